"""Search the placements of one layout on a fabric and price each with the step model (docs/placement.md).

Candidates: the free nodes in topology order (what a hostfile gives), and the layout's node axes in k + 1 orders
(assign.orders) packed aligned into domains (assign.packed). Each is priced by cost.step.estimate_step on the
links its groups actually span (cost.collectives.placed_group_links), all candidates in one vectorized call."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.cost.collectives import placed_group_links
from llmscale.cost.step import StepBreakdown, estimate_step
from llmscale.cost.traffic import GroupStrides, PlacedLinks
from llmscale.errors import LlmscaleError
from llmscale.layout.arrays import Layouts
from llmscale.placement.assign import Placement, in_order, orders, packed
from llmscale.placement.fabric import Fabric
from llmscale.placement.mesh import GroupKind, node_axes, world_size
from llmscale.placement.spans import KindSpan, spans
from llmscale.placement.traffic import KindTraffic, TierLoad, step_traffic, tier_loads
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants
from llmscale.specs.layout import Layout
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec

TOLERANCE = 1e-3
"""A placement other than the host order is recommended only when its step is shorter by more than this share:
below it the step model cannot tell them apart, and a changed host order is work for the user."""


@dataclass(frozen=True)
class PlacedResult:
    """One placement of the layout, priced."""

    placement: Placement
    spans: dict[GroupKind, KindSpan]
    step_s: float
    tokens_per_s_per_gpu: float
    traffic: list[KindTraffic]
    loads: list[TierLoad]


@dataclass(frozen=True)
class PlacementSearch:
    """The placements tried for one layout: `best` and the in-order one it is compared with."""

    layout: Layout
    fabric: Fabric
    nodes: int
    best: PlacedResult
    in_order: PlacedResult
    tried: tuple[tuple[str, float], ...]
    """(placement name, step seconds) of every candidate, in the order they are preferred."""
    aligned_step_s: float
    """The step the search priced on the rank order's aligned blocks (cost.traffic.GroupStrides)."""
    whole_in_order_s: float
    """The step in host order, and `whole_best_s` placed, on the same hosts without the exclusions: what the
    holes cost is measured against them."""
    whole_best_s: float

    @property
    def gain(self) -> float:
        """Step time in order ÷ step time placed (≥ 1)."""
        return self.in_order.step_s / self.best.step_s


def _links(cluster: ClusterSpec, constants: Constants, lay: Layouts, spanned: list[dict[GroupKind, KindSpan]]
           ) -> PlacedLinks:
    strides = GroupStrides.of(lay)
    stride = {GroupKind.TP: np.ones_like(lay.tp), GroupKind.CP: lay.tp, GroupKind.EP: strides.ep,
              GroupKind.PP: strides.pp, GroupKind.DP: strides.dense_dp, GroupKind.EDP: strides.edp}

    def links(kind: GroupKind):  # type: ignore[no-untyped-def]
        size = np.array([s[kind].size for s in spanned])
        members = np.stack([s[kind].members for s in spanned], axis=1)
        relief = np.stack([s[kind].relief for s in spanned], axis=1)
        domains = np.array([s[kind].domains[0] for s in spanned], dtype=float)
        return placed_group_links(cluster, size, stride[kind], members, constants.comm, relief, domains)

    return PlacedLinks(tp=links(GroupKind.TP), cp=links(GroupKind.CP), ep=links(GroupKind.EP),
                       pp=links(GroupKind.PP), dense_dp=links(GroupKind.DP), edp=links(GroupKind.EDP))


def candidates_on(fabric: Fabric, layout: Layout, tier_nodes: tuple[int, ...], nodes: int) -> list[Placement]:
    """The host order, then the packed orders (assign.orders) whose maps differ from those before."""
    found = [in_order(fabric, nodes)]
    axes = node_axes(layout, fabric.gpus_per_node)
    if axes is None:
        return found
    for order in orders(axes):
        made = packed(fabric, axes, order, tier_nodes)
        if not any(np.array_equal(made.node_of, c.node_of) for c in found):  # the same map: priced once
            found.append(made)
    return found


def _preferred(times: np.ndarray, candidates: list[Placement]) -> list[int]:
    """Candidate indices, preferred first: within TOLERANCE of the fastest, the host order (candidate 0), then the
    fewest idle nodes; then by step time."""
    fastest = float(times.min())
    return sorted(range(len(candidates)), key=lambda i: (float(times[i]) > fastest * (1 + TOLERANCE), i != 0,
                                                         candidates[i].skipped, float(times[i])))


def search_placements(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, layout: Layout, constants: Constants,
                      fabric: Fabric, aligned_step_s: float | None = None) -> PlacementSearch:
    """Every candidate placement of `layout` on `fabric`, and on the same hosts without exclusions, priced in one
    call; `aligned_step_s` the step the search priced it at where the caller has it. LlmscaleError when too few
    nodes are free."""
    g = cluster.node.gpus_per_node
    world = world_size(layout)
    nodes = -(-world // g)
    if fabric.free_nodes < nodes:
        raise LlmscaleError(f"placement: the layout needs {nodes:,} nodes ({world:,} GPUs), {fabric.free_nodes:,} of "
                            f"{fabric.size:,} are free after the exclusion list; plan with --gpus "
                            f"{fabric.free_nodes * g:,} or fewer")
    tier_nodes = tuple(max(1, t.ranks // g) for t in cluster.tiers)
    candidates = candidates_on(fabric, layout, tier_nodes, nodes)
    intact = fabric.whole()
    whole = candidates_on(intact, layout, tier_nodes, nodes) if fabric.excluded else []
    spanned = [spans(layout, fabric, c.node_of) for c in candidates]
    spanned += [spans(layout, intact, c.node_of) for c in whole]
    base = Layouts.from_layout(layout, world)
    lay = base.take(np.zeros(len(spanned), dtype=np.intp))
    step = estimate_step(model, cluster, train, lay, constants, placed=_links(cluster, constants, lay, spanned))
    here, there = step.step_time_s[:len(candidates)], step.step_time_s[len(candidates):]
    aligned = (float(estimate_step(model, cluster, train, base, constants).step_time_s[0])
               if aligned_step_s is None else aligned_step_s)
    rank = _preferred(here, candidates)
    first = _result(model, train, base, constants, candidates[0], spanned[0], step, 0, cluster)
    best = first if rank[0] == 0 else _result(model, train, base, constants, candidates[rank[0]], spanned[rank[0]],
                                              step, rank[0], cluster)
    whole_first, whole_best = (float(there[0]), float(there.min())) if whole else (first.step_s, best.step_s)
    return PlacementSearch(layout, fabric, nodes, best, first,
                           tuple((candidates[i].name, float(here[i])) for i in rank), aligned, whole_first,
                           min(whole_best, best.step_s))


def _result(model: ModelSpec, train: TrainSpec, base: Layouts, constants: Constants, placement: Placement,
            spanned: dict[GroupKind, KindSpan], step: StepBreakdown, i: int, cluster: ClusterSpec) -> PlacedResult:
    step_s = float(step.step_time_s[i])
    traffic = step_traffic(model, train, base, constants, spanned)
    return PlacedResult(placement, spanned, step_s, float(step.tokens_per_s_per_gpu[i]), traffic,
                        tier_loads(cluster, constants, traffic, step_s))
