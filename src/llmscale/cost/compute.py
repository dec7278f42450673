"""Compute time of one micro-batch on one GPU, by op class, vectorized over layouts.

Shape legend: arrays of shape (N,), one element per layout; seconds per micro-batch per GPU.

GEMMs (attention projections, MLP, experts, router, logits) take FLOPs / (peak(precision) · η_gemm · f),
with f = d / (d + d_half) for the GEMM's narrow dimension d — the tokens of a micro-batch, the output
columns left after the tensor-parallel split, or the tokens one expert receives — so small TP shards and
thinly loaded experts run below the large-GEMM efficiency. The attention core (FlashAttention, causal, so
half the s×s work) runs at η_attn of the 16-bit peak forward and attention_backward_ratio × that time
backward (FlashAttention-2 §3.1.2: 5 GEMMs against 2). Without FlashAttention (train.flash_attention false:
Megatron-LM's CoreAttention before 2022, Korthikanti et al. 2022 §4.1) QKᵀ and AV are batched 16-bit GEMMs
over the whole s×s matrix (the mask is applied afterwards), narrow in the head dimension, and every score
passes through HBM: the fused scale-mask-softmax reads and writes it, dropout reads it and writes it and a
1-byte mask (forward); backward, dropout reads the gradient and the mask and writes a gradient, softmax reads
the gradient and its output and writes one, and the two GEMMs become four. Elementwise work (norms, residuals, rotary,
activation functions, MoE permutation) moves bytes at η_hbm of the HBM bandwidth. Backward GEMMs are two
passes (input gradient, weight gradient) of the forward's cost. Recompute adds a forward of the layers
(full) or of the attention core (selective). Efficiencies come from catalog/efficiency.yaml per GPU.

Left out: kernel launch gaps, CPU overheads, GEMM wave quantisation, the fp8 casts' own time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.cost.flops import attention_core_flops_per_layer
from llmscale.cost.params import count_params
from llmscale.layout.arrays import Layouts
from llmscale.layout.stages import StageLayers
from llmscale.specs.cluster import ClusterSpec, EfficiencySpec
from llmscale.specs.layout import Recompute
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Precision, TrainSpec


@dataclass(frozen=True)
class LayerTimes:
    """Forward time of one layer (or the output layer) for one micro-batch on one GPU."""

    gemm_s: np.ndarray
    attention_core_s: np.ndarray
    attention_core_backward_s: np.ndarray
    elementwise_s: np.ndarray
    norm_s: np.ndarray
    """The two norms (inside elementwise_s): what recompute_norm re-runs."""
    up_proj_s: np.ndarray
    """MLA's q and kv up-projections (inside gemm_s): what recompute_mla_up re-runs (0 without MLA)."""
    activation_s: np.ndarray
    """The MLP or experts' activation functions (inside elementwise_s): what recompute_moe_act re-runs."""
    dense_mlp_s: np.ndarray
    """A dense layer's MLP, GEMMs and activation (inside the above): what recompute_mlp re-runs (0 for MoE)."""

    @property
    def forward_s(self) -> np.ndarray:
        return self.gemm_s + self.attention_core_s + self.elementwise_s


@dataclass(frozen=True)
class RankCompute:
    """Compute of one pipeline rank for one micro-batch (all its layers), per GPU."""

    forward_s: np.ndarray
    backward_input_s: np.ndarray
    """Input-gradient GEMMs, attention backward, elementwise backward, and any recompute."""
    backward_weight_s: np.ndarray
    """Weight-gradient GEMMs (what zero-bubble schedules defer)."""
    attention_core_forward_s: np.ndarray
    """Forward attention core time (what context-parallel KV exchange can hide behind)."""
    recompute_s: np.ndarray
    """The recomputed forward work inside backward_input_s (full: the layers; selective: the attention core)."""

    @property
    def total_s(self) -> np.ndarray:
        return self.forward_s + self.backward_input_s + self.backward_weight_s


