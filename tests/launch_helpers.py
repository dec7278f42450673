"""Helpers of the launcher and chaos tests: start `llmscale launch` as a child, wait on heartbeats, and kill (by
pid) the supervisor and everything below it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from llmscale.runtime.files import Heartbeat, RunPaths, read_heartbeat
from llmscale.runtime.procs import descendants

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "src" / "llmscale" / "runtime" / "example" / "train.py"


def start_launch(config: Path, run_dir: Path, script: Path, *flags: str, env: dict[str, str] | None = None,
                 log: Path | None = None) -> subprocess.Popen[str]:
    """`llmscale launch CONFIG --run-dir RUN_DIR FLAGS -- SCRIPT`; output to `log` (a file: a full pipe would block
    the children) or to pipes."""
    full = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", **(env or {})}
    cmd = [sys.executable, "-m", "llmscale.cli.main", "launch", str(config), "--run-dir", str(run_dir), *flags,
           "--", str(script)]
    if log is None:
        return subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    handle = open(log, "w")  # noqa: SIM115 (closed when the process is reaped)
    return subprocess.Popen(cmd, env=full, stdout=handle, stderr=subprocess.STDOUT, text=True)


def wait_beat(run_dir: Path, rank: int, attempt: int, min_step: float, proc: subprocess.Popen[str],
              timeout_s: float = 180.0) -> Heartbeat:
    """The first heartbeat of `rank` in `attempt` at `min_step` or later; AssertionError past the timeout."""
    paths = RunPaths(run_dir)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        beat = read_heartbeat(paths, rank)
        if beat is not None and beat.attempt == attempt and beat.step >= min_step:
            return beat
        if proc.poll() is not None:
            raise AssertionError(f"launch exited ({proc.returncode}) before rank {rank} of attempt {attempt} reached "
                                 f"step {min_step}")
        time.sleep(0.01)
    raise AssertionError(f"rank {rank} of attempt {attempt} never reached step {min_step}")


def reap_all(proc: subprocess.Popen[str]) -> None:
    """SIGCONT then SIGKILL (by pid) everything below the supervisor, then the supervisor; wait for it."""
    for pid in [*reversed(descendants(proc.pid)), proc.pid]:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
        proc.communicate(timeout=30)
