"""Collective bench (`llmscale bench collectives`): nccl-tests' quantities (NVIDIA/nccl-tests@03a204a
doc/PERFORMANCE.md) for all_reduce, all_gather, reduce_scatter, all_to_all and send_recv, busbw = S / time · f(n),
with a plain torch.distributed loop of the same call timed beside it; on gloo reduce_scatter runs as a2a+sum.
Sizes, #wrong, the gloo reduce_scatter (pytorch#118911) and scopes: docs/monitoring.md#measure-collectives.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmscale.cost.collectives import Collective, bus_factor
from llmscale.measure.launch import Context

OPS = tuple(op.value for op in Collective)
DEFAULT_CPU_SIZES = tuple(2**p for p in (12, 16, 20, 22, 24))
DEFAULT_GPU_SIZES = tuple(2**p for p in (20, 23, 26, 29, 30))


@dataclass(frozen=True)
class Group:
    """This rank's group in one scope."""

    scope: str
    tier: int | None
    """Network tier the scope measures (0 inside a host, 1 across hosts; None for mixed)."""
    pg: Any
    """The torch ProcessGroup (None = the world)."""
    ranks: tuple[int, ...]
    """Global ranks of the group, in group-rank order."""
    me: int
    """This rank's index in `ranks`."""

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def next(self) -> int:
        return self.ranks[(self.me + 1) % self.size]

    @property
    def prev(self) -> int:
        return self.ranks[(self.me - 1) % self.size]


def scopes(ctx: Context) -> list[Group]:
    """This rank's group per scope (module docstring); every rank creates every group in the same order."""
    import torch.distributed as dist

    hosts: list[str | None] = [None] * ctx.world_size
    dist.all_gather_object(hosts, ctx.host)
    by_host: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        by_host.setdefault(str(host), []).append(rank)
    everyone = tuple(range(ctx.world_size))
    if len(by_host) == 1:
        return [Group("intra-node", 0, None, everyone, ctx.rank)]
    result = []
    per_host = list(by_host.values())
    columns = [tuple(ranks[i] for ranks in per_host if i < len(ranks)) for i in range(max(map(len, per_host)))]
    for scope, tier, groups in (("intra-node", 0, per_host), ("inter-node", 1, columns)):
        for ranks in groups:
            pg = dist.new_group(list(ranks))
            if ctx.rank in ranks and len(ranks) > 1:
                result.append(Group(scope, tier, pg, tuple(ranks), ranks.index(ctx.rank)))
    result.append(Group("all", None, None, everyone, ctx.rank))
    return result


@dataclass
class Buffers:
    send: Any
    recv: Any
    scratch: Any = None


