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
    """Free nodes for `nodes` logical nodes in sequence, block by block (outermost first): a block that would cross
    a boundary of its tier starts again in the next domain of that tier while enough free nodes remain after it."""
    free = np.flatnonzero(fabric.available)
    if free.size < nodes:
        raise ValueError(f"{nodes} nodes needed, {free.size} free")
    if free[nodes - 1] == nodes - 1 and all(tier_nodes[t] % block == 0 for t, block in blocks):
        return free[:nodes].copy(), 0  # no hole among them and every block tiles its domains: already aligned
    ends = {t: _domain_ends(fabric.domain[t].take(free)) for t, _ in blocks}
    packer = _Packer(free, fabric.domain, ends, blocks)
    size = blocks[0][1] if blocks else 1
    k, picked = 0, []
    for placed in range(0, nodes, size):
        k, nodes_of = packer.block(0, k, nodes - placed)
        picked.extend(nodes_of)
    return np.asarray(picked, dtype=np.int64), k - nodes


def _domain_ends(dom: np.ndarray) -> np.ndarray:
    """For each free node k: the index of the first free node past its domain."""
    bounds = np.append(np.flatnonzero(np.diff(dom)) + 1, dom.size)
    return bounds.take(np.searchsorted(bounds, np.arange(dom.size), side="right"))


@dataclass
class _Packer:
    free: np.ndarray
    domain: np.ndarray
    ends: dict[int, np.ndarray]
    blocks: list[tuple[int, int]]

    def block(self, level: int, k: int, need: int) -> tuple[int, list[int]]:
        """Place one block of `level` from free index k, `need` nodes still to place with it: (next k, nodes)."""
        if level == len(self.blocks):
            return k + 1, [int(self.free[k])]
        t, size = self.blocks[level]
        inner = self.blocks[level + 1][1] if level + 1 < len(self.blocks) else 1
        while True:
            at, nodes = k, []
            for done in range(0, size, inner):
                at, more = self.block(level + 1, at, need - done)
                nodes.extend(more)
            inside = bool(np.all(self.domain[t].take(nodes) == self.domain[t][self.free[k]]))
            skip_to = int(self.ends[t][k])
            if inside or self.free.size - skip_to < need:
                return at, nodes  # fits its domain, or no spare node left to skip with: it straddles
            k = skip_to
