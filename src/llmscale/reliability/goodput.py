"""Expected goodput (ETTR) of each checkpoint policy, its best intervals per tier, and the time it costs. Shapes (N,),
one element per job; grids add trailing axes. Goodput = two-tier efficiency (intervals.py) × (1 − Σ_p λ_p D_p) ×
(1 − overhead): Meta's ETTR (Kokolis et al. arXiv:2410.21680), Llama 3's effective training time
(arXiv:2407.21783 §3.3.4). Policies and the interval search: docs/design-notes.md#reliability-goodput.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from llmscale.reliability.checkpoint import CheckpointCost, RestartCost
from llmscale.reliability.intervals import daly_interval_s, segment_efficiency, young_interval_s
from llmscale.reliability.rates import InterruptionRates
from llmscale.units import SECONDS_PER_DAY

MAX_INTERVAL_S = 30 * SECONDS_PER_DAY
K_GRID = np.unique(np.round(np.geomspace(1, 16384, 48))).astype(float)
"""Memory checkpoints per storage checkpoint tried by the optimizer."""


class CheckpointPolicy(str, Enum):
    """How a job checkpoints."""

    SYNC = "sync"
    """One tier: training stops while the state is written to persistent storage."""
    ASYNC = "async"
    """One tier: training stops for a device→host snapshot; the host writes it to storage in the background."""
    TIERED = "tiered"
    """Snapshot to host memory replicated to a peer node every τ; every k-th also written to storage in the
    background. Most restarts read the memory tier; those that lose a node and its peer read storage."""


@dataclass(frozen=True)
class PolicyTerms:
    """The constants of one checkpoint policy for each job."""

    policy: CheckpointPolicy
    blocking_s: np.ndarray
    """Per memory checkpoint: the wait, plus the interference of its background transfer."""
    storage_extra_s: np.ndarray
    """Per storage checkpoint: interference of the background write (spread over its k segments)."""
    min_segment_s: np.ndarray
    """τ + C must cover the background transfer started by the previous checkpoint."""
    min_storage_period_s: np.ndarray
    """k (τ + C) must cover the background storage write."""
    restart_memory_s: np.ndarray
    restart_storage_s: np.ndarray
    storage_share: np.ndarray
    planned_pause_s: np.ndarray
    feasible: np.ndarray


def policy_terms(policy: CheckpointPolicy, ckpt: CheckpointCost, restart: RestartCost,
                 rates: InterruptionRates) -> PolicyTerms:
    """C, R_m, R_s, q and the constraints of each policy from the checkpoint and restart costs."""
    f = ckpt.interference
    zero = np.zeros_like(ckpt.snapshot_s)
    one = np.ones_like(zero)
    storage = restart.from_storage_s
    if policy is CheckpointPolicy.SYNC:
        return PolicyTerms(policy, ckpt.storage_write_s, zero, zero, zero, storage, storage, one,
                           ckpt.storage_write_s + restart.planned_s(from_memory=False), one > 0)
    if policy is CheckpointPolicy.ASYNC:
        return PolicyTerms(policy, ckpt.snapshot_s + f * ckpt.storage_write_s, zero, ckpt.storage_write_s, zero,
                           storage, storage, one,
                           ckpt.snapshot_s + ckpt.storage_write_s + restart.planned_s(from_memory=False), one > 0)
    return PolicyTerms(
        policy, ckpt.snapshot_s + f * ckpt.replicate_s, f * ckpt.storage_write_s, ckpt.replicate_s,
        ckpt.storage_write_s, restart.from_memory_s, storage, rates.memory_miss_share * one,
        ckpt.snapshot_s + ckpt.replicate_s + restart.planned_s(from_memory=True), ckpt.host_tier_fits.copy(),
    )


def _efficiency_grid(t: PolicyTerms, rate: np.ndarray, tau: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Efficiency on a grid: tau (N, T) × k (N, K) → (N, T, K); combinations breaking a constraint score 0."""
    col = (slice(None), None, None)
    tau3, k3 = tau[:, :, None], k[:, None, :]
    blocking = t.blocking_s[col] + t.storage_extra_s[col] / k3
    length = tau3 + blocking
    eff = segment_efficiency(rate[col], t.storage_share[col], tau3, blocking, k3, t.restart_memory_s[col],
                             t.restart_storage_s[col])
    ok = (length >= t.min_segment_s[col]) & (k3 * length >= t.min_storage_period_s[col])
    return np.where(ok, eff, 0.0)


