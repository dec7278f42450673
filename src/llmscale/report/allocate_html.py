"""`llmscale allocate` output: the JSON document (one builder, used by the terminal table, `--json` and `--html`)
and the self-contained HTML page with an inline-SVG chart of predicted loss vs training compute.

Table columns come from `COLUMNS`, keyed by the candidate entries' JSON keys, so the terminal, JSON and HTML
never disagree. The HTML reuses report/svg.py's CSS and drawing helpers; no scripts, fonts or external files.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from llmscale import __version__
from llmscale.errors import LlmscaleError
from llmscale.reliability.rates import failures_of
from llmscale.report.svg import CHART_W, CSS, PALETTE, html_table, log_scale, log_ticks, svg_text
from llmscale.report.text import layout_text
from llmscale.scaling.allocate import AllocationResult, Outcome
from llmscale.scaling.laws import Allocation, ScalingLaw
from llmscale.scaling.multiplier import TARGET, Decomposition
from llmscale.units import SECONDS_PER_HOUR

SECONDS_PER_MINUTE = SECONDS_PER_HOUR / 60.0

J_PER_GWH = 1e9 * SECONDS_PER_HOUR


@dataclass(frozen=True)
class Column:
    """One column of the ranked table: the entry key it shows, its header, unit and formatter."""

    key: str
    header: str
    unit: str
    fmt: Callable[[Any], str]
    terminal: bool = True
    """Shown in the terminal table too (the HTML shows every column)."""


def _si(value: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if abs(value) >= scale:
            return f"{value / scale:,.1f}{suffix}"
    return f"{value:,.0f}"


def _or_na(fmt: Callable[[Any], str]) -> Callable[[Any], str]:
    return lambda v: "n/a" if v is None else fmt(v)


COLUMNS = [
    Column("rank", "#", "", str),
    Column("model", "model", "", str),
    Column("total_params", "total", "params", _si),
    Column("active_params", "active", "params", _si),
    Column("tokens", "tokens", "", _or_na(_si)),
    Column("tokens_per_param", "D/N", "tok/param", _or_na(lambda v: f"{v:,.0f}"), terminal=False),
    Column("layout_text", "layout", "", _or_na(str)),
    Column("gpus_text", "GPUs × jobs", "", _or_na(str)),
    Column("days", "days", "d", _or_na(lambda v: f"{v:,.1f}")),
    Column("epochs", "epochs", "D/U", _or_na(lambda v: f"{v:,.1f}")),
    Column("goodput", "goodput", "", _or_na(lambda v: f"{v:.3f}")),
    Column("checkpoint_policy", "ckpt", "", _or_na(str), terminal=False),
    Column("mfu", "MFU", "%", _or_na(lambda v: f"{100 * v:.1f}"), terminal=False),
    Column("loss", "loss", "nats", _or_na(lambda v: f"{v:.4f}")),
    Column("compute_efficiency", "cap/C", "× dense", _or_na(lambda v: f"{v:,.2f}")),
    Column("cost_usd", "cost", "M USD", _or_na(lambda v: f"{v / 1e6:,.0f}")),
    Column("energy_j", "energy", "GWh", _or_na(lambda v: f"{v / J_PER_GWH:,.1f}")),
]


def outcome_entry(o: Outcome, rank: int) -> dict[str, Any]:
    layout = o.layout.model_dump(mode="json") if o.layout is not None else None
    fitted = layout is not None
    return {
        "rank": rank, "model": o.model.name, "moe": o.scale.is_moe,
        "total_params": o.scale.total_params, "active_params": o.scale.active_params,
        "tokens": o.tokens if fitted else None,
        "tokens_per_param": o.tokens / o.scale.active_params if fitted else None,
        "layout": layout,
        "layout_text": layout_text(o.layout) if o.layout is not None else None,
        "gpus_per_job": o.gpus_per_job, "concurrent_jobs": o.concurrent_jobs,
        "gpus_text": f"{o.gpus_per_job:,} × {o.concurrent_jobs:,}" if fitted else None,
        "global_batch": o.global_batch, "critical_batch": o.critical_batch,
        "tokens_per_s": o.tokens_per_s if fitted else None, "mfu": o.mfu if fitted else None,
        "days": o.days if fitted else None, "compute_flops": o.compute_flops if fitted else None,
        "loss": o.loss if fitted else None, "compute_efficiency": o.compute_efficiency if fitted else None,
        "cost_usd": o.cost_usd, "energy_j": o.energy_j, "epochs": o.epochs,
        **_reliability_entry(o),
        "search_passes": o.passes, "feasible": o.feasible, "problems": list(o.problems),
    }


def _reliability_entry(o: Outcome) -> dict[str, Any]:
    """Goodput, best checkpoint policy, its intervals per tier (minutes) and the job's MTBF."""
    r = o.reliability
    if r is None:
        return {"goodput": None, "checkpoint_policy": None, "checkpoint_interval_min": None, "job_mtbf_hours": None}
    return {"goodput": r.goodput, "checkpoint_policy": r.policy.value,
            "checkpoint_interval_min": {tier.value: s / SECONDS_PER_MINUTE for tier, s in r.interval_s.items()},
            "job_mtbf_hours": r.job_mtbf_s / SECONDS_PER_HOUR}


