"""What a "3× compute" goal can mean on one cluster: useful model FLOPs per GPU-second = tokens/s per GPU · goodput ·
6·N_active, and the goal = the product of four levers' ratios (layout, FP8, goodput, batch/job size), each measured
with the one cost model against its baseline (goodput's after Kokolis et al., arXiv:2410.21680).
The levers, their baselines and what is left out: docs/design-notes.md#scaling-multiplier.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llmscale.layout.space import SpaceOptions
from llmscale.reliability.estimate import at_interval, layout_goodput
from llmscale.reliability.goodput import CheckpointPolicy, Tier
from llmscale.scaling.allocate import SEARCH_SPACE, job_rate, size_goodput
from llmscale.search.plan import JobSizeResult, Objective, critical_batch_sequences, plan, search_job_size
from llmscale.search.targets import SearchTarget
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants
from llmscale.specs.framework import Framework
from llmscale.specs.layout import Recompute, Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Precision, TrainSpec
from llmscale.units import SECONDS_PER_HOUR

TARGET = 3.0
"""The goal: three times the useful model FLOPs of the baseline ("3× compute")."""
BASELINE_CHECKPOINT_INTERVAL_S = SECONDS_PER_HOUR
"""Kokolis et al.'s (arXiv:2410.21680) setting, where hourly checkpointing is the typical practice: a checkpoint
every hour."""
SECONDS_PER_MINUTE = SECONDS_PER_HOUR / 60.0


def rule_of_thumb_space(cluster: ClusterSpec) -> SpaceOptions:
    """The usual habit: TP fills the node, plain 1F1B, full recompute, ZeRO-1, micro-batch 1."""
    return SpaceOptions(tp=(cluster.node.gpus_per_node,), vpp=(1,), mbs=(1,), zero=(1,),
                        recompute=(Recompute.FULL,), schedules=(Schedule.ONE_F_ONE_B,))


@dataclass(frozen=True)
class Factor:
    """One lever: its baseline and planned values (same unit) and their ratio."""

    name: str
    unit: str
    baseline: float
    planned: float
    baseline_means: str
    planned_means: str

    @property
    def gain(self) -> float:
        return _ratio(self.planned, self.baseline)


def _ratio(planned: float, baseline: float) -> float:
    """planned / baseline; +inf when the baseline is 0 (a job that never finishes a checkpoint interval)."""
    return planned / baseline if baseline else math.inf


@dataclass(frozen=True)
class Decomposition:
    model: str
    cluster: str
    cluster_gpus: int
    gpus_per_job: int
    largest_job: int
    global_batch: int
    factors: list[Factor]
    notes: list[str]

    @property
    def product(self) -> float:
        result = 1.0
        for factor in self.factors:
            result *= factor.gain
        return result


def _target(space: SpaceOptions | None) -> SearchTarget:
    """The 3× decomposition prices what the cost model can price (no framework bound), on `space`."""
    return SearchTarget(Framework.ANY, space=space)


def _best(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, gpus: int, space: SpaceOptions | None,
          constants: Constants) -> JobSizeResult:
    return search_job_size(model, cluster, train, gpus, Objective.THROUGHPUT, 1, constants, _target(space), {})


def _per_gpu(size: JobSizeResult) -> float:
    return job_rate(size) / size.num_gpus


def _mfu(size: JobSizeResult) -> float:
    best = size.top[0]
    return float(best.step.mfu[best.layout_index])


def hourly_sync_goodput(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, size: JobSizeResult,
                        constants: Constants) -> float:
    """Goodput of the job size's best layout checkpointing synchronously every 60 minutes of training: the
    reliability model of `plan` (resilience.layout_goodput; its checkpoint shards, step time, the cluster's failure
    profile, hot spares) with the storage tier's interval fixed (resilience.at_interval)."""
    best = size.top[0]
    row = np.array([best.layout_index])
    estimate = layout_goodput(model, cluster, train, best.layouts.take(row), best.step.step_time_s[row], constants,
                              cluster_gpus=cluster.num_gpus)
    return float(at_interval(estimate, CheckpointPolicy.SYNC, BASELINE_CHECKPOINT_INTERVAL_S)[0])


def _policy_text(size: JobSizeResult) -> str:
    """'tiered checkpoints (memory every 0.5 min, storage every 8.1 min)'."""
    reliability = size.top[0].reliability
    assert reliability is not None
    tiers = ", ".join(f"{tier.value} every {reliability.interval_s[tier] / SECONDS_PER_MINUTE:.2g} min"
                      for tier in Tier if tier in reliability.interval_s)
    return f"{reliability.policy.value} checkpoints ({tiers})"


