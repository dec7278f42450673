"""Whole-space layout search: the best layouts of a model on a cluster, by objective, and the best GPUs per job on
clusters larger than one job can use. Default batch: DeepSeek LLM's B_opt = 0.292·C^0.3271 tokens, C = 6·N_active·D
(arXiv:2401.02954 §3.1, Eq. 1); job size = the largest G keeping ≥ `scaling_floor` of the best per-GPU throughput.
Job sizes, batch and floor in full: docs/design-notes.md#search-plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from llmscale.cost.derived import derive
from llmscale.cost.params import count_params
from llmscale.cost.step import StepBreakdown, estimate_step
from llmscale.errors import SpecError
from llmscale.layout.arrays import Layouts
from llmscale.layout.rules import Reason
from llmscale.layout.space import SpaceOptions, candidate_count, generate
from llmscale.reliability.estimate import JobReliability, layout_goodput, reliability_rows
from llmscale.search.results import Candidate, JobSizeResult, Objective, PlanResult
from llmscale.search.targets import SearchTarget, Supports, runnable_by
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants, SearchConstants
from llmscale.specs.framework import Framework
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec
from llmscale.units import SECONDS_PER_DAY, SECONDS_PER_HOUR


def critical_batch_sequences(model: ModelSpec, train: TrainSpec, const: SearchConstants) -> int:
    """DeepSeek LLM's B_opt(C) in sequences, rounded down to a multiple of `batch_rounding_sequences` (at least
    one multiple)."""
    compute = 6.0 * count_params(model).active * train.total_tokens
    tokens = const.batch_law_coefficient * compute ** const.batch_law_exponent
    rounding = const.batch_rounding_sequences
    return max(rounding, int(tokens / train.seq_len) // rounding * rounding)


def _score(objective: Objective, step: StepBreakdown, cluster: ClusterSpec, train: TrainSpec,
           goodput: np.ndarray | None = None, max_memory_fraction: float = 1.0) -> np.ndarray:
    """Lower is better; layouts that need more than `max_memory_fraction` of the GPU's memory score +inf."""
    seconds = train.total_tokens / (step.tokens_per_s_per_gpu * step.num_gpus)
    gpu_hours = seconds * step.num_gpus / SECONDS_PER_HOUR
    score = {
        Objective.THROUGHPUT: -step.tokens_per_s_per_gpu * step.num_gpus,
        Objective.TIME_TO_TRAIN: seconds,
        Objective.COST: gpu_hours * (cluster.usd_per_gpu_hour or 0.0),
        Objective.ENERGY: gpu_hours * _watts_per_gpu(cluster),
        Objective.EFFECTIVE_TIME: seconds / goodput if goodput is not None else seconds,
    }[objective]
    fits = step.memory.total_bytes <= max_memory_fraction * step.memory.capacity_bytes
    return np.where(fits, score, np.inf)


def _watts_per_gpu(cluster: ClusterSpec) -> float:
    """Facility watts per GPU at full load: TDP plus the node's overhead share, times PUE."""
    gpu_w = cluster.gpu.tdp_w or 0.0
    return (gpu_w + cluster.power.node_overhead_w / cluster.node.gpus_per_node) * cluster.power.pue


def _candidate(step: StepBreakdown, lay: Layouts, i: int, cluster: ClusterSpec, train: TrainSpec,
               reliability: JobReliability | None = None) -> Candidate:
    gpus = int(lay.num_gpus[i])
    seconds = float(train.total_tokens / (step.tokens_per_s_per_gpu[i] * gpus))
    gpu_hours = seconds * gpus / SECONDS_PER_HOUR
    price = cluster.usd_per_gpu_hour
    watts = _watts_per_gpu(cluster)
    return Candidate(
        layout_index=i, step=step, layouts=lay, num_gpus=gpus, days=seconds / SECONDS_PER_DAY,
        cost_usd=gpu_hours * price if price else None,
        energy_j=gpu_hours * SECONDS_PER_HOUR * watts if watts else None, reliability=reliability,
    )


CHUNK_LAYOUTS = 65536
"""Layouts scored per call: keeps numpy's temporaries in cache (≈1.5× faster than one huge call)."""


@dataclass(frozen=True)
class _Scored:
    """Every valid layout of one job size with its score and the share of GPU memory it needs."""

    layouts: Layouts
    score: np.ndarray
    memory_fraction: np.ndarray