def goodput_source(profile: str) -> str:
    """How each candidate's goodput is computed (allocate.py module docstring)."""
    return (f"reliability model per candidate (resilience.layout_goodput): failure profile {profile} over the job's "
            "GPUs and nodes, its layout's checkpoint shards and step time, the best of sync/async/tiered "
            "checkpointing at its best intervals, hot spares, no mitigations")


def optimum_entry(a: Allocation) -> dict[str, Any]:
    return {"compute_flops": a.compute_flops, "params": a.params, "tokens": a.tokens, "loss": a.loss,
            "active_params": a.active_params, "granularity": a.granularity,
            "tokens_per_param": a.tokens_per_param}


def decomposition_entry(d: Decomposition) -> dict[str, Any]:
    return {
        "model": d.model, "cluster": d.cluster, "gpus_per_job": d.gpus_per_job, "largest_job": d.largest_job,
        "global_batch": d.global_batch, "target": TARGET, "product": d.product,
        "factors": [{"name": f.name, "unit": f.unit, "baseline": f.baseline, "planned": f.planned, "gain": f.gain,
                     "baseline_means": f.baseline_means, "planned_means": f.planned_means} for f in d.factors],
        "notes": d.notes,
    }


def _compared(entries: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    best = entries[0] if entries and entries[0]["feasible"] else None
    out = []
    for name in names:
        entry = next((e for e in entries if e["model"] == name), None)
        if entry is None or best is None or entry["loss"] is None:
            continue
        out.append({"model": name, "rank": entry["rank"], "loss": entry["loss"], "recommended": best["model"],
                    "recommended_loss": best["loss"], "loss_gap": entry["loss"] - best["loss"],
                    "compute_ratio": best["compute_flops"] / entry["compute_flops"],
                    "cost_ratio": (best["cost_usd"] / entry["cost_usd"]) if best["cost_usd"] and entry["cost_usd"]
                    else None})
    return out


def _at_edge(entries: list[dict[str, Any]]) -> bool:
    """Whether the recommendation has the most active parameters of its kind (dense or MoE): the law might
    prefer a larger model than any candidate."""
    if not entries or not entries[0]["feasible"]:
        return False
    best = entries[0]
    return bool(best["active_params"] >= max(e["active_params"] for e in entries if e["moe"] == best["moe"]))


def allocation_document(result: AllocationResult, digest: str, family: str, compare: list[str],
                        decomposition: Decomposition | None = None,
                        sensitivity: dict[str, float] | None = None, unique_source: str = "given") -> dict[str, Any]:
    """The `allocate --json` document (`unique_source`: where the unique-token cap comes from)."""
    req = result.request
    profile = failures_of(req.cluster, req.constants.failures).name
    entries = [outcome_entry(o, k) for k, o in enumerate(result.outcomes, start=1)]
    document: dict[str, Any] = {
        "llmscale_version": __version__, "input_sha256": digest, "cluster": req.cluster.name,
        "cluster_gpus": req.cluster.num_gpus, "gpus": req.gpus, "law": req.law.value, "family": family,
        "days": req.days, "flops": req.flops, "unique_tokens": req.unique_tokens,
        "unique_tokens_source": unique_source, "precision": req.precision.value,
        "seq_len": req.seq_len, "job_policy": req.policy.value,
        "goodput": {"failure_profile": profile, "source": goodput_source(profile)},
        "seconds": result.seconds, "candidates": entries,
        "recommendation": entries[0] if entries and entries[0]["feasible"] else None,
        "recommendation_at_ladder_edge": _at_edge(entries),
        "compared": _compared(entries, compare),
        "compute_optimal": optimum_entry(result.optimum),
        "shape_optimum": optimum_entry(result.shape_optimum) if result.shape_optimum is not None else None,
        "frontier": {kind: [optimum_entry(a) for a in points] for kind, points in result.frontier.items()},
    }
    if sensitivity:
        document["loss_gap_by_moe_fit"] = sensitivity
    if decomposition is not None:
        document["compute_3x"] = decomposition_entry(decomposition)
    return document


def pure_document(law: ScalingLaw, flops: float, optima: dict[str, Allocation]) -> dict[str, Any]:
    """`allocate --flops F` with no cluster: the law's compute-optimal allocation."""
    best = min(optima.values(), key=lambda a: a.loss)
    return {"llmscale_version": __version__, "law": law.value, "flops": flops,
            "compute_optimal": optimum_entry(best),
            "by_family": {kind: optimum_entry(a) for kind, a in optima.items()}}


# --------------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------------


def _loss_ticks(low: float, high: float) -> list[float]:
    step = next(s for s in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0) if (high - low) / s <= 8)
    start = math.floor(low / step) * step
    return [start + k * step for k in range(max(math.ceil((high - start) / step), 1) + 1)]


