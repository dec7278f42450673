"""Monte Carlo event simulation of a whole run under a checkpoint policy, vectorized over trials (per-trial arrays
(trials,), random blocks (events, trials)): the process intervals.segment_efficiency solves in expectation, so the
two agree within noise (tests/test_goodput.py). The simulated process and its cost:
docs/design-notes.md#reliability-montecarlo.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BLOCK = 64
"""Interruptions drawn per block: a (64, trials) float32 block stays in cache."""

MAX_WORK = 5e8
"""The most Monte Carlo work (`expected_work`) a run takes without being forced: about twice the default run
(10⁴ trials of 90 days on seed-500k, ~2·10⁴ interruptions each: 2.3·10⁸, ~8 s on two CPU cores)."""
FIXED_ROW_COST = 700
"""One interruption's fixed cost in trial-rows: the loop pays ~25 µs per interruption however few the trials, and
~35 ns per trial (measured with `llmscale goodput` on two CPU cores), so 25 µs / 35 ns ≈ 700 rows."""


def expected_work(expected_interruptions: float, trials: int) -> float:
    """The loop's work in trial-rows: one iteration per interruption of the busiest trial (about the mean),
    each over `trials` elements plus its fixed cost (`FIXED_ROW_COST`)."""
    return expected_interruptions * (trials + FIXED_ROW_COST)


@dataclass(frozen=True)
class SimulationInputs:
    """One job under one policy (scalars, seconds)."""

    rate_per_s: float
    storage_share: float
    tau_s: float
    blocking_s: float
    k: int
    restart_memory_s: float
    restart_storage_s: float
    wall_s: float
    pauses: tuple[tuple[float, float], ...] = ()
    """(rate per second, pause length) of each stream of planned pauses."""
    overhead_fraction: float = 0.0


@dataclass(frozen=True)
class MonteCarloResult:
    """Per-trial goodput and interruption counts."""

    goodput: np.ndarray
    unplanned: np.ndarray
    planned: np.ndarray
    seed: int

    @property
    def interruptions(self) -> np.ndarray:
        return self.unplanned + self.planned

    @property
    def stderr(self) -> float:
        return float(np.std(self.goodput, ddof=1) / np.sqrt(self.goodput.size)) if self.goodput.size > 1 else 0.0

    def percentiles(self, values: np.ndarray) -> dict[str, float]:
        p5, p50, p95 = np.percentile(values, [5, 50, 95])
        return {"p5": float(p5), "p50": float(p50), "p95": float(p95), "mean": float(np.mean(values))}


HALF_ULP = np.float32(2.0**-25)
"""Half the spacing of numpy's float32 uniforms (k·2⁻²⁴)."""


