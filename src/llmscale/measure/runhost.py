"""The probe's host micro-benchmarks (probe_worker's rounds: GEMMs of the model's own shapes, SDPA, memory-bound
kernels, copy, gloo collectives at the gradient size) without its training steps, for a model the probe does not
build: `llmscale profile` describes a run's host with them (monitor/predict.py). Every rank runs each round at the
same time, as in the probe, so a figure is what one rank gets while the others load the same cores.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from llmscale.measure.launch import Context
from llmscale.measure.probe_worker import RankGroups, WorkerConfig, host_bench_round, mean_of_rounds
from llmscale.measure.table import device_name


@dataclass(frozen=True)
class HostBenchConfig:
    """The model's micro-batch (`worker`; its steps/warmup unused), its parameter shapes (the optimizer bench) and
    how many rounds to average."""

    worker: WorkerConfig
    param_shapes: tuple[tuple[int, ...], ...]
    rounds: int = 2


def host_rank(ctx: Context, cfg: HostBenchConfig) -> dict[str, Any] | None:
    """`rounds` rounds of the probe's host benchmarks on this rank; rank 0 returns every rank's mean."""
    groups = RankGroups(ctx.rank, ctx.world_size, 1)
    params = [torch.nn.Parameter(torch.zeros(shape)) for shape in cfg.param_shapes]
    count = sum(p.numel() for p in params)
    rounds = [host_bench_round(cfg.worker, groups, ctx.world_size, params, count, 0) for _ in range(cfg.rounds)]
    mine = {"rank": ctx.rank, "pid": os.getpid(), "device": device_name(ctx.device), "bench": mean_of_rounds(rounds)}
    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, mine)
    return {"ranks": gathered} if ctx.rank == 0 else None
