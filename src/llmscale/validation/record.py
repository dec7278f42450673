"""A prediction beside the published record: is this layout's MFU above every published run on its GPU generation
and precision, and which terms carry the difference (search.plausibility)? The record run's own layout is built
from the shipped dataset (validation.jobs.job_from_run) and predicted with the same constants as the layouts it is
compared with, so the terms compare like with like."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmscale.cost.step import StepBreakdown, estimate_step
from llmscale.io.catalog import load_published_mfu
from llmscale.io.resolve import Job
from llmscale.search.plausibility import MfuExcess, mfu_excess, mfu_record
from llmscale.specs.record import MfuRecord
from llmscale.validation.jobs import job_from_run
from llmscale.validation.runs import load_runs


@dataclass
class RecordCheck:
    """Checks layouts of one job against the best published MFU of its GPU generation and precision; the record
    run's own step is predicted once, on the first layout above the record."""

    job: Job
    record: MfuRecord | None = field(init=False)
    _reference: StepBreakdown | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.record = mfu_record(load_published_mfu(), self.job.cluster.gpu, self.job.train.precision)

    def __call__(self, step: StepBreakdown, i: int = 0) -> MfuExcess | None:
        """Layout i of `step` against the record; None where it is not above it or no run is published there."""
        if self.record is None or float(step.mfu[i]) <= self.record.mfu:
            return None
        if self._reference is None:
            run = next(r for r in load_runs() if r.name == self.record.run)  # tests/test_plausibility.py
            ref = job_from_run(run, self.job.constants)
            self._reference = estimate_step(ref.model, ref.cluster, ref.train, ref.layouts, ref.constants)
        return mfu_excess(step, i, self.record, self._reference)
