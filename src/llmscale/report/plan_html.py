"""`llmscale plan --html`: one self-contained offline HTML page of a plan.

No scripts, no external fonts or stylesheets: inline CSS and inline SVG charts drawn here. The numbers
are the `plan --json` document's (same keys), so the page and the JSON never disagree; the memory classes
of the best layout come from its `MemoryBreakdown`. Step parts and memory classes are derived from the
document's breakdown keys and the dataclass fields, never from a hand-synced list.
"""

from __future__ import annotations

import dataclasses
import math
from html import escape
from pathlib import Path
from typing import Any

from llmscale.cost.memory import MemoryBreakdown
from llmscale.errors import LlmscaleError
from llmscale.layout.rules import Reason
from llmscale.report.svg import CSS, Bar, bar_chart, html_table, legend, num, scatter_chart, stacked_bars
from llmscale.report.text import layout_of, layout_text
from llmscale.search.plan import PlanResult, job_size_rule
from llmscale.units import GIB, SECONDS_PER_HOUR

J_PER_MWH = 1e6 * SECONDS_PER_HOUR
MEMORY_CLASSES = tuple(f.name for f in dataclasses.fields(MemoryBreakdown)
                       if f.name.endswith("_bytes") and f.name != "capacity_bytes")


def _part_name(key: str) -> str:
    """`tp_exposed_s` → `tp exposed`; `comm_buffer_bytes` → `comm buffer`."""
    return key.rsplit("_", 1)[0].replace("_", " ")


def _header(document: dict[str, Any]) -> str:
    batch, jobs, top = document["global_batch"], document["jobs"], document["top"]
    seq_len = batch["tokens"] // max(batch["sequences"], 1)
    facts = [("model", document["model"]), ("cluster", f"{document['cluster']} ({num(jobs['cluster_gpus'])} GPUs)"),
             ("objective", document["objective"]), ("framework", document["framework"]["checked"]),
             ("global batch", f"{num(batch['sequences'])} sequences × {num(seq_len)} tokens = "
                              f"{num(batch['tokens'])} tokens ({batch['source']})"),
             ("layouts", f"{num(document['generated_layouts'])} generated, {num(document['evaluated_layouts'])} "
                         f"valid and scored, {num(document['feasible_layouts'])} fit in memory "
                         f"({document['seconds']:.2f} s)"),
             ("input_sha256", document["input_sha256"]), ("llmscale", document["llmscale_version"])]
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v) if k != 'input_sha256' else f'<code>{escape(v)}</code>'}</dd>"
                   for k, v in facts)
    if top:
        sentence = (f"Recommendation: one job of {num(jobs['gpus_per_job'])} GPUs trains in "
                    f"{num(top[0]['days'], 1)} days ({num(jobs['tokens_per_s_per_job'])} tokens/s); the cluster "
                    f"holds {num(jobs['concurrent_jobs'])} such job(s) at once "
                    f"({num(jobs['cluster_tokens_per_s'])} tokens/s together).")
    elif document["evaluated_layouts"] == 0:
        sentence = "No valid layout at any job size: every candidate broke a rule (see the rejected layouts below)."
    else:
        sentence = "No layout fits in memory at any job size."
    title = f"llmscale plan: {document['model']} on {document['cluster']}"
    return f"<h1>{escape(title)}</h1><dl>{rows}</dl><p class=rec>{escape(sentence)}</p>"


def _step_section(top: list[dict[str, Any]]) -> str:
    keys = list(top[0]["breakdown"])
    names = [_part_name(k) for k in keys]
    bars = [Bar(f"#{rank} {layout_text(layout_of(entry['layout']))}", [entry["breakdown"][k] for k in keys],
                f"{entry['step_time_s']:.2f} s · MFU {entry['mfu']:.1%}") for rank, entry in enumerate(top, 1)]
    rows = [[str(rank), *[f"{entry['breakdown'][k]:.3f}" for k in keys], f"{entry['step_time_s']:.3f}"]
            for rank, entry in enumerate(top, 1)]
    notes = "".join(f"<p class=note>#{rank}: MFU {entry['mfu']:.1%} is {escape(entry['above_published_mfu']['note'])}"
                    "</p>" for rank, entry in enumerate(top, 1) if entry["above_published_mfu"])
    return ("<h2>Step time of the top layouts (s per optimizer step)</h2>" + legend(names)
            + stacked_bars(bars, names, "seconds per step (s)")
            + html_table(["#", *names, "step"], ["", *["s"] * len(keys), "s"], rows) + notes)


