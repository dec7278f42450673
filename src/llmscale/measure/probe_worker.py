"""One rank of the probe: process groups (EP blocks of `ep` ranks, EDP stride ep), host micro-benchmarks, the
training steps (gradient accumulation, then one un-overlapped DP all-reduce per bucket class, AdamW) and their
wall-clock timing per step.
Groups, timing fields and load handling: docs/design-notes.md#measure-probe-worker.
"""

from __future__ import annotations

import gc
import os
import resource
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist

from llmscale.measure import probe_host as host
from llmscale.measure.launch import Context
from llmscale.measure.probe_dispatch import CommClock, EPGroup
from llmscale.measure.probe_model import ProbeTransformer, split_parameters
from llmscale.measure.table import device_name
from llmscale.specs.model import ModelSpec

BENCH_REPS = 3
COLLECTIVE_REPS = 3
LEARNING_RATE = 1e-4


@dataclass(frozen=True)
class WorkerConfig:
    """What every rank needs; picklable for torch.multiprocessing.spawn."""

    model: ModelSpec
    seq_len: int
    mbs: int
    micro_batches: int
    steps: int
    warmup: int
    ep: int
    seed: int


@dataclass
class StepTiming:
    """One rank's step (module docstring); `events` are its collective calls (probe_dispatch.CommClock)."""

    step_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    events: list[tuple[str, tuple[int, ...], float, float]]


