"""Model-state memory of one GPU, vectorized: weights, gradients and optimizer state per parameter, ZeRO sharding,
ZeRO-3 buffers, low-precision weight copies and host offload (`cost.memory` adds the rest); bytes per GPU.

Mixed precision: 2 + 4 + 12 = 18 B per parameter (Megatron `theoretical_memory_usage.py` at 00caa53); ZeRO z ≥ 1,
2, 3 shards optimizer, gradients, weights over dp·cp (experts: edp). Breakdown: docs/cost-model.md#model-state."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.cost.activations import BYTES_16BIT
from llmscale.cost.derived import RankParams
from llmscale.layout.arrays import Layouts
from llmscale.specs.constants import MemoryConstants
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Optimizer, Precision, TrainSpec, Zero3Gather


@dataclass(frozen=True)
class StateBytes:
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


def state_bytes(
    model: ModelSpec, train: TrainSpec, lay: Layouts, params: RankParams, shard: Sharding, num_micro: np.ndarray,
    const: MemoryConstants,
) -> StateBytes:
    """Weights, gradients and optimizer bytes after ZeRO sharding, offload and low-precision copies."""
    grad_b = gradient_bytes_per_param(train)
    opt_b = optimizer_state_bytes_per_param(train)
    cache_b = {Precision.FP8: const.fp8_weight_cache_bytes_per_param,
               Precision.FP4: const.fp4_weight_cache_bytes_per_param}.get(train.precision, 0.0)
    ne = params.non_expert
    ex = params.expert
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
    state = StateBytes(weights, grads_params * grad_b, optimizer, gather, zeros, zeros)
    if lay.offload_optimizer.any() or lay.offload_params.any():
        state = _offloaded(lay, params, state, grads_params, num_micro, const)
    return state


def _offloaded(
    lay: Layouts, params: RankParams, state: StateBytes, grads_params: np.ndarray, num_micro: np.ndarray,
    const: MemoryConstants,
) -> StateBytes:
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
    return StateBytes(
        weights=np.where(prm, 0.0, state.weights),
        gradients=state.gradients,
        optimizer=np.where(opt, 0.0, state.optimizer),
        gather_buffer=np.maximum(state.gather_buffer, param_buffer),
        host_per_gpu=opt_host + np.where(prm, state.weights, 0.0),
        pcie_per_step=opt_pcie + param_pcie,
    )
