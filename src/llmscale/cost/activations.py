"""Activation memory of one transformer layer and of a pipeline stage, vectorized over layouts; bytes per GPU.

Per token a layer keeps the tensors its backward needs (GPT-3: sbh·(34 + 5·a·s/h), Korthikanti et al. 2022
(arXiv:2205.05198) §4.1 Table 2); rank r of 1F1B holds min(m, p − r) micro-batches (Narayanan et al. 2021,
arXiv:2104.04473). Tensor list, sources, recompute, schedules: docs/cost-model.md#activations."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.cost.moe import expert_clamp_outside_fusion
from llmscale.cost.routing import routed_copies_per_token
from llmscale.layout.arrays import Layouts
from llmscale.specs.cluster import Fp8AttentionScaling
from llmscale.specs.layout import Recompute, Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Fp8Cache, Fp8Recipe, Precision, TrainSpec
from llmscale.units import BYTES_16BIT, BYTES_FP32

ROW_MAP_BYTES = 8
"""Bytes per token and expert of the fused permutation's row map (int64; the estimator's permute_row_id_map)."""
MXFP8_BOTH_COPIES_BYTES = 2.0 * (1.0 + 1.0 / 32.0)
"""An MXFP8 tensor kept row- and column-wise: two 1-byte copies, each with an E8M0 scale per 32 elements."""
E5M6_BYTES = 1.5
"""DeepSeek-V3's attention-output format (§3.3.3: a 12-bit E5M6 with 1×128 tile scales)."""


@dataclass(frozen=True)
class LayerActivations:
    """Activation bytes one layer keeps for one micro-batch, per GPU, by layer kind."""

    dense_bytes: np.ndarray
    """A dense layer with the layout's recompute setting (none or selective, with its module recomputes)."""
    moe_bytes: np.ndarray
    """An MoE layer with the layout's recompute setting."""
    input_bytes: np.ndarray
    """The layer input kept under full recompute."""
    routed_tokens_per_gpu: np.ndarray
    """Routed token copies per GPU per micro-batch in an MoE layer (0 for dense models)."""


@dataclass(frozen=True)
class _Widths:
    """Per-layout factors shared by the tensor list: tokens, divisors and byte sizes (arrays of shape (N,))."""

    tokens: np.ndarray
    sigma: np.ndarray
    tp: np.ndarray
    gemm_in: float
    fine_grained: bool
    keep_norm: np.ndarray
    """1 unless the norms are recomputed."""

    @classmethod
    def of(cls, train: TrainSpec, lay: Layouts) -> _Widths:
        low = train.precision in (Precision.FP8, Precision.FP4)
        return cls(
            tokens=(train.seq_len / lay.cp) * lay.mbs, sigma=np.where(lay.sp, lay.tp, 1).astype(float),
            tp=lay.tp.astype(float), gemm_in=1.0 if low else float(BYTES_16BIT),
            fine_grained=train.precision is Precision.FP8 and train.fp8_cache is Fp8Cache.FINE_GRAINED,
            keep_norm=np.where(lay.recompute_norm, 0.0, 1.0),
        )


def _fp8_attention_saves(train: TrainSpec) -> tuple[float, float]:
    """(bytes per element of Q, K, V; of O) the attention core saves for its backward: 16-bit, but FP8 Q, K, V
    under FP8 attention (per-tensor scales: 1 B; MXFP8: row- and column-wise copies with their scales), and FP8 O
    under the delayed recipe (recipe named by memory.memory_breakdown; docs/cost-model.md#fp8-attention)."""
    recipe = train.fp8_recipe
    scaling = Fp8AttentionScaling.of(recipe) if train.fp8_attention and recipe is not None else None
    if scaling is None:
        return float(BYTES_16BIT), float(BYTES_16BIT)
    if scaling is Fp8AttentionScaling.MXFP8:
        return MXFP8_BOTH_COPIES_BYTES, float(BYTES_16BIT)
    return 1.0, 1.0 if recipe is Fp8Recipe.DELAYED else float(BYTES_16BIT)


def _attention(model: ModelSpec, train: TrainSpec, lay: Layouts, w: _Widths) -> np.ndarray:
    """Bytes per token the attention block keeps (docs/cost-model.md#activations-tensors), already divided by t or σ."""
    h = model.hidden
    n = model.heads
    replicated = BYTES_16BIT * h + w.keep_norm * w.gemm_in * h  # layer input, input-norm output
    if model.mla is not None:
        a = model.mla
        d_q = d_k = model.qk_head_dim
        d_v = model.value_head_dim
        g = n
        replicated = replicated + (BYTES_16BIT + w.gemm_in) * ((a.q_lora_rank or 0) + a.kv_lora_rank)
        keep_qkv = np.where(lay.recompute_mla_up, 0.0, 1.0)
    else:
        d_q = d_k = d_v = model.dim_per_head
        g = model.num_kv_heads
        keep_qkv = np.ones(lay.size)
    if model.dropout:
        replicated = replicated + h  # attention-output dropout mask (1 byte)
    qkv_bytes, core_output = _fp8_attention_saves(train)
    qkv = keep_qkv * qkv_bytes * (n * d_q + g * d_k + g * d_v)
    output_bytes = E5M6_BYTES if w.fine_grained else core_output + (w.gemm_in if w.gemm_in < BYTES_16BIT else 0.0)
    sharded = qkv + output_bytes * n * d_v
    if train.flash_attention:
        core = BYTES_FP32 * n * np.ones(lay.size)
    else:
        probs = (BYTES_16BIT + (1 + BYTES_16BIT if model.dropout else 0)) * n * train.seq_len
        core = np.where(lay.recompute == Recompute.SELECTIVE.code, 0.0, probs)
    return replicated / w.sigma + (sharded + core) / w.tp


