"""Plausibility of a predicted MFU: the published record it is compared with (specs.record,
catalog/published_mfu.yaml), and what carries the difference: MFU = MFU of the compute alone × the compute's share
of the step, the share split into the step parts smaller here than in the record run's layout.
Rationale: docs/design-notes.md#search-plausibility.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.cost.step import STEP_PARTS, StepBreakdown
from llmscale.specs.cluster import GPUSpec
from llmscale.specs.record import MfuRecord, PublishedMfu
from llmscale.specs.train import Precision

KERNELS = "kernels"
"""The term for the compute's own efficiency (MFU of the busy compute time)."""


def mfu_record(record: PublishedMfu, gpu: GPUSpec, precision: Precision) -> MfuRecord | None:
    """The best published MFU on `gpu`'s generation at `precision`'s class, or None where none is published."""
    return record.best(gpu.generation, precision)


@dataclass(frozen=True)
class TermShift:
    """One term of the step in this layout beside the record run's predicted step."""

    term: str
    """A step part (cost.step.STEP_PARTS) or KERNELS."""
    value: float
    """The part's share of the step, or for KERNELS the compute-only MFU."""
    record_value: float
    """The same in the record run's predicted step."""
    log_gain: float
    """This term's share of ln(predicted MFU / record run's predicted MFU)."""


@dataclass(frozen=True)
class MfuExcess:
    """A predicted MFU above the published record, with the terms that carry the difference (largest first)."""

    predicted_mfu: float
    record: MfuRecord
    record_predicted_mfu: float
    """The record run's own layout through the same model (the reference the terms are compared with)."""
    terms: tuple[TermShift, ...]
    features: tuple[str, ...] = ()
    """Per term, what this job has that the record run did not (validation.record names it; '' where unknown)."""

    def text(self) -> str:
        """One line: the record, then the terms that carry the gain and the feature behind each."""
        named = []
        for i, t in enumerate(self.terms):
            if t.term == KERNELS:
                text = f"kernels at {t.value:.0%} of peak vs {t.record_value:.0%}"
            else:
                part = t.term.removesuffix("_s").replace("_", " ")
                text = f"{part} {t.value:.1%} of the step vs {t.record_value:.1%}"
            feature = self.features[i] if i < len(self.features) else ""
            named.append(f"{text} ({feature})" if feature else text)
        return (f"above the best published {self.record.mfu:.1%} on {self.record.generation.value} "
                f"{self.record.precision.value} ({self.record.run}); what this job has that run lacked: "
                + ("; ".join(named) or "no single term"))


def _shares(step: StepBreakdown, i: int) -> dict[str, float]:
    total = float(step.step_time_s[i])
    return {part: float(np.asarray(getattr(step, part))[i]) / total for part in STEP_PARTS}


def mfu_excess(step: StepBreakdown, i: int, record: MfuRecord, record_step: StepBreakdown,
               max_terms: int = 3) -> MfuExcess | None:
    """Layout i's MFU against `record` (None when it is not above it). `record_step` is the record run's own layout
    (index 0) through the same model. ln(MFU/MFU_rec) = ln(kernel MFU ratio) + ln(compute share ratio); the
    second is split over the non-compute parts in proportion to how much smaller their share is here."""
    mfu = float(step.mfu[i])
    if mfu <= record.mfu:
        return None
    here, there = _shares(step, i), _shares(record_step, 0)
    kernel, kernel_rec = mfu / here["compute_s"], float(record_step.mfu[0]) / there["compute_s"]
    share_gain = float(np.log(here["compute_s"] / there["compute_s"]))
    deltas = {p: there[p] - here[p] for p in STEP_PARTS if p != "compute_s"}
    total_delta = sum(deltas.values())
    terms = [TermShift(KERNELS, kernel, kernel_rec, float(np.log(kernel / kernel_rec)))]
    terms += [TermShift(p, here[p], there[p], share_gain * d / total_delta if total_delta else 0.0)
              for p, d in deltas.items()]
    carrying = sorted((t for t in terms if t.log_gain > 0), key=lambda t: -t.log_gain)[:max_terms]
    return MfuExcess(mfu, record, float(record_step.mfu[0]), tuple(carrying))
