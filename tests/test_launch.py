"""`llmscale launch`: restarts after kills (4 of 4), hangs found by heartbeat, the stop after attempts without
progress, the config hash check, exclusion lists. Each test runs the real supervisor (torch's elastic agent, c10d
rendezvous on loopback) over a stand-in trainer (tests/fixtures/standin_trainer.py), 2 ranks; every process started
is killed by pid in a finally."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")


from llmscale.runtime import journal as jr
from llmscale.runtime.files import RunPaths, read_heartbeat
from tests.launch_helpers import reap_all

ROOT = Path(__file__).resolve().parent.parent
TRAINER = ROOT / "tests" / "fixtures" / "standin_trainer.py"
CONFIG = """name: standin
nproc_per_node: 2
layout: {{dp: 2}}
batch: {{micro_batch_size: 1, global_batch_size: 2}}
seed: {seed}
restart: {{max_attempts: {max_attempts}, max_attempts_without_progress: 2, heartbeat_timeout_s: 3}}
"""


def write_config(path: Path, seed: int = 1, max_attempts: int = 8, extra: str = "") -> Path:
    path.write_text(CONFIG.format(seed=seed, max_attempts=max_attempts) + extra)
    return path


def start(tmp_path: Path, config: Path, *flags: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    full = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", **(env or {})}
    cmd = [sys.executable, "-m", "llmscale.cli.main", "launch", str(config), "--run-dir", str(tmp_path / "run"),
           *flags, "--", str(TRAINER)]
    return subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout_s: float = 240) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout_s)
    return proc.returncode, out, err


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for p in started:
            reap_all(p)


def events(tmp_path: Path, kind: jr.EventKind) -> list[jr.Event]:
    return jr.read(tmp_path / "run").of_kind(kind)


def test_four_kills_four_restarts(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    rng = random.Random(15)
    paths = RunPaths(tmp_path / "run")
    proc = start(tmp_path, write_config(tmp_path / "run.yaml"), env={"STANDIN_STEPS": "60"})
    procs.append(proc)
    killed: list[tuple[int, int, int]] = []
    for attempt in range(4):
        # past the last kill's step, so each attempt makes progress (no stop for lack of it)
        rank, at_step = rng.randrange(2), (killed[-1][2] if killed else 0) + rng.randrange(2, 8)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            beat = read_heartbeat(paths, rank)
            if beat is not None and beat.attempt == attempt and beat.step >= at_step:
                os.kill(beat.pid, signal.SIGKILL)
                killed.append((attempt, rank, beat.step))
                break
            time.sleep(0.02)
        else:
            pytest.fail(f"attempt {attempt} never reached step {at_step}: {proc.poll()}")
    code, _out, err = finish(proc)
    assert code == 0, err[-2000:]
    faults = events(tmp_path, jr.EventKind.FAULT)
    assert [(f.attempt, f.cause) for f in faults] == [(a, jr.Cause.PROCESS_KILLED) for a in range(4)]
    assert [f.rank for f in faults] == [r for _, r, _ in killed]
    assert [f.signal for f in faults] == ["SIGKILL"] * 4
    assert len(events(tmp_path, jr.EventKind.ATTEMPT_START)) == 5
    assert events(tmp_path, jr.EventKind.STOP)[-1].reason == "completed"
    last = [json.loads(line) for line in paths.steps(0).read_text().splitlines()]
    assert last[-1]["step"] == 60 and last[-1]["attempt"] == 4


def test_hang_is_found_by_heartbeat_and_restarted(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    proc = start(tmp_path, write_config(tmp_path / "run.yaml"), env={"STANDIN_FAULT": "0:1:8:hang"})
    procs.append(proc)
    code, _out, err = finish(proc)
    assert code == 0, err[-2000:]
    (fault,) = events(tmp_path, jr.EventKind.FAULT)
    assert fault.cause is jr.Cause.HANG and fault.rank == 1 and fault.step == 7
    assert fault.detect_s is not None and 3.0 <= fault.detect_s < 8.0   # heartbeat_timeout_s = 3


def test_stops_after_attempts_without_progress(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    proc = start(tmp_path, write_config(tmp_path / "run.yaml"), env={"STANDIN_FAULT": "*:0:1:exit"})
    procs.append(proc)
    code, _out, err = finish(proc)
    assert code == 1
    assert err.strip().splitlines()[-1].startswith("error: stopped after 2 attempt(s): 2 consecutive attempt(s)")
    faults = events(tmp_path, jr.EventKind.FAULT)
    assert [(f.cause, f.exit_code) for f in faults] == [(jr.Cause.PROCESS_EXIT, 3)] * 2
    assert "max_attempts_without_progress" in (events(tmp_path, jr.EventKind.STOP)[-1].reason or "")


def test_stops_after_max_attempts(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    # a kill at step 3 of every attempt: each restores step 0 and reaches step 2, no new step after the first
    proc = start(tmp_path, write_config(tmp_path / "run.yaml", max_attempts=1), env={"STANDIN_FAULT": "*:1:3:kill"})
    procs.append(proc)
    code, _out, err = finish(proc)
    assert code == 1 and "restart.max_attempts = 1" in err


def test_config_hash_checked_on_resume(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    config = write_config(tmp_path / "run.yaml")
    procs.append(proc := start(tmp_path, config, env={"STANDIN_STEPS": "3"}))
    assert finish(proc)[0] == 0
    write_config(config, seed=2)
    procs.append(proc := start(tmp_path, config, env={"STANDIN_STEPS": "3"}))
    code, _out, err = finish(proc)
    assert code == 2 and err.count("\n") == 1 and "seed" in err and "--allow-config-change" in err
    assert not events(tmp_path, jr.EventKind.CONFIG_CHANGED)
    procs.append(proc := start(tmp_path, config, "--allow-config-change", env={"STANDIN_STEPS": "3"}))
    assert finish(proc)[0] == 0
    (changed,) = events(tmp_path, jr.EventKind.CONFIG_CHANGED)
    assert changed.extra["changed_keys"] == ["seed"] and changed.message == "seed: 1 -> 2"
    assert (tmp_path / "run" / "config.yaml").read_text() == config.read_text()


def test_exclusion_list(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=2\n127.0.0.1 slots=2\n")
    config = write_config(tmp_path / "run.yaml", extra=f"hosts: {hostfile}\n")
    both = tmp_path / "exclude_both"
    both.write_text("# slow links\nlocalhost\n# bad GPU\n127.0.0.1\n")
    procs.append(proc := start(tmp_path, config, "--exclude-from", str(both), env={"STANDIN_STEPS": "3"}))
    code, _out, err = finish(proc)
    assert code == 2 and err.count("\n") == 1 and "leaves 0 host(s)" in err
    one = tmp_path / "exclude_one"
    one.write_text("# slow links\n127.0.0.1\n")
    procs.append(proc := start(tmp_path, config, "--exclude-from", str(one), env={"STANDIN_STEPS": "3"}))
    code, _out, err = finish(proc)
    assert code == 0, err[-2000:]
    (excluded,) = events(tmp_path, jr.EventKind.EXCLUDED_HOSTS)
    assert excluded.extra["hosts"] == ["127.0.0.1"] and excluded.extra["reasons"] == ["slow links"]


def test_a_save_blocking_past_the_training_deadline_is_no_hang(tmp_path: Path,
                                                               procs: list[subprocess.Popen[str]]) -> None:
    # rank 1's "save" at step 8 blocks 6 s under a checkpoint-phase heartbeat; rank 0 waits for it in the all-reduce
    # with a 6 s old training heartbeat: both past heartbeat_timeout_s = 3, within phase_timeout_s = 20
    cfg = write_config(tmp_path / "run.yaml", extra="")
    cfg.write_text(cfg.read_text().replace("heartbeat_timeout_s: 3}", "heartbeat_timeout_s: 3, phase_timeout_s: 20}"))
    proc = start(tmp_path, cfg, env={"STANDIN_FAULT": "0:1:8:slowsave", "STANDIN_STALL_S": "6"})
    procs.append(proc)
    code, _out, err = finish(proc)
    assert code == 0, err[-2000:]
    assert events(tmp_path, jr.EventKind.FAULT) == []


def test_a_stopped_rank_in_a_save_is_still_a_hang(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    cfg = write_config(tmp_path / "run.yaml")
    cfg.write_text(cfg.read_text().replace("heartbeat_timeout_s: 3}", "heartbeat_timeout_s: 3, phase_timeout_s: 60}"))
    proc = start(tmp_path, cfg, env={"STANDIN_FAULT": "0:1:8:stopsave"})
    procs.append(proc)
    code, _out, err = finish(proc)
    assert code == 0, err[-2000:]
    (fault,) = events(tmp_path, jr.EventKind.FAULT)
    assert fault.cause is jr.Cause.HANG and fault.rank == 1
    assert fault.detect_s is not None and 3.0 <= fault.detect_s < 20.0   # the training deadline, not 60 s


def test_launch_example_runs_the_packaged_example_from_any_directory(tmp_path: Path,
                                                                     procs: list[subprocess.Popen[str]]) -> None:
    from tests.launch_helpers import wait_beat

    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    bad = subprocess.run([sys.executable, "-m", "llmscale.cli.main", "launch", "--example", "x.yaml"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "error: --example runs the packaged example" in bad.stderr, bad.stderr
    proc = subprocess.Popen([sys.executable, "-m", "llmscale.cli.main", "launch", "--example", "--run-dir", "ex"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    procs.append(proc)
    beat = wait_beat(tmp_path / "ex", 0, 0, 1, proc)        # the example trains: rank 0 finished step 1
    assert beat.step >= 1
    config = (tmp_path / "ex" / "config.yaml").read_text()
    assert config == (ROOT / "src" / "llmscale" / "runtime" / "example" / "run.yaml").read_text()
