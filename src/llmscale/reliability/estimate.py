"""A job's goodput from its specs — the glue between the failure model (rates.py), the checkpoint costs
(checkpoint.py), the policy optimizer (goodput.py) and the simulation (montecarlo.py).

Shape legend: job sizes, layouts and results have shape (N,).

Two entry points: `job_goodput` for job sizes with the checkpoint state spread evenly over the GPUs (what
`llmscale goodput` reports), and `layout_goodput` for layouts with their own sharding and step time (what `plan`
shows per layout). `simulate_job` runs the Monte Carlo for one job under its best (or a given) policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.cost.derived import LayoutDerived
from llmscale.cost.flops import model_flops_per_token
from llmscale.layout.arrays import Layouts
from llmscale.reliability.checkpoint import even_checkpoint_cost, layout_checkpoint_cost, restart_cost
from llmscale.reliability.goodput import (
    CheckpointPolicy,
    GoodputEstimate,
    Tier,
    estimate_goodput,
    evaluate_policy,
    policy_terms,
)
from llmscale.reliability.montecarlo import MonteCarloResult, SimulationInputs, simulate
from llmscale.reliability.rates import cluster_rates, lemon_rate_factors
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants
from llmscale.specs.failures import Mitigation
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec


def peak_step_s(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, num_gpus: np.ndarray | int) -> np.ndarray:
    """The shortest a training step can be: the step's model FLOPs (cost.flops.model_flops_per_token × tokens per
    step) over the job's dense peak at the run's precision (MFU = 1). A lower bound on any layout's step: the
    floor of a checkpoint interval when no layout is given (`llmscale goodput`)."""
    flops = model_flops_per_token(model, train.seq_len, causal=True) * train.tokens_per_step
    gpus = np.atleast_1d(np.asarray(num_gpus, dtype=float))
    result: np.ndarray = flops / (gpus * cluster.gpu.peak_flops_per_s(train.precision))
    return result


def job_goodput(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, num_gpus: np.ndarray | int,
                wall_s: np.ndarray | float, constants: Constants, *, floor_s: np.ndarray | float | None = None,
                hot_spares: bool = True, mitigations: tuple[Mitigation, ...] = ()) -> GoodputEstimate:
    """Every policy at its best intervals for jobs of `num_gpus` GPUs, the state spread evenly over them; no
    interval is shorter than `floor_s` (default: one step at peak, `peak_step_s`)."""
    gpus = np.atleast_1d(np.asarray(num_gpus, dtype=float))
    floor_s = peak_step_s(model, cluster, train, gpus) if floor_s is None else floor_s
    rates = cluster_rates(cluster, gpus, constants, mitigations)
    ckpt = even_checkpoint_cost(model, cluster, train, gpus, constants.checkpoint)
    restart = restart_cost(ckpt, constants.checkpoint, hot_spares)
    return estimate_goodput(rates, ckpt, restart, np.broadcast_to(wall_s, gpus.shape), floor_s=floor_s)


def layout_goodput(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts, step_time_s: np.ndarray,
                   constants: Constants, *, fast: bool = False, hot_spares: bool = True,
                   mitigations: tuple[Mitigation, ...] = (), cluster_gpus: int | None = None,
                   derived: LayoutDerived | None = None) -> GoodputEstimate:
    """Every policy for each layout: its own checkpoint shards, τ at least one training step, expectations over
    the layout's time to train; the job shares storage with the rest of a `cluster_gpus`-GPU cluster. `fast`
    ranks with the closed-form intervals (goodput.closed_form_intervals); `derived` hands over the batch's derived
    quantities (`cost.derived.derive`) when the caller has them."""
    rates = cluster_rates(cluster, lay.num_gpus, constants, mitigations)
    ckpt = layout_checkpoint_cost(model, cluster, train, lay, constants.checkpoint, cluster_gpus, derived)
    restart = restart_cost(ckpt, constants.checkpoint, hot_spares)
    steps = train.total_tokens / train.tokens_per_step
    return estimate_goodput(rates, ckpt, restart, steps * step_time_s, floor_s=step_time_s, fast=fast)


def at_interval(est: GoodputEstimate, policy: CheckpointPolicy, interval_s: float) -> np.ndarray:
    """Goodput of `policy` with its first tier's interval fixed (k still chosen): one point of a sweep."""
    terms = policy_terms(policy, est.ckpt, est.restart, est.rates)
    floor = np.zeros_like(est.rates.unplanned_per_s)
    return evaluate_policy(terms, est.rates, floor, interval_s=np.full(floor.shape, interval_s)).goodput


def simulation_inputs(est: GoodputEstimate, job: int, policy: CheckpointPolicy | None = None) -> SimulationInputs:
    """The scalars of job `job` under `policy` (default: its best) at the estimate's intervals."""
    chosen = est.policies[policy if policy is not None else est.best_policy[job]]
    terms = chosen.terms
    first = Tier.MEMORY if terms.policy is CheckpointPolicy.TIERED else Tier.STORAGE
    tau = float(chosen.interval_s[first][job])
    k = max(1, round(float(chosen.interval_s[Tier.STORAGE][job]) / tau)) if first is Tier.MEMORY else 1
    planned = float(terms.planned_pause_s[job])
    pauses = tuple((float(p.per_s[job]), planned if p.duration_s is None else p.duration_s) for p in est.rates.pauses)
    return SimulationInputs(
        rate_per_s=float(est.rates.unplanned_per_s[job]), storage_share=float(terms.storage_share[job]), tau_s=tau,
        blocking_s=float(terms.blocking_s[job] + terms.storage_extra_s[job] / k), k=k,
        restart_memory_s=float(terms.restart_memory_s[job]), restart_storage_s=float(terms.restart_storage_s[job]),
        wall_s=float(est.wall_s[job]), pauses=pauses, overhead_fraction=est.rates.overhead_fraction,
    )


def simulate_job(est: GoodputEstimate, job: int, num_nodes: int, *, trials: int = 10_000, seed: int = 0,
                 policy: CheckpointPolicy | None = None) -> MonteCarloResult:
    """Monte Carlo of job `job` (lemon nodes drawn per trial when the failure profile has them)."""
    factors = lemon_rate_factors(est.rates, num_nodes, trials, np.random.default_rng([seed, 1]))
    return simulate(simulation_inputs(est, job, policy), trials=trials, seed=seed, rate_factors=factors)


@dataclass(frozen=True)
class JobReliability:
    """One job's best policy, its goodput and intervals (what `plan` shows per layout)."""

    policy: CheckpointPolicy
    goodput: float
    interval_s: dict[Tier, float]
    job_mtbf_s: float
    expected_interruptions: float


def reliability_rows(est: GoodputEstimate) -> list[JobReliability]:
    """The estimate's best policy per job, as rows."""
    rows = []
    total = est.expected_unplanned + est.expected_planned
    for i, (policy, result) in enumerate(zip(est.best_policy, est.best, strict=True)):
        rows.append(JobReliability(policy, float(est.goodput[i]),
                                   {tier: float(v[i]) for tier, v in result.interval_s.items()},
                                   float(est.rates.job_mtbf_s[i]), float(total[i])))
    return rows
