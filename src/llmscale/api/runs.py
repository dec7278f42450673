"""The API of runs and their record: `goodput` (failures, checkpoint policy and goodput of one job size) and
`validate` (predicted vs published runs). Same inputs and documents as the commands."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from llmscale.api.jobs import ClusterRef, ModelRef, choice
from llmscale.api.results import Document
from llmscale.errors import SpecError
from llmscale.io.resolve import JobRequest, resolve
from llmscale.reliability.estimate import job_goodput, simulate_job
from llmscale.reliability.rates import failures_of
from llmscale.report.documents import validation_document
from llmscale.report.goodput_output import goodput_document
from llmscale.specs.failures import Mitigation
from llmscale.units import SECONDS_PER_DAY
from llmscale.validation.runs import load_rows
from llmscale.validation.validate import validate_rows

MAX_TRIALS = 1_000_000


def _check(days: float, intervals_min: list[float], trials: int) -> None:
    if not days > 0 or days == float("inf"):
        raise SpecError("days", days, "must be a positive, finite number of days")
    bad = next((v for v in intervals_min if not 0 < v < float("inf")), None)
    if bad is not None:
        raise SpecError("interval_min", bad, "must be a positive, finite number of minutes")
    if not 0 <= trials <= MAX_TRIALS:
        raise SpecError("trials", trials, f"must be in 0..{MAX_TRIALS:,}")


def goodput(cluster: ClusterRef = None, gpus: int | None = None, model: ModelRef = None, *, days: float = 90.0,
            intervals_min: Iterable[float] = (), trials: int = 10_000, seed: int = 0, hot_spares: bool = True,
            mitigations: Iterable[Mitigation | str] = (), expect_sha256: str | None = None) -> Document:
    """Job MTBF, expected interruptions, the best checkpoint policy and intervals per tier, goodput and its Monte
    Carlo spread (`llmscale goodput`). `to_frame()`: one row per checkpoint policy."""
    intervals = [float(v) for v in intervals_min]
    _check(days, intervals, trials)
    if seed < 0:
        raise SpecError("seed", seed, "must be a non-negative integer")
    job = resolve(JobRequest(model=model, cluster=cluster, gpus=gpus, expect_sha256=expect_sha256))
    chosen = tuple(dict.fromkeys(choice(Mitigation, m, "mitigation") for m in mitigations))
    est = job_goodput(job.model, job.cluster, job.train, job.num_gpus, days * SECONDS_PER_DAY, job.constants,
                      hot_spares=hot_spares, mitigations=chosen)
    nodes = -(-job.num_gpus // job.cluster.node.gpus_per_node)
    mc = simulate_job(est, 0, nodes, trials=trials, seed=seed) if trials else None
    document = goodput_document(est, mc, intervals, days=days, digest=job.input_sha256)
    document.update({"cluster": job.cluster.name, "model": job.model.name, "num_gpus": job.num_gpus,
                     "num_nodes": nodes, "hot_spares": hot_spares, "mitigations": [m.value for m in chosen],
                     "failure_profile": failures_of(job.cluster, job.constants.failures).name})
    return Document(document, rows_key="policies")


def validate(runs: Path | str | None = None, calibration: Path | None = None) -> Document:
    """Predicted vs published tokens/s per GPU for every run of a published-runs file (default: the shipped set;
    `llmscale validate`). `to_frame()`: one row per evaluated run."""
    return Document(validation_document(validate_rows(*load_rows(runs), calibration=calibration)), rows_key="rows")
