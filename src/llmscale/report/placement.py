"""The placement of a layout in the plan and explain documents and on the terminal: the map (which domains hold
which part of the mesh), each group's span over the tiers, per-tier traffic and link load, and the step placed,
in order and as the search priced it (docs/placement.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.table import Table

from llmscale.placement.fabric import Fabric
from llmscale.placement.mesh import Axis, node_axes
from llmscale.placement.search import PlacedResult, PlacementSearch
from llmscale.report.text import layout_text

MAP_DOMAINS = 4
"""Domains the map lists (the rest are alike, or in the written host order)."""
HEAD_HOSTS = 8


def _map_tier(fabric: Fabric) -> int:
    """The innermost tier whose domains hold more than one node (the scale-up domain on NVL72, the leaf on
    8-GPU nodes): where a placement's choices show."""
    shared = np.flatnonzero(fabric.shared_tiers)
    return int(shared[0]) if shared.size else fabric.domain.shape[0] - 1


def domain_map(result: PlacedResult, fabric: Fabric, axes: tuple[Axis, ...] | None) -> list[dict[str, Any]]:
    """The first MAP_DOMAINS domains of the map tier the placement uses: their nodes (free and excluded) and the
    range of each node axis their logical nodes take."""
    tier = _map_tier(fabric)
    dom = fabric.domain[tier].take(result.placement.node_of)
    out = []
    for d in list(dict.fromkeys(dom.tolist()))[:MAP_DOMAINS]:
        logical = np.flatnonzero(dom == d)
        holes = int(np.count_nonzero(~fabric.available[fabric.domain[tier] == d]))
        parts = {}
        for axis in axes or ():
            digit = logical // axis.stride % axis.size
            parts[axis.name] = [int(digit.min()), int(digit.max())]
        out.append({"tier": fabric.tier_names[tier], "domain": int(d), "nodes_used": int(logical.size),
                    "excluded_nodes": holes, "axes": parts})
    return out


def _result_entry(result: PlacedResult, fabric: Fabric, axes: tuple[Axis, ...] | None) -> dict[str, Any]:
    names = fabric.tier_names
    return {
        "placement": result.placement.name,
        "idle_nodes_for_alignment": result.placement.skipped,
        "step_s": result.step_s,
        "tokens_per_s_per_gpu": result.tokens_per_s_per_gpu,
        "groups": {kind.value: {"size": span.size,
                                "members_per_domain": dict(zip(names, span.members.tolist(), strict=True)),
                                "domains": dict(zip(names, span.domains.tolist(), strict=True))}
                   for kind, span in result.spans.items()},
        "traffic_bytes_per_gpu": {t.kind.value: {"op": t.op.value, "per_step": t.bytes_per_step,
                                                 "by_tier": dict(zip(names, t.by_tier.tolist(), strict=True)),
                                                 "through_tier": dict(zip(names, t.through.tolist(), strict=True))}
                                  for t in result.traffic},
        "tiers": [{"name": load.name, "bytes_per_gpu": load.bytes_per_gpu, "busy_s": load.busy_s,
                   "load": load.load} for load in result.loads],
        "map": domain_map(result, fabric, axes),
        "hosts_head": [fabric.name(int(i)) for i in result.placement.node_of[:HEAD_HOSTS]],
    }


def placement_entry(search: PlacementSearch) -> dict[str, Any]:
    """The JSON of one layout's placement search."""
    fabric = search.fabric
    axes = node_axes(search.layout, fabric.gpus_per_node)
    return {
        "layout": layout_text(search.layout),
        "nodes": search.nodes,
        "fabric": {"nodes": fabric.size, "free": fabric.free_nodes, "from_hostfile": fabric.hosts is not None,
                   "excluded": [e.host for e in fabric.excluded], "not_in_fabric": list(fabric.unknown)},
        "node_axes": [{"name": a.name, "size": a.size} for a in axes or ()],
        "aligned_step_s": search.aligned_step_s,
        "gain": search.gain,
        "whole_in_order_step_s": search.whole_in_order_s,
        "whole_best_step_s": search.whole_best_s,
        "holes_cost": {"in_order": search.in_order.step_s / search.whole_in_order_s - 1,
                       "placed": search.best.step_s / search.whole_best_s - 1},
        "best": _result_entry(search.best, fabric, axes),
        "in_order": _result_entry(search.in_order, fabric, axes),
        "tried": [{"placement": name, "step_s": step} for name, step in search.tried],
    }


