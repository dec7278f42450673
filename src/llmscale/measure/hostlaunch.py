"""Ranks of a measuring worker (the link sweep, the collective bench) started on other hosts: one process per rank,
each through the caller's node command (`runtime/nodes.py` builds it: ssh, `ip netns exec`, srun), with torchrun's
environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) so `launch.launch` runs its
env:// path there, and LLMSCALE_HOST naming the host as the hostfile does (namespaces on one machine share its
hostname). Each rank runs `python -m llmscale.measure.hostlaunch MODULE:FUNCTION BACKEND`, reads the payload as
JSON on stdin; rank 0 prints the result as one `llmscale-result ` line on stdout, which comes back to the caller.

Processes: each started in its own session (its own process group); when one exits non-zero or the timeout passes,
the others' groups are killed (SIGKILL, by their pids) and every process is reaped before the error is raised.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmscale.errors import LlmscaleError

RESULT_PREFIX = "llmscale-result "
WORKERS = {"links": "llmscale.measure.links:sweep_worker",
           "collectives": "llmscale.measure.collectives:collectives_worker"}
"""The workers a host may be asked to run (nothing else is importable through this entry point)."""
PASS_ENV = ("PYTHONPATH", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
"""Carried to every rank when set here: where llmscale is, and which interface gloo/NCCL bind (a namespace whose
hostname resolves to loopback needs it)."""


@dataclass(frozen=True)
class RankPlace:
    """Where one rank runs."""

    rank: int
    host: str
    local_rank: int
    local_world_size: int


@dataclass(frozen=True)
class RankProcess:
    rank: int
    host: str
    process: subprocess.Popen[bytes]
    out_path: Path
    err_path: Path


def rank_env(place: RankPlace, world_size: int, master_addr: str, master_port: int) -> dict[str, str]:
    env = {name: os.environ[name] for name in PASS_ENV if name in os.environ}
    env.update({"RANK": str(place.rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(place.local_rank),
                "LOCAL_WORLD_SIZE": str(place.local_world_size), "MASTER_ADDR": master_addr,
                "MASTER_PORT": str(master_port), "LLMSCALE_HOST": place.host, "OMP_NUM_THREADS": "1"})
    return env


def worker_argv(worker: str, backend: str) -> list[str]:
    return [sys.executable, "-m", "llmscale.measure.hostlaunch", worker, backend]


def _last_line(path: Path) -> str:
    lines = [x for x in path.read_text(encoding="utf-8", errors="replace").splitlines() if x.strip()]
    return lines[-1].strip() if lines else "(no output)"


def _stop(procs: list[RankProcess]) -> None:
    """SIGKILL the process group of every rank still running (each its own session), then reap them all."""
    for p in procs:
        if p.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.process.pid, signal.SIGKILL)
    for p in procs:
        p.process.wait()


def run_ranks(commands: list[tuple[RankPlace, list[str]]], payload: Any, timeout_s: float) -> Any:
    """Start every rank's command, feed it the payload, wait for all; rank 0's result, or one LlmscaleError naming
    the first rank that failed (its host and last stderr line) or the timeout."""
    data = json.dumps(payload).encode()
    procs: list[RankProcess] = []
    with tempfile.TemporaryDirectory(prefix="llmscale-hosts-") as tmp:
        try:
            for place, argv in commands:
                out, err = Path(tmp) / f"rank{place.rank}.out", Path(tmp) / f"rank{place.rank}.err"
                with out.open("wb") as out_f, err.open("wb") as err_f:
                    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out_f, stderr=err_f,
                                            start_new_session=True)
                procs.append(RankProcess(place.rank, place.host, proc, out, err))
                assert proc.stdin is not None
                proc.stdin.write(data)
                proc.stdin.close()
            _wait_all(procs, time.monotonic() + timeout_s)
        finally:
            _stop(procs)
        lines = [x for x in procs[0].out_path.read_text(encoding="utf-8").splitlines() if x.startswith(RESULT_PREFIX)]
        if not lines:
            raise LlmscaleError(f"rank 0 on {procs[0].host} printed no result: {_last_line(procs[0].err_path)}")
        return json.loads(lines[-1][len(RESULT_PREFIX):])


def _wait_all(procs: list[RankProcess], deadline: float) -> None:
    while True:
        codes = [p.process.poll() for p in procs]
        failed = next((p for p, c in zip(procs, codes, strict=True) if c not in (None, 0)), None)
        if failed is not None:
            raise LlmscaleError(f"rank {failed.rank} on {failed.host} exited with code {failed.process.returncode}: "
                                f"{_last_line(failed.err_path)}")
        if all(c == 0 for c in codes):
            return
        if time.monotonic() > deadline:
            waiting = [f"{p.rank}@{p.host}" for p, c in zip(procs, codes, strict=True) if c is None]
            raise LlmscaleError(f"ranks {', '.join(waiting)} did not finish in time (killed)")
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    """Entry point on each host: `python -m llmscale.measure.hostlaunch MODULE:FUNCTION BACKEND` (module docstring)."""
    from llmscale.measure.launch import launch, under_torchrun

    worker_ref, backend = argv
    if worker_ref not in WORKERS.values() or not under_torchrun():
        print(f"error: {worker_ref!r} is not one of {', '.join(WORKERS.values())}, or the rank env is missing",
              file=sys.stderr)
        return 2
    module, name = worker_ref.split(":")
    worker = getattr(importlib.import_module(module), name)
    result = launch(worker, json.loads(sys.stdin.read()), 0, backend)
    if result is not None:
        sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
