"""Placements: which physical node holds each logical node (rank // g) of a layout.

`in_order` lays the logical nodes on the free nodes in topology order, as a plain hostfile (or a scheduler's node
list) does. `packed` first reorders the logical nodes by a permutation of the layout's node axes (mesh.node_axes),
then packs them aligned: a block of logical nodes that fits one domain of a tier starts in a fresh domain when the
current one has too few free nodes left and spare nodes allow it (docs/placement.md#packing)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.placement.fabric import Fabric
from llmscale.placement.mesh import Axis


@dataclass(frozen=True)
class Placement:
    """One assignment of logical nodes to physical ones."""

    name: str
    """`in order`, or the node axes innermost first, e.g. `dp/ep·edp·pp`."""
    node_of: np.ndarray
    """(logical nodes,) the physical node (Fabric index) of each logical node."""
    skipped: int
    """Free nodes left idle to keep blocks aligned."""


def in_order(fabric: Fabric, nodes: int) -> Placement:
    """The first `nodes` free nodes, in topology order (what a hostfile in that order gives)."""
    free = np.flatnonzero(fabric.available)
    return Placement("in order", free[:nodes].copy(), 0)


def orders(axes: tuple[Axis, ...]) -> list[tuple[int, ...]]:
    """The node-axis orders (innermost first) a search tries: the rank order's, each axis moved innermost (which
    group gets the fastest tier: the choice that decides the traffic), and the reverse; k + 1 at most."""
    ident = tuple(range(len(axes)))
    moved = [(i, *(j for j in ident if j != i)) for i in ident]
    return list(dict.fromkeys([ident, *moved, ident[::-1]]))


def packed(fabric: Fabric, axes: tuple[Axis, ...], order: tuple[int, ...], tier_nodes: tuple[int, ...]) -> Placement:
    """Logical nodes reordered by `order` (indices into `axes`, innermost first) and packed aligned into domains of
    `tier_nodes` nodes each (per tier, innermost first)."""
    nodes = int(np.prod([a.size for a in axes])) if axes else 1
    logical = np.arange(nodes)
    position = np.zeros(nodes, dtype=np.int64)
    scale = 1
    for i in order:
        axis = axes[i]
        position += (logical // axis.stride) % axis.size * scale
        scale *= axis.size
    sequence = np.argsort(position)  # sequence[p] = the logical node laid down p-th
    blocks = _block_sizes([axes[i].size for i in order], tier_nodes)
    physical, skipped = _pack(fabric, nodes, blocks, tier_nodes)
    node_of = np.empty(nodes, dtype=np.int64)
    node_of[sequence] = physical
    name = "·".join(axes[i].name for i in order) if axes else "one node"
    return Placement(name, node_of, skipped)


def _block_sizes(sizes: list[int], tier_nodes: tuple[int, ...]) -> list[tuple[int, int]]:
    """(tier, block) pairs, outermost tier first: the largest run of the ordered axes that fits a tier domain."""
    out = []
    for t, capacity in enumerate(tier_nodes):
        block = 1
        for size in sizes:
            if block * size > capacity:
                break
            block *= size
        if block > 1:
            out.append((t, block))
    return out[::-1]


def _pack(fabric: Fabric, nodes: int, blocks: list[tuple[int, int]], tier_nodes: tuple[int, ...]
          ) -> tuple[np.ndarray, int]:
    """Free nodes for `nodes` logical nodes in sequence, starting each block in a fresh domain where the current one
    cannot hold it and spare nodes remain."""
    free = np.flatnonzero(fabric.available)
    if free.size < nodes:
        raise ValueError(f"{nodes} nodes needed, {free.size} free")
    if free[nodes - 1] == nodes - 1 and all(tier_nodes[t] % block == 0 for t, block in blocks):
        return free[:nodes].copy(), 0  # no hole among them and every block tiles its domains: already aligned
    # end[t][k]: index in `free` of the first free node past free[k]'s tier-t domain
    end = {}
    for t, _ in blocks:
        dom = fabric.domain[t].take(free)
        change = np.flatnonzero(np.diff(dom)) + 1
        bounds = np.append(change, free.size)
        end[t] = bounds.take(np.searchsorted(bounds, np.arange(free.size), side="right"))
    spare = free.size - nodes
    out = np.empty(nodes, dtype=np.int64)
    k = 0
    skipped = 0
    for j in range(nodes):
        for t, block in blocks:
            if j % block == 0 and spare > 0:
                left = int(end[t][k]) - k
                if left < block and left <= spare:
                    k += left
                    spare -= left
                    skipped += left
        out[j] = free[k]
        k += 1
    return out, skipped