def decompose(model: ModelSpec, cluster: ClusterSpec, tokens: float, constants: Constants,
              seq_len: int = 4096) -> Decomposition | None:
    """The four levers for `model` on `cluster` training `tokens` tokens (module docstring); None if no layout
    fits at any job size."""
    train = TrainSpec(seq_len=seq_len, total_tokens=tokens)
    train = train.model_copy(update={"global_batch": critical_batch_sequences(model, train, constants.search)})
    sized = plan(model, cluster, train, constants, objective=Objective.EFFECTIVE_TIME, top=1,
                 target=_target(SEARCH_SPACE))
    fitting = [s for s in sized.sizes if s.top]
    if not fitting or not sized.chosen.top:
        return None
    gpus, largest = sized.gpus_per_job, fitting[-1]
    rule = _best(model, cluster, train, gpus, rule_of_thumb_space(cluster), constants)
    bf16 = _best(model, cluster, train, gpus, None, constants)
    has_fp8 = cluster.gpu.supports(Precision.FP8)  # an A100 has no FP8 tensor cores: no FP8 lever (gain 1)
    fp8 = (_best(model, cluster, train.model_copy(update={"precision": Precision.FP8}), gpus, None, constants)
           if has_fp8 else bf16)
    chosen = sized.chosen
    hourly_largest = hourly_sync_goodput(model, cluster, train, largest, constants)
    # The goodput lever is the checkpoint policy at the planned job size: the job-size part of goodput belongs
    # to the batch / job-size lever's choice, and counting it here too would double-count the split into jobs.
    hourly_chosen = hourly_sync_goodput(model, cluster, train, chosen, constants)
    factors = [
        Factor("layout (MFU)", "MFU", _mfu(rule) if rule.top else float("nan"), _mfu(bf16),
               "rule-of-thumb layouts (tp = node, 1F1B, full recompute, ZeRO-1)", "searched best layout"),
        Factor("FP8", "tokens/s/GPU", _per_gpu(bf16), _per_gpu(fp8), "best BF16 layout",
               "best FP8 layout" if has_fp8 else f"none: {cluster.gpu.name} has no FP8 tensor cores"),
        Factor("goodput", "fraction", hourly_chosen, size_goodput(chosen),
               f"jobs of {gpus:,} GPUs, sync checkpoints every 60 min (Kokolis et al.)",
               f"jobs of {gpus:,} GPUs, {_policy_text(chosen)}"),
        Factor("batch / job size", "tokens/s/GPU", _per_gpu(largest), _per_gpu(chosen),
               f"one job of {largest.num_gpus:,} GPUs at the critical batch",
               f"jobs of {gpus:,} GPUs ({max(1, cluster.num_gpus // gpus):,} at once)"),
    ]
    grow, kept = largest.num_gpus / gpus, 1.0 / factors[3].gain
    worth = 2.0 / (1.0 + grow)
    notes = [
        f"Growing the batch instead, to fill {largest.num_gpus:,} GPUs at {gpus:,}-GPU efficiency, needs "
        f"{grow:,.0f}× the critical {train.global_batch:,} sequences; by McCandlish's E/E_min = 1 + B/B_crit "
        f"those tokens are worth {worth:.2f} of tokens at B_crit, {'less' if worth < kept else 'more'} than the "
        f"{kept:.2f} of per-GPU throughput the one big job keeps.",
        _goodput_note(model, cluster, train, largest, chosen, hourly_largest, constants),
    ]
    if not rule.top:
        notes.append("No rule-of-thumb layout fits in memory at this job size: the layout factor is undefined.")
    return Decomposition(model.name, cluster.name, cluster.num_gpus, gpus, largest.num_gpus, train.global_batch,
                         factors, notes)


def _goodput_note(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, largest: JobSizeResult,
                  chosen: JobSizeResult, hourly_largest: float, constants: Constants) -> str:
    """The goodput lever as checkpoint policy (at plan's job size) × job size (under hourly sync checkpoints)."""
    hourly = hourly_sync_goodput(model, cluster, train, chosen, constants)
    best = size_goodput(chosen)
    mtbf_h = [r.job_mtbf_s / SECONDS_PER_HOUR for r in (largest.top[0].reliability, chosen.top[0].reliability) if r]
    return (f"Goodput lever {_ratio(best, hourly):,.2f}× = the checkpoint policy at {chosen.num_gpus:,} GPUs "
            f"(sync every 60 min {hourly:.3f} → best {best:.3f}). Job size moves goodput too — "
            f"{_ratio(hourly, hourly_largest):,.2f}× under hourly sync checkpoints ({largest.num_gpus:,} GPUs "
            f"{hourly_largest:.3f} → {chosen.num_gpus:,} GPUs {hourly:.3f}; job MTBF {mtbf_h[0]:.2g} h → "
            f"{mtbf_h[-1]:.2g} h) — a second reason for the batch / job-size lever's smaller jobs, not multiplied "
            f"in again.")