def _mlp(model: ModelSpec, ffn: float, divisor: np.ndarray, w: _Widths, keep_act: np.ndarray | float,
         fc1_bytes: float = BYTES_16BIT) -> np.ndarray:
    """fc1 output ((m−1)·f wide, kept for the activation's backward) and activation output (f wide, the fc2 input)
    of an MLP of inner size `ffn` split `divisor` ways, per token it processes."""
    return (fc1_bytes * (model.mlp_matrices - 1) + keep_act * w.gemm_in) * ffn / divisor


def _dense_mlp(model: ModelSpec, lay: Layouts, w: _Widths) -> np.ndarray:
    h = model.hidden
    keep = np.where(lay.recompute_mlp, 0.0, 1.0)
    replicated = BYTES_16BIT * h + keep * w.keep_norm * w.gemm_in * h + (h if model.dropout else 0)
    return replicated / w.sigma + keep * _mlp(model, model.ffn_hidden, w.tp, w, 1.0)


def _moe_mlp(model: ModelSpec, lay: Layouts, w: _Widths, routed_per_token: np.ndarray, clamped: bool) -> np.ndarray:
    """Bytes per token (of the micro-batch on this GPU) the MoE block keeps: replicated-or-SP terms, the routed
    copies this GPU's experts process (`routed_per_token` copies per token), and the shared experts. `clamped`: the
    eager clamp's concatenated copy of fc1's output, which the fused activation saves (cost.moe.GLU_CLAMP_BYTES)."""
    h = model.hidden
    e = model.experts
    shared_ffn = model.shared_ffn * model.shared_experts
    fp8_copy = w.gemm_in if (shared_ffn and w.gemm_in < BYTES_16BIT) else 0.0
    replicated = BYTES_16BIT * h + w.keep_norm * (BYTES_16BIT + fp8_copy) * h + (BYTES_FP32 + ROW_MAP_BYTES) * e
    keep_act = np.where(lay.recompute_moe_act, 0.0, 1.0)
    expert_fc1 = 1.0 if w.fine_grained else float(BYTES_16BIT)  # fine-grained: FP8 SwiGLU input, output recomputed
    expert_act = 0.0 if w.fine_grained else keep_act
    per_copy = w.gemm_in * h + _mlp(model, model.expert_ffn_hidden or 0, lay.etp, w, expert_act, expert_fc1)
    if clamped:
        per_copy = per_copy + keep_act * BYTES_16BIT * 2 * (model.expert_ffn_hidden or 0) / lay.etp
    shared = _mlp(model, shared_ffn, w.tp, w, keep_act)
    return replicated / w.sigma + routed_per_token * per_copy + shared


def layer_activations(model: ModelSpec, train: TrainSpec, lay: Layouts,
                      load: np.ndarray | float = 1.0) -> LayerActivations:
    """Per-layer activation bytes for one micro-batch (terms: docs/cost-model.md#activations-tensors), with the
    experts of the busiest EP rank holding `load` times the mean routed tokens (cost.routing; 1 = balanced)."""
    w = _Widths.of(train, lay)
    attention = _attention(model, train, lay, w)
    dense = w.tokens * (attention + _dense_mlp(model, lay, w))
    routed = np.zeros(lay.size)
    moe = np.zeros(lay.size)
    if model.is_moe:
        per_token = routed_copies_per_token(model, lay) * load
        routed = w.tokens * per_token
        clamped = expert_clamp_outside_fusion(model, train.moe_grouped_gemm_impl)
        moe = w.tokens * (attention + _moe_mlp(model, lay, w, per_token, clamped))
    full_input = BYTES_16BIT * w.tokens * model.hidden / w.sigma
    return LayerActivations(dense_bytes=dense, moe_bytes=moe, input_bytes=full_input, routed_tokens_per_gpu=routed)


def inflight_microbatches(lay: Layouts, num_micro: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Stage-equivalents of micro-batch activations held by pipeline rank `rank` at its peak, per schedule
    (docs/cost-model.md#activations-inflight)."""
    p = lay.pp
    v = lay.vpp
    one_f_one_b = np.minimum(num_micro, p - rank)
    interleaved = np.minimum(num_micro * v, 2 * (p - 1 - rank) + (v - 1) * p + 1) / v
    dualpipe = np.minimum(num_micro, p + 1)
    held = np.select(
        [lay.schedule == Schedule.INTERLEAVED.code, lay.schedule == Schedule.DUALPIPE.code],
        [interleaved, dualpipe],
        default=one_f_one_b,
    )
    return np.where(p == 1, 1, held).astype(float)


def stage_activation_bytes(
    model: ModelSpec,
    acts: LayerActivations,
    lay: Layouts,
    dense_layers: np.ndarray,
    moe_layers: np.ndarray,
    held: np.ndarray,
) -> np.ndarray:
    """Activations a pipeline rank holds at its peak: `held` micro-batches of its layers; under full
    recompute only layer inputs, plus the rest of one layer's activations while it is recomputed (the
    layer being recomputed starts from its own saved input, so that input is not counted twice)."""
    kept = dense_layers * acts.dense_bytes + moe_layers * acts.moe_bytes
    layers = dense_layers + moe_layers
    working = np.where(moe_layers > 0, acts.moe_bytes, acts.dense_bytes) - acts.input_bytes
    full = layers * acts.input_bytes * held + working
    return np.where(lay.recompute == Recompute.FULL.code, full, kept * held)
