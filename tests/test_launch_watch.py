"""The hang watch's two deadlines (runtime/watch.py), on heartbeat files written by hand — no processes but this one
and one child it starts and kills: a training heartbeat older than `heartbeat_timeout_s` is a hang; a checkpoint,
restore or startup heartbeat (a blocking save, a load, the writer process starting) is allowed the longer
`phase_timeout_s`, and so are its peers (they wait for it in a collective); a stopped process is a hang at the
training deadline whatever its phase."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from llmscale.runtime.files import BeatPhase, Heartbeat, RunPaths, write_heartbeat
from llmscale.runtime.watch import HangWatch

NOW = 1_000_000.0
TRAIN_S, PHASE_S = 10.0, 100.0


def _watch(tmp_path: Path, beats: dict[int, tuple[int, float, BeatPhase]]) -> HangWatch:
    paths = RunPaths(tmp_path)
    for rank, (pid, age_s, phase) in beats.items():
        write_heartbeat(paths, rank, Heartbeat(pid, 5, NOW - age_s, 0, phase))
    watch = HangWatch(paths, len(beats), 0, TRAIN_S, PHASE_S)
    watch.started_unix = NOW - 1000.0
    return watch


def test_training_heartbeat_past_its_deadline_is_a_hang(tmp_path: Path) -> None:
    me = os.getpid()
    watch = _watch(tmp_path, {0: (me, 1.0, BeatPhase.TRAIN), 1: (me, 11.0, BeatPhase.TRAIN)})
    assert watch._check(NOW) == (1, me, 5, NOW - 11.0)


def test_a_blocking_save_gets_the_phase_deadline_and_so_do_its_waiting_peers(tmp_path: Path) -> None:
    me = os.getpid()
    # rank 0 has been saving for 50 s (its first save: the writer spawn on a loaded CPU); rank 1 waits for it in
    # the next step's all-reduce, its training heartbeat 40 s old: neither is hung yet
    watch = _watch(tmp_path, {0: (me, 50.0, BeatPhase.CHECKPOINT), 1: (me, 40.0, BeatPhase.TRAIN)})
    assert watch._check(NOW) is None
    for phase in (BeatPhase.STARTUP, BeatPhase.RESTORE):
        assert _watch(tmp_path, {0: (me, 50.0, phase), 1: (me, 40.0, BeatPhase.TRAIN)})._check(NOW) is None
    # past the phase deadline the saving rank is hung
    watch = _watch(tmp_path, {0: (me, 101.0, BeatPhase.CHECKPOINT), 1: (me, 99.0, BeatPhase.TRAIN)})
    assert watch._check(NOW) == (0, me, 5, NOW - 101.0)


def test_a_stopped_process_is_a_hang_at_the_training_deadline_in_any_phase(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        me = os.getpid()
        watch = _watch(tmp_path, {0: (me, 11.0, BeatPhase.CHECKPOINT), 1: (child.pid, 11.0, BeatPhase.CHECKPOINT)})
        found = None
        for _ in range(50):  # the kernel reports the stop asynchronously
            found = watch._check(NOW)
            if found is not None:
                break
            os.sched_yield()
        assert found is not None and found[0] == 1
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)


def test_no_heartbeat_at_all_gets_the_phase_deadline(tmp_path: Path) -> None:
    watch = HangWatch(RunPaths(tmp_path), 1, 0, TRAIN_S, PHASE_S)
    watch.started_unix = NOW - 50.0
    assert watch._check(NOW) is None
    watch.started_unix = NOW - 101.0
    assert watch._check(NOW) == (0, None, None, None)


def test_a_stopped_rank_is_the_hang_even_when_its_peer_is_late_first(tmp_path: Path) -> None:
    # rank 1 wrote its heartbeat, then rank 0 its own and was stopped: rank 1 waits for it in the all-reduce and passes
    # the training deadline first (11 s), while the stopped rank 0's heartbeat is 9.5 s old: rank 0 is the hang (the
    # chaos benchmark found rank 1 blamed)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        watch = _watch(tmp_path, {0: (child.pid, 9.5, BeatPhase.TRAIN), 1: (os.getpid(), 11.0, BeatPhase.TRAIN)})
        found = None
        for _ in range(50):  # the kernel reports the stop asynchronously
            found = watch._check(NOW)
            if found is not None and found[0] == 0:
                break
            os.sched_yield()
        assert found == (0, child.pid, 5, NOW - 9.5)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
