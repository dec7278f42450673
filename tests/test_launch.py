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
from llmscale.runtime.reconcile import NOTE
from tests.launch_helpers import reap_all, wait_beat

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


def _kill_at(paths: RunPaths, proc: subprocess.Popen[str], attempt: int, rank: int, at_step: int) -> int:
    """SIGKILL `rank` by its heartbeat's pid once it reached `at_step` in `attempt`; the step it was at."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        beat = read_heartbeat(paths, rank)
        if beat is not None and beat.attempt == attempt and beat.step >= at_step:
            os.kill(beat.pid, signal.SIGKILL)
            return beat.step
        time.sleep(0.02)
    pytest.fail(f"attempt {attempt} never reached step {at_step}: {proc.poll()}")


def test_kills_restart(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    # two kills at random steps and ranks (benchmarks/chaos.py delivers ~100 of every kind)
    rng = random.Random(15)
    paths = RunPaths(tmp_path / "run")
    proc = start(tmp_path, write_config(tmp_path / "run.yaml"), env={"STANDIN_STEPS": "30"})
    procs.append(proc)
    killed: list[tuple[int, int, int]] = []
    for attempt in range(2):
        # past the last kill's step, so each attempt makes progress (no stop for lack of it)
        rank, at_step = rng.randrange(2), (killed[-1][2] if killed else 0) + rng.randrange(2, 8)
        killed.append((attempt, rank, _kill_at(paths, proc, attempt, rank, at_step)))
    code, _out, err = finish(proc)
    assert code == 0, err[-2000:]
    faults = events(tmp_path, jr.EventKind.FAULT)
    assert [(f.attempt, f.cause) for f in faults] == [(a, jr.Cause.PROCESS_KILLED) for a in range(2)]
    assert [f.rank for f in faults] == [r for _, r, _ in killed]
    assert [f.signal for f in faults] == ["SIGKILL"] * 2
    assert len(events(tmp_path, jr.EventKind.ATTEMPT_START)) == 3
    assert events(tmp_path, jr.EventKind.STOP)[-1].reason == "completed"
    last = [json.loads(line) for line in paths.steps(0).read_text().splitlines()]
    assert last[-1]["step"] == 30 and last[-1]["attempt"] == 2


def test_hangs_by_heartbeat_and_a_slow_save_that_is_none(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    # attempt 0: rank 1 SIGSTOPs itself while training (step 8) -> hang at heartbeat_timeout_s = 3.
    # attempt 1: rank 1's "save" at step 12 blocks 4 s under a checkpoint-phase heartbeat while rank 0 waits for it in
    # the all-reduce with a 4 s old training heartbeat: both past heartbeat_timeout_s, within phase_timeout_s = 60,
    # so no hang; then rank 1 stops itself inside a save at step 16: a stopped process is a hang at the training
    # deadline whatever its phase (not 60 s)
    cfg = write_config(tmp_path / "run.yaml")
    cfg.write_text(cfg.read_text().replace("heartbeat_timeout_s: 3}", "heartbeat_timeout_s: 3, phase_timeout_s: 60}"))
    proc = start(tmp_path, cfg, env={"STANDIN_STEPS": "20", "STANDIN_STALL_S": "4",
                                     "STANDIN_FAULT": "0:1:8:hang,1:1:12:slowsave,1:1:16:stopsave"})
    procs.append(proc)
    code, _out, err = finish(proc)
    assert code == 0, err[-2000:]
    faults = events(tmp_path, jr.EventKind.FAULT)
    assert [(f.attempt, f.cause, f.rank, f.step) for f in faults] == [(0, jr.Cause.HANG, 1, 7),
                                                                       (1, jr.Cause.HANG, 1, 15)]
    assert all(f.detect_s is not None and 3.0 <= f.detect_s < 10.0 for f in faults), faults


def test_stops_after_attempts_without_progress(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    proc = start(tmp_path, write_config(tmp_path / "run.yaml"), env={"STANDIN_FAULT": "*:0:1:raise"})
    procs.append(proc)
    code, _out, err = finish(proc)
    assert code == 1
    assert err.strip().splitlines()[-1].startswith("error: stopped after 2 attempt(s): 2 consecutive attempt(s)")
    faults = events(tmp_path, jr.EventKind.FAULT)
    assert [(f.cause, f.exit_code) for f in faults] == [(jr.Cause.PROCESS_EXIT, 1)] * 2
    # the trainer's own exception, not torch's "To enable traceback see ..." placeholder
    assert all("RuntimeError: standin failed at step 1" in (f.message or "") for f in faults), faults
    assert "max_attempts_without_progress" in (events(tmp_path, jr.EventKind.STOP)[-1].reason or "")


def test_stops_after_max_attempts(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    # a kill at step 3 of every attempt: each restores step 0 and reaches step 2, no new step after the first
    proc = start(tmp_path, write_config(tmp_path / "run.yaml", max_attempts=1), env={"STANDIN_FAULT": "*:1:3:kill"})
    procs.append(proc)
    code, _out, err = finish(proc)
    assert code == 1 and "restart.max_attempts = 1" in err


def test_a_refused_input_stops_the_job_at_once(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    proc = start(tmp_path, write_config(tmp_path / "run.yaml"), env={"STANDIN_FAULT": "*:0:2:refuse"})
    procs.append(proc)
    code, _out, err = finish(proc)
    assert code == 2, err[-2000:]
    assert "error: stopped after 1 attempt(s): rank 0 refused its input (exit 2), not retried" in err
    (fault,) = events(tmp_path, jr.EventKind.FAULT)
    assert "LlmscaleError: standin.setting = 2 is invalid" in (fault.message or "")


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


def _gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """The pids still alive (not zombies) after waiting up to `timeout_s`."""
    from llmscale.runtime.procs import is_zombie

    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if not is_zombie(p)]
        time.sleep(0.05)
    return alive


def test_one_launcher_per_run_dir_and_a_killed_launchers_ranks_die_with_it(
        tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    import socket

    from llmscale.runtime.runlock import LOCK_FILE

    config, run = write_config(tmp_path / "run.yaml"), tmp_path / "run"
    first = start(tmp_path, config, env={"STANDIN_STEPS": "400"})
    procs.append(first)
    ranks = [wait_beat(run, r, 0, 3, first) for r in (0, 1)]
    holder = json.loads((run / LOCK_FILE).read_text())
    assert (holder["pid"], holder["host"]) == (first.pid, socket.gethostname())
    # a second launch on the same run directory is refused at once, naming the live launcher; the first goes on
    procs.append(second := start(tmp_path, config, env={"STANDIN_STEPS": "400"}))
    code, _out, err = finish(second, 60)
    assert code == 2 and err.count("\n") == 1, err
    assert f"another llmscale launch holds it (pid {first.pid} on host {socket.gethostname()}" in err
    # SIGKILL of the launcher: its ranks die with it (parent-death signal), nothing trains on unsupervised
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    assert _gone([b.pid for b in ranks]) == []
    # a process of this run directory left running (started here, as a dead launcher's would be): the relaunch
    # ends it before it starts, and journals the dead launcher's attempt as a `launcher` fault
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             env={**os.environ, "LLMSCALE_RUN_DIR": str(run)})
    procs.append(stray)  # type: ignore[arg-type]
    procs.append(third := start(tmp_path, config, env={"STANDIN_STEPS": "12"}))
    code, out, err = finish(third)
    assert code == 0, err[-2000:]
    assert stray.wait(timeout=10) == -signal.SIGKILL
    assert f"ended 1 process(es) of this run directory left running (pids [{stray.pid}])" in out
    (fault,) = events(tmp_path, jr.EventKind.FAULT)
    assert (fault.attempt, fault.cause, fault.pid, fault.host) == (0, jr.Cause.LAUNCHER, first.pid,
                                                                   socket.gethostname())
    assert fault.step is not None and fault.step >= 3 and fault.detect_s is not None
    assert [e.attempt for e in events(tmp_path, jr.EventKind.ATTEMPT_START)] == [0, 1]
    assert (run / LOCK_FILE).read_text() == ""   # released at a clean exit


def test_sigint_stops_the_run_with_130_and_one_line(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    run = tmp_path / "run"
    proc = start(tmp_path, write_config(tmp_path / "run.yaml"), env={"STANDIN_STEPS": "400"})
    procs.append(proc)
    beats = [wait_beat(run, r, 0, 3, proc) for r in (0, 1)]
    # a storage save committed (its manifest written) by a trainer the stop signal cuts before its journal line
    sha = (run / "config.sha256").read_text().strip()
    cut = run / "checkpoints" / "step_00000003.saving-a0"
    cut.mkdir(parents=True)
    (cut / "manifest.json").write_text(json.dumps({"step": 3, "config_sha256": sha, "time_unix": time.time()}))
    os.kill(proc.pid, signal.SIGINT)   # what Ctrl-C sends the launcher (its ranks run in their own sessions)
    code, out, err = finish(proc, 60)
    assert code == 130, err[-3000:]
    assert "Traceback" not in out + err, (out + err)[-3000:]
    assert err.strip().splitlines()[-1] == "error: interrupted by SIGINT; llmscale launch again resumes the run"
    assert _gone([b.pid for b in beats]) == []
    (fault,) = events(tmp_path, jr.EventKind.FAULT)
    assert (fault.attempt, fault.cause, fault.signal, fault.pid) == (0, jr.Cause.LAUNCHER, "SIGINT", proc.pid)
    assert events(tmp_path, jr.EventKind.STOP)[-1].reason.startswith("interrupted by SIGINT")  # type: ignore[union-attr]
    # the cut commit is journaled by the stopped launcher, in its attempt, before the attempt's fault
    journal = jr.read(run).events
    (found,) = [e for e in journal if e.event is jr.EventKind.CHECKPOINT_SAVED and e.step == 3]
    assert (found.attempt, found.tier, found.message) == (0, "storage", NOTE)
    assert journal.index(found) < journal.index(fault)
