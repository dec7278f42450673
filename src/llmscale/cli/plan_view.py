"""`llmscale plan`: resolve the inputs, run the search with a progress bar, render the recommendation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.progress import Progress
from rich.table import Table

from llmscale import __version__
from llmscale.cli.render import console, explain_table
from llmscale.cost.calibrate import apply_calibration
from llmscale.errors import LlmscaleError, SpecError
from llmscale.io.calibration import load_profile
from llmscale.io.catalog import load_cluster, load_constants, load_model
from llmscale.io.files import parse_spec
from llmscale.io.resolve import JobInputs, check_precision, constants_if_changed
from llmscale.report.text import layout_of, layout_text
from llmscale.search.plan import Candidate, Objective, PlanResult, critical_batch_sequences, plan
from llmscale.specs.fingerprint import sha256_of
from llmscale.specs.train import Precision, TrainSpec
from llmscale.units import GIB


def _train(model_tokens: float | None, gbs: int | None, seq_len: int | None, precision: Precision,
           cap_tokens: float | None) -> tuple[dict[str, Any], bool]:
    fields: dict[str, Any] = {"precision": precision}
    if model_tokens is not None:
        fields["total_tokens"] = model_tokens
    if seq_len is not None:
        fields["seq_len"] = seq_len
    if gbs is not None:
        fields["global_batch"] = gbs
    elif cap_tokens is not None:
        if cap_tokens <= 0:
            raise SpecError("max_global_batch_tokens", cap_tokens, "must be a positive number of tokens")
        fields["global_batch"] = max(1, int(cap_tokens // (seq_len or TrainSpec().seq_len)))
    return fields, gbs is not None or cap_tokens is not None


def run_plan(*, model: str, cluster: str, gpus: int | None, tokens: float | None, objective: Objective, top: int,
             gbs: int | None, max_global_batch_tokens: float | None, seq_len: int | None, precision: Precision,
             as_json: bool, html: Path | None, expect_sha256: str | None, calibration: Path | None = None) -> None:
    model_spec, cluster_spec = load_model(model), load_cluster(cluster)
    constants = load_constants()
    if calibration is not None:
        calibrated = apply_calibration(cluster_spec, constants, load_profile(calibration))
        cluster_spec, constants = calibrated.cluster, calibrated.constants
    fields, batch_given = _train(tokens, gbs, seq_len, precision, max_global_batch_tokens)
    train = parse_spec(TrainSpec, fields, where="train")
    check_precision(cluster_spec, train)
    if not batch_given:
        train = train.model_copy(update={"global_batch": critical_batch_sequences(model_spec, train, constants.search)})
    if gpus is not None and not 0 < gpus <= cluster_spec.num_gpus:
        raise SpecError("gpus", gpus, f"must be in 1..{cluster_spec.num_gpus} (cluster {cluster_spec.name!r})")
    digest = sha256_of(model=model_spec, cluster=cluster_spec, train=train, constants=constants_if_changed(constants))
    if expect_sha256 is not None and expect_sha256.lower() != digest:
        raise LlmscaleError(
            f"--expect-sha256 {expect_sha256} does not match the inputs' SHA256 {digest}: refusing to run"
        )
    result = _search(model_spec, cluster_spec, train, constants, gpus, objective, top, batch_given, quiet=as_json)
    document = plan_document(result, digest, model_spec.name, cluster_spec.name, train)
    if html is not None:
        from llmscale.report.plan_html import write_plan_html

        write_plan_html(html, result, document)
    if as_json:
        typer.echo(json.dumps(document, indent=2))
    else:
        _render(result, document, model_spec, cluster_spec, train, constants)


def _search(model, cluster, train, constants, gpus, objective, top, batch_given, quiet) -> PlanResult:  # type: ignore[no-untyped-def]
    """plan.plan with a progress bar over job sizes; Ctrl-C stops cleanly."""
    try:
        with Progress(console=console, transient=True, disable=quiet) as progress:
            task = progress.add_task("searching layouts", total=None)

            def on_size(i: int, n: int, size: int) -> None:
                progress.update(task, total=n, completed=i, description=f"searching layouts on {size:,} GPUs")

            return plan(model, cluster, train, constants, gpus=gpus, objective=objective, top=top,
                        batch_given=batch_given, on_size=on_size)
    except KeyboardInterrupt:
        console.print("interrupted: no plan written")
        raise typer.Exit(130) from None


def _top_entry(c: Candidate) -> dict[str, Any]:
    i = c.layout_index
    return {
        "layout": c.layouts.row(i).model_dump(mode="json"),
        "num_gpus": c.num_gpus,
        "step_time_s": float(c.step.step_time_s[i]),
        "mfu": float(c.step.mfu[i]),
        "tokens_per_s_per_gpu": float(c.step.tokens_per_s_per_gpu[i]),
        "memory_bytes": float(c.step.memory.total_bytes[i]),
        "days": c.days,
        "cost_usd": c.cost_usd,
        "energy_j": c.energy_j,
        **_reliability_entry(c),
        "breakdown": {name: float(getattr(c.step, name)[i]) for name in (
            "compute_s", "recompute_s", "tp_exposed_s", "cp_exposed_s", "ep_exposed_s", "pp_exposed_s",
            "dp_exposed_s", "bubble_s", "optimizer_s", "overhead_s", "offload_s")},
    }


def _reliability_entry(c: Candidate) -> dict[str, Any]:
    """Goodput, checkpoint policy and intervals per tier (minutes), effective days = days / goodput."""
    r = c.reliability
    if r is None:
        return {"goodput": None, "checkpoint_policy": None, "checkpoint_interval_min": None, "effective_days": None}
    return {"goodput": r.goodput, "checkpoint_policy": r.policy.value,
            "checkpoint_interval_min": {tier.value: s / 60.0 for tier, s in r.interval_s.items()},
            "job_mtbf_hours": r.job_mtbf_s / 3600.0, "expected_interruptions": r.expected_interruptions,
            "effective_days": c.days / r.goodput if r.goodput > 0 else None}


def plan_document(result: PlanResult, digest: str, model: str, cluster: str, train: TrainSpec) -> dict[str, Any]:
    chosen = result.chosen
    best = chosen.top[0] if chosen.top else None
    per_job = float(best.step.tokens_per_s_per_gpu[best.layout_index]) * best.num_gpus if best else 0.0
    return {
        "llmscale_version": __version__,
        "input_sha256": digest,
        "model": model,
        "cluster": cluster,
        "objective": result.objective.value,
        "generated_layouts": result.generated_layouts,
        "evaluated_layouts": result.evaluated_layouts,
        "feasible_layouts": result.feasible_layouts,
        "seconds": result.seconds,
        "global_batch": {"sequences": result.global_batch, "tokens": result.global_batch * train.seq_len,
                         "source": "DeepSeek LLM B_opt(C) = 0.292·C^0.3271 tokens" if result.batch_from_law
                         else "given"},
        "top": [_top_entry(c) for c in chosen.top],
        "jobs": {"gpus_per_job": result.gpus_per_job, "concurrent_jobs": result.concurrent_jobs,
                 "cluster_gpus": result.cluster_gpus, "tokens_per_s_per_job": per_job,
                 "cluster_tokens_per_s": per_job * result.concurrent_jobs},
        "job_sizes": [
            {"num_gpus": s.num_gpus, "generated": s.generated, "evaluated": s.evaluated, "feasible": s.feasible,
             "rejected": {reason.name.lower(): n for reason, n in s.rejected.items()},
             "best": _top_entry(s.top[0]) if s.top else None}
            for s in result.sizes
        ],
    }


def _render(result: PlanResult, document: dict[str, Any], model, cluster, train, constants) -> None:  # type: ignore[no-untyped-def]
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
        sizes.add_row(f"{entry['num_gpus']:,}", _layout_text(best["layout"]) if best else "none fits",
                      f"{best['mfu']:.1%}" if best else "", f"{best['tokens_per_s_per_gpu']:,.0f}" if best else "",
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
    top_entry = _top_entry(best)
    if top_entry["goodput"] is not None:
        console.print(f"goodput {top_entry['goodput']:.3f} under failures (job MTBF "
                      f"{top_entry['job_mtbf_hours']:.3g} h, {top_entry['checkpoint_policy']} checkpoints every "
                      + ", ".join(f"{k} {v:.3g} min" for k, v in top_entry["checkpoint_interval_min"].items())
                      + f") -> effective {top_entry['effective_days'] or float('inf'):,.1f} days (llmscale goodput)")
    job = JobInputs(model, cluster.model_copy(update={"num_gpus": best.num_gpus}), train,
                    best.layouts.row(best.layout_index), best.num_gpus, constants)
    explain_table(job, best.step, best.layout_index)
    runners = Table(title="runners-up", title_justify="left")
    for column in ("#", "layout", "tokens/s/GPU", "vs best", "GiB"):
        runners.add_column(column, justify="left" if column == "layout" else "right")
    top_rate = float(best.step.tokens_per_s_per_gpu[best.layout_index])
    for rank, c in enumerate(chosen.top, start=1):
        rate = float(c.step.tokens_per_s_per_gpu[c.layout_index])
        runners.add_row(str(rank), _layout_text(_top_entry(c)["layout"]), f"{rate:,.0f}", f"{rate / top_rate - 1:+.1%}",
                        f"{float(c.step.memory.total_bytes[c.layout_index]) / GIB:,.1f}")
    console.print(runners)


def _layout_text(layout: dict[str, Any]) -> str:
    return layout_text(layout_of(layout))
