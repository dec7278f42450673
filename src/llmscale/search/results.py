"""The results of the layout search (`search.plan`): the objective it ranks by, a scored layout (`Candidate`), the
best layouts of one job size and the whole search with its chosen job size."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from llmscale.cost.step import StepBreakdown
from llmscale.layout.arrays import Layouts
from llmscale.layout.rules import Reason
from llmscale.reliability.estimate import JobReliability
from llmscale.search.targets import SearchTarget
from llmscale.specs.framework import Framework


class Objective(str, Enum):
    """What the search ranks layouts by."""

    THROUGHPUT = "throughput"
    """Most tokens per second for the job."""
    TIME_TO_TRAIN = "time"
    """Least wall time to train the TrainSpec's tokens."""
    COST = "cost"
    """Least GPU-hour cost (the cluster's price per GPU-hour)."""
    ENERGY = "energy"
    """Least facility energy (GPU TDP and node overhead, times PUE)."""
    EFFECTIVE_TIME = "effective-time"
    """Least effective time-to-train: wall time ÷ goodput under failures at the best checkpoint policy (goodput.py)."""


@dataclass(frozen=True)
class Candidate:
    """One scored layout."""

    layout_index: int
    step: StepBreakdown
    layouts: Layouts
    num_gpus: int
    days: float
    cost_usd: float | None
    energy_j: float | None
    reliability: JobReliability | None = None
    """Goodput, best checkpoint policy and intervals (resilience.layout_goodput)."""
    frameworks: tuple[Framework, ...] = ()
    """The catalog frameworks whose features include this layout (search.targets.runnable_by)."""

    @property
    def gpu_hours(self) -> float:
        """GPU-hours of the training run without failures: days × 24 × GPUs."""
        return self.days * 24.0 * self.num_gpus

    @property
    def effective_days(self) -> float:
        """Days under failures (÷ goodput at the best checkpoint policy); the failure-free days when the goodput
        is unknown."""
        return self.days / self.reliability.goodput if self.reliability and self.reliability.goodput else self.days

    @property
    def memory_fraction(self) -> float:
        """Share of the GPU's memory the most-loaded GPU needs."""
        memory = self.step.memory
        return float(memory.total_bytes[self.layout_index] / memory.capacity_bytes)


@dataclass(frozen=True)
class JobSizeResult:
    """The best layouts for one job size."""

    num_gpus: int
    generated: int
    """Candidate combinations built before the rules filtered them."""
    evaluated: int
    """Valid layouts scored by the cost model."""
    feasible: int
    """Scored layouts that fit in memory."""
    rejected: dict[Reason, int]
    top: list[Candidate]
    roomier: Candidate | None = None
    """The best layout that leaves ≥ `headroom_margin` more of the GPU's memory free than top[0] while its
    objective stays within `headroom_tolerance` of it (None: no such layout, or top[0] is it)."""


@dataclass(frozen=True)
class PlanResult:
    """The search over job sizes and the chosen job size."""

    sizes: list[JobSizeResult]
    objective: Objective
    target: SearchTarget
    global_batch: int
    seconds: float
    gpus_per_job: int
    concurrent_jobs: int
    cluster_gpus: int
    floor: float = 0.9
    """The scaling floor the job size was chosen with (SearchConstants.scaling_floor)."""
    framework_label: str = ""
    """The target framework and its checked commit (`megatron-core @ d98e8a6`), or `any`."""
    deadline_days: float | None = None
    """`--deadline`: the job size is the cheapest whose best layout trains by then (None: the objective's rule)."""

    @property
    def meets_deadline(self) -> bool | None:
        """Whether the chosen job's best layout trains within the deadline, failures included (None: no deadline,
        or nothing fits)."""
        top = self.chosen.top
        if self.deadline_days is None or not top:
            return None
        return top[0].effective_days <= self.deadline_days

    @property
    def chosen(self) -> JobSizeResult:
        return next(size for size in self.sizes if size.num_gpus == self.gpus_per_job)

    @property
    def generated_layouts(self) -> int:
        return sum(size.generated for size in self.sizes)

    @property
    def evaluated_layouts(self) -> int:
        return sum(size.evaluated for size in self.sizes)

    @property
    def feasible_layouts(self) -> int:
        return sum(size.feasible for size in self.sizes)
