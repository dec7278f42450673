"""Memory of the most-loaded GPU for a model × cluster × training run × layouts, vectorized; bytes per GPU, (N,).

Per representative rank: model state (`cost.model_state`), activations, communication buffers, a runtime
reservation and a fragmentation margin on the dynamic part (catalog/memory.yaml), from the parameters and in-flight
micro-batches of `cost.derived`. What each holds: docs/cost-model.md#memory."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import fields as dataclass_fields

import numpy as np

from llmscale.cost.activations import (
    BYTES_16BIT,
    MXFP8_BOTH_COPIES_BYTES,
    LayerActivations,
    layer_activations,
    stage_activation_bytes,
)
from llmscale.cost.derived import STAGE_COLUMNS, LayoutDerived, RankStage, derive
from llmscale.cost.model_state import (
    Sharding,
    StateBytes,
    state_bytes,
)
from llmscale.cost.routing import busiest_rank_load
from llmscale.layout.arrays import Layouts, distinct_rows, reads, reads_of, take_fields
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants, MemoryConstants
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec


@dataclass(frozen=True)
class MemoryBreakdown:
    """Memory of the most-loaded GPU of each layout, by class (bytes per GPU, shape (N,))."""

    weights_bytes: np.ndarray
    """Model weights (16-bit) plus cached FP8/FP4 copies, as sharded on this GPU."""
    gradients_bytes: np.ndarray
    """Gradient buffers (fp32 main grads by default)."""
    optimizer_bytes: np.ndarray
    """fp32 master weights and optimizer moments kept on the GPU."""
    activations_bytes: np.ndarray
    """Activations held at the pipeline peak (and logits on the last stage)."""
    comm_buffer_bytes: np.ndarray
    """TP/SP gather, pipeline send/recv, EP dispatch/combine, ZeRO-3 gather buffers."""
    runtime_bytes: np.ndarray
    """CUDA context, NCCL and library workspaces."""
    fragmentation_bytes: np.ndarray
    """Allocator margin on the dynamic part."""
    capacity_bytes: float
    """The GPU's memory."""
    pipeline_rank: np.ndarray
    """Which pipeline rank is the most loaded."""
    host_bytes_per_node: np.ndarray
    """Host memory that offload needs on one node."""
    pcie_bytes_per_step: np.ndarray
    """Host↔device traffic per GPU per optimizer step caused by offload."""
    pcie_s_per_step: np.ndarray
    """That traffic at the node's PCIe bandwidth per GPU."""
    activation_offload_bytes_per_microbatch: np.ndarray
    """Activations of the offloaded layers sent to the host and back, per micro-batch (Layout.offload_activations);
    the step overlaps this traffic with the micro-batch's compute."""

    @property
    def other_bytes(self) -> np.ndarray:
        return self.comm_buffer_bytes + self.runtime_bytes + self.fragmentation_bytes

    @property
    def total_bytes(self) -> np.ndarray:
        return (
            self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes
            + self.other_bytes
        )

    @property
    def fits(self) -> np.ndarray:
        return self.total_bytes <= self.capacity_bytes


def _comm_buffer_bytes(model: ModelSpec, train: TrainSpec, lay: Layouts, acts: LayerActivations) -> np.ndarray:
    """TP/SP all-gather of one activation, pipeline send+recv, EP dispatch+combine; the ZeRO-3 gather buffer
    (which depends on the rank) is added by the caller."""
    tokens = train.seq_len / lay.cp * lay.mbs
    activation = BYTES_16BIT * tokens * model.hidden
    sp_gather = np.where(lay.tp > 1, activation, 0.0)
    p2p = np.where(lay.pp > 1, 2 * activation / np.where(lay.sp, lay.tp, 1), 0.0)
    ep_dispatch = 2 * BYTES_16BIT * acts.routed_tokens_per_gpu * model.hidden
    return sp_gather + p2p + ep_dispatch