def _score_space(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts, objective: Objective,
                 constants: Constants, target: SearchTarget, cluster_gpus: int) -> _Scored:
    """Score `lay` in chunks of CHUNK_LAYOUTS with the one cost model."""
    score, used = np.empty(lay.size), np.empty(lay.size)
    for start in range(0, lay.size, CHUNK_LAYOUTS):
        chunk = lay.take(slice(start, min(start + CHUNK_LAYOUTS, lay.size)))  # views: no copy of the columns
        derived = derive(model, train, chunk)  # once per chunk, for the step model and the goodput ranking
        step = estimate_step(model, cluster, train, chunk, constants, derived)
        goodput = None
        if objective is Objective.EFFECTIVE_TIME:  # closed-form intervals to rank; the top rows are refined below
            goodput = layout_goodput(model, cluster, train, chunk, step.step_time_s, constants, fast=True,
                                     cluster_gpus=cluster_gpus, derived=derived).goodput
        score[start:start + chunk.size] = _score(objective, step, cluster, train, goodput, target.max_memory_fraction)
        used[start:start + chunk.size] = step.memory.total_bytes / step.memory.capacity_bytes
    return _Scored(lay, score, used)


def _roomier_index(scored: _Scored, best: int, const: SearchConstants) -> int | None:
    """The best-scoring layout that needs ≥ headroom_margin less of the GPU's memory than `best` and scores within
    headroom_tolerance of it (scores are signed: a throughput score is negative)."""
    score, used = scored.score, scored.memory_fraction
    within = score <= score[best] + const.headroom_tolerance * abs(score[best])
    roomy = np.flatnonzero(within & (used <= used[best] - const.headroom_margin) & np.isfinite(score))
    return int(roomy[np.argmin(score[roomy])]) if roomy.size else None


def search_job_size(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, num_gpus: int,
                    objective: Objective, top: int, constants: Constants, target: SearchTarget | None = None,
                    supports: Supports | None = None) -> JobSizeResult:
    """Score every valid layout of `num_gpus` GPUs in chunks; keep the `top` best that fit in memory (and a roomier
    alternative), whose full breakdowns are then computed together (the same cost model, on those rows only).
    Without a target: every layout the cost model prices (Framework.ANY)."""
    supports = supports or {}
    target = target or SearchTarget(Framework.ANY)
    job_cluster = cluster.model_copy(update={"num_gpus": num_gpus}) if num_gpus != cluster.num_gpus else cluster
    space = generate(model, job_cluster, train, num_gpus, target.space_options(supports, model.is_moe))
    rejected = dict(space.rejected)
    size = space.layouts.size
    if size == 0:
        return JobSizeResult(num_gpus, space.generated, 0, 0, rejected, [])
    scored = _score_space(model, job_cluster, train, space.layouts, objective, constants, target, cluster.num_gpus)
    feasible = int(np.isfinite(scored.score).sum())
    if size - feasible:
        rejected[Reason.OUT_OF_MEMORY] = size - feasible
    order = np.argsort(scored.score, kind="stable")[:top]
    order = order[np.isfinite(scored.score[order])]
    roomier = _roomier_index(scored, int(order[0]), constants.search) if order.size else None
    ranked = order.tolist()
    extra = [roomier] if roomier is not None and roomier not in ranked else []
    scored_rows = _candidates(model, job_cluster, train, space.layouts.take(np.array(ranked + extra, dtype=np.int64)),
                              constants, cluster.num_gpus, supports, model.is_moe)
    by_index = dict(zip(ranked + extra, scored_rows, strict=True))
    best = [by_index[i] for i in ranked]
    if objective is Objective.EFFECTIVE_TIME:
        best = sorted(best, key=_effective_days)
    spare = by_index.get(roomier) if roomier is not None else None
    return JobSizeResult(num_gpus, space.generated, size, feasible, rejected, best,
                         _still_roomier(spare, best[0], objective, constants.search) if spare and best else None)


def _still_roomier(spare: Candidate, best: Candidate, objective: Objective, const: SearchConstants) -> Candidate | None:
    """`spare` while it is still the roomier alternative to `best` (the effective-time objective re-ranks the top
    rows by refined goodput, which can change which layout is best)."""
    if spare is best or spare.memory_fraction > best.memory_fraction - const.headroom_margin:
        return None
    if objective is Objective.EFFECTIVE_TIME and _effective_days(spare) > (1 + const.headroom_tolerance) * (
            _effective_days(best)):
        return None
    return spare


def _effective_days(c: Candidate) -> float:
    return c.days / c.reliability.goodput if c.reliability and c.reliability.goodput else float(np.inf)


def _candidates(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts, constants: Constants,
                cluster_gpus: int, supports: Supports, moe: bool) -> list[Candidate]:
    """Full breakdowns, goodput and runnable frameworks of a few layouts."""
    if not lay.size:
        return []
    derived = derive(model, train, lay)
    step = estimate_step(model, cluster, train, lay, constants, derived)
    rows = reliability_rows(layout_goodput(model, cluster, train, lay, step.step_time_s, constants,
                                           cluster_gpus=cluster_gpus, derived=derived))
    frameworks = runnable_by(lay, supports, moe)
    return [replace(_candidate(step, lay, i, cluster, train, rows[i]), frameworks=tuple(frameworks[i]))
            for i in range(lay.size)]


