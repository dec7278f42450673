"""`llmscale plan` in the terminal: read from the plan's JSON document (`report.documents.plan_document`) and the
search result it was built from."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rich.table import Table

from llmscale import __version__
from llmscale.io.resolve import Job
from llmscale.report.tables import console, explain_table, print_placement
from llmscale.report.text import layout_of, layout_text
from llmscale.search.plan import PlanResult, job_size_rule
from llmscale.specs.framework import Framework
from llmscale.units import GIB


def _mfu_cell(entry: dict[str, Any]) -> str:
    """The MFU, marked where it lies above every published run of the GPU generation and precision."""
    return f"{entry['mfu']:.1%}" + (" > published" if entry["above_published_mfu"] else "")


def plan_table(result: PlanResult, document: dict[str, Any], job: Job) -> None:
    """The terminal view of a plan: the search, the best layout per job size, the recommendation, the best layout's
    step and memory, the runners-up."""
    model, cluster, train = job.model, job.cluster, job.train
    jobs = document["jobs"]
    console.print(f"# llmscale {__version__} plan · model {model.name} · cluster {cluster.name} "
                  f"({cluster.num_gpus:,} GPUs) · objective {result.objective.value} · "
                  f"input_sha256 {document['input_sha256'][:16]}…")
    console.print(f"# {result.generated_layouts:,} candidate layouts, {result.evaluated_layouts:,} valid and scored, "
                  f"{result.feasible_layouts:,} fit in memory; "
                  f"{len(result.sizes)} job size(s) in {result.seconds:.2f} s · global batch "
                  f"{result.global_batch:,} × {train.seq_len} tokens ({document['global_batch']['source']})")
    console.print(f"# framework {_target_text(document['framework'])}")
    sizes = Table(title="best layout per job size", title_justify="left")
    for column in ("GPUs", "layout", "MFU", "tokens/s/GPU", "step s", "feasible"):
        sizes.add_column(column, justify="left" if column == "layout" else "right")
    for entry in document["job_sizes"]:
        best = entry["best"]
        empty = "none fits" if entry["evaluated"] else "none valid"
        sizes.add_row(f"{entry['num_gpus']:,}", layout_text(layout_of(best["layout"])) if best else empty,
                      _mfu_cell(best) if best else "", f"{best['tokens_per_s_per_gpu']:,.0f}" if best else "",
                      f"{best['step_time_s']:.2f}" if best else "", f"{entry['feasible']:,}")
    console.print(sizes)
    chosen = result.chosen
    if not chosen.top:
        console.print(_nothing_text(result))
        return
    best = chosen.top[0]
    console.print(f"[bold]recommendation[/bold]: one job of {jobs['gpus_per_job']:,} GPUs trains "
                  f"{train.total_tokens:.3g} tokens in {best.days:,.1f} days, {best.gpu_hours:,.0f} GPU-hours "
                  f"({jobs['tokens_per_s_per_job']:,.0f} tokens/s; {_why_size(result)})")
    if result.meets_deadline is False:
        console.print(f"[bold]misses the deadline[/bold]: {best.effective_days:,.1f} days under failures > "
                      f"--deadline {result.deadline_days:,.4g} days; more GPUs, fewer tokens or a smaller model")
    if jobs["concurrent_jobs"] > 1:
        console.print(f"the cluster holds {jobs['concurrent_jobs']:,} such jobs at once "
                      f"({jobs['cluster_tokens_per_s']:,.0f} tokens/s together)")
    top = document["top"][0]
    if top["goodput"] is not None:
        console.print(f"goodput {top['goodput']:.3f} under failures (job MTBF "
                      f"{top['job_mtbf_hours']:.3g} h, {top['checkpoint_policy']} checkpoints every "
                      + ", ".join(f"{k} {v:.3g} min" for k, v in top["checkpoint_interval_min"].items())
                      + f") -> effective {top['effective_days'] or float('inf'):,.1f} days (llmscale goodput)")
    best_job = replace(job, layout=best.layouts.row(best.layout_index), num_gpus=best.num_gpus)
    above = top["above_published_mfu"]
    explain_table(best_job, best.step, best.layout_index, above["note"] if above else None)
    _runners(result, document)
    _placements(document["placement"])


def _placements(entries: list[dict[str, Any]]) -> None:
    """The best layout's placement in full, one line for each other layout placed."""
    if not entries:
        return
    print_placement(entries[0])
    for rank, entry in enumerate(entries[1:], start=2):
        best, first = entry["best"], entry["in_order"]
        console.print(f"placement of #{rank}: {best['step_s']:.3f} s placed ({best['placement']}) vs "
                      f"{first['step_s']:.3f} s in host order ({100 * (entry['gain'] - 1):+.1f}%)")


def _runners(result: PlanResult, document: dict[str, Any]) -> None:
    """The chosen job size's best layouts (with the frameworks that run each, for `--framework any`) and the roomier
    alternative."""
    chosen = result.chosen
    best = chosen.top[0]
    runners = Table(title="runners-up", title_justify="left")
    any_framework = result.target.framework is Framework.ANY
    for column in ("#", "layout", "tokens/s/GPU", "vs best", "GiB") + (("runs on",) if any_framework else ()):
        runners.add_column(column, justify="left" if column in ("layout", "runs on") else "right")
    top_rate = float(best.step.tokens_per_s_per_gpu[best.layout_index])
    for rank, c in enumerate(chosen.top, start=1):
        rate = float(c.step.tokens_per_s_per_gpu[c.layout_index])
        cells = [str(rank), layout_text(c.layouts.row(c.layout_index)), f"{rate:,.0f}", f"{rate / top_rate - 1:+.1%}",
                 f"{float(c.step.memory.total_bytes[c.layout_index]) / GIB:,.1f}"]
        if any_framework:
            cells.append(", ".join(f.value for f in c.frameworks) or "no catalog framework")
        runners.add_row(*cells)
    console.print(runners)
    roomier = document["roomier"]
    if roomier is not None:
        rate = roomier["tokens_per_s_per_gpu"]
        best_used = document["top"][0]["memory_fraction"]
        console.print(f"more memory headroom: {layout_text(layout_of(roomier['layout']))} uses "
                      f"{roomier['memory_fraction']:.0%} of GPU memory (best: {best_used:.0%}) at "
                      f"{rate / top_rate - 1:+.1%} tokens/s")


def _target_text(target: dict[str, Any]) -> str:
    rules = " ".join(f"--{name.replace('_', '-')} {text}" for name, text in target["rules"].items())
    cap = target["max_memory_fraction"]
    return (target["checked"] + (f" · {rules}" if rules else "")
            + (f" · at most {cap:.0%} of GPU memory" if cap < 1 else ""))


def _why_size(result: PlanResult) -> str:
    """Why the chosen job size won, in the objective's terms (search.plan.job_size_rule)."""
    return job_size_rule(result)


def _nothing_text(result: PlanResult) -> str:
    """'none valid' (the rules left no layout to score) vs 'none fits' (every scored layout is out of memory)."""
    if result.evaluated_layouts == 0:
        reasons: dict[str, int] = {}
        for size in result.sizes:
            for reason, n in size.rejected.items():
                reasons[reason.name.lower()] = reasons.get(reason.name.lower(), 0) + n
        named = ", ".join(f"{k} {v:,}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]))
        return f"no valid layout at any job size: every candidate broke a rule ({named})"
    return "no layout fits in memory at any job size"
