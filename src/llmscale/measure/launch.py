"""One worker per rank under torch.distributed: processes started here with torch.multiprocessing (gloo forked with
one intra-op thread, NCCL spawned), or the ranks torchrun started (detected from RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR). The NCCL path has not run in this repository's CI.
Why fork vs spawn, and how results come back: docs/design-notes.md#measure-launch.
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from llmscale.errors import LlmscaleError, SpecError

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
INIT_TIMEOUT = timedelta(seconds=300)


@dataclass(frozen=True)
class Context:
    """Where one worker runs."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    backend: str
    device: str
    """'cpu' or 'cuda:<local rank>'."""
    host: str

    @property
    def num_nodes(self) -> int:
        return max(self.world_size // max(self.local_world_size, 1), 1)


def under_torchrun() -> bool:
    """True when torchrun (or any launcher setting its variables) started this process as one rank."""
    return all(name in os.environ for name in TORCHRUN_VARS)


def default_backend() -> str:
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def check_backend(backend: str, nproc: int) -> None:
    """A clear line for a backend this machine cannot run."""
    import torch
    import torch.distributed as dist

    if backend not in ("gloo", "nccl"):
        raise LlmscaleError(f"--backend {backend!r} is invalid: choose gloo or nccl")
    if backend == "nccl":
        if not torch.cuda.is_available() or not dist.is_nccl_available():
            raise LlmscaleError("--backend nccl needs CUDA GPUs and a torch built with NCCL; use --backend gloo")
        if not under_torchrun() and nproc > torch.cuda.device_count():
            raise LlmscaleError(f"--nproc {nproc} exceeds the {torch.cuda.device_count()} GPUs of this machine")
    elif not dist.is_gloo_available():
        raise LlmscaleError("this torch has no gloo backend")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _init(rank: int, world: int, local_rank: int, local_world: int, backend: str, init_method: str) -> Context:
    import torch
    import torch.distributed as dist

    if backend == "gloo":
        torch.set_num_threads(1)
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world, timeout=INIT_TIMEOUT)
    # LLMSCALE_HOST: the hostfile's name for this host (measure/hostlaunch.py), which namespaces sharing this
    # machine's hostname need
    return Context(rank, world, local_rank, local_world, backend, device,
                   os.environ.get("LLMSCALE_HOST") or socket.gethostname())


def _child(rank: int, nproc: int, backend: str, init_method: str, worker: Callable[[Context, Any], Any],
           payload: Any, result_path: str) -> None:
    import torch.distributed as dist

    ctx = _init(rank, nproc, rank, nproc, backend, init_method)
    try:
        result = worker(ctx, payload)
        if rank == 0:
            Path(result_path).write_text(json.dumps(result), encoding="utf-8")
    finally:
        dist.destroy_process_group()


def launch(worker: Callable[[Context, Any], Any], payload: Any, nproc: int, backend: str) -> Any:
    """Run `worker(ctx, payload)` on every rank; return rank 0's (JSON-serialisable) result, None on other ranks
    under torchrun. `nproc` is ignored under torchrun (its WORLD_SIZE rules)."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if under_torchrun():
        env = os.environ
        world = int(env["WORLD_SIZE"])
        ctx = _init(int(env["RANK"]), world, int(env["LOCAL_RANK"]), int(env.get("LOCAL_WORLD_SIZE", world)),
                    backend, "env://")
        try:
            result = worker(ctx, payload)
            return result if ctx.rank == 0 else None
        finally:
            dist.destroy_process_group()
    if nproc < 2:
        raise LlmscaleError(f"--nproc {nproc} is invalid: a collective needs at least 2 ranks")
    method = "spawn" if backend == "nccl" else "fork"
    with tempfile.TemporaryDirectory(prefix="llmscale-") as tmp:
        result_path = str(Path(tmp) / "rank0.json")
        init_method = f"tcp://127.0.0.1:{_free_port()}"
        try:
            mp.start_processes(_child, args=(nproc, backend, init_method, worker, payload, result_path),
                               nprocs=nproc, start_method=method)
        except mp.ProcessRaisedException as exc:
            last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise LlmscaleError(f"rank {exc.error_index} failed: {last}") from None
        except mp.ProcessExitedException as exc:
            raise LlmscaleError(f"rank {exc.error_index} exited with code {exc.exit_code}") from None
        return json.loads(Path(result_path).read_text(encoding="utf-8"))


def resolve_device(device: str | None) -> str:
    """`--device` as a torch device name: default the local rank's GPU under torchrun, else the CPU; a device this
    torch cannot see is one SpecError."""
    import torch

    if device is None:  # under torchrun, the local rank's GPU
        return f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        device = "cuda:0"
    if device != "cpu" and not re.fullmatch(r"cuda:\d+", device):
        raise SpecError("device", device, "cpu, cuda or cuda:N")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SpecError("device", device, "this torch sees no CUDA GPU; use --device cpu")
    return device