def _gaps(rng: np.random.Generator, q: float, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A block of gaps (in segments) and storage-type flags from one uniform U each: the type is U < q and the
    tent map min(U/q, (1 − U)/(1 − q)) is again uniform and independent of it (U + 2⁻²⁵ on the low branch keeps
    it off 0, so no gap is infinite)."""
    u = rng.random((BLOCK, scale.size), dtype=np.float32)
    storage = u < np.float32(q)
    if 0.0 < q < 1.0:
        low = (u + HALF_ULP) * np.float32(1.0 / q)
        np.subtract(np.float32(1.0), u, out=u)
        u *= np.float32(1.0 / (1.0 - q))
        np.minimum(low, u, out=u)
    else:
        np.subtract(np.float32(1.0), u, out=u)
    np.log(u, out=u)
    u *= -scale.astype(np.float32)
    return u, storage


def _horizon(gap: np.ndarray, storage: np.ndarray, elapsed: np.ndarray,
             limit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Clip a block at each trial's working time: the last gap ends at the horizon and is no interruption."""
    total = elapsed + gap.sum(axis=0, dtype=np.float64)
    if np.all(total < limit):
        return gap, storage, total, np.full(limit.shape, BLOCK)
    end = elapsed + np.cumsum(gap, axis=0, dtype=np.float64)
    inside = end < limit
    available = np.clip(limit - (end - gap), 0.0, gap).astype(np.float32)
    return available, storage & inside, np.minimum(end[-1], limit), inside.sum(axis=0)


def simulate(inputs: SimulationInputs, trials: int = 10_000, seed: int = 0,
             rate_factors: np.ndarray | None = None) -> MonteCarloResult:
    """Simulate `trials` runs of `inputs.wall_s` (module docstring); `rate_factors` scales λ per trial."""
    rng = np.random.default_rng(seed)
    length = inputs.tau_s + inputs.blocking_s
    planned = np.zeros(trials)
    working = np.full(trials, inputs.wall_s)
    for rate, pause_s in inputs.pauses:
        count = rng.poisson(rate * inputs.wall_s, size=trials)
        planned += count
        working -= count * pause_s
    limit = np.maximum(working, 0.0) / length
    factors = np.ones(trials) if rate_factors is None else rate_factors
    scale = (1.0 / (inputs.rate_per_s * length) / factors) if inputs.rate_per_s > 0 else None
    done, unplanned = np.zeros(trials), np.zeros(trials)
    if scale is not None:
        done, unplanned = _run(inputs, rng, scale, limit, length)
    else:
        done = np.floor(limit)
    goodput = done * inputs.tau_s / inputs.wall_s * (1.0 - inputs.overhead_fraction)
    return MonteCarloResult(goodput=goodput, unplanned=unplanned, planned=planned, seed=seed)


def _run(inputs: SimulationInputs, rng: np.random.Generator, scale: np.ndarray, limit: np.ndarray,
         length: float) -> tuple[np.ndarray, np.ndarray]:
    """The event loop: segments completed and interruptions, per trial. In-place float32 operations on rows of
    `trials` elements (a row per interruption) keep one interruption at ~15 µs for 10⁴ trials."""
    trials = limit.size
    r_mem = np.float32(inputs.restart_memory_s / length)
    r_extra = np.float32(inputs.restart_storage_s / length) - r_mem
    rounds = inputs.k > 1 and inputs.storage_share > 0
    done, elapsed, events = np.zeros(trials), np.zeros(trials), np.zeros(trials)
    restart = np.zeros(trials, dtype=np.float32)
    pending, short = np.zeros(trials, dtype=bool), np.empty(trials, dtype=bool)
    work = np.empty((BLOCK, trials), dtype=np.float32)
    counter = _StorageCounter(trials, inputs.k)
    while np.any(elapsed < limit):
        gap, storage, elapsed, inside = _horizon(*_gaps(rng, inputs.storage_share, scale), elapsed, limit)
        events += inside
        ends = bool(np.any(inside < BLOCK))
        raw = np.empty_like(work) if ends else work
        if rounds:
            counter.start_block(storage)
        for j in range(BLOCK):
            row = work[j]
            np.subtract(gap[j], restart, out=row)
            np.less(row, 0.0, out=short)
            pending &= short
            pending |= storage[j]
            np.multiply(pending, r_extra, out=restart)
            restart += r_mem
            if ends:
                raw[j] = row
            if rounds:
                counter.add(row, j)
        if ends:
            done += _final_segment(raw, inside, inputs.tau_s / length)
        if rounds:
            done += counter.kept
        else:
            np.floor(work, out=work)
            done += _positive(work).sum(axis=0, dtype=np.float64)
    return done + counter.since, events


def _final_segment(raw: np.ndarray, inside: np.ndarray, tau_share: float) -> np.ndarray:
    """The run ends in the middle of a segment and saves its state: credit the compute done in it (a share f of
    the segment is min(f, τ/L) / (τ/L) of a segment's work). The row that ends trial t is row inside[t]."""
    rows = np.minimum(inside, BLOCK - 1).astype(int)
    last = raw[rows, np.arange(raw.shape[1])].astype(np.float64)
    fraction = np.where((inside < BLOCK) & (last > 0), last - np.floor(last), 0.0)
    return np.minimum(fraction, tau_share) / tau_share


def _positive(values: np.ndarray) -> np.ndarray:
    """max(x, 0) in place as (x + |x|) / 2: three cheap operations instead of numpy's slower maximum."""
    magnitude = np.abs(values)
    values += magnitude
    values *= np.float32(0.5)
    return values


class _StorageCounter:
    """Segments done since the last storage checkpoint, per trial: a storage-type interruption keeps only whole
    storage periods, ⌊since / k⌋·k, and starts the count again."""

    def __init__(self, trials: int, k: int) -> None:
        self.k, self.inv_k = np.float32(k), np.float32(1.0 / k)
        self.since = np.zeros(trials, dtype=np.float32)
        self.kept = np.zeros(trials, dtype=np.float32)
        self.scratch = np.empty(trials, dtype=np.float32)
        self.hit = np.empty((BLOCK, trials), dtype=np.float32)
        self.miss = np.empty((BLOCK, trials), dtype=np.float32)

    def start_block(self, storage: np.ndarray) -> None:
        self.kept[:] = 0.0
        np.copyto(self.hit, storage)
        np.subtract(np.float32(1.0), self.hit, out=self.miss)

    def add(self, row: np.ndarray, j: int) -> None:
        np.floor(row, out=row)
        self.since += _positive(row)
        kept = np.multiply(self.since, self.inv_k, out=self.scratch)
        np.floor(kept, out=kept)
        kept *= self.k
        kept *= self.hit[j]
        self.kept += kept
        self.since *= self.miss[j]