def _gb(value: float) -> str:
    return f"{value / 1e9:,.1f}"


def placement_tables(entry: dict[str, Any]) -> list[Table | str]:
    """The terminal view of a `placement_entry`: the summary lines, the map, spans and traffic tables."""
    best, first = entry["best"], entry["in_order"]
    fabric = entry["fabric"]
    lines: list[Table | str] = [
        f"placement of {entry['layout']} on {entry['nodes']:,} of {fabric['free']:,} free nodes "
        f"({len(fabric['excluded']):,} excluded)" + (f"; not nodes of this fabric: {', '.join(fabric['not_in_fabric'])}"
                                                   if fabric["not_in_fabric"] else ""),
        f"step {best['step_s']:.3f} s placed ({best['placement']}, {best['idle_nodes_for_alignment']:,} free nodes "
        f"left idle to keep groups aligned) · {first['step_s']:.3f} s in host order · {entry['aligned_step_s']:.3f} s "
        f"as the search priced it · placement buys {100 * (entry['gain'] - 1):+.1f}%",
    ]
    if fabric["excluded"]:
        cost = entry["holes_cost"]
        lines.append(f"the holes cost {100 * cost['in_order']:+.1f}% of the step in host order, "
                     f"{100 * cost['placed']:+.1f}% placed (against the same hosts with nothing excluded: "
                     f"{entry['whole_in_order_step_s']:.3f} s in host order, {entry['whole_best_step_s']:.3f} s "
                     "placed)")
    lines.append(_map_table(best))
    lines.append(_span_table(best, first))
    lines.append(_traffic_table(best, first))
    lines.append("host order (node rank 0, 1, …): " + ", ".join(best["hosts_head"]) + ", …")
    return lines


def _map_table(result: dict[str, Any]) -> Table:
    table = Table(title=f"map ({result['placement']}): the first domains and the node axes they hold")
    for column in ("tier", "domain", "nodes used", "excluded", "axes held"):
        table.add_column(column, justify="right" if column in ("domain", "nodes used", "excluded") else "left")
    for d in result["map"]:
        held = " · ".join(f"{name} {lo}–{hi}" if lo != hi else f"{name} {lo}" for name, (lo, hi) in d["axes"].items())
        table.add_row(d["tier"], str(d["domain"]), str(d["nodes_used"]), str(d["excluded_nodes"]), held)
    return table


def _span_table(best: dict[str, Any], first: dict[str, Any]) -> Table:
    tiers = list(next(iter(best["groups"].values()))["members_per_domain"])
    table = Table(title="fewest members of the worst group in one domain of each tier: placed / in host order")
    table.add_column("group")
    table.add_column("size", justify="right")
    for tier in tiers:
        table.add_column(tier, justify="right")
    for kind, group in best["groups"].items():
        if group["size"] == 1:
            continue
        other = first["groups"][kind]["members_per_domain"]
        cells = [f"{group['members_per_domain'][t]:g} / {other[t]:g}" for t in tiers]
        table.add_row(kind, str(group["size"]), *cells)
    return table


def _traffic_table(best: dict[str, Any], first: dict[str, Any]) -> Table:
    tiers = [t["name"] for t in best["tiers"]]
    table = Table(title="GB per GPU per step by the outermost tier crossed (placed), and the busiest link of each "
                  "tier: seconds busy and share of the step")
    table.add_column("group")
    for tier in tiers:
        table.add_column(tier, justify="right")
    for kind, traffic in best["traffic_bytes_per_gpu"].items():
        if traffic["per_step"] > 0:
            table.add_row(kind, *(_gb(traffic["by_tier"][t]) for t in tiers))
    table.add_row("busy s (placed)", *(f"{t['busy_s']:.2f}" for t in best["tiers"]))
    table.add_row("load (placed)", *(f"{100 * t['load']:.1f}%" for t in best["tiers"]))
    table.add_row("load (in order)", *(f"{100 * t['load']:.1f}%" for t in first["tiers"]))
    return table