def _argmax_grid(eff: np.ndarray, tau: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    flat = eff.reshape(eff.shape[0], -1)
    best = np.argmax(flat, axis=1)
    rows = np.arange(eff.shape[0])
    i, j = np.unravel_index(best, eff.shape[1:])
    return tau[rows, i], k[rows, j], flat[rows, best]


def optimize_intervals(t: PolicyTerms, rate: np.ndarray, floor_s: np.ndarray) -> tuple[np.ndarray, ...]:
    """The (τ, k) of highest efficiency: 64 log-spaced τ from the floor (a training step, and the background
    transfer) to min(50 M, 30 days) × the k grid, then twice a grid 16× finer around the best (τ to ~0.1 %).
    Returns (τ, k, efficiency)."""
    n = rate.shape[0]
    with np.errstate(divide="ignore"):
        mtbf = 1.0 / rate
    lo = np.maximum(np.maximum(floor_s, t.min_segment_s - t.blocking_s), 1e-3)
    hi = np.clip(50.0 * mtbf, 100.0 * lo, MAX_INTERVAL_S)
    tau = np.geomspace(lo, hi, 64, axis=-1)
    two_tier = t.policy is CheckpointPolicy.TIERED
    k = np.broadcast_to(K_GRID if two_tier else np.ones(1), (n, K_GRID.size if two_tier else 1))
    best_tau, best_k, best = _argmax_grid(_efficiency_grid(t, rate, tau, k), tau, k)
    step, k_step = (hi / lo) ** (1.0 / 63.0), 1.3
    for _ in range(2):
        tau = np.geomspace(np.maximum(best_tau / step, lo), np.minimum(best_tau * step, hi), 33, axis=-1)
        if two_tier:
            k = np.round(np.geomspace(np.maximum(best_k / k_step, 1.0), best_k * k_step, 16, axis=-1))
        best_tau, best_k, best = _argmax_grid(_efficiency_grid(t, rate, tau, k), tau, k)
        step, k_step = step ** (1.0 / 16.0), 1.0 + (k_step - 1.0) / 4.0
    return best_tau, best_k, best


def closed_form_intervals(t: PolicyTerms, rate: np.ndarray, floor_s: np.ndarray) -> tuple[np.ndarray, ...]:
    """A fast (τ, k) for ranking many layouts: Daly's τ for the memory tier (C, M), k from Young's interval for the
    storage tier (C_s, M/q) within the constraints, efficiency evaluated exactly. Returns (τ, k, efficiency)."""
    with np.errstate(divide="ignore"):
        mtbf = 1.0 / rate
        tau = np.maximum(daly_interval_s(t.blocking_s, mtbf), np.maximum(floor_s, t.min_segment_s - t.blocking_s))
        tau = np.clip(np.nan_to_num(tau, nan=MAX_INTERVAL_S), 1e-3, MAX_INTERVAL_S)
        length = tau + t.blocking_s
        storage = np.maximum(young_interval_s(t.storage_extra_s, mtbf / t.storage_share), t.min_storage_period_s)
        k = np.clip(np.ceil(np.nan_to_num(storage / length, posinf=K_GRID[-1])), 1.0, K_GRID[-1])
    if t.policy is not CheckpointPolicy.TIERED:
        k = np.ones_like(tau)
    blocking = t.blocking_s + t.storage_extra_s / k
    eff = segment_efficiency(rate, t.storage_share, tau, blocking, k, t.restart_memory_s, t.restart_storage_s)
    return tau, k, eff


class Tier(str, Enum):
    """Where a checkpoint lives."""

    MEMORY = "memory"
    """Host memory of the node, replicated to a peer node."""
    STORAGE = "storage"
    """The persistent (shared) file system."""


@dataclass(frozen=True)
class PolicyResult:
    """One policy at its best (or given) intervals, for each job."""

    terms: PolicyTerms
    goodput: np.ndarray
    interval_s: dict[Tier, np.ndarray]
    """Compute time between checkpoints of each tier the policy uses (memory τ, storage kτ)."""
    young_s: dict[Tier, np.ndarray]
    """Young's √(2CM) per tier (storage tier: C_s and M / q)."""
    daly_s: dict[Tier, np.ndarray]
    """Daly's eq. 37 per tier."""


def pause_fraction(rates: InterruptionRates, planned_pause_s: np.ndarray) -> np.ndarray:
    paused = sum((p.per_s * (planned_pause_s if p.duration_s is None else p.duration_s) for p in rates.pauses),
                 np.zeros_like(planned_pause_s))
    return np.clip(paused, 0.0, 1.0)


def evaluate_policy(t: PolicyTerms, rates: InterruptionRates, floor_s: np.ndarray, *, fast: bool = False,
                    interval_s: np.ndarray | None = None) -> PolicyResult:
    """Goodput of one policy at its best intervals (grid search, or the closed form when `fast`), or with τ fixed at
    `interval_s` (k still chosen)."""
    rate = rates.unplanned_per_s
    if interval_s is not None:
        tau = np.broadcast_to(np.asarray(interval_s, dtype=float), rate.shape)[:, None]
        ks = K_GRID if t.policy is CheckpointPolicy.TIERED else np.ones(1)
        k = np.broadcast_to(ks, (rate.size, ks.size))
        tau, k, eff = _argmax_grid(_efficiency_grid(t, rate, tau, k), tau, k)
    elif fast:
        tau, k, eff = closed_form_intervals(t, rate, floor_s)
    else:
        tau, k, eff = optimize_intervals(t, rate, floor_s)
    goodput = eff * (1.0 - pause_fraction(rates, t.planned_pause_s)) * (1.0 - rates.overhead_fraction)
    goodput = np.where(t.feasible, goodput, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mtbf = 1.0 / rate
        storage_mtbf = mtbf / t.storage_share
    two_tier = t.policy is CheckpointPolicy.TIERED
    first = Tier.MEMORY if two_tier else Tier.STORAGE
    intervals = {first: tau}
    young = {first: young_interval_s(t.blocking_s, mtbf)}
    daly = {first: daly_interval_s(t.blocking_s, mtbf)}
    if two_tier:
        intervals[Tier.STORAGE] = k * tau
        young[Tier.STORAGE] = young_interval_s(t.storage_extra_s, storage_mtbf)
        daly[Tier.STORAGE] = daly_interval_s(t.storage_extra_s, storage_mtbf)
    return PolicyResult(t, goodput, intervals, young, daly)


@dataclass(frozen=True)
class GoodputEstimate:
    """Every policy for each job, the best one, and what it means for the run."""

    rates: InterruptionRates
    ckpt: CheckpointCost
    restart: RestartCost
    policies: dict[CheckpointPolicy, PolicyResult]
    wall_s: np.ndarray
    """Wall time the expectations are taken over (the run)."""

    @property
    def best_index(self) -> np.ndarray:
        return np.argmax(np.stack([p.goodput for p in self.policies.values()]), axis=0)

    @property
    def best_policy(self) -> list[CheckpointPolicy]:
        names = list(self.policies)
        return [names[i] for i in self.best_index]

    @property
    def best(self) -> list[PolicyResult]:
        return [self.policies[p] for p in self.best_policy]

    @property
    def goodput(self) -> np.ndarray:
        return np.max(np.stack([p.goodput for p in self.policies.values()]), axis=0)

    def interval_s(self, tier: Tier) -> np.ndarray:
        """The best policy's interval for `tier` (NaN where that policy does not use the tier)."""
        return np.array([r.interval_s[tier][i] if tier in r.interval_s else np.nan for i, r in enumerate(self.best)])

    @property
    def pause_fraction(self) -> np.ndarray:
        return np.array([pause_fraction(self.rates, r.terms.planned_pause_s)[i] for i, r in enumerate(self.best)])

    @property
    def expected_unplanned(self) -> np.ndarray:
        """λ · the run's wall time outside planned pauses."""
        return self.rates.unplanned_per_s * self.wall_s * (1.0 - self.pause_fraction)

    @property
    def expected_planned(self) -> np.ndarray:
        return self.rates.paused_per_s * self.wall_s


def estimate_goodput(rates: InterruptionRates, ckpt: CheckpointCost, restart: RestartCost, wall_s: np.ndarray, *,
                     floor_s: np.ndarray | float = 1.0, fast: bool = False,
                     policies: tuple[CheckpointPolicy, ...] = tuple(CheckpointPolicy)) -> GoodputEstimate:
    """Every policy at its best intervals; `floor_s` is the shortest τ (a training step)."""
    floor = np.broadcast_to(np.asarray(floor_s, dtype=float), rates.unplanned_per_s.shape)
    results = {p: evaluate_policy(policy_terms(p, ckpt, restart, rates), rates, floor, fast=fast) for p in policies}
    return GoodputEstimate(rates, ckpt, restart, results, np.broadcast_to(np.asarray(wall_s, float), floor.shape))