def logits_bytes(model: ModelSpec, train: TrainSpec, lay: Layouts) -> np.ndarray:
    """Last stage, one micro-batch: fp32 logits for the vocab-parallel cross-entropy, 4·s·b·V/t (Megatron
    theoretical_memory_usage.py counts 4·sbh·(1 + V/h)/t), or only the 16-bit ones, 2·s·b·V/t, under Transformer
    Engine's fused cross-entropy (TrainSpec.fused_cross_entropy), which writes the gradient into them in place.
    Sources: docs/cost-model.md#memory-logits."""
    tokens = train.seq_len / lay.cp * lay.mbs
    vocab_bytes = float(BYTES_16BIT) if train.fused_cross_entropy else 4.0
    return tokens * (vocab_bytes * model.vocab + 4.0 * model.hidden) / lay.tp


def mxfp8_head_bytes(model: ModelSpec, train: TrainSpec, lay: Layouts) -> np.ndarray:
    """Last stage, what an MXFP8 output layer (TrainSpec.fp8_output_proj) adds once: its output gradient quantized
    row- and column-wise at the start of the backward, s·b·V/t elements, and the cached row- and column-wise MXFP8
    copies of its weight beside the 16-bit one, V/t·h (docs/cost-model.md#memory-logits)."""
    if not train.fp8_output_proj:
        return np.zeros(lay.size)
    tokens = train.seq_len / lay.cp * lay.mbs
    return MXFP8_BOTH_COPIES_BYTES * (tokens + model.hidden) * model.vocab / lay.tp


def _offloaded_activations(lay: Layouts, activations: np.ndarray,
                           layers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes kept on the GPU, bytes of the one offloaded layer in transit, bytes sent to the host and back per
    micro-batch) when the activations of `offload_activations` of the rank's `layers` go to host memory (Transformer
    Engine's CPU offload, Megatron --cpu-offloading-num-layers; pp = 1, so one micro-batch per layer). Why one
    offloaded layer stays resident: docs/cost-model.md#memory-offload."""
    per_layer = activations / np.maximum(layers, 1)
    offloaded = np.minimum(lay.offload_activations, layers)
    kept = activations - offloaded * per_layer
    return kept, np.where(offloaded > 0, per_layer, 0.0), 2 * offloaded * per_layer


def _graph_buffers(lay: Layouts, acts: LayerActivations, held: np.ndarray) -> np.ndarray:
    """CUDA graphs keep their static input and output buffers resident between replays: taken as one layer's
    activations per micro-batch in flight (ASSUMPTION: Megatron-Bridge's guide calls the cost "flat to moderately
    higher ... a run that barely fits in eager mode may OOM once graph buffers stay resident",
    NVIDIA-NeMo/Megatron-Bridge@067f987d docs/fern/versions/nightly/pages/training/cuda-graphs.mdx, with no
    number)."""
    return np.where(lay.cuda_graphs, held * np.maximum(acts.dense_bytes, acts.moe_bytes), 0.0)


