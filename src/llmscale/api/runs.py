"""The API of runs and their record: `goodput` (failures, checkpoint policy and goodput of one job size) and
`validate` (predicted vs published runs). Same inputs and documents as the commands."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmscale.api.checks import flag_arg, names_arg, numbers_arg, path_arg, ref_arg, text_arg
from llmscale.api.jobs import ClusterRef, ModelRef, choice, framework_text, whole
from llmscale.api.results import Document, Goodput
from llmscale.errors import SpecError
from llmscale.io.catalog import load_published_mfu
from llmscale.io.resolve import Job, JobRequest, resolve
from llmscale.reliability.estimate import job_goodput, peak_step_s, simulate_job
from llmscale.reliability.montecarlo import MAX_WORK, expected_work
from llmscale.reliability.rates import failures_of
from llmscale.report.documents import validation_document
from llmscale.report.goodput_output import MinInterval, goodput_document
from llmscale.specs.bounds import MAX_DAYS, MIN_DAYS
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.failures import Mitigation
from llmscale.specs.model import ModelSpec
from llmscale.units import MINUTES_PER_DAY, SECONDS_PER_DAY
from llmscale.validation.jobs import Facts
from llmscale.validation.runs import load_rows
from llmscale.validation.validate import ValidationReport, validate_rows

MAX_TRIALS = 1_000_000


MAX_STEP_S = 1e4
"""A step time in s: ~100× the slowest published step (data/published_runs.yaml: ~105 s); a longer step leaves no
checkpoint interval inside any cluster's mean time between failures."""
MAX_SEED = 2**64 - 1
"""numpy's SeedSequence takes any non-negative integer; one 64-bit word is more than a user types."""


MIN_INTERVAL_MIN = 1.0 / 60.0
"""The shortest checkpoint interval evaluated, one second: no checkpoint of a training job is written faster."""
MIN_STEP_S = 1e-3
"""The shortest step time, a millisecond: far below any step of a model llmscale plans (published: 1-100 s)."""


def _check(days: float, intervals_min: list[float], trials: int, intervals_name: str = "intervals_min") -> None:
    if not MIN_DAYS <= days <= MAX_DAYS:
        raise SpecError("days", days, f"must be a number of days in {MIN_DAYS:g}..{MAX_DAYS:,.0f} (specs.bounds)")
    bad = next((v for v in intervals_min if not MIN_INTERVAL_MIN <= v <= days * MINUTES_PER_DAY), None)
    if bad is not None:
        raise SpecError(intervals_name, bad, f"must be a number of minutes in {MIN_INTERVAL_MIN:.4g}"
                        f" (one second)..{days * MINUTES_PER_DAY:,.0f} (the run's length)")
    if not 0 <= trials <= MAX_TRIALS:
        raise SpecError("trials", trials, f"must be in 0..{MAX_TRIALS:,}")


def goodput(cluster: ClusterRef = None, gpus: int | None = None, model: ModelRef = None, *, days: float = 90.0,
            intervals_min: Iterable[float] | None = (), trials: int = 10_000, seed: int = 0, hot_spares: bool = True,
            mitigations: Iterable[Mitigation | str] | None = (), step_s: float | None = None,
            expect_sha256: str | None = None, force: bool = False) -> Goodput:
    """Job MTBF, expected interruptions, the best checkpoint policy and intervals per tier, goodput and its Monte
    Carlo spread (`llmscale goodput`); no interval shorter than one step (`step_s`, default one step at the GPUs'
    dense peak, a lower bound). `to_frame()`: one row per checkpoint policy."""
    intervals = numbers_arg("intervals_min", intervals_min)  # None: no extra intervals, as ()
    given = names_arg("mitigations", mitigations, "['predictive-migration']")
    chosen = tuple(dict.fromkeys(choice(Mitigation, m, "mitigations") for m in given))
    whole("gpus", gpus)
    request = JobRequest(model=ref_arg("model", model, ModelSpec), cluster=ref_arg("cluster", cluster, ClusterSpec),
                         gpus=gpus, expect_sha256=text_arg("expect_sha256", expect_sha256))
    return goodput_job(request, GoodputRun(days, intervals, trials, seed, flag_arg("hot_spares", hot_spares), chosen,
                                           step_s, flag_arg("force", force)))


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(name, value, "a number")
    return float(value)