def gemm_fraction(eff: EfficiencySpec, precision: Precision) -> float:
    """Large-GEMM fraction of the peak of `precision` (16-bit formats share one)."""
    return {Precision.FP8: eff.gemm_fp8, Precision.FP4: eff.gemm_fp4}.get(precision, eff.gemm_bf16)


def _gemm_s(
    flops: np.ndarray, narrow_dim: np.ndarray, peak: float, eff: EfficiencySpec, precision: Precision
) -> np.ndarray:
    fraction = gemm_fraction(eff, precision) * narrow_dim / (narrow_dim + eff.gemm_half_dim)
    result: np.ndarray = flops / (peak * fraction)
    return result


def _narrow(*dims: np.ndarray | float) -> np.ndarray:
    """The narrowest of a GEMM's M, N, K (tokens, output columns per GPU, reduction size)."""
    result = np.asarray(dims[0], dtype=float)
    for dim in dims[1:]:
        result = np.minimum(result, dim)
    return result


CAST_BYTES_PER_ELEMENT = {Precision.FP8: 3.0, Precision.FP4: 2.5}
"""Quantising one 16-bit GEMM input: read 2 bytes, write 1 (FP8) or 0.5 (FP4); scales ignored."""


def _elementwise_bytes_per_token(model: ModelSpec, moe: bool, precision: Precision) -> tuple[float, float]:
    """(bytes ÷σ, bytes ÷tp) one token's forward elementwise kernels move in one layer: two norms
    (read + write 2·2h each), two residual adds (read 2·2h, write 2h each), rotary on q and k, the
    activation function (gated: read 2·2f, write 2f; else read and write 2f); an MoE layer permutes and
    un-permutes its k routed copies (read + write 2·2h each) and combines them (read 2h each). FP8/FP4
    recipes quantise every GEMM input (QKV and MLP inputs h, output-projection input n·d, fc2 input f, and
    each routed copy h) at CAST_BYTES_PER_ELEMENT."""
    h, q = model.hidden, model.heads * model.dim_per_head
    per_sigma = 8.0 * h + 12.0 * h
    if moe:
        ffn = (model.expert_ffn_hidden or 0) * model.top_k + model.shared_ffn * model.shared_experts
        per_sigma += model.top_k * (8.0 * h + 2.0 * h)
    else:
        ffn = model.ffn_hidden
    per_tp = (6.0 if model.gated_mlp else 4.0) * ffn + 4.0 * (model.heads + 2 * model.num_kv_heads) * model.dim_per_head
    cast = CAST_BYTES_PER_ELEMENT.get(precision, 0.0)
    per_sigma += cast * (2 * h + (model.top_k * h if moe else 0))
    per_tp += cast * (q + ffn)
    return per_sigma, per_tp


UNFUSED_SCORE_BYTES = {False: (4.0, 6.0), True: (9.0, 11.0)}
"""(forward, backward) bytes each 16-bit attention score moves through HBM without FlashAttention, by whether
the model has dropout: softmax read + write 2 + 2 (backward: read gradient and output, write gradient 6);
dropout read + write + 1-byte mask 5 (backward: read gradient and mask, write gradient 5)."""