def _with_mtp(model: ModelSpec, dense: np.ndarray, moe: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rank's layers with the multi-token-prediction modules on the last stage counted as layers of the last
    layer's kind (DeepSeek-V3 §2.2: each MTP module is one transformer block beside the shared head)."""
    extra = last * model.mtp_layers
    return (dense, moe + extra) if model.is_moe else (dense + extra, moe)




@dataclass(frozen=True)
class _RankActivations:
    """Activations of each representative rank (first axis, in the order of LayoutDerived.stages) per distinct
    (STAGE_COLUMNS, ACTIVATION_COLUMNS) row (second axis), and the buffers every rank has (one per row)."""

    activations: np.ndarray
    """Held at the rank's peak, with CUDA-graph buffers and logits, after activation offload."""
    offload_traffic: np.ndarray
    """Activation offload traffic per micro-batch."""
    rank: np.ndarray
    shared_buffers: np.ndarray
    """TP/SP gather, pipeline send/recv and EP dispatch/combine (_comm_buffer_bytes), shape (U,)."""


@reads("tp", "ep", "etp", "mbs", "pp", "cp", "sp", "recompute", "recompute_norm", "recompute_mla_up",
       "recompute_moe_act", "recompute_mlp", "offload_activations", "cuda_graphs")
def _rank_activations(model: ModelSpec, train: TrainSpec, lay: Layouts, stages: list[RankStage],
                      constants: Constants) -> _RankActivations:
    """_RankActivations of layouts `lay` whose representative ranks are `stages`."""
    tokens = (train.seq_len / lay.cp * lay.mbs).astype(float)
    acts = layer_activations(model, train, lay, busiest_rank_load(model, train, lay, tokens, constants.moe))
    logits = logits_bytes(model, train, lay)
    mxfp8_head = mxfp8_head_bytes(model, train, lay)
    held, traffic, ranks = [], [], []
    for stage in stages:
        dense_layers, moe_layers = _with_mtp(model, stage.layers.dense, stage.layers.moe, stage.layers.last)
        activations = stage_activation_bytes(model, acts, lay, dense_layers, moe_layers, stage.held)
        activations, in_transit, offload_traffic = _offloaded_activations(lay, activations, dense_layers + moe_layers)
        activations = activations + _graph_buffers(lay, acts, stage.held)
        head = np.where(stage.layers.last > 0, (1 + model.mtp_layers) * logits + mxfp8_head, 0.0)
        held.append(activations + np.maximum(head, in_transit))
        traffic.append(offload_traffic)
        ranks.append(stage.layers.rank)
    return _RankActivations(np.stack(held), np.stack(traffic), np.stack(ranks),
                            _comm_buffer_bytes(model, train, lay, acts))


@reads("tp", "ep", "etp", "dp", "mbs", "cp", "zero", "offload_optimizer", "offload_params")
def _rank_states(model: ModelSpec, train: TrainSpec, lay: Layouts, stages: list[RankStage],
                 const: MemoryConstants) -> StateBytes:
    """StateBytes of each representative rank (first axis) of layouts `lay` (second axis)."""
    shard = Sharding.of(lay)
    num_micro = lay.num_microbatches(train.global_batch)
    states = [state_bytes(model, train, lay, stage.params, shard, num_micro, const) for stage in stages]
    return StateBytes(*(np.stack([getattr(s, f.name) for s in states]) for f in dataclass_fields(StateBytes)))


@dataclass(frozen=True)
class _Tables:
    """Per-rank tables of the activation and state rows, and which row every layout has (`*_row`, shape (N,))."""

    acts: _RankActivations
    act_row: np.ndarray
    states: StateBytes
    state_row: np.ndarray

    def total(self, rank: int, shared_buffers: np.ndarray, fragmentation_fraction: float) -> np.ndarray:
        """Device bytes of representative rank `rank` of every layout (with the buffers every rank has,
        `shared_buffers`, per layout): the sum MemoryBreakdown.total_bytes makes, in the same order, before the runtime
        reservation."""
        s, a = self.states, self.acts
        held = a.activations[rank].take(self.act_row)
        state = (s.weights[rank] + s.gradients[rank] + s.optimizer[rank]).take(self.state_row)
        buffers = shared_buffers + s.gather_buffer[rank].take(self.state_row)
        total: np.ndarray = state + held + buffers + fragmentation_fraction * (held + buffers)
        return total


ACTIVATION_VIEW = reads_of(_rank_activations)
STATE_VIEW = reads_of(_rank_states)
"""The columns the activation and state formulas read (declared beside them): the views they run on."""
ACTIVATION_COLUMNS = tuple(name for name in ACTIVATION_VIEW if name not in STAGE_COLUMNS)
STATE_COLUMNS = tuple(name for name in STATE_VIEW if name not in STAGE_COLUMNS)
"""Beside the STAGE_COLUMNS row (cost.derived, which brings the rank's layers, parameters and in-flight
micro-batches): the rest of each key. ZeRO and the optimizer and parameter offload are not among the activations'."""


def _distinct_tables(model: ModelSpec, train: TrainSpec, lay: Layouts, constants: Constants,
                     derived: LayoutDerived) -> _Tables:
    """The activations and state of every representative rank, each once per distinct row of the columns it reads
    (STAGE_COLUMNS through derived.rows, with ACTIVATION_COLUMNS or STATE_COLUMNS): a search has a few times fewer
    such rows than layouts."""
    stage_row = derived.rows.inverse
    stages = list(derived.distinct_stages.values())
    act_rows = distinct_rows(stage_row, *(lay.column(name) for name in ACTIVATION_COLUMNS))
    state_rows = distinct_rows(stage_row, *(lay.column(name) for name in STATE_COLUMNS))
    act_stage, state_stage = stage_row.take(act_rows.first), stage_row.take(state_rows.first)
    acts = _rank_activations(model, train, lay.select(*ACTIVATION_VIEW).take(act_rows.first),
                             [take_fields(stage, act_stage) for stage in stages], constants)
    states = _rank_states(model, train, lay.select(*STATE_VIEW).take(state_rows.first),
                          [take_fields(stage, state_stage) for stage in stages], constants.memory)
    return _Tables(acts, act_rows.inverse, states, state_rows.inverse)


def memory_breakdown(
    model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts, constants: Constants,
    derived: LayoutDerived | None = None,
) -> MemoryBreakdown:
    """Memory of the most-loaded GPU of every layout (docs/cost-model.md#memory). `derived` hands over the batch's
    micro-batch count and per-rank layers, parameters and in-flight micro-batches (`cost.derived.derive`) when the
    caller has them."""
    const = constants.memory
    if train.fp8_attention and train.fp8_recipe is None:  # what FP8 attention saves depends on the recipe it runs
        train = train.model_copy(update={"fp8_recipe": cluster.gpu.fp8_recipe(train)})
    derived = derived if derived is not None else derive(model, train, lay)
    assert derived.num_microbatches.shape == (lay.size,), "derived quantities of another batch of layouts"
    tables = _distinct_tables(model, train, lay, constants, derived)
    # The most loaded of the representative ranks (the first of equals): its index per layout, then each field
    # gathered from the flat (rank, row) tables.
    shared_buffers = tables.acts.shared_buffers.take(tables.act_row)
    best_total, best = np.full(lay.size, -1.0), np.zeros(lay.size, dtype=np.intp)
    for rank in range(tables.acts.activations.shape[0]):
        total = tables.total(rank, shared_buffers, const.fragmentation_fraction)
        better = total > best_total
        best_total, best = np.where(better, total, best_total), np.where(better, rank, best)
    acts, states = tables.acts, tables.states
    act_at = best * acts.activations.shape[1] + tables.act_row
    state_at = best * states.weights.shape[1] + tables.state_row
    activations = acts.activations.reshape(-1).take(act_at)
    buffers = shared_buffers + states.gather_buffer.reshape(-1).take(state_at)
    pcie = states.pcie_per_step.reshape(-1).take(state_at)
    return MemoryBreakdown(
        weights_bytes=states.weights.reshape(-1).take(state_at),
        gradients_bytes=states.gradients.reshape(-1).take(state_at),
        optimizer_bytes=states.optimizer.reshape(-1).take(state_at),
        activations_bytes=activations,
        comm_buffer_bytes=buffers,
        runtime_bytes=np.full(lay.size, const.runtime_reserved_bytes),
        fragmentation_bytes=const.fragmentation_fraction * (activations + buffers),
        capacity_bytes=cluster.gpu.memory_bytes,
        pipeline_rank=acts.rank.reshape(-1).take(act_at),
        host_bytes_per_node=states.host_per_gpu.reshape(-1).take(state_at) * cluster.node.gpus_per_node,
        pcie_bytes_per_step=pcie,
        pcie_s_per_step=pcie / cluster.node.pcie_bytes_per_s,
        activation_offload_bytes_per_microbatch=acts.offload_traffic.reshape(-1).take(act_at),
    )
