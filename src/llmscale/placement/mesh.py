"""The ranks of one layout and the groups they form, as Megatron-Core numbers them, and the axes a placement may
reorder across nodes.

Megatron-Core's RankGenerator (NVIDIA/Megatron-LM@core_v0.15.0 megatron/core/parallel_state.py) lays ranks out in
the order `tp-cp-ep-dp-pp` (or `tp-cp-ep-pp-dp`), innermost first; the expert groups come from a second generator
over the same ranks with tp → etp, ep, dp → edp, cp → 1. Groups per kind: docs/placement.md#groups."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import Enum

import numpy as np

from llmscale.specs.layout import Layout, RankOrder


class GroupKind(str, Enum):
    """The communication groups of a layout (cost.traffic prices each)."""

    TP = "tp"
    CP = "cp"
    EP = "ep"
    PP = "pp"
    DP = "dp"
    """The dense data-parallel group, dp·cp ranks (gradients of the non-expert parameters)."""
    EDP = "edp"
    """The expert data-parallel group (gradients of the expert parameters)."""


@dataclass(frozen=True)
class Axis:
    """One factor of the rank index: `size` values at `stride` ranks apart."""

    name: str
    size: int
    stride: int


def filled(lay: Layout) -> tuple[int, int]:
    """(dp, etp) of a resolved layout (io.resolve fills both)."""
    assert lay.dp is not None and lay.etp is not None, "placement of a layout without dp or etp"
    return lay.dp, lay.etp


def world_size(lay: Layout) -> int:
    return lay.tp * lay.cp * filled(lay)[0] * lay.pp


def _dense_axes(lay: Layout) -> list[tuple[str, int]]:
    dp, _ = filled(lay)
    inner_pp = lay.rank_order is RankOrder.TP_CP_EP_PP_DP
    return [("tp", lay.tp), ("cp", lay.cp), *([("pp", lay.pp), ("dp", dp)] if inner_pp else [("dp", dp),
                                                                                            ("pp", lay.pp)])]


def _expert_axes(lay: Layout) -> list[tuple[str, int]]:
    dp, etp = filled(lay)
    edp = lay.tp * lay.cp * dp // (lay.ep * etp)
    inner_pp = lay.rank_order is RankOrder.TP_CP_EP_PP_DP
    return [("etp", etp), ("ep", lay.ep), *([("pp", lay.pp), ("edp", edp)] if inner_pp else [("edp", edp),
                                                                                            ("pp", lay.pp)])]


MEMBER_AXES = {
    GroupKind.TP: ("dense", ("tp",)),
    GroupKind.CP: ("dense", ("cp",)),
    GroupKind.PP: ("dense", ("pp",)),
    GroupKind.DP: ("dense", ("cp", "dp")),
    GroupKind.EP: ("expert", ("ep",)),
    GroupKind.EDP: ("expert", ("edp",)),
}
"""The generator and the axes whose ranks are the members of each group kind."""


def group_ids(lay: Layout, kind: GroupKind, ranks: np.ndarray) -> np.ndarray:
    """The group of `kind` each of `ranks` belongs to: ranks that differ only along the kind's axes share one."""
    generator, members = MEMBER_AXES[kind]
    axes = _dense_axes(lay) if generator == "dense" else _expert_axes(lay)
    ids = np.zeros(ranks.shape, dtype=np.int64)
    rest = ranks.astype(np.int64, copy=True)
    scale = 1
    for name, size in axes:
        digit = rest % size
        rest //= size
        if name not in members:
            ids += digit * scale
            scale *= size
    return ids


def group_size(lay: Layout, kind: GroupKind) -> int:
    generator, members = MEMBER_AXES[kind]
    axes = dict(_dense_axes(lay) if generator == "dense" else _expert_axes(lay))
    return int(np.prod([axes[name] for name in members]))


def node_axes(lay: Layout, gpus_per_node: int) -> tuple[Axis, ...] | None:
    """The factors of the node index (rank // gpus_per_node) that a placement may reorder, innermost first: the rank
    index cut at every group boundary of both generators and at the node. None where those boundaries do not nest
    (a factor of one does not divide the next): then only the rank order's own sequence is placed."""
    world = world_size(lay)
    cuts = {1, world, gpus_per_node}
    for axes in (_dense_axes(lay), _expert_axes(lay)):
        span = 1
        for _, size in axes:
            span *= size
            cuts.add(span)
    chain = sorted(c for c in cuts if c <= world)
    if any(b % a for a, b in itertools.pairwise(chain)) or world % gpus_per_node:
        return None
    out = []
    for low, high in itertools.pairwise(chain):
        if low >= gpus_per_node:
            out.append(Axis(_axis_name(lay, low), high // low, low // gpus_per_node))
    return tuple(out)


def _axis_name(lay: Layout, low: int) -> str:
    """The dense axis (and the expert one, where it differs) that the factor starting at rank span `low` belongs
    to, e.g. `dp/ep` for the part of dp that an EP group spans."""
    names = []
    for axes in (_dense_axes(lay), _expert_axes(lay)) if lay.ep > 1 else (_dense_axes(lay),):
        span = 1
        for name, size in axes:
            if span <= low < span * size:
                names.append(name)
                break
            span *= size
    return "/".join(dict.fromkeys(names)) or "?"
