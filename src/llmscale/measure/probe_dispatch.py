"""Expert-parallel token dispatch and combine for the probe: top-k copies sent to the rank that owns their expert
with `all_to_all_single` (rows sorted by global expert, counts sent first), run there, sent back and summed with the
router weights; an autograd Function, rows in `wire` precision, calls timed in a `CommClock`.
Wire order, shapes and what is left out: docs/design-notes.md#measure-probe-dispatch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist


@dataclass
class CommClock:
    """Every blocking collective call of this rank: (kind, the group's member ranks, entry time, exit time), on the
    host's monotonic clock (time.perf_counter, CLOCK_MONOTONIC on Linux: one clock for every process of the
    machine). On CPU with gloo a call returns when its data has arrived, so exit − entry is its time, including
    any wait for a slower peer; matching the same call across ranks separates the two (probe_predict)."""

    events: list[tuple[str, tuple[int, ...], float, float]] = field(default_factory=list)

    @contextmanager
    def timed(self, kind: str, members: tuple[int, ...]) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.events.append((kind, members, start, time.perf_counter()))

    def total(self, kind: str) -> float:
        """Seconds inside calls of `kind` so far."""
        return sum(end - start for k, _, start, end in self.events if k == kind)


@dataclass(frozen=True)
class EPGroup:
    """This rank's expert-parallel group: `size` ranks, this one at `rank`, experts split evenly."""

    size: int
    rank: int
    group: Any
    """A torch.distributed process group (None = the default group); unused when size is 1."""
    members: tuple[int, ...]
    """Global ranks of the group, in group-rank order."""
    clock: CommClock
    wire: torch.dtype = torch.bfloat16


@dataclass(frozen=True)
class Route:
    """Where this rank's copies go and what it receives (module docstring: order on the wire)."""

    order: torch.Tensor
    """(T·k,) copy indices sorted by global expert (copy j is token j // k, slot j % k)."""
    send_splits: list[int]
    """Rows sent to each EP rank."""
    recv_splits: list[int]
    """Rows received from each EP rank."""
    recv_counts: torch.Tensor
    """(ep, E_l): rows received from source s for local expert e."""

    @property
    def expert_rows(self) -> list[int]:
        """Rows each local expert runs on (summed over sources)."""
        return [int(c) for c in self.recv_counts.sum(0).tolist()]


class _AllToAll(torch.autograd.Function):
    """Rows exchanged with all_to_all_single; the backward sends the gradients back along the same routes."""

    @staticmethod
    def forward(
        ctx: Any, rows: torch.Tensor, out_splits: list[int], in_splits: list[int], ep: EPGroup
    ) -> torch.Tensor:
        ctx.routes = (out_splits, in_splits, ep)
        return _exchange(rows, out_splits, in_splits, ep)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        out_splits, in_splits, ep = ctx.routes
        return _exchange(grad, in_splits, out_splits, ep), None, None, None


def _exchange(rows: torch.Tensor, out_splits: list[int], in_splits: list[int], ep: EPGroup) -> torch.Tensor:
    """One timed all_to_all_single of `rows` in wire precision; returned in the rows' own dtype."""
    send = rows.detach().to(ep.wire).contiguous()
    recv = torch.empty((sum(out_splits), *rows.shape[1:]), dtype=ep.wire)
    with ep.clock.timed("ep", ep.members):
        dist.all_to_all_single(recv, send, out_splits, in_splits, group=ep.group)
    return recv.to(rows.dtype)


def plan_route(expert_index: torch.Tensor, num_experts: int, ep: EPGroup) -> Route:
    """Sort this rank's copies by expert and swap per-expert counts with the EP group (one small, timed
    all_to_all). `expert_index` is (T, k) global expert ids."""
    flat = expert_index.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=num_experts)
    local = num_experts // ep.size
    send_splits = [int(c) for c in counts.view(ep.size, local).sum(1).tolist()]
    if ep.size == 1:
        return Route(order, send_splits, send_splits, counts.view(1, local))
    recv = torch.empty(ep.size * local, dtype=counts.dtype)
    with ep.clock.timed("ep", ep.members):
        dist.all_to_all_single(recv, counts, group=ep.group)
    recv_counts = recv.view(ep.size, local)
    return Route(order, send_splits, [int(c) for c in recv_counts.sum(1).tolist()], recv_counts)


def dispatch(tokens: torch.Tensor, route: Route, top_k: int, ep: EPGroup) -> torch.Tensor:
    """(T, h) tokens → (R, h) rows this rank's experts run, ordered (source rank, local expert)."""
    copies = tokens.index_select(0, route.order // top_k)
    if ep.size == 1:
        return copies
    result: torch.Tensor = _AllToAll.apply(copies, route.recv_splits, route.send_splits, ep)
    return result


def combine(rows: torch.Tensor, route: Route, weights: torch.Tensor, ep: EPGroup) -> torch.Tensor:
    """(R, h) expert outputs → (T, h): rows sent back to their source, unsorted to (token, slot) order and
    summed over the k slots with the router `weights` (T, k)."""
    back = rows if ep.size == 1 else _AllToAll.apply(rows, route.send_splits, route.recv_splits, ep)
    inverse = torch.argsort(route.order)
    per_copy = back.index_select(0, inverse).view(*weights.shape, -1)
    mixed: torch.Tensor = (per_copy * weights.unsqueeze(-1).to(per_copy.dtype)).sum(1)
    return mixed


def run_experts(
    rows: torch.Tensor, route: Route, expert: Callable[[int, torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """Apply local expert e to its rows: regroup (source, expert) order to expert-major, call
    `expert(e, block)` on each contiguous block, and restore the wire order."""
    local = route.recv_counts.shape[1]
    ids = torch.arange(local).repeat(route.recv_counts.shape[0])
    expert_of_row = torch.repeat_interleave(ids, route.recv_counts.reshape(-1))
    perm = torch.argsort(expert_of_row, stable=True)
    grouped = rows.index_select(0, perm)
    outputs = [expert(e, block) for e, block in enumerate(torch.split(grouped, route.expert_rows))]
    merged = torch.cat(outputs) if outputs else grouped
    return merged.index_select(0, torch.argsort(perm))


def moe_exchange(
    tokens: torch.Tensor, expert_index: torch.Tensor, weights: torch.Tensor, num_experts: int, ep: EPGroup,
    expert: Callable[[int, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """Dispatch → local experts → combine for one MoE layer: (T, h) in, (T, h) out."""
    route = plan_route(expert_index, num_experts, ep)
    rows = dispatch(tokens, route, expert_index.shape[1], ep)
    return combine(run_experts(rows, route, expert), route, weights, ep)
