"""How the groups of a placed layout spread over the tiers: for each group kind, the fewest members its worst
group has in any domain of each tier it touches (the `members` of cost.collectives.placed_group_links).

Placements move whole nodes, so the count is taken over logical nodes: a group that meets a node has the same
number of members in every node it meets (the rank generators nest), so members per domain = members per node ×
the group's nodes in that domain (docs/placement.md#spans)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.placement.fabric import Fabric
from llmscale.placement.mesh import GroupKind, group_ids, group_size, node_axes, world_size
from llmscale.specs.layout import Layout


@dataclass(frozen=True)
class KindSpan:
    """One group kind under one placement."""

    kind: GroupKind
    size: int
    members: np.ndarray
    """(T,) the fewest members the worst group has in one tier-i domain it touches (size where it fits one)."""
    domains: np.ndarray
    """(T,) the most tier-i domains one group touches."""
    relief: np.ndarray
    """(T,) ≥ 1: how much more of tier i's rated bandwidth the worst member gets than its oversubscribed share,
    because the busiest domain below sends less than that share on every GPU (docs/placement.md#uplink-load)."""
    leaving: np.ndarray
    """(T,) L_i: what the busiest tier-(i−1) domain sends out through tier i, per GPU slot, in one rank's bus bytes;
    NaN where tier i − 1 is the node (each GPU its own NIC: the worst rank's share is the load)."""


@dataclass(frozen=True)
class _Units:
    """What the count runs over: logical nodes where the generators nest (a group meeting a node has `members` of
    its ranks there, and `copies` groups alike share the node), ranks otherwise."""

    group: np.ndarray
    node: np.ndarray
    """The logical node of each unit."""
    members: int
    copies: float
    nested: bool


def _units(lay: Layout, kind: GroupKind, g: int, nodes: int) -> _Units:
    if node_axes(lay, g) is None:
        ranks = np.arange(world_size(lay), dtype=np.int64)
        return _Units(group_ids(lay, kind, ranks), ranks // g, 1, 1.0, False)
    per_node = int(np.count_nonzero(group_ids(lay, kind, np.arange(g)) == group_ids(lay, kind, np.zeros(1))[0]))
    group = group_ids(lay, kind, np.arange(nodes, dtype=np.int64) * g)
    return _Units(group, np.arange(nodes), per_node, g / per_node, True)


def kind_span(lay: Layout, kind: GroupKind, fabric: Fabric, node_of: np.ndarray) -> KindSpan:
    """`kind`'s span when logical node L sits on physical node node_of[L]."""
    n = group_size(lay, kind)
    tiers = fabric.domain.shape[0]
    units = _units(lay, kind, fabric.gpus_per_node, node_of.size) if n > 1 else None
    if units is None or (units.nested and units.members >= n):  # one rank, or inside one node: one domain everywhere
        return KindSpan(kind, n, np.full(tiers, float(n)), np.ones(tiers), np.ones(tiers), np.zeros(tiers))
    members, domains, relief, leaving = np.empty(tiers), np.empty(tiers), np.ones(tiers), np.full(tiers, np.nan)
    leaving[0] = 0.0
    physical = node_of.take(units.node)
    for t in range(tiers):
        if t == tiers - 1 or (units.nested and not fabric.shared_tiers[t]):
            # the outermost tier spans the cluster; a tier whose domains are single nodes holds a node's members
            members[t], domains[t] = (n, 1) if t == tiers - 1 else (units.members, n // units.members)
            continue
        dom = fabric.domain[t].take(physical)
        width = int(dom.max()) + 1
        pairs, inverse, counts = np.unique(units.group * width + dom, return_inverse=True, return_counts=True)
        group = pairs // width
        starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        members[t] = min(n, units.members * int(np.minimum.reduceat(counts, starts).min()))
        domains[t] = int(np.diff(np.r_[starts, group.size]).max())
        load, worst = _leaving(kind, n, units.members, units.group, dom, units.members * counts.take(inverse))
        leaving[t + 1] = float(np.bincount(dom, weights=load * units.copies, minlength=width).max()
                               ) / fabric.tier_ranks[t]
        relief[t + 1] = _relief(leaving[t + 1], worst, fabric.oversubscription[t + 1])
    return KindSpan(kind, n, members, domains, relief, leaving)


def _leaving(kind: GroupKind, n: int, per_node: int, node_group: np.ndarray, dom: np.ndarray,
             here: np.ndarray) -> tuple[np.ndarray, float]:
    """Per logical node, the bus bytes its ranks send out of their domain (in one rank's bus bytes), and the most
    one rank sends out (as a share of its own). An all-to-all rank sends (n − here)/(n − 1) out (`here`: its group's
    members in its domain); a ring (ordered by rank, a node's members in a row) only across the edge to the group's
    next node, all of one rank's."""
    if kind is GroupKind.EP:
        share = (n - here) / (n - 1)
        return per_node * share, float(share.max())
    logical = np.arange(node_group.size)
    order = np.lexsort((logical, node_group))
    grouped = node_group.take(order)
    first = np.r_[True, grouped[1:] != grouped[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(order.size), 0))
    last = np.r_[first[1:], True]
    successor = np.where(last, order.take(start), np.roll(order, -1))
    out = np.zeros(node_group.size)
    out[order] = (dom.take(order) != dom.take(successor)).astype(float)
    return out, float(out.max())


def _relief(busiest: float, worst: float, oversubscription: float) -> float:
    """over ÷ over_eff for the uplinks above these domains: the busiest domain's leaving bytes per GPU slot L and the
    worst rank's x give over_eff = clip(over·L/x, 1, over), so that the worst rank's time is the larger of its NIC
    at full rate and its domain's uplinks carrying L (docs/placement.md#uplink-load)."""
    if worst <= 0 or oversubscription <= 1:
        return 1.0
    return oversubscription / float(np.clip(oversubscription * busiest / worst, 1.0, oversubscription))


def spans(lay: Layout, fabric: Fabric, node_of: np.ndarray) -> dict[GroupKind, KindSpan]:
    return {kind: kind_span(lay, kind, fabric, node_of) for kind in GroupKind}