def loss_chart(document: dict[str, Any]) -> str:
    """Predicted loss (linear) vs training compute (log): candidates, the law's frontier(s), the recommendation
    ringed, compared models labelled."""
    points = [e for e in document["candidates"] if e["loss"] is not None]
    lines = {kind: [(p["compute_flops"], p["loss"]) for p in pts] for kind, pts in document["frontier"].items()}
    xs = [p["compute_flops"] for p in points] + [x for pts in lines.values() for x, _ in pts]
    ys = [p["loss"] for p in points] + [y for pts in lines.values() for _, y in pts]
    if not xs:
        return "<p>No candidate fits.</p>"
    width, height, left, right, top, bottom = CHART_W, 440, 70, 30, 20, 50
    x_ticks = log_ticks(min(xs), max(xs))
    fx = log_scale(x_ticks[0], x_ticks[-1], left, width - left - right)
    y_ticks = _loss_ticks(min(ys), max(ys))
    span = y_ticks[-1] - y_ticks[0]

    def fy(v: float) -> float:
        return height - bottom - (v - y_ticks[0]) / span * (height - top - bottom)

    out = [f'<svg width="{width}" height="{height}" role="img">']
    for x in x_ticks:
        out.append(f'<line x1="{fx(x):.1f}" y1="{top}" x2="{fx(x):.1f}" y2="{height - bottom}" stroke="#000" '
                   'stroke-opacity=".08"/>')
        out.append(svg_text(fx(x), height - bottom + 16, f"{x:.0e}", "middle"))
    for y in y_ticks:
        out.append(f'<line x1="{left}" y1="{fy(y):.1f}" x2="{width - right}" y2="{fy(y):.1f}" stroke="#000" '
                   'stroke-opacity=".08"/>')
        out.append(svg_text(left - 6, fy(y) + 4, f"{y:.2f}", "end"))
    out.append(svg_text((width + left - right) / 2, height - 12, "training compute C = 6·N_active·D (FLOPs)", "middle",
                     'fill="#666"'))
    mid = (height - bottom + top) / 2
    out.append(svg_text(16, mid, "predicted loss", "middle", f'fill="#666" transform="rotate(-90 16 {mid:.1f})"'))
    for k, (kind, pts) in enumerate(lines.items()):
        path = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{PALETTE[k]}" stroke-width="2" '
                   f'stroke-dasharray="6 4"><title>{escape(kind)} compute-optimal frontier</title></polyline>')
    compared = {c["model"] for c in document["compared"]}
    best = document["recommendation"]
    for p in points:
        colour = PALETTE[1 if p["moe"] and len(lines) > 1 else 0]
        cx, cy = fx(p["compute_flops"]), fy(p["loss"])
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{colour}"><title>{escape(p["model"])}: '
                   f'loss {p["loss"]:.4f}, {p["compute_flops"]:.2e} FLOPs</title></circle>')
        if p["model"] in compared or (best and p["model"] == best["model"]):
            out.append(svg_text(cx + 9, cy - 8, p["model"]))
    if best:
        out.append(f'<circle cx="{fx(best["compute_flops"]):.1f}" cy="{fy(best["loss"]):.1f}" r="10" fill="none" '
                   f'stroke="{PALETTE[2]}" stroke-width="3"/>')
    out.append("</svg>")
    return "".join(out)


