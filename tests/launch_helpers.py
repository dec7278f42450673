"""Helpers of the launcher and chaos tests: start `llmscale launch` as a child, wait on heartbeats, and kill (by
pid) the supervisor and everything below it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from llmscale.runtime.files import Heartbeat, RunPaths, read_heartbeat
from llmscale.runtime.nodes import NodeArgv
from llmscale.runtime.procs import descendants

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "src" / "llmscale" / "runtime" / "example" / "train.py"


def example_config(path: Path, name: str, total_steps: int, *, d_model: int, seq_len: int, micro_batch: int,
                   seed: int, memory_every: int, storage_every: int, warmup_steps: int, max_attempts: int,
                   without_progress: int, heartbeat_timeout_s: float, save_timeout_s: float,
                   checkpoint_dir: str | None = None) -> Path:
    """A 2-rank run config of the example GPT (n_layer 2, n_head 2) for the chaos and goodput runs, written to
    `path`; the figures each run varies are the arguments."""
    checkpoint: dict[str, Any] = {"memory_every_steps": memory_every, "storage_every_steps": storage_every, "keep": 2,
                                  "save_timeout_s": save_timeout_s}
    if checkpoint_dir:
        checkpoint["dir"] = checkpoint_dir
    cfg = {"name": name, "model": {"n_layer": 2, "n_head": 2, "d_model": d_model, "seq_len": seq_len},
           "layout": {"dp": 2}, "nproc_per_node": 2,
           "schedule": {"warmup_steps": warmup_steps, "total_steps": total_steps},
           "batch": {"micro_batch_size": micro_batch, "global_batch_size": 2 * micro_batch}, "seed": seed,
           "checkpoint": checkpoint,
           "restart": {"max_attempts": max_attempts, "max_attempts_without_progress": without_progress,
                       "heartbeat_timeout_s": heartbeat_timeout_s, "phase_timeout_s": 60}}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


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


def run_processes(run_dir: Path) -> list[int]:
    """Live processes of this user started for `run_dir` by a launcher (LLMSCALE_RUN_DIR in their environment)."""
    from llmscale.runtime.procs import processes_with_env

    return processes_with_env("LLMSCALE_RUN_DIR", str(Path(run_dir).absolute()))


def reap_run(run_dir: Path) -> list[int]:
    """SIGKILL (by pid) what a launcher this test or benchmark started left of `run_dir` (a launcher killed by the
    test cannot reap its own); the pids that would not die."""
    from llmscale.runtime.procs import kill_and_wait

    return kill_and_wait(run_processes(run_dir))


def torchrun_argv(script_argv: Sequence[str]) -> NodeArgv:
    """A node command for runtime.nodes.plan_nodes: each node runs torchrun (static rendezvous at the master) on
    `script_argv`."""

    def argv(node_rank: int, nnodes: int, addr: str, port: int, nproc: int) -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}",
                f"--node-rank={node_rank}", f"--master-addr={addr}", f"--master-port={port}", *script_argv]

    return argv