def _buffers(op: str, count: int, n: int, dtype: Any, device: str) -> Buffers:
    import torch

    def new(c: int) -> Any:
        return torch.zeros(c, dtype=dtype, device=device)

    if op == "all_reduce":
        buf = new(count)
        return Buffers(buf, buf)
    if op == "all_gather":
        return Buffers(new(count // n), new(count))
    if op == "reduce_scatter":
        return Buffers(new(count), new(count // n), new(count))
    return Buffers(new(count), new(count))


def _calls(emulate_rs: bool) -> dict[str, Callable[[Buffers, Group], None]]:
    """The call each op's bench times (reduce_scatter: `a2a+sum` when emulate_rs)."""
    import torch
    import torch.distributed as dist

    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    held: list[Any] = []

    def send_recv(b: Buffers, g: Group) -> None:
        # Hold the handles until the next call, as a loop's variables do: freeing a gloo send/recv handle right
        # after its wait() stalls the next exchange (measured here: 2-5x slower than the same plain loop).
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, b.send, g.next, group=g.pg),
                                        dist.P2POp(dist.irecv, b.recv, g.prev, group=g.pg)])
        for work in works:
            work.wait()
        held[:] = works

    def reduce_scatter_a2a(b: Buffers, g: Group) -> None:
        dist.all_to_all_single(b.scratch, b.send, group=g.pg)
        torch.sum(b.scratch.view(g.size, -1), dim=0, out=b.recv)

    return {
        "all_reduce": lambda b, g: dist.all_reduce(b.send, group=g.pg),
        "all_gather": lambda b, g: gather(b.recv, b.send, group=g.pg),
        "reduce_scatter": reduce_scatter_a2a if emulate_rs else lambda b, g: scatter(b.recv, b.send, group=g.pg),
        "all_to_all": lambda b, g: dist.all_to_all_single(b.recv, b.send, group=g.pg),
        "send_recv": send_recv,
    }


# ---- the plain loops: no llmscale wrapper, the calls written out -------------------------------------------------

def _plain_all_reduce(b: Buffers, g: Group, iters: int, warmup: int, emulate_rs: bool) -> float:
    import torch.distributed as dist

    for _ in range(warmup):
        dist.all_reduce(b.send, group=g.pg)
    dist.barrier(group=g.pg)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(b.send, group=g.pg)
    return _plain_stop(b, start, iters)


def _plain_all_gather(b: Buffers, g: Group, iters: int, warmup: int, emulate_rs: bool) -> float:
    import torch.distributed as dist

    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    for _ in range(warmup):
        gather(b.recv, b.send, group=g.pg)
    dist.barrier(group=g.pg)
    start = time.perf_counter()
    for _ in range(iters):
        gather(b.recv, b.send, group=g.pg)
    return _plain_stop(b, start, iters)


def _plain_reduce_scatter(b: Buffers, g: Group, iters: int, warmup: int, emulate_rs: bool) -> float:
    import torch
    import torch.distributed as dist

    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if emulate_rs:
        for _ in range(warmup):
            dist.all_to_all_single(b.scratch, b.send, group=g.pg)
            torch.sum(b.scratch.view(g.size, -1), dim=0, out=b.recv)
        dist.barrier(group=g.pg)
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_to_all_single(b.scratch, b.send, group=g.pg)
            torch.sum(b.scratch.view(g.size, -1), dim=0, out=b.recv)
        return _plain_stop(b, start, iters)
    for _ in range(warmup):
        scatter(b.recv, b.send, group=g.pg)
    dist.barrier(group=g.pg)
    start = time.perf_counter()
    for _ in range(iters):
        scatter(b.recv, b.send, group=g.pg)
    return _plain_stop(b, start, iters)


def _plain_all_to_all(b: Buffers, g: Group, iters: int, warmup: int, emulate_rs: bool) -> float:
    import torch.distributed as dist

    for _ in range(warmup):
        dist.all_to_all_single(b.recv, b.send, group=g.pg)
    dist.barrier(group=g.pg)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_to_all_single(b.recv, b.send, group=g.pg)
    return _plain_stop(b, start, iters)


def _plain_send_recv(b: Buffers, g: Group, iters: int, warmup: int, emulate_rs: bool) -> float:
    import torch.distributed as dist

    ops = [dist.P2POp(dist.isend, b.send, g.next, group=g.pg), dist.P2POp(dist.irecv, b.recv, g.prev, group=g.pg)]
    for _ in range(warmup):
        works = dist.batch_isend_irecv(ops)
        for work in works:
            work.wait()
    dist.barrier(group=g.pg)
    start = time.perf_counter()
    for _ in range(iters):
        works = dist.batch_isend_irecv(ops)
        for work in works:
            work.wait()
    return _plain_stop(b, start, iters)


def _plain_stop(b: Buffers, start: float, iters: int) -> float:
    import torch

    if b.send.is_cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters


_PLAIN: dict[str, Callable[[Buffers, Group, int, int, bool], float]] = {
    "all_reduce": _plain_all_reduce, "all_gather": _plain_all_gather, "reduce_scatter": _plain_reduce_scatter,
    "all_to_all": _plain_all_to_all, "send_recv": _plain_send_recv,
}


# ---- checking ------------------------------------------------------------------------------------------------

def _expected(op: str, count: int, g: Group, device: str) -> tuple[Any, Any]:
    """(what this rank sends, what it must receive) as float64: small integers, exact in float32."""
    import torch

    n, r = g.size, g.me
    pattern = (torch.arange(count, device=device) % 3).double()
    local = count // n
    chunk_of = torch.arange(n, device=device).double().repeat_interleave(local)
    tiled = pattern[:local].repeat(n)
    if op == "all_reduce":
        return r + 1 + pattern, n * (n + 1) / 2 + n * pattern
    if op == "all_gather":
        return r + 1 + pattern[:local], chunk_of + 1 + tiled
    if op == "reduce_scatter":
        return r + 1 + pattern, (n * (n + 1) / 2 + n * pattern).view(n, -1)[r]
    if op == "all_to_all":
        return r * n + chunk_of + tiled, chunk_of * n + r + tiled
    return r + 1 + pattern, (g.me - 1) % n + 1 + pattern


def _wrong(op: str, b: Buffers, g: Group, call: Callable[[], None], sync: Callable[[], None]) -> int:
    """Elements of this rank's result that differ from the expected values after one call."""
    import torch

    count = b.recv.numel() if op == "all_gather" else b.send.numel()
    sent, expect = _expected(op, count, g, str(b.send.device))
    b.send.copy_(sent)
    if b.recv is not b.send:
        b.recv.zero_()
    call()
    sync()
    tolerance = 0.0 if b.recv.dtype in (torch.float32, torch.float64) else 0.01
    wrong = int(((b.recv.double() - expect).abs() > tolerance * expect.abs()).sum().item())
    b.send.zero_()
    b.recv.zero_()
    return wrong


# ---- the bench -----------------------------------------------------------------------------------------------

def _world(value: float, device: str, op: str) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return float(t.item())


def _slowest(seconds: list[float], device: str) -> list[float]:
    """Per block, the slowest rank's seconds (one all-reduce for all blocks)."""
    import torch
    import torch.distributed as dist

    if not seconds:
        return []
    t = torch.tensor(seconds, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(x) for x in t.tolist()]


def _count(op: str, size: int, itemsize: int, n: int) -> int:
    count = max(size // itemsize, 1)
    return max(count // n, 1) * n if op in ("all_gather", "reduce_scatter", "all_to_all") else count


def _case(op: str, size: int, g: Group, ctx: Context, cfg: dict[str, Any],
          calls: dict[str, Callable[[Buffers, Group], None]]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from llmscale.measure.timing import block_s, iterations_for, synchronizer

    dtype = getattr(torch, cfg["dtype"])
    itemsize = torch.empty((), dtype=dtype).element_size()
    count = _count(op, size, itemsize, g.size)
    b = _buffers(op, count, g.size, dtype, ctx.device)
    sync = synchronizer(ctx.device)

    def call() -> None:
        calls[op](b, g)

    warm = block_s(call, cfg["warmup"], sync)
    iters = cfg["iters"] or iterations_for(_world(warm, ctx.device, "max"), cfg["target_s"])

    def bench_block() -> float:
        block_s(call, cfg["warmup"], sync)
        dist.barrier(group=g.pg)
        return block_s(call, iters, sync)

    def plain_block() -> float:
        return _PLAIN[op](b, g, iters, cfg["warmup"], cfg["emulate_rs"])

    local_bench, local_plain = [], []
    for i in range(cfg["repeats"]):  # interleaved, alternating which goes first, so drift hits both alike
        if cfg["plain"] and i % 2:
            local_plain.append(plain_block())
        local_bench.append(bench_block())
        if cfg["plain"] and not i % 2:
            local_plain.append(plain_block())
    bench, plain = _slowest(local_bench, ctx.device), _slowest(local_plain, ctx.device)
    wrong = int(_world(_wrong(op, b, g, call, sync), ctx.device, "sum"))
    s = count * itemsize
    factor = float(bus_factor(Collective(op), np.array(g.size)))
    seconds = statistics.median(bench)
    row = {"scope": g.scope, "tier": g.tier, "op": op,
           "impl": "a2a+sum" if op == "reduce_scatter" and cfg["emulate_rs"] else "native",
           "ranks": g.size, "group_ranks": list(g.ranks), "size_bytes": s, "count": count, "type": cfg["dtype"],
           "iters": iters,
           "time_s": seconds, "algbw_bytes_per_s": s / seconds, "busbw_bytes_per_s": s / seconds * factor,
           "wrong": wrong, "time_samples_s": bench}
    if plain:
        plain_s = statistics.median(plain)
        row.update({"plain_time_s": plain_s, "plain_samples_s": plain, "plain_busbw_bytes_per_s": s / plain_s * factor,
                    "ratio": statistics.median(p / t for p, t in zip(plain, bench, strict=True))})
    return row


def collectives_worker(ctx: Context, cfg: dict[str, Any]) -> dict[str, Any]:
    """Every (scope, op, size) of `cfg` on this rank; rank 0's return value holds the rows."""
    import os

    import torch.distributed as dist

    from llmscale.measure.table import device_name

    ranks: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(ranks, {"rank": ctx.rank, "host": ctx.host, "pid": os.getpid(), "device": ctx.device,
                                   "device_name": device_name(ctx.device)})
    calls = _calls(cfg["emulate_rs"])
    rows = [_case(op, size, g, ctx, cfg, calls) for g in scopes(ctx) for op in cfg["ops"] for size in cfg["sizes"]]
    return {"ranks": ranks, "rows": rows}


def bench_config(ops: list[str], sizes: list[int], dtype: str, backend: str, *, iters: int = 0, warmup: int = 2,
                 repeats: int = 3, target_s: float = 0.05, plain: bool = True) -> dict[str, Any]:
    """The payload every rank receives (plain data, so it pickles for spawned workers)."""
    return {"ops": ops, "sizes": sizes, "dtype": dtype, "iters": iters, "warmup": max(warmup, 1),
            "repeats": max(repeats, 1), "target_s": target_s, "plain": plain, "emulate_rs": backend == "gloo"}