def _ranked_table(document: dict[str, Any]) -> str:
    rows = [[c.fmt(e[c.key]) for c in COLUMNS] for e in document["candidates"]]
    return html_table([c.header for c in COLUMNS], [c.unit for c in COLUMNS], rows, left=2)


def _facts(document: dict[str, Any]) -> str:
    budget = f"{document['days']:g} days" if document["days"] else f"{document['flops']:.3g} FLOPs"
    facts = [("cluster", f"{document['cluster']} ({document['cluster_gpus']:,} GPUs)"), ("budget", budget),
             ("law", document["law"]), ("family", document["family"]), ("job size", document["job_policy"]),
             ("goodput", document["goodput"]["source"]),
             ("input_sha256", document["input_sha256"]), ("llmscale", document["llmscale_version"])]
    return "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(str(v))}</dd>" for k, v in facts) + "</dl>"


def _decomposition_section(d: dict[str, Any]) -> str:
    rows = [[f["name"], f"{f['baseline']:.3g}", f"{f['planned']:.3g}", f["unit"], f"{f['gain']:.2f}×",
             f["baseline_means"], f["planned_means"]] for f in d["factors"]]
    rows.append(["product", "", "", "", f"{d['product']:.2f}×", f"target {d['target']:g}×", ""])
    notes = "".join(f"<p class=note>{escape(n)}</p>" for n in d["notes"])
    return (f"<h2>What “3× compute” is made of: {escape(d['model'])} on {escape(d['cluster'])}</h2>"
            + html_table(["lever", "baseline", "planned", "unit", "gain", "baseline is", "planned is"], None, rows)
            + notes)


def allocate_html(document: dict[str, Any]) -> str:
    best = document["recommendation"]
    sentence = (f"Recommendation: {best['model']} — {best['total_params'] / 1e9:,.0f}B total, "
                f"{best['active_params'] / 1e9:,.0f}B active, {best['tokens'] / 1e12:,.1f}T tokens on "
                f"{best['gpus_per_job']:,} GPUs, predicted loss {best['loss']:.4f}."
                if best else "No candidate fits.")
    gaps = "".join(f"<p>{escape(c['model'])}: rank {c['rank']}, loss {c['loss']:.4f}, "
                   f"{c['loss_gap']:+.4f} vs the recommendation.</p>" for c in document["compared"])
    body = [f"<h1>llmscale allocate: {escape(document['cluster'])}</h1>", _facts(document),
            f"<p class=rec>{escape(sentence)}</p>", gaps,
            "<h2>Predicted loss vs training compute</h2><p class=note>Dots: candidates (blue dense, orange MoE when "
            "both); dashed: the law's compute-optimal frontier; ringed: the recommendation.</p>",
            loss_chart(document), "<h2>Candidates, best first</h2>", _ranked_table(document)]
    if "compute_3x" in document:
        body.append(_decomposition_section(document["compute_3x"]))
    title = f"llmscale allocate · {document['cluster']}"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")


def write_allocate_html(path: Path, document: dict[str, Any]) -> None:
    try:
        path.write_text(allocate_html(document), encoding="utf-8")
    except OSError as error:
        raise LlmscaleError(f"--html {path}: cannot write the report ({error.strerror})") from None
