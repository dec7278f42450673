"""How the groups of a placed layout spread over the tiers: for each group kind, the fewest members its worst
group has in any domain of each tier it touches (the `members` of cost.collectives.placed_group_links).

Placements move whole nodes, so the count is taken over logical nodes: a group that meets a node has the same
number of members in every node it meets (the rank generators nest), so members per domain = members per node ×
the group's nodes in that domain (docs/placement.md#spans)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.placement.fabric import Fabric
from llmscale.placement.mesh import GroupKind, group_ids, group_size
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


def kind_span(lay: Layout, kind: GroupKind, fabric: Fabric, node_of: np.ndarray) -> KindSpan:
    """`kind`'s span when logical node L sits on physical node node_of[L]."""
    g = fabric.gpus_per_node
    n = group_size(lay, kind)
    tiers = fabric.domain.shape[0]
    if n == 1:
        return KindSpan(kind, 1, np.ones(tiers), np.ones(tiers))
    per_node = int(np.count_nonzero(group_ids(lay, kind, np.arange(g)) == group_ids(lay, kind, np.zeros(1))[0]))
    if per_node >= n:  # inside one node: inside one domain of every tier
        return KindSpan(kind, n, np.full(tiers, float(n)), np.ones(tiers))
    node_group = group_ids(lay, kind, np.arange(node_of.size, dtype=np.int64) * g)
    members = np.empty(tiers)
    domains = np.empty(tiers)
    for t in range(tiers):
        if t == tiers - 1 or not fabric.shared_tiers[t]:
            # the outermost tier spans the cluster; a tier whose domains are single nodes holds per_node members
            members[t], domains[t] = (n, 1) if t == tiers - 1 else (per_node, n // per_node)
            continue
        dom = fabric.domain[t].take(node_of)
        width = int(dom.max()) + 1
        pairs, counts = np.unique(node_group * width + dom, return_counts=True)
        group = pairs // width
        starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        members[t] = min(n, per_node * int(np.minimum.reduceat(counts, starts).min()))
        domains[t] = int(np.diff(np.r_[starts, group.size]).max())
    return KindSpan(kind, n, members, domains)


def spans(lay: Layout, fabric: Fabric, node_of: np.ndarray) -> dict[GroupKind, KindSpan]:
    return {kind: kind_span(lay, kind, fabric, node_of) for kind in GroupKind}