@dataclass(frozen=True)
class GoodputRun:
    """What `goodput` is asked about the job: the run's length, intervals to evaluate, the Monte Carlo, spares."""

    days: float = 90.0
    intervals_min: list[float] = field(default_factory=list)
    trials: int = 10_000
    seed: int = 0
    hot_spares: bool = True
    mitigations: tuple[Mitigation, ...] = ()
    step_s: float | None = None
    force: bool = False
    """Run a Monte Carlo beyond `montecarlo.MAX_WORK`."""
    intervals_name: str = "intervals_min"
    """What a refusal of an interval calls it: the API's argument, or the CLI's flag (--interval-min)."""

    def check(self) -> None:
        for name in ("days", "step_s"):
            value = getattr(self, name)
            if value is not None:
                _number(name, value)
        for name in ("trials", "seed"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int):
                raise SpecError(name, getattr(self, name), "a whole number")
        _check(self.days, self.intervals_min, self.trials, self.intervals_name)
        if not 0 <= self.seed <= MAX_SEED:
            raise SpecError("seed", self.seed, "must be an integer in 0..2⁶⁴ − 1")
        if self.step_s is not None and not MIN_STEP_S <= self.step_s <= MAX_STEP_S:
            raise SpecError("step_s", self.step_s, f"must be a number of seconds in {MIN_STEP_S:g}..{MAX_STEP_S:,.0f}")


def _record_step(job: Job) -> MinInterval:
    """Without a step time given, the shortest step any published run's MFU allows: the step at the dense peak divided
    by the best published MFU of the GPU generation and precision (catalog/published_mfu.yaml), or at MFU 1 where
    the generation has no published run."""
    peak = float(peak_step_s(job.model, job.cluster, job.train, job.num_gpus)[0])
    record = load_published_mfu().best(job.cluster.gpu.generation, job.train.precision)
    if record is None:
        return MinInterval(peak, "one step at the dense peak (MFU 1; no published run on this GPU generation)")
    return MinInterval(peak / record.mfu, f"one step at the best published MFU {record.mfu:.1%} of "
                                          f"{record.generation.value} ({record.run})")


def goodput_job(request: JobRequest, run: GoodputRun) -> Goodput:
    """`goodput` of a resolver request (the CLI's way in)."""
    run.check()
    job = resolve(request)
    floor = MinInterval(run.step_s, "--step-s") if run.step_s is not None else _record_step(job)
    est = job_goodput(job.model, job.cluster, job.train, job.num_gpus, run.days * SECONDS_PER_DAY, job.constants,
                      floor_s=floor.seconds, hot_spares=run.hot_spares, mitigations=run.mitigations)
    nodes = -(-job.num_gpus // job.cluster.node.gpus_per_node)
    if run.trials and not run.force:
        _check_work(float(est.expected_unplanned[0]), run.trials)
    mc = simulate_job(est, 0, nodes, trials=run.trials, seed=run.seed) if run.trials else None
    document = goodput_document(est, mc, run.intervals_min, days=run.days, digest=job.input_sha256, floor=floor)
    document.update({"cluster": job.cluster.name, "model": job.model.name, "num_gpus": job.num_gpus,
                     "num_nodes": nodes, "hot_spares": run.hot_spares,
                     "mitigations": [m.value for m in run.mitigations],
                     "failure_profile": failures_of(job.cluster, job.constants.failures).name})
    return Goodput(document, rows_key="policies", job=job, estimate=est, mitigations=run.mitigations)


def _check_work(interruptions: float, trials: int) -> None:
    """Refuse a Monte Carlo whose estimated work passes the documented limit (reliability.montecarlo.MAX_WORK)."""
    work = expected_work(interruptions, trials)
    if work > MAX_WORK:
        raise SpecError("trials", trials, f"a Monte Carlo of {trials:,} trials × ~{interruptions:,.0f} interruptions "
                        f"is ~{work:.2g} trial-rows, above the limit {MAX_WORK:.2g} (~2× the default run): lower "
                        "--trials or --days, or pass --force")


def validate(runs: Path | str | None = None, calibration: Path | None = None, allow_unsealed: bool = False,
             facts: Facts | str = Facts.PROFILE, framework: str | None = None,
             force_calibration: bool = False) -> Document:
    """Predicted vs published tokens/s per GPU for every run of a published-runs file (default: the shipped set;
    `llmscale validate`). facts: `profile` (the published table and the row's release profile: what a user knows)
    or `recipe` (also the row's own recipe facts); framework: only rows of NAME or NAME@RELEASE. A CPU-measured
    `calibration` is refused unless `force_calibration`. `to_frame()`: one row per evaluated run."""
    return Document(validation_document(validate_report(runs, calibration, allow_unsealed, facts, framework,
                                                        force_calibration)), rows_key="rows")


def validate_report(runs: Path | str | None = None, calibration: Path | None = None, allow_unsealed: bool = False,
                    facts: Facts | str = Facts.PROFILE, framework: str | None = None,
                    force_calibration: bool = False) -> ValidationReport:
    """The validation report itself (validation.validate), for tables and charts."""
    return validate_rows(*load_rows(path_arg("runs", runs)), calibration=path_arg("calibration", calibration),
                         allow_unsealed=flag_arg("allow_unsealed", allow_unsealed),
                         facts=choice(Facts, facts, "facts"), framework=framework_text(framework),
                         force_calibration=flag_arg("force_calibration", force_calibration))
