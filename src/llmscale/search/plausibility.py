"""Plausibility of a predicted MFU: the published record it is compared with.

A predicted MFU above the best any published run reached on the same accelerator generation and precision
(specs.record, catalog/published_mfu.yaml) is a number no run has checked; `plan`, `explain` and `validate` say so
beside it.
"""

from __future__ import annotations

from llmscale.specs.cluster import GPUSpec
from llmscale.specs.record import MfuRecord, PublishedMfu
from llmscale.specs.train import Precision


def mfu_record(record: PublishedMfu, gpu: GPUSpec, precision: Precision) -> MfuRecord | None:
    """The best published MFU on `gpu`'s generation at `precision`'s class, or None where none is published."""
    return record.best(gpu.generation, precision)
