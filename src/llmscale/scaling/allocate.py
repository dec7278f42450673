"""Which model, how many tokens, for this cluster and deadline, deduced in three steps per candidate: memory (plan's
mask), time (D = tokens/s · goodput · deadline, at the critical batch B_opt = 0.292·C^0.3271 of arXiv:2401.02954,
iterated), capability (the law's loss, ranked). The steps, the goodput and the pruned layout space with its
measured check: docs/design-notes.md#scaling-allocate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from llmscale.errors import SpecError
from llmscale.layout.space import SpaceOptions
from llmscale.reliability.estimate import JobReliability
from llmscale.scaling.laws import (
    Allocation,
    ModelScale,
    ScalingLaw,
    check_law,
    compute_optimal,
    dense_equivalent_flops,
    predict_loss,
    training_flops,
)
from llmscale.scaling.optimum import shape_optimum
from llmscale.search.plan import JobSizeResult, Objective, critical_batch_sequences, plan
from llmscale.search.targets import SearchTarget
from llmscale.specs.bounds import MAX_TOKENS
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants
from llmscale.specs.framework import Framework
from llmscale.specs.layout import Layout, Recompute, Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Precision, TrainSpec
from llmscale.units import SECONDS_PER_DAY

SEARCH_SPACE = SpaceOptions(
    mbs=(1,), zero=(1, 2), recompute=(Recompute.SELECTIVE, Recompute.FULL),
    schedules=(Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED, Schedule.ZB_V, Schedule.DUALPIPE),
)
MAX_PASSES = 4
CONVERGED = 0.10
"""Stop repeating the search once the tokens by the deadline move by less than this fraction."""
FASTEST_SLACK = 0.02
"""JobPolicy.FASTEST takes the smallest job size within 2% of the most tokens per second after goodput."""


class JobPolicy(str, Enum):
    """How many GPUs one candidate's training job gets."""

    FASTEST = "fastest"
    """The job size that trains the most tokens by the deadline, tokens/s × goodput (the smallest within 2% of the
    most)."""
    EFFICIENT = "efficient"
    """plan's choice: the largest job size within 10% of the best tokens/s × goodput per GPU; the cluster runs
    several."""


