"""`llmscale plan` in the terminal: read from the plan's JSON document (`report.documents.plan_document`) and the
search result it was built from."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rich.table import Table

from llmscale import __version__
from llmscale.io.resolve import Job
from llmscale.report.tables import console, explain_table
from llmscale.report.text import layout_of, layout_text
from llmscale.search.plan import PlanResult
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
    sizes = Table(title="best layout per job size", title_justify="left")
    for column in ("GPUs", "layout", "MFU", "tokens/s/GPU", "step s", "feasible"):
        sizes.add_column(column, justify="left" if column == "layout" else "right")
    for entry in document["job_sizes"]:
        best = entry["best"]
        sizes.add_row(f"{entry['num_gpus']:,}", layout_text(layout_of(best["layout"])) if best else "none fits",
                      _mfu_cell(best) if best else "", f"{best['tokens_per_s_per_gpu']:,.0f}" if best else "",
                      f"{best['step_time_s']:.2f}" if best else "", f"{entry['feasible']:,}")
    console.print(sizes)
    chosen = result.chosen
    if not chosen.top:
        console.print("no layout fits in memory at any job size")
        return
    best = chosen.top[0]
    console.print(f"[bold]recommendation[/bold]: {jobs['concurrent_jobs']:,} concurrent job(s) of "
                  f"{jobs['gpus_per_job']:,} GPUs; cluster throughput {jobs['cluster_tokens_per_s']:,.0f} tokens/s "
                  f"({jobs['tokens_per_s_per_job']:,.0f} per job; one job trains {train.total_tokens:.3g} tokens in "
                  f"{best.days:,.1f} days)")
    top = document["top"][0]
    if top["goodput"] is not None:
        console.print(f"goodput {top['goodput']:.3f} under failures (job MTBF "
                      f"{top['job_mtbf_hours']:.3g} h, {top['checkpoint_policy']} checkpoints every "
                      + ", ".join(f"{k} {v:.3g} min" for k, v in top["checkpoint_interval_min"].items())
                      + f") -> effective {top['effective_days'] or float('inf'):,.1f} days (llmscale goodput)")
    best_job = replace(job, layout=best.layouts.row(best.layout_index), num_gpus=best.num_gpus)
    above = top["above_published_mfu"]
    explain_table(best_job, best.step, best.layout_index, above["note"] if above else None)
    runners = Table(title="runners-up", title_justify="left")
    for column in ("#", "layout", "tokens/s/GPU", "vs best", "GiB"):
        runners.add_column(column, justify="left" if column == "layout" else "right")
    top_rate = float(best.step.tokens_per_s_per_gpu[best.layout_index])
    for rank, c in enumerate(chosen.top, start=1):
        rate = float(c.step.tokens_per_s_per_gpu[c.layout_index])
        runners.add_row(str(rank), layout_text(c.layouts.row(c.layout_index)), f"{rate:,.0f}",
                        f"{rate / top_rate - 1:+.1%}", f"{float(c.step.memory.total_bytes[c.layout_index]) / GIB:,.1f}")
    console.print(runners)
