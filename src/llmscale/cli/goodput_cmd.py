"""`llmscale goodput`: interruptions, checkpoint policy and goodput of one job size on a cluster.

The checkpoint state is P · 14 B spread evenly over the job's GPUs (checkpoint.even_checkpoint_cost); `plan` uses
each layout's own shards and step time. The table lists every policy at its best intervals with Young's and Daly's
intervals beside them; the Monte Carlo simulates the best policy over the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmscale.api.runs import MAX_SEED, MAX_TRIALS, GoodputRun, goodput_job
from llmscale.cli import options as o
from llmscale.io.resolve import JobRequest
from llmscale.report.goodput_output import goodput_table
from llmscale.report.strict_json import strict_dumps
from llmscale.specs.failures import Mitigation

DaysOpt = Annotated[float, typer.Option("--days", help="wall-clock days of the run (finite, ≤ 10⁴: specs.bounds)")]
IntervalOpt = Annotated[
    list[float] | None, typer.Option("--interval-min", help="also evaluate these checkpoint intervals (minutes)")
]
TrialsOpt = Annotated[int, typer.Option("--trials", parser=o.number_parser("--trials", 0, MAX_TRIALS, integer=True),
                                           help="Monte Carlo trials (0: none)")]
SeedOpt = Annotated[int, typer.Option("--seed", parser=o.number_parser("--seed", 0, MAX_SEED, integer=True),
                                         help="Monte Carlo seed")]
SparesOpt = Annotated[bool, typer.Option("--hot-spares/--no-hot-spares", help="warm standby nodes in the job")]
MitigationOpt = Annotated[
    list[Mitigation] | None,
    typer.Option("--mitigation", case_sensitive=False, help="predictive-migration and/or subhealthy-eviction"),
]
StepOpt = Annotated[float | None, typer.Option("--step-s", help="the job's step time (from `explain` or `plan`): no "
                                              "checkpoint interval is shorter (default: the shortest step the best "
                                              "published MFU of the GPU generation allows)")]
ForceOpt = Annotated[bool, typer.Option("--force", metavar="", help="run a Monte Carlo beyond its work limit "
                                      "(trials × interruptions: reliability.montecarlo.MAX_WORK) [default: off]")]
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
    force: ForceOpt = False,
    calibration: o.CalibrationOpt = None,
    force_calibration: o.ForceCalibrationOpt = False,
    allow_unsealed: o.AllowUnsealedOpt = False,
) -> None:
    """Job MTBF, expected interruptions, the best checkpoint policy per tier, goodput and its Monte Carlo spread."""
    run = GoodputRun(days, list(interval_min or []), trials, seed, hot_spares, tuple(dict.fromkeys(mitigation or [])),
                     step_s, force, intervals_name="--interval-min")
    request = JobRequest(model=model, cluster=cluster, gpus=gpus, expect_sha256=expect_sha256, calibration=calibration,
                         force_calibration=force_calibration, allow_unsealed=allow_unsealed)
    result = goodput_job(request, run)
    if plot is not None:
        from llmscale.report.goodput_charts import write_charts

        job, est = result.job, result.estimate
        assert job is not None and est is not None
        write_charts(plot, est, job.model, job.cluster, job.train, job.constants, job.num_gpus, days, hot_spares,
                     result.mitigations)
        o.wrote(plot)
    if as_json:
        typer.echo(strict_dumps(result.to_dict()))
    else:
        goodput_table(result.to_dict())