@dataclass(frozen=True)
class Request:
    """What to allocate: the cluster, the budget (days or FLOPs) and the law."""

    cluster: ClusterSpec
    law: ScalingLaw
    constants: Constants
    """The model constants every search and goodput estimate uses."""
    days: float | None = 90.0
    flops: float | None = None
    gpus: int | None = None
    """A fixed job size; None = search the job sizes."""
    unique_tokens: float | None = None
    precision: Precision = Precision.BF16
    seq_len: int = 4096
    policy: JobPolicy = JobPolicy.FASTEST
    space: SpaceOptions = SEARCH_SPACE

    def __post_init__(self) -> None:
        if (self.days is None) == (self.flops is None):
            raise SpecError("days/flops", (self.days, self.flops), "give exactly one of --days and --flops")
        for name in ("days", "flops", "unique_tokens"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise SpecError(name, value, "must be a positive finite number")
        if self.gpus is not None and not 0 < self.gpus <= self.cluster.num_gpus:
            raise SpecError("gpus", self.gpus, f"must be in 1..{self.cluster.num_gpus} (cluster {self.cluster.name!r})")


@dataclass(frozen=True)
class Outcome:
    """One candidate's best training run on the cluster and its predicted loss."""

    model: ModelSpec
    scale: ModelScale
    layout: Layout | None
    gpus_per_job: int
    concurrent_jobs: int
    global_batch: int
    """Sequences per step."""
    critical_batch: int
    """The critical batch (sequences) of the tokens actually trained."""
    tokens_per_s: float
    """Per job, while it runs (before goodput)."""
    mfu: float
    days: float
    tokens: float
    compute_flops: float
    """C = 6·N_active·D in the law's parameter convention."""
    loss: float
    compute_efficiency: float
    """Dense-equivalent compute at this loss / compute spent (capability per unit of compute)."""
    cost_usd: float | None
    energy_j: float | None
    passes: int
    problems: tuple[str, ...]
    """Constraints this candidate breaks; empty = feasible."""
    unique_tokens: float | None = None
    reliability: JobReliability | None = None
    """The job's best checkpoint policy, its intervals and goodput (resilience.layout_goodput); None if nothing fits."""

    @property
    def feasible(self) -> bool:
        return not self.problems

    @property
    def goodput(self) -> float:
        """Share of wall time that trains (0 when nothing fits)."""
        return self.reliability.goodput if self.reliability is not None else 0.0

    @property
    def epochs(self) -> float | None:
        """Passes over the unique tokens (None without a unique-token limit)."""
        return None if self.unique_tokens is None else self.tokens / self.unique_tokens


@dataclass(frozen=True)
class AllocationResult:
    request: Request
    outcomes: list[Outcome]
    """Feasible first, each group by predicted loss."""
    optimum: Allocation
    """The law's compute-optimal allocation at the best candidate's compute (or the FLOP budget)."""
    frontier: dict[str, list[Allocation]]
    """"dense" and/or "moe": the law's compute-optimal allocations across the candidates' compute range."""
    seconds: float
    shape_optimum: Allocation | None = None
    """The least-loss allocation of the recommendation's shape at its compute, counted as the candidates are
    (laws.shape_optimum; None: no feasible candidate)."""

    @property
    def best(self) -> Outcome | None:
        return self.outcomes[0] if self.outcomes and self.outcomes[0].feasible else None

    def outcome(self, name: str) -> Outcome | None:
        return next((o for o in self.outcomes if o.model.name == name), None)


def choose_job(sizes: list[JobSizeResult], policy: JobPolicy, efficient: int) -> JobSizeResult | None:
    """The job size `policy` picks among `sizes` where a layout fits (None: nothing fits); `efficient` is
    plan's own choice of GPUs per job."""
    fitting = [s for s in sizes if s.top]
    if not fitting:
        return None
    if policy is JobPolicy.EFFICIENT:
        return next((s for s in fitting if s.num_gpus == efficient), fitting[-1])
    rates = [effective_rate(s) for s in fitting]
    target = (1.0 - FASTEST_SLACK) * max(rates)
    return next(s for s, rate in zip(fitting, rates, strict=True) if rate >= target)


def job_rate(size: JobSizeResult) -> float:
    """Tokens per second of the job size's best layout while it runs."""
    best = size.top[0]
    return float(best.step.tokens_per_s_per_gpu[best.layout_index]) * size.num_gpus


def size_goodput(size: JobSizeResult) -> float:
    """Goodput of the job size's best layout under its best checkpoint policy (plan fills it in for every top
    layout with resilience.layout_goodput)."""
    reliability = size.top[0].reliability
    assert reliability is not None, "plan computes the reliability of every top layout"
    return reliability.goodput


def effective_rate(size: JobSizeResult) -> float:
    """Tokens per second of wall time: job_rate × goodput."""
    return job_rate(size) * size_goodput(size)


def search_job(model: ModelSpec, request: Request, train: TrainSpec) -> JobSizeResult | None:
    """plan's job sizes — powers of two, as its batch-divisibility rules need (a 500,000-GPU cluster's largest
    job is 262,144 GPUs; the rest can run other jobs) — or the one given, each with the layout of least effective
    time (wall time ÷ goodput); then the policy's choice."""
    result = plan(model, request.cluster, train, request.constants, gpus=request.gpus,
                  objective=Objective.EFFECTIVE_TIME, top=1,
                  target=SearchTarget(Framework.ANY, space=request.space))
    return choose_job(result.sizes, request.policy, result.gpus_per_job)


def _infeasible(model: ModelSpec, scale: ModelScale, batch: int, passes: int, why: str) -> Outcome:
    return Outcome(model=model, scale=scale, layout=None, gpus_per_job=0, concurrent_jobs=0, global_batch=batch,
                   critical_batch=batch, tokens_per_s=0.0, mfu=0.0, days=0.0, tokens=0.0, compute_flops=0.0,
                   loss=math.inf, compute_efficiency=0.0, cost_usd=None, energy_j=None, passes=passes,
                   problems=(why,))


def _tokens(request: Request, scale: ModelScale, effective_per_s: float) -> float:
    """D = F / (6·N_active) for a FLOP budget, else tokens/s × goodput × deadline."""
    if request.flops is not None:
        return request.flops / training_flops(request.law, scale, 1.0)
    assert request.days is not None
    return effective_per_s * request.days * SECONDS_PER_DAY


def evaluate(model: ModelSpec, request: Request) -> Outcome:
    """One candidate through the three steps (module docstring). Each pass sets the batch to the critical batch
    of the tokens the previous pass reached; a pass counts only if its batch stays at or under the critical batch
    of the tokens it reaches itself, and the one reaching the most tokens is kept."""
    scale = ModelScale.of(model)
    why = check_law(request.law, scale)
    if why is not None:
        raise SpecError("law", request.law.value, why)
    budget_tokens = _tokens(request, scale, 0.0) if request.flops else 20.0 * scale.active_params
    if budget_tokens < request.seq_len:  # a FLOP budget of less than one sequence through this model trains nothing
        return _infeasible(model, scale, 0, 0, f"the budget of {request.flops:.3g} FLOPs buys less than one "
                           f"sequence ({request.seq_len} tokens) of this model")
    if budget_tokens > MAX_TOKENS:
        return _infeasible(model, scale, 0, 0, f"the budget of {request.flops:.3g} FLOPs buys more than "
                           f"{MAX_TOKENS:.0e} tokens of this model (specs.bounds.MAX_TOKENS)")
    train = TrainSpec(seq_len=request.seq_len, precision=request.precision, total_tokens=budget_tokens)
    kept: tuple[JobSizeResult, TrainSpec] | None = None
    last: tuple[JobSizeResult, TrainSpec] | None = None
    passes = 0
    while passes < MAX_PASSES:
        passes += 1
        batch = critical_batch_sequences(model, train, request.constants.search)
        train = train.model_copy(update={"global_batch": batch})
        job = search_job(model, request, train)
        if job is None:
            return _infeasible(model, scale, batch, passes, "no layout fits in memory")
        reached = train.model_copy(update={"total_tokens": _tokens(request, scale, effective_rate(job))})
        last = (job, reached)
        within = critical_batch_sequences(model, reached, request.constants.search) >= batch
        if within and (kept is None or reached.total_tokens > kept[1].total_tokens):
            kept = last
        converged = abs(reached.total_tokens / train.total_tokens - 1) < CONVERGED
        train = reached
        if within and (converged or request.flops is not None):
            break
    chosen = kept or last
    assert chosen is not None
    return _outcome(model, scale, request, chosen[0], chosen[1], passes)


def _outcome(model: ModelSpec, scale: ModelScale, request: Request, job: JobSizeResult, train: TrainSpec,
             passes: int) -> Outcome:
    best, rate = job.top[0], job_rate(job)
    i, tokens = best.layout_index, train.total_tokens
    days = request.days if request.days is not None else tokens / effective_rate(job) / SECONDS_PER_DAY
    loss = predict_loss(request.law, scale, tokens, request.unique_tokens)
    flops = training_flops(request.law, scale, tokens)
    critical = critical_batch_sequences(model, train, request.constants.search)
    problems = () if train.global_batch <= critical else (
        f"global batch {train.global_batch:,} > critical batch {critical:,} sequences",)
    gpu_s = job.num_gpus * days * SECONDS_PER_DAY
    price = request.cluster.usd_per_gpu_hour
    watts = best.energy_j / (best.days * SECONDS_PER_DAY * best.num_gpus) if best.energy_j and best.days else None
    return Outcome(
        model=model, scale=scale, layout=best.layouts.row(i), gpus_per_job=job.num_gpus,
        concurrent_jobs=max(1, request.cluster.num_gpus // job.num_gpus), global_batch=train.global_batch,
        critical_batch=critical, tokens_per_s=rate, mfu=float(best.step.mfu[i]), days=days, tokens=tokens,
        compute_flops=flops, loss=loss, compute_efficiency=dense_equivalent_flops(request.law, loss) / flops,
        cost_usd=gpu_s / 3600.0 * price if price else None, energy_j=gpu_s * watts if watts else None,
        passes=passes, problems=problems, unique_tokens=request.unique_tokens, reliability=best.reliability,
    )


def _rank_key(o: Outcome) -> tuple[bool, float]:
    return (not o.feasible, o.loss)


def frontier_budgets(low: float, high: float, points: int = 9) -> list[float]:
    """Log-spaced budgets from `low`/4 to 4·`high`."""
    a, b = math.log10(low / 4), math.log10(high * 4)
    return [10 ** (a + (b - a) * k / (points - 1)) for k in range(points)]


def allocate(models: list[ModelSpec], request: Request,
             on_model: Callable[[int, int, str], None] | None = None) -> AllocationResult:
    """Every candidate through the deduction, ranked; the law's optimum and frontier beside them."""
    if not models:
        raise SpecError("candidates", [], "need at least one model")
    start = time.perf_counter()
    outcomes = []
    for k, model in enumerate(models):
        if on_model is not None:
            on_model(k, len(models), model.name)
        outcomes.append(evaluate(model, request))
    outcomes.sort(key=_rank_key)
    kinds = {kind: moe for kind, moe in (("dense", False), ("moe", True))
             if any(o.scale.is_moe == moe for o in outcomes)}
    spent = [o.compute_flops for o in outcomes if o.feasible] or [request.flops or 1e24]
    budget = request.flops or (outcomes[0].compute_flops if outcomes[0].feasible else spent[0])
    budgets = frontier_budgets(min(spent), max(spent))
    frontier = {kind: [compute_optimal(request.law, c, moe) for c in budgets] for kind, moe in kinds.items()}
    optimum = compute_optimal(request.law, budget, "moe" in kinds)
    best = outcomes[0] if outcomes[0].feasible else None
    shaped = shape_optimum(request.law, best.scale, best.compute_flops, request.unique_tokens) if best else None
    return AllocationResult(request, outcomes, optimum, frontier, time.perf_counter() - start, shaped)


def pure_optimum(law: ScalingLaw, flops: float, moe: bool) -> dict[str, Allocation]:
    """The compute-optimal answer with no cluster: the law's dense optimum, and its MoE one when asked."""
    result = {"dense": compute_optimal(law, flops)}
    if moe:
        result["moe"] = compute_optimal(law, flops, moe=True)
    return result


def default_law(moe: bool) -> ScalingLaw:
    """Besiroglu for dense-only comparisons (its refit, arXiv:2404.10102, agrees with Hoffmann et al.'s Approaches
    1-2), Krajewski when MoE is in."""
    return ScalingLaw.KRAJEWSKI if moe else ScalingLaw.BESIROGLU