def _memory_section(result: PlanResult) -> str:
    best = result.chosen.top[0]
    memory, i = best.step.memory, best.layout_index
    values = [float(getattr(memory, name)[i]) / GIB for name in MEMORY_CLASSES]
    names = [_part_name(name) for name in MEMORY_CLASSES]
    capacity = memory.capacity_bytes / GIB
    label = f"pipeline rank {int(memory.pipeline_rank[i])}"
    bar = Bar(label, values, f"{num(sum(values), 1)} GiB")
    rows = [[n, num(v, 2), f"{v / capacity:.1%}"] for n, v in zip(names, values, strict=True)]
    rows.append(["total", num(sum(values), 2), f"{sum(values) / capacity:.1%}"])
    return (f"<h2>Memory of the best layout's most-loaded GPU ({num(sum(values), 1)} GiB of "
            f"{num(capacity, 1)} GiB)</h2>" + legend(names)
            + stacked_bars([bar], names, "GiB", marker=(f"capacity {num(capacity, 1)} GiB", capacity))
            + html_table(["class", "memory", "of capacity"], ["", "GiB", "%"], rows))


def _pareto_section(document: dict[str, Any]) -> str:
    sizes = [s for s in document["job_sizes"] if s["best"]]
    if not sizes:
        return ""
    points = [(float(s["num_gpus"]), float(s["best"]["days"])) for s in sizes]
    front, best_days = [], math.inf
    for i in sorted(range(len(points)), key=lambda j: points[j]):
        if points[i][1] < best_days:
            front.append(i)
            best_days = points[i][1]
    chosen = next((i for i, s in enumerate(sizes) if s["num_gpus"] == document["jobs"]["gpus_per_job"]), None)
    return ("<h2>Time to train vs GPUs per job (best layout of each job size)</h2>"
            "<p class=note>Blue: Pareto-optimal (no job size is both smaller and faster), joined; grey: dominated; "
            "ringed: the chosen job size. Both axes logarithmic.</p>"
            + scatter_chart(points, front, chosen, "GPUs per job", "time to train (days)"))


def _rejection_section(document: dict[str, Any]) -> str:
    sizes = document["job_sizes"]
    present = {reason for s in sizes for reason in s["rejected"]}
    reasons = [r.name.lower() for r in Reason if r.name.lower() in present]
    header = ["GPUs", "generated", "valid", "fit", *[r.replace("_", " ") for r in reasons]]
    rows = [[num(s["num_gpus"]), num(s["generated"]), num(s["evaluated"]), num(s["feasible"]),
             *[num(s["rejected"].get(r, 0)) for r in reasons]] for s in sizes]
    totals = sorted(((sum(s["rejected"].get(r, 0) for s in sizes), r) for r in reasons), reverse=True)
    chart = bar_chart([r.replace("_", " ") for _, r in totals], [float(n) for n, _ in totals], "layouts",
                       "rejected layouts") if totals else "<p>No layout was rejected.</p>"
    meanings = html_table(["reason", "rejected", "the rule"], None,
                          [[r.replace("_", " "), num(n), Reason[r.upper()].meaning] for n, r in totals], left=1)
    return ("<h2>Rejected layouts by reason</h2>" + html_table(header, None, rows, left=0)
            + "<p class=note>Totals over all job sizes, and what each reason means:</p>" + chart + meanings)


def _reliability_section(best: dict[str, Any]) -> str:
    """Goodput of the best layout under failures: job MTBF, interruptions, the checkpoint policy and intervals."""
    if best.get("goodput") is None:
        return ""
    intervals = ", ".join(f"{tier} every {num(minutes, 2)} min" for tier, minutes in
                          best["checkpoint_interval_min"].items())
    facts = [("goodput", f"{best['goodput']:.3f} of the wall time is training progress"),
             ("job MTBF", f"{num(best['job_mtbf_hours'], 2)} h between interruptions of this job"),
             ("interruptions", f"{num(best['expected_interruptions'], 0)} expected over the run"),
             ("checkpoints", f"{best['checkpoint_policy']}: {intervals}"),
             ("effective time", f"{num(best['effective_days'], 1)} days = {num(best['days'], 1)} days ÷ goodput"
              if best["effective_days"] else "no progress under these failures")]
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    return "<h2>Failures and goodput of the best layout (llmscale goodput)</h2><dl>" + rows + "</dl>"


def _size_row(size: dict[str, Any], chosen: bool, best_rate: float) -> list[str]:
    best = size["best"]
    return [("▶ " if chosen else "") + num(size["num_gpus"]), layout_text(layout_of(best["layout"])),
            num(best["tokens_per_s_per_gpu"], 1), f"{best['tokens_per_s_per_gpu'] / best_rate:.1%}",
            num(best["days"], 1), f"{best['goodput']:.3f}" if best["goodput"] is not None else "n/a",
            num(best["effective_days"], 1) if best["effective_days"] else "n/a"]


