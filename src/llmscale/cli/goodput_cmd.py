"""`llmscale goodput`: interruptions, checkpoint policy and goodput of one job size on a cluster.

The checkpoint state is P · 14 B spread evenly over the job's GPUs (checkpoint.even_checkpoint_cost); `plan` uses
each layout's own shards and step time. The table lists every policy at its best intervals with Young's and Daly's
intervals beside them; the Monte Carlo simulates the best policy over the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from llmscale.cli import options as o
from llmscale.errors import SpecError
from llmscale.io.resolve import JobRequest, resolve
from llmscale.reliability.estimate import job_goodput, peak_step_s, simulate_job
from llmscale.reliability.rates import failures_of
from llmscale.report.goodput_output import MinInterval, goodput_document, goodput_table
from llmscale.specs.failures import Mitigation
from llmscale.units import SECONDS_PER_DAY

DaysOpt = Annotated[float, typer.Option("--days", help="wall-clock days of the run")]
IntervalOpt = Annotated[
    list[float] | None, typer.Option("--interval-min", help="also evaluate these checkpoint intervals (minutes)")
]
TrialsOpt = Annotated[int, typer.Option("--trials", help="Monte Carlo trials (0: none)")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Monte Carlo seed")]
SparesOpt = Annotated[bool, typer.Option("--hot-spares/--no-hot-spares", help="warm standby nodes in the job")]
MitigationOpt = Annotated[
    list[Mitigation] | None,
    typer.Option("--mitigation", case_sensitive=False, help="predictive-migration and/or subhealthy-eviction"),
]
StepOpt = Annotated[float | None, typer.Option("--step-s", help="the job's step time (from `explain` or `plan`): no "
                                              "checkpoint interval is shorter (default: one step at the GPUs' dense "
                                              "peak, a lower bound)")]
PlotOpt = Annotated[Path | None, typer.Option("--plot", help="write charts (goodput vs interval and vs job size)")]


def goodput(
    cluster: o.ClusterOpt = None,
    gpus: o.GpusOpt = None,
    model: o.ModelOpt = None,
    days: DaysOpt = 90.0,
    interval_min: IntervalOpt = None,
    trials: TrialsOpt = 10_000,
    seed: SeedOpt = 0,
    hot_spares: SparesOpt = True,
    mitigation: MitigationOpt = None,
    as_json: o.JsonOpt = False,
    plot: PlotOpt = None,
    step_s: StepOpt = None,
    expect_sha256: o.ExpectShaOpt = None,
) -> None:
    """Job MTBF, expected interruptions, the best checkpoint policy per tier, goodput and its Monte Carlo spread."""
    job = resolve(JobRequest(model=model, cluster=cluster, gpus=gpus, expect_sha256=expect_sha256))
    _check_inputs(days, interval_min or [], trials)
    model_spec, cluster_spec, train, constants = job.model, job.cluster, job.train, job.constants
    num_gpus = job.num_gpus
    mitigations = tuple(dict.fromkeys(mitigation or []))
    if step_s is not None and not step_s > 0:
        raise SpecError("step_s", step_s, "must be a positive number of seconds")
    floor = MinInterval(step_s, "--step-s") if step_s is not None else MinInterval(
        float(peak_step_s(model_spec, cluster_spec, train, num_gpus)[0]), "one step at the dense peak (MFU 1)")
    est = job_goodput(model_spec, cluster_spec, train, num_gpus, days * SECONDS_PER_DAY, constants,
                      floor_s=floor.seconds, hot_spares=hot_spares, mitigations=mitigations)
    nodes = -(-num_gpus // cluster_spec.node.gpus_per_node)
    mc = simulate_job(est, 0, nodes, trials=trials, seed=seed) if trials else None
    document = goodput_document(est, mc, interval_min or [], days=days, digest=job.input_sha256, floor=floor)
    document.update({"cluster": cluster_spec.name, "model": model_spec.name, "num_gpus": num_gpus,
                     "num_nodes": nodes, "hot_spares": hot_spares, "mitigations": [m.value for m in mitigations],
                     "failure_profile": failures_of(cluster_spec, constants.failures).name})
    if plot is not None:
        from llmscale.report.goodput_charts import write_charts

        write_charts(plot, est, model_spec, cluster_spec, train, constants, num_gpus, days, hot_spares, mitigations)
        o.wrote(plot)
    if as_json:
        typer.echo(json.dumps(document, indent=2))
    else:
        goodput_table(document)


def _check_inputs(days: float, intervals: list[float], trials: int) -> None:
    if not days > 0:
        raise SpecError("days", days, "must be a positive number of days")
    bad = next((v for v in intervals if not v > 0), None)
    if bad is not None:
        raise SpecError("interval_min", bad, "must be a positive number of minutes")
    if not 0 <= trials <= 1_000_000:
        raise SpecError("trials", trials, "must be in 0..1,000,000")