class RankGroups:
    """This rank's EP and EDP process groups and their members (every rank creates every group, in order)."""

    def __init__(self, rank: int, world: int, ep: int) -> None:
        self.ep_group: Any = None
        self.edp_group: Any = None
        self.ep_members: tuple[int, ...] = (rank,)
        self.edp_members: tuple[int, ...] = (rank,)
        for block in range(world // ep):
            ranks = tuple(range(block * ep, (block + 1) * ep))
            group = dist.new_group(list(ranks)) if ep > 1 else None
            if rank in ranks:
                self.ep_group, self.ep_members = group, ranks
        for index in range(ep):
            ranks = tuple(range(index, world, ep))
            group = dist.new_group(list(ranks)) if len(ranks) > 1 else None
            if rank in ranks:
                self.edp_group, self.edp_members = group, ranks
        self.ep, self.edp, self.ep_rank = ep, world // ep, rank % ep


def _flat_grads(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """One zeroed buffer whose slices are the parameters' .grad (autograd accumulates into them in place)."""
    flat = torch.zeros(sum(p.numel() for p in params))
    offset = 0
    for p in params:
        p.grad = flat[offset:offset + p.numel()].view_as(p)
        offset += p.numel()
    return flat


def host_bench_round(cfg: WorkerConfig, groups: RankGroups, world: int, params: list[torch.nn.Parameter],
           non_expert: int, expert: int) -> dict[str, Any]:
    """One round of the host micro-benchmarks (probe_host), run by every rank at the same time."""
    model, tokens = cfg.model, cfg.seq_len * cfg.mbs
    shapes = host.gemm_shapes(model, tokens, cfg.ep)
    dist.barrier()
    gemm = [host.gemm_seconds(shape, BENCH_REPS) for shape in shapes]
    attention = host.attention_seconds(model, cfg.seq_len, cfg.mbs, BENCH_REPS)
    kinds = {"dense": model.num_dense_layers > 0, "moe": model.num_moe_layers > 0}
    elementwise = {kind: host.layer_elementwise_seconds(model, cfg.seq_len, cfg.mbs, kind == "moe", cfg.ep,
                                                        BENCH_REPS) if present else 0.0
                   for kind, present in kinds.items()}
    everyone = tuple(range(world))
    samples = [host.collective_sample("all_reduce", nbytes, None, everyone, 1, COLLECTIVE_REPS)
               for nbytes in (host.SMALL_MESSAGE_BYTES, 4.0 * non_expert)]
    if expert and groups.edp > 1:
        samples.append(host.collective_sample("all_reduce", 4.0 * expert, groups.edp_group, groups.edp_members,
                                              cfg.ep, COLLECTIVE_REPS))
    if groups.ep > 1:
        routed = tokens * model.top_k * model.hidden * torch.bfloat16.itemsize
        samples += [host.collective_sample("all_to_all", nbytes, groups.ep_group, groups.ep_members, 1,
                                           COLLECTIVE_REPS, torch.bfloat16)
                    for nbytes in (host.SMALL_MESSAGE_BYTES, routed)]
    return {
        "gemm_flops_per_micro_batch": sum(s.count * s.flops for s in shapes),
        "gemm_s_per_micro_batch": sum(s.count * t for s, t in zip(shapes, gemm, strict=True)),
        "reference_gemm_flops_per_s": host.reference_gemm_flops_per_s(BENCH_REPS),
        "attention_forward_s": attention[0],
        "attention_backward_s": attention[1],
        "dense_layer_elementwise_s": elementwise["dense"],
        "moe_layer_elementwise_s": elementwise["moe"],
        "loss_s": host.loss_seconds(tokens, model.vocab, BENCH_REPS),
        "optimizer_s": host.optimizer_seconds([tuple(p.shape) for p in params], BENCH_REPS),
        "copy_bytes_per_s": host.copy_bytes_per_s(BENCH_REPS),
        "collectives": [asdict(s) for s in samples],
    }


def mean_of_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Field-wise mean of the benchmark rounds (collective samples matched by position)."""
    first = rounds[0]
    merged: dict[str, Any] = {k: statistics.fmean(r[k] for r in rounds) for k in first if k != "collectives"}
    merged["collectives"] = [dict(c, seconds=statistics.fmean(r["collectives"][i]["seconds"] for r in rounds))
                             for i, c in enumerate(first["collectives"])]
    merged["rounds"] = len(rounds)
    return merged


def _step(model: ProbeTransformer, batches: list[tuple[torch.Tensor, torch.Tensor]], clock: CommClock,
          buffers: list[tuple[torch.Tensor, Any, tuple[int, ...]]], optimizer: torch.optim.Optimizer) -> StepTiming:
    clock.events.clear()
    dist.barrier()
    start = time.perf_counter()
    forward = backward = 0.0
    for tokens, targets in batches:
        t0, c0 = time.perf_counter(), clock.total("ep")
        loss = model(tokens, targets) / len(batches)
        t1, c1 = time.perf_counter(), clock.total("ep")
        loss.backward()
        t2, c2 = time.perf_counter(), clock.total("ep")
        forward += t1 - t0 - (c1 - c0)
        backward += t2 - t1 - (c2 - c1)
    for flat, group, members in buffers:
        if len(members) > 1:
            with clock.timed("dp", members):
                dist.all_reduce(flat, group=group)
    t3 = time.perf_counter()
    for flat, _, members in buffers:
        flat.div_(len(members))
    optimizer.step()
    for flat, _, _ in buffers:
        flat.zero_()
    end = time.perf_counter()
    return StepTiming(end - start, forward, backward, end - t3, list(clock.events))


def probe_rank(ctx: Context, cfg: WorkerConfig) -> dict[str, Any] | None:
    """Train the probe for warmup + steps on this rank (launch.py started it and joined the gloo group); rank 0
    gathers every rank's timings and micro-benchmarks and returns them, the other ranks return None."""
    rank, world = ctx.rank, ctx.world_size
    groups = RankGroups(rank, world, cfg.ep)
    clock = CommClock()
    torch.manual_seed(cfg.seed)
    ep_group = EPGroup(cfg.ep, groups.ep_rank, groups.ep_group, groups.ep_members, clock)
    net = ProbeTransformer(cfg.model, cfg.seq_len, ep_group)
    dense_params, expert_params = split_parameters(net)
    with torch.no_grad():  # each EP rank's experts differ; replicas of one expert (EDP) agree
        generator = torch.Generator().manual_seed(cfg.seed + 1 + groups.ep_rank)
        for p in expert_params:
            p.normal_(0.0, 0.02, generator=generator)
    buffers = [(_flat_grads(dense_params), None, tuple(range(world)))]
    if expert_params:
        buffers.append((_flat_grads(expert_params), groups.edp_group, groups.edp_members))
    optimizer = torch.optim.AdamW(dense_params + expert_params, lr=LEARNING_RATE)
    non_expert = sum(p.numel() for p in dense_params)
    expert = sum(p.numel() for p in expert_params)
    params = dense_params + expert_params
    rounds: list[dict[str, Any]] = []
    data = torch.Generator().manual_seed(cfg.seed * 1000 + rank)
    batches = [(torch.randint(cfg.model.vocab, (cfg.mbs, cfg.seq_len), generator=data),
                torch.randint(cfg.model.vocab, (cfg.mbs, cfg.seq_len), generator=data))
               for _ in range(cfg.micro_batches)]
    gc.collect()
    gc.disable()
    switches = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
    timings = []
    try:
        for i in range(cfg.warmup + cfg.steps):
            timings.append(asdict(_step(net, batches, clock, buffers, optimizer)))
            if i >= cfg.warmup:  # a round after every timed step: load that comes and goes hits both
                rounds.append(host_bench_round(cfg, groups, world, params, non_expert, expert))
    finally:
        gc.enable()
    switches = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw - switches
    mine = {"rank": rank, "pid": os.getpid(), "threads": torch.get_num_threads(), "device": device_name(ctx.device),
            "preemptions_per_step": switches / (cfg.warmup + cfg.steps), "non_expert_params": non_expert,
            "expert_params": expert, "steps": timings[cfg.warmup:],
            "bench": mean_of_rounds(rounds)}
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, mine)
    return {"world": world, "ranks": gathered} if rank == 0 else None
