"""Chaos smoke (CI, under two minutes): the example GPT (2 ranks, gloo) under `llmscale launch`, killed with SIGKILL
in every phase of a storage save, its checkpoint writer killed, a rank stopped (SIGSTOP → heartbeat timeout →
restart), in one run. (A mid-compute kill resuming from the memory tier: tests/test_runtime_resume.py and
benchmarks/chaos.py.) Required each time: no committed checkpoint lost, no resume from a partial
one, and every step's loss on every rank bitwise equal to the uninterrupted run with the same seed
(runtime/verify.py). Every process started is killed by pid in a finally (tests/launch_helpers.py)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

from llmscale.runtime import journal as jr
from llmscale.runtime.verify import Losses, losses, verify_run
from tests.launch_helpers import EXAMPLE, example_config, reap_all, run_processes, start_launch, wait_beat

TOTAL = 40
def config(tmp: Path, memory: int) -> Path:
    return example_config(tmp / f"chaos_m{memory}.yaml", "chaos", TOTAL, d_model=32, seq_len=32, micro_batch=4, seed=7,
                          memory_every=memory, storage_every=5, warmup_steps=5, max_attempts=10, without_progress=3,
                          heartbeat_timeout_s=5, save_timeout_s=30)


def run(cfg: Path, run_dir: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    log = run_dir.with_suffix(".log")
    proc = start_launch(cfg, run_dir, EXAMPLE, env=env, log=log)
    try:
        proc.wait(timeout=300)
    finally:
        reap_all(proc)
    return proc.returncode, log.read_text()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Losses]:
    tmp = tmp_path_factory.mktemp("reference")
    code, log = run(config(tmp, 1000), tmp / "run")
    assert code == 0, log[-3000:]
    yield losses(tmp / "run", 2)


def test_kill_in_every_save_phase_the_writer_and_a_hang(tmp_path: Path, reference: Losses) -> None:
    # one fault per attempt: each resumed attempt replays, then meets the next point (memory tier off: storage only)
    chaos = ",".join(["after_files:10:0:0", "save_writing:15:1:1", "after_manifest:20:0:2", "kill_writer:25:0:3",
                      "save_start:30:1:4"])
    run_dir = tmp_path / "run"
    proc = start_launch(config(tmp_path, 1000), run_dir, EXAMPLE, env={"LLMSCALE_CHAOS": chaos},
                        log=tmp_path / "run.log")
    stopped: list[int] = []
    try:
        beat = wait_beat(run_dir, 1, 3, 27, proc)   # after the writer kill, attempt 3 trains on: stop rank 1
        os.kill(beat.pid, signal.SIGSTOP)           # a hang: the supervisor must notice the stale heartbeat
        stopped.append(beat.pid)
        proc.wait(timeout=300)
    finally:
        for pid in stopped:                         # cleanup of the stopped rank, if the supervisor had not
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
        left = run_processes(run_dir)           # nothing of the run outlives its launcher
        reap_all(proc)
    assert proc.returncode == 0, (tmp_path / "run.log").read_text()[-3000:]
    assert left == []
    v = verify_run(run_dir, reference, 2, TOTAL)
    assert v.ok, (v.lost, v.partial_resumes, v.curve_mismatches[:5])
    faults = jr.read(run_dir).of_kind(jr.EventKind.FAULT)
    assert [(f.attempt, f.cause, f.rank) for f in faults] == [
        (0, jr.Cause.PROCESS_KILLED, 0), (1, jr.Cause.PROCESS_KILLED, 1), (2, jr.Cause.PROCESS_KILLED, 0),
        (3, jr.Cause.HANG, 1), (4, jr.Cause.PROCESS_KILLED, 1)]
    restored = {a: s for a, tier, s in v.restores}
    assert restored[1] == 5            # step 10's files written, no manifest: not committed, step 5 is
    assert restored[2] == 10           # killed while the writer wrote step 15
    assert restored[3] in (15, 20)     # step 20's manifest written, `latest` not moved: complete either way
    # step 25's writer killed right after async_save returned: that save fails (checkpoint_failed, checkpoint_io),
    # the next save restarts the writers; the hang then ends attempt 3 and attempt 4 resumes from step 20
    assert restored[4] == 20
    failed = [e for e in jr.read(run_dir).of_kind(jr.EventKind.CHECKPOINT_FAILED) if e.attempt == 3]
    assert {(e.step, e.cause, e.tier) for e in failed} == {(25, jr.Cause.CHECKPOINT_IO, "storage")}, failed
    assert 0 in {e.rank for e in failed}   # the rank whose writer was killed (rank 1's may still wait on it)
    assert restored[5] == 25           # killed in save 30 before async_save: step 25, saved in attempt 4
    kills = [json.loads(line)["phase"] for line in (run_dir / "chaos_kills.jsonl").read_text().splitlines()]
    assert kills == ["after_files", "save_writing", "after_manifest", "kill_writer", "save_start"]
