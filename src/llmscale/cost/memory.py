"""Memory of the most-loaded GPU for a model × cluster × training run × layouts, vectorized.

Shape legend: every array field of the results has shape (N,), one element per layout; bytes per GPU
unless the name says otherwise.

The parameters each pipeline rank's GPU holds (before ZeRO) and its micro-batches in flight come from
`cost.derived` (computed once per batch of layouts).

Bytes per parameter (mixed precision, Megatron `theoretical_memory_usage.py` at 00caa53: 18 B without,
6 + 12/DP B with the distributed optimizer): weights 2 (16-bit), gradients 4 (fp32 main_grad; 2 if
TrainSpec.fp32_grads is off), optimizer 4 (fp32 master) + 8 (Adam moments). ZeRO stage z shards the
optimizer (z ≥ 1), the gradients (z ≥ 2) and the weights (z = 3) over the data-parallel group: dp × cp
ranks for non-expert parameters, the expert-data-parallel group edp = tp·cp·dp / (ep·etp) for experts.
FP8/FP4 recipes add cached low-precision weight copies. Offload moves the optimizer (with the fp32 gradient
copy) or the weights to host memory and costs PCIe traffic every step.

Other: a runtime reservation (CUDA context, NCCL), communication buffers (TP/SP gather of one activation,
pipeline send/recv, EP dispatch/combine, ZeRO-3 unsharded weights and gradients: `_zero3_gather_bytes`), and a
fragmentation margin on the dynamic part (constants in catalog/memory.yaml with their sources).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.cost.activations import (
    BYTES_16BIT,
    LayerActivations,
    layer_activations,
    stage_activation_bytes,
)
from llmscale.cost.derived import LayoutDerived, RankParams, derive
from llmscale.cost.routing import busiest_rank_load
from llmscale.layout.arrays import Layouts
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants, MemoryConstants
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Optimizer, Precision, TrainSpec, Zero3Gather


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


@dataclass(frozen=True)
class _StateBytes:
    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    gather_buffer: np.ndarray
    host_per_gpu: np.ndarray
    pcie_per_step: np.ndarray


def gradient_bytes_per_param(train: TrainSpec) -> float:
    """fp32 main gradients (Megatron main_grad) or 16-bit ones."""
    return 4.0 if train.fp32_grads else 2.0


def optimizer_state_bytes_per_param(train: TrainSpec) -> float:
    """fp32 master weights (4) plus the optimizer's state: Adam two moments, SGD one momentum buffer, 4 B each
    (2 B in bf16: TrainSpec.bf16_moments)."""
    moment = 2.0 if train.bf16_moments else 4.0
    return (4.0 if train.fp32_master_weights else 0.0) + moment * (2 if train.optimizer is Optimizer.ADAM else 1)


def optimizer_step_traffic_bytes_per_param(train: TrainSpec) -> float:
    """HBM bytes an optimizer step moves per local parameter: read the gradient, read and write the master
    weight and the optimizer state, write the 16-bit weight (Adam with fp32 grads and master: 4 + 24 + 2 = 30)."""
    return gradient_bytes_per_param(train) + 2 * optimizer_state_bytes_per_param(train) + BYTES_16BIT


@dataclass(frozen=True)
class Sharding:
    """Per-layout fraction of non-expert (ne) and expert (ex) state kept on a GPU, by ZeRO stage; the
    same for every pipeline rank, so computed once."""

    weights_ne: np.ndarray
    weights_ex: np.ndarray
    grads_ne: np.ndarray
    grads_ex: np.ndarray
    optim_ne: np.ndarray
    optim_ex: np.ndarray

    @classmethod
    def of(cls, lay: Layouts) -> Sharding:
        ne = 1.0 / (lay.dp * lay.cp)
        ex = 1.0 / np.maximum(lay.edp, 1)
        one = np.ones(lay.size)
        return cls(
            weights_ne=np.where(lay.zero >= 3, ne, one), weights_ex=np.where(lay.zero >= 3, ex, one),
            grads_ne=np.where(lay.zero >= 2, ne, one), grads_ex=np.where(lay.zero >= 2, ex, one),
            optim_ne=np.where(lay.zero >= 1, ne, one), optim_ex=np.where(lay.zero >= 1, ex, one),
        )


def _fsdp_fp8(train: TrainSpec, lay: Layouts) -> np.ndarray:
    """ZeRO-3 layouts whose layers' weights (experts included; the layers' norms, bf16 in Megatron, are 0.002 % of
    a Llama layer and counted so too) are sharded and gathered in FP8 (TrainSpec.fp8_params): 1 B each,
    no transpose kept (Megatron-FSDP drops it after each module, NVIDIA/Megatron-LM@d95e86a25bce
    megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py `release_params_fp8_transpose_cache`; the
    model weight buffer is uint8 for FP8 parameters, param_and_grad_buffer.py `param_dtype = torch.uint8`)."""
    return (lay.zero >= 3) & (train.fp8_params and train.precision is Precision.FP8)


def _zero3_gather_bytes(model: ModelSpec, train: TrainSpec, lay: Layouts, params: RankParams,
                        const: MemoryConstants) -> np.ndarray:
    """Unsharded weights and gradients a ZeRO-3 GPU holds at once (TrainSpec.zero3_gather has the sources).
    Layer units: `zero3_prefetch_layers` layers' weights (1 B each under `_fsdp_fp8`), one
    layer's gradients (two with the fsdp_double_buffer pool) and the 16-bit parameters outside the layers.
    Module units: the largest weight matrix and its 16-bit gradient."""
    if train.zero3_gather is Zero3Gather.MODULE:
        return np.where(lay.zero >= 3, 2 * largest_matrix_params(model, lay) * BYTES_16BIT, 0.0)
    weight_b = np.where(_fsdp_fp8(train, lay), 1.0, float(BYTES_16BIT))
    grad_layers = 2 if train.fsdp_double_buffer else 1
    per_layer = const.zero3_prefetch_layers * weight_b + grad_layers * gradient_bytes_per_param(train)
    gathered = params.largest_layer * per_layer + params.outside_layers * BYTES_16BIT
    return np.where(lay.zero >= 3, gathered, 0.0)


def largest_matrix_params(model: ModelSpec, lay: Layouts) -> np.ndarray:
    """Parameters of the largest single weight matrix on a GPU: the dense MLP's fc1 (gate and up fused, as
    Megatron builds it), one expert's fc1, or the vocabulary table; the attention projections are smaller for
    the modelled architectures (fused QKV 3h² with MHA, fewer with GQA; fc1 h·(m−1)·f, 4h² or more)."""
    fc1 = model.hidden * (model.mlp_matrices - 1) * model.ffn_hidden / lay.tp
    expert_fc1 = model.hidden * (model.mlp_matrices - 1) * (model.expert_ffn_hidden or 0) / lay.etp
    return np.maximum(np.maximum(fc1, expert_fc1), model.vocab * model.hidden / lay.tp)


def _state_bytes(
    model: ModelSpec, train: TrainSpec, lay: Layouts, params: RankParams, shard: Sharding, num_micro: np.ndarray,
    const: MemoryConstants,
) -> _StateBytes:
    """Weights, gradients and optimizer bytes after ZeRO sharding, offload and low-precision copies."""
    grad_b = gradient_bytes_per_param(train)
    opt_b = optimizer_state_bytes_per_param(train)
    cache_b = {Precision.FP8: const.fp8_weight_cache_bytes_per_param,
               Precision.FP4: const.fp4_weight_cache_bytes_per_param}.get(train.precision, 0.0)
    ne, ex = params.non_expert, params.expert
    byte = np.where(_fsdp_fp8(train, lay), 1.0 / BYTES_16BIT, 1.0)  # FP8 layer weights: 1 B instead of 2
    layers_ne = ne - params.outside_layers
    weights = ((params.outside_layers + byte * layers_ne) * shard.weights_ne
               + byte * ex * shard.weights_ex) * BYTES_16BIT
    if cache_b:
        weights = weights + (ne + ex) * cache_b
    grads_params = ne * shard.grads_ne + ex * shard.grads_ex
    optimizer = (ne * shard.optim_ne + ex * shard.optim_ex) * opt_b
    gather = _zero3_gather_bytes(model, train, lay, params, const)
    zeros = np.zeros(lay.size)
    state = _StateBytes(weights, grads_params * grad_b, optimizer, gather, zeros, zeros)
    if lay.offload_optimizer.any() or lay.offload_params.any():
        state = _offloaded(lay, params, state, grads_params, num_micro, const)
    return state


def _offloaded(
    lay: Layouts, params: RankParams, state: _StateBytes, grads_params: np.ndarray, num_micro: np.ndarray,
    const: MemoryConstants,
) -> _StateBytes:
    """Optimizer offload (ZeRO-Offload, Ren et al. 2021 §4): optimizer state and an fp32 gradient copy on
    the host; per step the gradients go down and the updated 16-bit weights come back up. Parameter offload
    (ZeRO-Infinity): weights on the host, streamed in for forward and backward of every micro-batch, with a
    two-layer device buffer."""
    opt = lay.offload_optimizer
    opt_host = np.where(opt, state.optimizer + grads_params * 4.0, 0.0)
    opt_pcie = np.where(opt, state.gradients + grads_params * BYTES_16BIT, 0.0)
    prm = lay.offload_params
    per_param = params.non_expert + params.expert
    param_pcie = np.where(prm, 2 * num_micro * per_param * BYTES_16BIT, 0.0)
    param_buffer = np.where(prm, const.zero3_prefetch_layers * params.largest_layer * BYTES_16BIT, 0.0)
    return _StateBytes(
        weights=np.where(prm, 0.0, state.weights),
        gradients=state.gradients,
        optimizer=np.where(opt, 0.0, state.optimizer),
        gather_buffer=np.maximum(state.gather_buffer, param_buffer),
        host_per_gpu=opt_host + np.where(prm, state.weights, 0.0),
        pcie_per_step=opt_pcie + param_pcie,
    )


def _comm_buffer_bytes(model: ModelSpec, train: TrainSpec, lay: Layouts, acts: LayerActivations) -> np.ndarray:
    """TP/SP all-gather of one activation, pipeline send+recv, EP dispatch+combine; the ZeRO-3 gather buffer
    (which depends on the rank) is added by the caller."""
    tokens = train.seq_len / lay.cp * lay.mbs
    activation = BYTES_16BIT * tokens * model.hidden
    sp_gather = np.where(lay.tp > 1, activation, 0.0)
    p2p = np.where(lay.pp > 1, 2 * activation / np.where(lay.sp, lay.tp, 1), 0.0)
    ep_dispatch = 2 * BYTES_16BIT * acts.routed_tokens_per_gpu * model.hidden
    return sp_gather + p2p + ep_dispatch


def _logits_bytes(model: ModelSpec, train: TrainSpec, lay: Layouts) -> np.ndarray:
    """Last stage: fp32 logits for the vocab-parallel cross-entropy, 4·s·b·V/t, for one micro-batch
    (Megatron theoretical_memory_usage.py counts 4·sbh·(1 + V/h)/t). Transformer Engine's fused cross-entropy
    (TrainSpec.fused_cross_entropy) keeps only the 16-bit logits, 2·s·b·V/t: its Triton kernel writes the
    gradient into them in place and the autograd function saves that tensor (NVIDIA/TransformerEngine@1269b2e209c3
    transformer_engine/pytorch/cross_entropy.py `ctx.save_for_backward(_input.detach())`; Megatron-Core calls it for
    cross_entropy_fusion_impl 'te', NVIDIA/Megatron-LM@d95e86a25bce
    megatron/core/models/common/language_module/language_module.py `compute_language_model_loss`)."""
    tokens = train.seq_len / lay.cp * lay.mbs
    vocab_bytes = float(BYTES_16BIT) if train.fused_cross_entropy else 4.0
    return tokens * (vocab_bytes * model.vocab + 4.0 * model.hidden) / lay.tp


def _offloaded_activations(lay: Layouts, activations: np.ndarray,
                           layers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes kept on the GPU, bytes of the one offloaded layer in transit, bytes sent to the host and back per
    micro-batch) when the activations of `offload_activations` of the rank's `layers` go to host memory (Transformer
    Engine's CPU offload, which Megatron enables with --cpu-offloading-num-layers). One offloaded layer is resident
    beside the kept ones twice: the last one offloaded is freed only at the last layer's commit, and it is reloaded
    at the first commit of the backward (NVIDIA/TransformerEngine@1269b2e209c3 transformer_engine/pytorch/
    cpu_offload.py AsyncDoubleBufferGroupOffloadHandler: offload group i is freed and reloaded at layer
    layer_window_map[i], which is the model's last layer for the last group), so not while the output layer and the
    loss run. Megatron allows offload only with pp = 1 and no recompute (layout rules), so one micro-batch of each
    layer is held."""
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


