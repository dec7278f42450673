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
from llmscale.search.plan import PlanResult
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
             ("objective", document["objective"]),
             ("global batch", f"{num(batch['sequences'])} sequences × {num(seq_len)} tokens = "
                              f"{num(batch['tokens'])} tokens ({batch['source']})"),
             ("layouts", f"{num(document['generated_layouts'])} generated, {num(document['evaluated_layouts'])} "
                         f"valid and scored, {num(document['feasible_layouts'])} fit in memory "
                         f"({document['seconds']:.2f} s)"),
             ("input_sha256", document["input_sha256"]), ("llmscale", document["llmscale_version"])]
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v) if k != 'input_sha256' else f'<code>{escape(v)}</code>'}</dd>"
                   for k, v in facts)
    if top:
        sentence = (f"Recommendation: {num(jobs['concurrent_jobs'])} concurrent job(s) × "
                    f"{num(jobs['gpus_per_job'])} GPUs per job; cluster throughput "
                    f"{num(jobs['cluster_tokens_per_s'])} tokens/s; one job trains in {num(top[0]['days'], 1)} days.")
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
    return ("<h2>Rejected layouts by reason</h2>" + html_table(header, None, rows, left=0)
            + "<p class=note>Totals over all job sizes:</p>" + chart)


def _top_table(top: list[dict[str, Any]]) -> str:
    header = ["#", "layout", "step", "MFU", "throughput", "memory", "time to train", "cost", "energy"]
    units = ["", "", "s", "%", "tokens/s/GPU", "GiB", "days", "USD", "MWh"]
    rows = [[str(rank), layout_text(layout_of(e["layout"])), f"{e['step_time_s']:.3f}", f"{e['mfu'] * 100:.1f}",
             num(e["tokens_per_s_per_gpu"], 1), num(e["memory_bytes"] / GIB, 1), num(e["days"], 1),
             num(e["cost_usd"]) if e["cost_usd"] is not None else "n/a",
             num(e["energy_j"] / J_PER_MWH, 1) if e["energy_j"] is not None else "n/a"]
            for rank, e in enumerate(top, 1)]
    return "<h2>Top layouts</h2>" + html_table(header, units, rows, left=2)


def plan_html(result: PlanResult, document: dict[str, Any]) -> str:
    """The whole page as a string."""
    body = [_header(document)]
    if document["top"]:
        body += [_step_section(document["top"]), _memory_section(result)]
    body += [_pareto_section(document), _rejection_section(document)]
    if document["top"]:
        body.append(_top_table(document["top"]))
    title = f"llmscale plan · {document['model']} · {document['cluster']}"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")


def write_plan_html(path: Path, result: PlanResult, document: dict[str, Any]) -> None:
    """Write the plan's self-contained HTML report to `path`."""
    try:
        path.write_text(plan_html(result, document), encoding="utf-8")
    except OSError as error:
        raise LlmscaleError(f"--html {path}: cannot write the report ({error.strerror})") from None
