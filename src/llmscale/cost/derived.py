"""What the cost model derives from a batch of layouts before it costs anything, once per batch (`derive`).

The micro-batch count and, per representative pipeline rank (`layout.stages.RankOf`), its layers, the parameters
resident on one GPU (non-expert ÷tp, experts ÷ep·etp) and its micro-batches in flight; shape (N,). Sharding and
its sources: docs/cost-model.md#derived."""

from __future__ import annotations

from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from functools import cached_property

import numpy as np

from llmscale.cost.activations import inflight_microbatches
from llmscale.cost.params import ParamCounts, count_params
from llmscale.layout.arrays import DistinctRows, Layouts, reads, reads_of
from llmscale.layout.stages import RankOf, StageLayers, stage_layers
from llmscale.specs.layout import Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec


@dataclass(frozen=True)
class RankParams:
    """Parameters resident on one GPU of a pipeline rank, before ZeRO sharding."""

    non_expert: np.ndarray
    expert: np.ndarray
    largest_layer: np.ndarray
    """Largest single layer on this GPU (for ZeRO-3 / offload gather buffers)."""
    outside_layers: np.ndarray
    """Of `non_expert`, the parameters outside the transformer layers: embedding, output layer, final norm (and
    the MTP modules' projections)."""


def rank_params(model: ModelSpec, counts: ParamCounts, lay: Layouts, layers: StageLayers) -> RankParams:
    """Non-expert (÷tp, norms and router replicated) and expert (÷ep·etp) parameters on one GPU."""
    dense, moe = counts.dense_layer, counts.moe_layer
    # Counts as float64: layers × parameters per layer can pass 2⁶³ for a valid model at its bounds (10⁴ layers of
    # 10⁵ experts of 3·10¹² weights), which int64 would wrap to a negative; float64 is exact below 2⁵³.
    layers = replace(layers, dense=layers.dense.astype(np.float64), moe=layers.moe.astype(np.float64),
                     first=layers.first.astype(np.float64), last=layers.last.astype(np.float64))
    sharded = layers.dense * (dense.attention + dense.dense_mlp) + layers.moe * (moe.attention + moe.shared_experts)
    replicated = layers.dense * dense.norms + layers.moe * (moe.norms + moe.router)
    # A tied output layer still needs its own copy of the embedding on a last rank that is not also the
    # first (Megatron keeps it and all-reduces its gradient with the first stage's).
    output = counts.output if counts.output else np.where(layers.first > 0, 0, model.vocab * model.hidden)
    vocab = layers.first * counts.embedding + layers.last * output
    # The last rank also holds the final norm (replicated) and the MTP modules (DeepSeek-V3 §2.2): per module
    # two norms, a 2h→h projection and one layer of the last layer's kind.
    last_kind = moe if model.is_moe else dense
    mtp = layers.last * model.mtp_layers
    non_expert = ((sharded + vocab + mtp * (2 * model.hidden**2 + last_kind.attention + last_kind.shared_experts
                                            + last_kind.dense_mlp)) / lay.tp
                  + replicated + layers.last * counts.final_norm + mtp * (last_kind.norms + last_kind.router))
    expert = (layers.moe + mtp * model.is_moe) * moe.routed_experts / (lay.ep * lay.etp)
    biggest_dense = np.where(layers.dense > 0, dense.total / lay.tp, 0.0)
    biggest_moe = np.where(
        layers.moe > 0, (moe.non_expert) / lay.tp + moe.routed_experts / (lay.ep * lay.etp), 0.0
    )
    outside = (vocab + mtp * 2 * model.hidden**2) / lay.tp + layers.last * counts.final_norm
    return RankParams(non_expert, expert, np.maximum(biggest_dense, biggest_moe), outside)



@dataclass(frozen=True)
class RankStage:
    """One representative pipeline rank (`layout.stages.RankOf`) of every layout."""

    layers: StageLayers
    params: RankParams
    held: np.ndarray
    """Stage-equivalents of micro-batch activations it holds at its peak (activations.inflight_microbatches),
    halved under DualPipe, whose two chunks share the p + 1 budget."""


RankStages = dict[RankOf, RankStage]
"""Per representative rank, its layers, parameters and in-flight micro-batches."""

@dataclass(frozen=True)
class LayoutDerived:
    """What the cost model derives from a batch of layouts before any cost, shape (N,): computed once per batch
    (`derive`) and handed to every consumer (step time, memory, checkpoint size) instead of recomputed by each."""

    num_microbatches: np.ndarray
    """Micro-batches per step and pipeline, global batch / (dp · mbs) (`Layouts.num_microbatches`)."""
    rows: DistinctRows
    """The distinct STAGE_COLUMNS rows of the batch (a search has few) and the row of every layout."""
    distinct_stages: RankStages
    """Layers, resident parameters and in-flight micro-batches of each representative pipeline rank, per distinct
    row (shape (U,)): what the step and memory models read, keyed by `rows.inverse`."""

    @cached_property
    def stages(self) -> RankStages:
        """`distinct_stages` spread to every layout, shape (N,) (computed on first use)."""
        return {which: self.rows.spread_fields(stage) for which, stage in self.distinct_stages.items()}


def derive(model: ModelSpec, train: TrainSpec, lay: Layouts) -> LayoutDerived:
    """The derived quantities of every layout (class docstring)."""
    rows, few = lay.distinct_view(*STAGE_COLUMNS)
    # dp and mbs are stage columns: the micro-batch count (an integer division, slow per layout) once per row
    num_micro = rows.spread(few.num_microbatches(train.global_batch))
    return LayoutDerived(num_micro, rows, distinct_rank_stages(model, train, few))


@reads("pp", "vpp", "schedule", "tp", "ep", "etp", "dp", "mbs")
def distinct_rank_stages(model: ModelSpec, train: TrainSpec, lay: Layouts) -> RankStages:
    """RankStage of every representative rank of the layouts `lay` (e.g. one per distinct STAGE_COLUMNS row)."""
    counts = count_params(model)
    num_micro = lay.num_microbatches(train.global_batch)
    dualpipe = lay.schedule == Schedule.DUALPIPE.code
    stages: RankStages = {}
    for which in RankOf:
        layers = stage_layers(model, lay, which, train.pipeline_splits)
        if which is RankOf.BUSIEST and _same_stage(layers, stages[RankOf.SECOND].layers):
            break  # the busiest interior rank is rank 1 in every layout: nothing new to evaluate
        held = inflight_microbatches(lay, num_micro, layers.rank)
        held = np.where(dualpipe, held / 2, held)
        stages[which] = RankStage(layers, rank_params(model, counts, lay, layers), held)
    return stages


STAGE_COLUMNS = reads_of(distinct_rank_stages)
"""The key of `derive`'s distinct rows: what stage_layers, rank_params and inflight_microbatches read (dp and mbs
through the number of micro-batches)."""


def _same_stage(a: StageLayers, b: StageLayers) -> bool:
    return all(np.array_equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclass_fields(StageLayers))