def memory_breakdown(
    model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts, constants: Constants,
    derived: LayoutDerived | None = None,
) -> MemoryBreakdown:
    """Memory of the most-loaded GPU of every layout (see module docstring). `derived` hands over the batch's
    micro-batch count and per-rank layers, parameters and in-flight micro-batches (`cost.derived.derive`) when the
    caller has them."""
    const = constants.memory
    derived = derived if derived is not None else derive(model, train, lay)
    assert derived.num_microbatches.shape == (lay.size,), "derived quantities of another batch of layouts"
    tokens = (train.seq_len / lay.cp * lay.mbs).astype(float)
    acts = layer_activations(model, train, lay, busiest_rank_load(model, train, lay, tokens, constants.moe))
    num_micro = derived.num_microbatches
    shard = Sharding.of(lay)
    stages = derived.stages
    logits = _logits_bytes(model, train, lay)
    shared_buffers = _comm_buffer_bytes(model, train, lay, acts)
    best_total = np.full(lay.size, -1.0)
    fields: dict[str, np.ndarray] = {}
    for stage in stages.values():
        state = _state_bytes(model, train, lay, stage.params, shard, num_micro, const)
        dense_layers, moe_layers = _with_mtp(model, stage.layers.dense, stage.layers.moe, stage.layers.last)
        activations = stage_activation_bytes(model, acts, lay, dense_layers, moe_layers, stage.held)
        activations, in_transit, offload_traffic = _offloaded_activations(lay, activations, dense_layers + moe_layers)
        activations = activations + _graph_buffers(lay, acts, stage.held)
        head = np.where(stage.layers.last > 0, (1 + model.mtp_layers) * logits, 0.0)
        activations = activations + np.maximum(head, in_transit)
        buffers = shared_buffers + state.gather_buffer
        fragmentation = const.fragmentation_fraction * (activations + buffers)
        candidate = {
            "weights_bytes": state.weights,
            "gradients_bytes": state.gradients,
            "optimizer_bytes": state.optimizer,
            "activations_bytes": activations,
            "comm_buffer_bytes": buffers,
            "fragmentation_bytes": fragmentation,
            "host_bytes_per_node": state.host_per_gpu * cluster.node.gpus_per_node,
            "pcie_bytes_per_step": state.pcie_per_step,
            "pipeline_rank": stage.layers.rank,
            "activation_offload_bytes_per_microbatch": offload_traffic,
        }
        total = sum(candidate[k] for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes",
                                           "activations_bytes", "comm_buffer_bytes", "fragmentation_bytes"))
        better = total > best_total
        best_total = np.where(better, total, best_total)
        for key, value in candidate.items():
            fields[key] = np.where(better, value, fields[key]) if key in fields else value
    return MemoryBreakdown(
        runtime_bytes=np.full(lay.size, const.runtime_reserved_bytes),
        capacity_bytes=cluster.gpu.memory_bytes,
        pcie_s_per_step=fields["pcie_bytes_per_step"] / cluster.node.pcie_bytes_per_s,
        **fields,
    )
