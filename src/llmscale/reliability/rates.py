"""Job interruption rates: causes × the job's GPUs and nodes, planned pauses, mitigations, lemon nodes. Shapes (N,),
one element per job; rates per second of wall time. Each cause is a Poisson process of rate per-unit rate × units
(a series system; Meta's MTTF = (N_nodes · r_f)⁻¹, Kokolis et al. arXiv:2410.21680, is the one-cause case).
What is left out: docs/design-notes.md#reliability-rates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants
from llmscale.specs.failures import FailureSpec, InterruptionKind, Mitigation, MitigationSpec, Scope

SECONDS_PER_YEAR = 365.0 * 86400.0
"""Catalog rates are per 365-day year (Llama 3's 54-day snapshot, arXiv:2407.21783 §3.3.4, counts as 54/365 of a
year)."""


def failures_of(cluster: ClusterSpec, default: FailureSpec) -> FailureSpec:
    """The cluster's failure profile, or `default` (specs.constants.Constants.failures) when it names none."""
    return cluster.failures if cluster.failures is not None else default


@dataclass(frozen=True)
class Pause:
    """A stream of announced pauses: no work lost, the job stops for `duration_s` (per-policy when None)."""

    name: str
    per_s: np.ndarray
    duration_s: float | None
    """None: the policy's planned restart (checkpoint, swap, restart, reload); else a fixed pause."""


@dataclass(frozen=True)
class InterruptionRates:
    """Interruption rates of jobs (per second of wall time, shape (N,))."""

    unplanned_per_s: np.ndarray
    """Failures that lose work (after mitigations)."""
    memory_miss_share: np.ndarray
    """Share of unplanned interruptions the host-memory tier cannot recover (replica lost too)."""
    pauses: tuple[Pause, ...]
    """Planned maintenance and mitigation pauses."""
    overhead_fraction: float
    """Steady share of wall time the mitigations cost."""
    by_cause_per_s: dict[str, np.ndarray]
    """Every cause's rate before mitigations (planned causes included)."""
    lemon_node_fraction: float
    lemon_rate_multiplier: float

    @property
    def job_mtbf_s(self) -> np.ndarray:
        """Mean time between unplanned interruptions, 1 / λ (series system: the causes' rates add)."""
        with np.errstate(divide="ignore"):
            return 1.0 / self.unplanned_per_s

    @property
    def paused_per_s(self) -> np.ndarray:
        return sum((p.per_s for p in self.pauses), np.zeros_like(self.unplanned_per_s))

    @property
    def total_per_s(self) -> np.ndarray:
        return self.unplanned_per_s + self.paused_per_s


def _units(scope: Scope, num_gpus: np.ndarray, num_nodes: np.ndarray) -> np.ndarray:
    return {Scope.GPU: num_gpus, Scope.NODE: num_nodes, Scope.JOB: np.ones_like(num_gpus)}[scope]


def interruption_rates(
    failures: FailureSpec, num_gpus: np.ndarray | int, gpus_per_node: int,
    mitigations: dict[Mitigation, MitigationSpec] | None = None,
) -> InterruptionRates:
    """λ_job = Σ_c r_c · units_c(G, ⌈G / gpus_per_node⌉) per cause c, then the mitigations: each removes its share
    s of unplanned interruptions ((1 − s) multiplies λ; shares compound), turning them into planned pauses of its
    `pause_s` when it has one, and costs its steady `overhead_fraction` (catalog/failures.yaml `mitigations`)."""
    gpus = np.atleast_1d(np.asarray(num_gpus, dtype=float))
    nodes = np.ceil(gpus / gpus_per_node)
    by_cause = {c.name: c.per_year * _units(c.scope, gpus, nodes) / SECONDS_PER_YEAR for c in failures.causes}
    zero = np.zeros_like(gpus)
    unplanned = [c for c in failures.causes if c.kind is InterruptionKind.UNPLANNED]
    rate = sum((by_cause[c.name] for c in unplanned), zero)
    lost = sum((by_cause[c.name] * c.memory_tier_loss for c in unplanned), zero)
    with np.errstate(invalid="ignore", divide="ignore"):
        miss = np.where(rate > 0, lost / rate, 0.0)
    planned = sum((by_cause[c.name] for c in failures.causes if c.kind is InterruptionKind.PLANNED), zero)
    pauses = [Pause("planned-maintenance", planned, None)]
    overhead = 0.0
    for which, spec in (mitigations or {}).items():
        removed = rate * spec.share_removed
        rate = rate - removed
        if spec.pause_s > 0:
            pauses.append(Pause(which.value, removed, spec.pause_s))
        overhead = 1.0 - (1.0 - overhead) * (1.0 - spec.overhead_fraction)
    return InterruptionRates(
        unplanned_per_s=rate, memory_miss_share=miss, pauses=tuple(pauses), overhead_fraction=overhead,
        by_cause_per_s=by_cause, lemon_node_fraction=failures.lemon_node_fraction,
        lemon_rate_multiplier=failures.lemon_rate_multiplier,
    )


def cluster_rates(cluster: ClusterSpec, num_gpus: np.ndarray | int, constants: Constants,
                  mitigations: tuple[Mitigation, ...] = ()) -> InterruptionRates:
    """interruption_rates for the cluster's failure profile and node size, with the chosen mitigations' shares and
    costs from `constants`."""
    return interruption_rates(failures_of(cluster, constants.failures), num_gpus, cluster.node.gpus_per_node,
                              {which: constants.mitigations[which] for which in mitigations})


def lemon_rate_factors(rates: InterruptionRates, num_nodes: int, trials: int,
                       rng: np.random.Generator) -> np.ndarray:
    """Per-trial multiplier of the unplanned rate when a share f of nodes are lemons failing m× as often.

    The catalog rate r̄ is a fleet average, so a healthy node fails at r̄ / (1 − f + f·m) and a lemon at m times
    that; a job draws K ~ Binomial(n, f) lemons and fails at r̄ · (n − K + K·m) / (n · (1 − f + f·m)), whose mean is
    r̄. Kokolis et al. (arXiv:2410.21680): 1.2 % of RSC-1's nodes were lemons. Treats every cause as node-borne
    (job-scope causes are planned and not scaled)."""
    f, m = rates.lemon_node_fraction, rates.lemon_rate_multiplier
    if f <= 0 or m <= 1:
        return np.ones(trials)
    lemons = rng.binomial(num_nodes, f, size=trials)
    return (num_nodes - lemons + lemons * m) / (num_nodes * (1.0 - f + f * m))