def job_sizes(model: ModelSpec, cluster: ClusterSpec, const: SearchConstants) -> list[int]:
    """Powers of two from the smallest that can hold the training state (`state_bytes_per_param` in
    `usable_memory_fraction` of each GPU, catalog/plan.yaml) to the cluster."""
    state_bytes = const.state_bytes_per_param * count_params(model).total
    usable = const.usable_memory_fraction * cluster.gpu.memory_bytes
    smallest = max(cluster.node.gpus_per_node, int(np.ceil(state_bytes / usable)))
    size = 1 << int(np.ceil(np.log2(smallest)))
    sizes = []
    while size <= cluster.num_gpus:
        sizes.append(size)
        size *= 2
    return sizes or [cluster.num_gpus]


def leftover_sizes(free_gpus: int, smallest: int) -> tuple[int, ...]:
    """Job sizes for a cluster whose free GPUs are not a power of two (after an exclusion list): the largest
    multiples of P/2 and P/4 within them, P the largest power of two that fits, so the nodes a sweep left are not
    cut back to P; none below `smallest`."""
    if free_gpus <= 0 or free_gpus & (free_gpus - 1) == 0:
        return ()
    power = 1 << (free_gpus.bit_length() - 1)
    return tuple(sorted({free_gpus // step * step for step in (power // 2, power // 4)
                         if step >= smallest and free_gpus // step * step > power}))


def check_objective(objective: Objective, cluster: ClusterSpec) -> None:
    """Cost needs a price and energy a power figure; without them the ranking would be meaningless."""
    if objective is Objective.COST and cluster.usd_per_gpu_hour is None:
        raise SpecError("objective", objective.value, f"cluster {cluster.name!r} has no usd_per_gpu_hour")
    if objective is Objective.ENERGY and _watts_per_gpu(cluster) == 0:
        raise SpecError("objective", objective.value, f"cluster {cluster.name!r} has no GPU tdp_w or node power")


def plan(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, constants: Constants,
         supports: Supports | None = None, *, gpus: int | None = None,
         objective: Objective = Objective.THROUGHPUT, top: int = 5,
         target: SearchTarget | None = None, on_size: Callable[[int, int, int], None] | None = None,
         force: bool = False, deadline_days: float | None = None, extra_sizes: tuple[int, ...] = (),
         at_size: Callable[[int, SearchTarget], tuple[TrainSpec, SearchTarget]] | None = None) -> PlanResult:
    """Search every job size (or the one given) at the run's global batch and choose the job size and the number of
    jobs. `supports` says what each framework runs (io.catalog.load_frameworks); `target` which one the plan is for
    and what the user fixed. `on_size(i, n, num_gpus)` is called before each job size is searched (progress).
    `deadline_days`: choose the job size by `deadline_job_size` instead of the objective's rule; `extra_sizes` are
    searched beside the powers of two (`leftover_sizes`). `at_size(num_gpus, target)` gives the run and target a
    job size is searched with where its release fills them by the GPU count (api.sizes.SizedJobs)."""
    check_objective(objective, cluster)
    supports = supports or {}
    target = target or SearchTarget(framework=Framework.MEGATRON_CORE if supports else Framework.ANY)
    target.check(supports, model.is_moe)
    start = time.perf_counter()
    sizes = [gpus] if gpus is not None else sorted({*job_sizes(model, cluster, constants.search), *extra_sizes})
    if not force:
        _check_work(model, cluster, train, sizes, target.space_options(supports, model.is_moe))
    results = []
    for i, size in enumerate(sizes):
        if on_size is not None:
            on_size(i, len(sizes), size)
        sized_train, sized_target = at_size(size, target) if at_size is not None else (train, target)
        results.append(search_job_size(model, cluster, sized_train, size, objective, top, constants, sized_target,
                                       supports))
    chosen = (_choose_job_size(results, objective, constants.search.scaling_floor) if deadline_days is None
              else deadline_job_size(results, deadline_days))
    return PlanResult(
        sizes=results, objective=objective, target=target, global_batch=train.global_batch,
        seconds=time.perf_counter() - start, gpus_per_job=chosen,
        concurrent_jobs=max(1, cluster.num_gpus // chosen), cluster_gpus=cluster.num_gpus,
        floor=constants.search.scaling_floor,
        framework_label=_framework_label(target, supports),
        deadline_days=deadline_days,
    )


def _framework_label(target: SearchTarget, supports: Supports) -> str:
    """`megatron-bridge@26.08 on megatron-core @ d98e8a6`, `megatron-core @ d98e8a6`, or `any`."""
    engine = supports[target.framework].label if target.framework in supports else target.framework.value
    if target.release is None or target.release.release is None:
        return engine
    return f"{target.release.release.label} on {engine}"


MAX_SEARCH_CANDIDATES = 100_000_000
"""Layout combinations one plan may build (before the rules) unless forced: ~40× the default plan's 2.3M, about two
minutes at the search's ~1M layouts/s on one core (benchmarks/search_layouts_per_s.py)."""


def _check_work(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, sizes: list[int],
                options: SpaceOptions) -> None:
    """Refuse a search whose estimated combinations pass MAX_SEARCH_CANDIDATES (layout.space.candidate_count)."""
    work = sum(candidate_count(model, cluster.model_copy(update={"num_gpus": g}), train, g, options) for g in sizes)
    if work > MAX_SEARCH_CANDIDATES:
        raise SpecError("search", f"{work:.3g} layouts", f"over {len(sizes)} job size(s) is above the limit "
                        f"{MAX_SEARCH_CANDIDATES:.0e}: fix or bound layout fields (--tp 8, --pp 4..16), give --gpus, "
                        "or pass --force")


def _choose_job_size(results: list[JobSizeResult], objective: Objective, floor: float) -> int:
    """Throughput (and effective time, whose rate is × goodput): the largest job size whose best per-GPU rate is
    ≥ `floor` × the best over sizes — the cluster runs the most tokens while each job stays efficient. Time: the
    size whose best layout trains one model soonest. Cost and energy: the cheapest (least energy) size for one
    model."""
    ranked = [r for r in results if r.top]
    if not ranked:
        return results[-1].num_gpus
    if objective in (Objective.THROUGHPUT, Objective.EFFECTIVE_TIME):
        per_gpu = {r.num_gpus: _per_gpu_rate(r.top[0], objective) for r in ranked}
        best = max(per_gpu.values())
        return max(g for g, value in per_gpu.items() if value >= floor * best)
    measure: dict[Objective, Callable[[Candidate], float]] = {
        Objective.TIME_TO_TRAIN: lambda c: c.days,
        Objective.COST: lambda c: c.cost_usd or 0.0, Objective.ENERGY: lambda c: c.energy_j or 0.0,
    }
    return min(ranked, key=lambda r: (measure[objective](r.top[0]), -r.num_gpus)).num_gpus


def deadline_job_size(results: list[JobSizeResult], deadline_days: float) -> int:
    """The cheapest job that trains by the deadline: among the job sizes whose best layout's effective days (failures
    included, `Candidate.effective_days`) are ≤ `deadline_days`, the one of fewest GPU-hours (the smaller job on a
    tie); when none makes it, the one that finishes soonest (the plan says it misses the deadline)."""
    ranked = [r for r in results if r.top]
    if not ranked:
        return results[-1].num_gpus
    in_time = [r for r in ranked if r.top[0].effective_days <= deadline_days]
    if not in_time:
        return min(ranked, key=lambda r: (r.top[0].effective_days, r.num_gpus)).num_gpus
    return min(in_time, key=lambda r: (r.top[0].effective_days * r.num_gpus, r.num_gpus)).num_gpus


def _per_gpu_rate(c: Candidate, objective: Objective) -> float:
    rate = float(c.step.tokens_per_s_per_gpu[c.layout_index])
    if objective is Objective.EFFECTIVE_TIME and c.reliability is not None:
        return rate * c.reliability.goodput
    return rate


def job_size_rule(result: PlanResult) -> str:
    """Why `result.gpus_per_job` won, in words (the rule `_choose_job_size` applied, or that the size was given)."""
    if len(result.sizes) == 1:
        return "the job size given"
    if result.deadline_days is not None:
        if result.meets_deadline:
            return (f"the job of fewest GPU-hours whose effective time, failures included, is within the "
                    f"{result.deadline_days:,.4g}-day deadline")
        return (f"no job size trains within the {result.deadline_days:,.4g}-day deadline, failures included: "
                "this one finishes soonest")
    if result.objective in (Objective.THROUGHPUT, Objective.EFFECTIVE_TIME):
        rate = "per-GPU rate × goodput" if result.objective is Objective.EFFECTIVE_TIME else "per-GPU rate"
        return (f"the largest job whose best {rate} stays ≥ {result.floor:.0%} of the best job size's: beyond it, "
                "more GPUs per job buy less than they cost, and the cluster does better running more jobs")
    what = {Objective.TIME_TO_TRAIN: "trains one model soonest", Objective.COST: "costs least for one model",
            Objective.ENERGY: "uses least energy for one model"}[result.objective]
    return f"the job size whose best layout {what}"
