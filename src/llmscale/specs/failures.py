"""FailureSpec: what interrupts a training job, at what rate, and how far each interruption reaches.

Rates are interruptions per unit-year, the unit being a GPU, a node or the job (`Scope`); the job's rate is the
sum over causes of rate × units (series system with exponential failures). Catalog profiles and their
derivations live in catalog/failures.yaml; a cluster names one or gives its own (ClusterSpec.failures).
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field, model_validator

from llmscale.specs.base import FieldProblem, Spec
from llmscale.specs.bounds import (
    MAX_PER_YEAR,
    MAX_RATIO,
    MAX_SECONDS,
)


class Scope(str, Enum):
    """What a cause's rate is counted per."""

    GPU = "gpu"
    """Per GPU-year: the job's rate grows with its GPUs."""
    NODE = "node"
    """Per node-year: the job's rate grows with its nodes."""
    JOB = "job"
    """Per job-year: independent of the job's size (rolling maintenance waves)."""


class InterruptionKind(str, Enum):
    """Whether the interruption is announced."""

    UNPLANNED = "unplanned"
    """A failure: work since the last checkpoint is lost and the job pays a full restart."""
    PLANNED = "planned"
    """Maintenance the job is told about: it checkpoints first and loses no work, only the pause."""


class Mitigation(str, Enum):
    """Options that avoid a share of unplanned interruptions at a cost (catalog/failures.yaml `mitigations`)."""

    PREDICTIVE_MIGRATION = "predictive-migration"
    """Health telemetry predicts a node failure; the job moves off the node in a short planned pause."""
    SUBHEALTHY_EVICTION = "subhealthy-eviction"
    """Periodic stress tests find sub-healthy nodes and take them out of the pool before they fail a job."""


class FailureCause(Spec):
    """One cause of job interruptions."""

    name: str = Field(min_length=1, description="label, e.g. 'gpu' or 'network-switch'")
    scope: Scope
    per_year: float = Field(ge=0, le=MAX_PER_YEAR, description="interruptions per unit-year (unit = scope)")
    kind: InterruptionKind = InterruptionKind.UNPLANNED
    memory_tier_loss: float = Field(
        0.0, ge=0, le=1,
        description="share of these interruptions that also lose the host-memory checkpoint replica "
                    "(node and its peer down together): recovery must read persistent storage",
    )


class MitigationSpec(Spec):
    """A mitigation: the share of unplanned interruptions it avoids and what it costs."""

    share_removed: float = Field(ge=0, le=1, description="share of unplanned interruptions avoided")
    pause_s: float = Field(0.0, ge=0, le=MAX_SECONDS, description="planned pause per avoided interruption (migration)")
    overhead_fraction: float = Field(0.0, ge=0, lt=1, description="steady share of wall time it costs")
    source: str = ""


class FailureSpec(Spec):
    """Interruption causes of a fleet, an optional lemon-node sub-population, and its source."""

    name: str = Field(min_length=1)
    causes: tuple[FailureCause, ...] = Field(min_length=1)
    lemon_node_fraction: float = Field(
        0.0, ge=0, lt=1, description="share of nodes that fail far more often than the rest (0 = homogeneous)"
    )
    lemon_rate_multiplier: float = Field(
        1.0, ge=1, le=MAX_RATIO, description="a lemon node's rate ÷ a healthy node's rate"
    )
    source: str = ""

    @model_validator(mode="after")
    def _unique_names(self) -> FailureSpec:
        names = [cause.name for cause in self.causes]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise FieldProblem("causes", duplicate, "cause names must be unique")
        return self