def _job_size_section(result: PlanResult, document: dict[str, Any]) -> str:
    """Every job size's best layout side by side, and the rule that picked one (search.plan._choose_job_size)."""
    sizes = [s for s in document["job_sizes"] if s["best"]]
    if not sizes:
        return ""
    best_rate = max(s["best"]["tokens_per_s_per_gpu"] for s in sizes)
    chosen = document["jobs"]["gpus_per_job"]
    rows = [_size_row(s, s["num_gpus"] == chosen, best_rate) for s in sizes]
    header = ["GPUs", "best layout", "throughput", "vs best rate", "time to train", "goodput", "effective"]
    units = ["", "", "tokens/s/GPU", "%", "days", "", "days"]
    objective, rule = result.objective.value, job_size_rule(result)
    return (f"<h2>Why {num(chosen)} GPUs per job</h2><p>Chosen by objective {escape(objective)}: "
            f"{escape(rule)}.</p>" + html_table(header, units, rows, left=2))


def _top_table(document: dict[str, Any]) -> str:
    top, roomier = document["top"], document["roomier"]
    header = ["#", "layout", "step", "MFU", "throughput", "memory", "time to train", "cost", "energy", "runs on"]
    units = ["", "", "s", "%", "tokens/s/GPU", "GiB", "days", "USD", "MWh", ""]
    ranked = [(str(rank), e) for rank, e in enumerate(top, 1)] + ([("roomier", roomier)] if roomier else [])
    rows = [[rank, layout_text(layout_of(e["layout"])), f"{e['step_time_s']:.3f}", f"{e['mfu'] * 100:.1f}",
             num(e["tokens_per_s_per_gpu"], 1), num(e["memory_bytes"] / GIB, 1), num(e["days"], 1),
             num(e["cost_usd"]) if e["cost_usd"] is not None else "n/a",
             num(e["energy_j"] / J_PER_MWH, 1) if e["energy_j"] is not None else "n/a",
             ", ".join(e["frameworks"]) or "no catalog framework"] for rank, e in ranked]
    note = ("<p class=note>roomier: the best layout that leaves clearly more GPU memory free while staying within a "
            "few percent of the best (catalog/plan.yaml headroom_margin, headroom_tolerance).</p>" if roomier else "")
    return "<h2>Top layouts</h2>" + html_table(header, units, rows, left=2) + note


def _placement_section(entries: list[dict[str, Any]]) -> str:
    """The best layout's placement on the cluster's nodes (report.placement): steps, what the holes cost, each
    group's span and each tier's busiest link, placed beside in host order."""
    if not entries:
        return ""
    entry, fabric = entries[0], entries[0]["fabric"]
    best, first = entry["best"], entry["in_order"]
    facts = [("nodes", f"{num(entry['nodes'])} of {num(fabric['free'])} free ({num(len(fabric['excluded']))} "
                       f"excluded)"),
             ("placed", f"{best['step_s']:.3f} s ({best['placement']}; {num(best['idle_nodes_for_alignment'])} "
                        "free nodes left idle to keep groups aligned)"),
             ("in host order", f"{first['step_s']:.3f} s: placement buys {100 * (entry['gain'] - 1):+.1f}%"),
             ("the holes cost", f"{100 * entry['holes_cost']['in_order']:+.1f}% in host order, "
                                f"{100 * entry['holes_cost']['placed']:+.1f}% placed")]
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    tiers = [t["name"] for t in best["tiers"]]
    spans = [[f"{kind} of {num(g['size'])}", *(f"{g['members_per_domain'][t]:g} / "
                                                f"{first['groups'][kind]['members_per_domain'][t]:g}" for t in tiers)]
             for kind, g in best["groups"].items() if g["size"] > 1]
    loads = [[label, *(f"{100 * t['load']:.1f}%" for t in result["tiers"])]
             for label, result in (("busiest link, placed", best), ("busiest link, in host order", first))]
    table = html_table(["group", *tiers], None, spans + loads, left=1)
    return (f"<h2>Placement of the best layout on the cluster's nodes</h2><dl>{rows}</dl>"
            "<p class=note>Fewest members of the worst group in one domain of each tier, placed / in host order, "
            "and the share of the step each tier's busiest link is busy (docs/placement.md).</p>" + table)


def plan_html(result: PlanResult, document: dict[str, Any]) -> str:
    """The whole page as a string."""
    body = [_header(document)]
    if document["top"]:
        body += [_step_section(document["top"]), _memory_section(result), _reliability_section(document["top"][0])]
    body += [_job_size_section(result, document), _pareto_section(document), _rejection_section(document)]
    if document["top"]:
        body += [_top_table(document), _placement_section(document.get("placement", []))]
    title = f"llmscale plan · {document['model']} · {document['cluster']}"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")


def write_plan_html(path: Path, result: PlanResult, document: dict[str, Any]) -> None:
    """Write the plan's self-contained HTML report to `path`."""
    try:
        path.write_text(plan_html(result, document), encoding="utf-8")
    except OSError as error:
        raise LlmscaleError(f"--html {path}: cannot write the report ({error.strerror})") from None