def _attention_core_s(
    model: ModelSpec, train: TrainSpec, lay: Layouts, tokens: np.ndarray, eff: EfficiencySpec, peak16: float,
    hbm: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of one layer's attention core for one micro-batch on one GPU."""
    if train.flash_attention:
        flops = attention_core_flops_per_layer(model, train.seq_len, causal=True) * tokens / lay.tp
        forward: np.ndarray = flops / (peak16 * eff.attention)
        return forward, forward * eff.attention_backward_ratio
    flops = attention_core_flops_per_layer(model, train.seq_len, causal=False) * tokens / lay.tp
    gemm = _gemm_s(flops, _narrow(tokens, float(model.dim_per_head)), peak16, eff, Precision.BF16)
    scores = model.heads / lay.tp * tokens * train.seq_len
    fwd_bytes, bwd_bytes = UNFUSED_SCORE_BYTES[model.dropout]
    return gemm + scores * fwd_bytes / hbm, 2.0 * gemm + scores * bwd_bytes / hbm


def _up_proj_s(model: ModelSpec, train: TrainSpec, lay: Layouts, tokens: np.ndarray, peak: float,
               eff: EfficiencySpec) -> np.ndarray:
    """MLA's up-projections of one micro-batch: c_q (r_q) → n·(d_nope + d_rope) and c_kv (r_kv) → n·(d_nope + d_v),
    column-split over tp (DeepSeek-V2 §2.1.2); 0 for other attention."""
    if model.mla is None:
        return np.zeros(lay.size)
    a, n = model.mla, model.heads
    params = (a.q_lora_rank or model.hidden) * n * (a.qk_nope_head_dim + a.qk_rope_head_dim) + a.kv_lora_rank * n * (
        a.qk_nope_head_dim + a.v_head_dim)
    narrow = _narrow(tokens, float(a.kv_lora_rank), n * a.v_head_dim / lay.tp)
    return _gemm_s(2.0 * params * tokens / lay.tp, narrow, peak, eff, train.precision)


def _output_times(model: ModelSpec, train: TrainSpec, lay: Layouts, tokens: np.ndarray, last_kind: LayerTimes,
                  rates: tuple[float, float], eff: EfficiencySpec) -> LayerTimes:
    """The output layer (logits GEMM, fp32 softmax and cross-entropy) and the MTP modules the last stage runs
    (DeepSeek-V3 §2.2: per module a 2h→h projection, one layer of the last layer's kind and the shared head again)."""
    peak, hbm = rates
    h = model.hidden
    logits_gemm = _gemm_s(2.0 * h * model.vocab * tokens / lay.tp, _narrow(tokens, h, model.vocab / lay.tp), peak,
                          eff, train.precision)
    logits_elementwise = tokens * 3 * 4.0 * model.vocab / lay.tp / hbm  # fp32 softmax + CE: write, read, write
    mtp = model.mtp_layers
    projection = _gemm_s(2.0 * 2 * h * h * tokens / lay.tp, _narrow(tokens, h, h / lay.tp), peak, eff,
                         train.precision)
    return LayerTimes(
        (1 + mtp) * logits_gemm + mtp * (last_kind.gemm_s + projection),
        mtp * last_kind.attention_core_s,
        mtp * last_kind.attention_core_backward_s,
        (1 + mtp) * logits_elementwise + mtp * last_kind.elementwise_s,
        mtp * last_kind.norm_s, mtp * last_kind.up_proj_s, mtp * last_kind.activation_s, mtp * last_kind.dense_mlp_s,
    )


def layer_times(
    model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts
) -> tuple[LayerTimes, LayerTimes, LayerTimes]:
    """Forward times of a dense layer, an MoE layer and the output layer for one micro-batch."""
    counts, gpu = count_params(model), cluster.gpu
    eff = gpu.efficiency
    peak = gpu.peak_flops_per_s(train.precision)
    peak16 = gpu.peak_flops_per_s(Precision.BF16)
    tokens = train.seq_len / lay.cp * lay.mbs
    sigma = np.where(lay.sp, lay.tp, 1)
    hbm = gpu.memory_bandwidth_bytes_per_s * eff.hbm
    core_s, core_bwd_s = _attention_core_s(model, train, lay, tokens, eff, peak16, hbm)
    h = model.hidden
    attn_cols = (model.heads + 2 * model.num_kv_heads) * model.dim_per_head / lay.tp
    attn_s = _gemm_s(2.0 * counts.dense_layer.attention * tokens / lay.tp, _narrow(tokens, h, attn_cols), peak, eff,
                     train.precision)

    def elementwise(moe: bool) -> np.ndarray:
        per_sigma, per_tp = _elementwise_bytes_per_token(model, moe, train.precision)
        return tokens * (per_sigma / sigma + per_tp / lay.tp) / hbm

    norm_s = tokens * 8.0 * h / sigma / hbm  # two norms: read and write 2·2h bytes each
    up_proj_s = _up_proj_s(model, train, lay, tokens, peak, eff)

    def activation_s(ffn: float) -> np.ndarray:
        return tokens * (6.0 if model.gated_mlp else 4.0) * ffn / lay.tp / hbm  # read (m−1)·f, write f, 16-bit

    mlp_s = _gemm_s(2.0 * counts.dense_layer.dense_mlp * tokens / lay.tp,
                    _narrow(tokens, h, model.ffn_hidden / lay.tp), peak, eff, train.precision)
    dense_act = activation_s(model.ffn_hidden)
    dense = LayerTimes(attn_s + mlp_s, core_s, core_bwd_s, elementwise(False), norm_s, up_proj_s, dense_act,
                       mlp_s + dense_act)
    zero = np.zeros(lay.size)
    moe = LayerTimes(zero, zero, zero, zero, zero, zero, zero, zero)
    if model.is_moe:
        per_expert_tokens = tokens * model.top_k * lay.etp / lay.tp * lay.ep / model.experts
        routed_flops = 2.0 * counts.active_routed_per_moe_layer * tokens * (model.capacity_factor or 1.0) / lay.tp
        expert_dim = _narrow(per_expert_tokens, h, (model.expert_ffn_hidden or 1) / lay.etp)
        # Grouped GEMMs over many thinly loaded experts (one kernel, ragged token counts) run below a dense GEMM
        # of the same FLOPs: a separate roll-off in tokens per local expert.
        grouped = per_expert_tokens / (per_expert_tokens + eff.expert_half_tokens)
        shared_flops = 2.0 * (counts.moe_layer.shared_experts + counts.moe_layer.router) * tokens / lay.tp
        shared_dim = _narrow(tokens, h, max(model.shared_ffn * model.shared_experts, 1) / lay.tp)
        moe_gemm = (attn_s + _gemm_s(routed_flops, expert_dim, peak, eff, train.precision) / grouped
                    + _gemm_s(shared_flops, shared_dim, peak, eff, train.precision))
        moe_act = activation_s((model.expert_ffn_hidden or 0) * model.top_k + model.shared_ffn * model.shared_experts)
        moe = LayerTimes(moe_gemm, core_s, core_bwd_s, elementwise(True), norm_s, up_proj_s, moe_act, zero)
    output = _output_times(model, train, lay, tokens, moe if model.is_moe else dense, (peak, hbm), eff)
    return dense, moe, output


def rank_compute(
    lay: Layouts, layers: StageLayers, times: tuple[LayerTimes, LayerTimes, LayerTimes], eff: EfficiencySpec
) -> RankCompute:
    """One micro-batch on one pipeline rank: forward, input-gradient backward (with recompute) and
    weight-gradient backward, summed over its dense and MoE layers and, on the last rank, the output."""
    dense, moe, logits = times
    has_moe = bool(layers.moe.any())  # else every MoE term is 0 · 0: skipped, with the same sums

    def total(field: str) -> np.ndarray:
        value: np.ndarray = layers.dense * getattr(dense, field)
        if has_moe:
            value = value + layers.moe * getattr(moe, field)
        value = value + layers.last * getattr(logits, field)
        return value

    gemm, core, elementwise = total("gemm_s"), total("attention_core_s"), total("elementwise_s")
    core_backward = total("attention_core_backward_s")
    elementwise = elementwise + (layers.dense + layers.moe) * eff.layer_overhead_us * 1e-6
    forward = gemm + core + elementwise
    layers_forward = forward - layers.last * logits.forward_s
    modules = (lay.recompute_norm * total("norm_s") + lay.recompute_mla_up * total("up_proj_s")
               + lay.recompute_moe_act * (total("activation_s") - layers.dense * dense.activation_s)
               + lay.recompute_mlp * total("dense_mlp_s"))
    recompute = np.where(lay.recompute == Recompute.FULL.code, layers_forward,
                         np.where(lay.recompute == Recompute.SELECTIVE.code, core, 0.0) + modules)
    backward_input = gemm + core_backward + 2.0 * elementwise + recompute
    return RankCompute(forward, backward_input, gemm, core, recompute)
