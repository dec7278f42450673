"""The published record: the best MFU published runs reached per accelerator generation and precision.

A prediction above every run on the same generation has no measurement behind it; `search.plausibility` says so
beside the number. The values live in catalog/published_mfu.yaml, each naming the run that set it; they are the
shipped runs' throughput expressed in llmscale's MFU convention (cost.step: model FLOPs, dense peak of the training
precision), and tests/test_plausibility.py recomputes them from data/published_runs.yaml so they cannot drift.
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field

from llmscale.specs.base import Spec
from llmscale.specs.cluster import Generation
from llmscale.specs.train import Precision


class PrecisionClass(str, Enum):
    """Precisions whose MFU is measured against the same peak: 16-bit formats share the bf16 peak."""

    BIT16 = "16-bit"
    FP8 = "fp8"
    FP4 = "fp4"

    @classmethod
    def of(cls, precision: Precision) -> PrecisionClass:
        return {Precision.FP8: cls.FP8, Precision.FP4: cls.FP4}.get(precision, cls.BIT16)


class MfuRecord(Spec):
    """The best published MFU on one generation at one precision class."""

    generation: Generation
    precision: PrecisionClass
    mfu: float = Field(gt=0, le=1, description="llmscale's MFU of the published throughput")
    run: str = Field(min_length=1, description="the published run (data/published_runs.yaml name) that reached it")


class PublishedMfu(Spec):
    """Every generation and precision class with a published run."""

    records: tuple[MfuRecord, ...]
    source: str = ""

    def best(self, generation: Generation | None, precision: Precision) -> MfuRecord | None:
        """The record for `generation` at `precision`'s class, or None where no published run exists."""
        cls = PrecisionClass.of(precision)
        return next((r for r in self.records if r.generation == generation and r.precision == cls), None)
