"""Compute time of one micro-batch on one GPU, by op class, vectorized over layouts; seconds per micro-batch per GPU.

Linear layers are three GEMMs on the kernel model (cost/kernels.py) at their tensor-parallel shapes, the attention
core fused (or unfused 16-bit GEMMs), elementwise work bytes / (η_hbm·B), backward twice the forward; plus recompute
and a launch gap per layer and pass. Derivations and sources: docs/cost-model.md#compute."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.cost.flops import attention_core_flops_per_layer
from llmscale.cost.kernels import KernelRates, LinearTimes, attention_core_s, gemm_s, linear_s, memory_s
from llmscale.cost.moe import MoeBlock, mlp_linears, moe_block
from llmscale.cost.routing import busiest_rank_load
from llmscale.layout.arrays import Layouts, reads
from llmscale.layout.stages import StageLayers
from llmscale.specs.cluster import ClusterSpec, Fp8AttentionRatio
from llmscale.specs.constants import Constants
from llmscale.specs.layout import Recompute
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Fp8Recipe, Precision, TrainSpec
from llmscale.units import BYTES_16BIT, US


@dataclass(frozen=True)
class LayerTimes:
    """One layer (or the output layer) for one micro-batch on one GPU: forward times and the backward GEMMs."""

    gemm_s: np.ndarray
    gemm_input_grad_s: np.ndarray
    gemm_weight_grad_s: np.ndarray
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
    after_sync_s: np.ndarray
    """An MoE layer's forward GPU work after its token counts reach the host (cost.moe.MoeBlock.after_sync_s;
    0 for dense layers): what cost.host's flow shop sets against the host's launches."""
    window_gap_s: np.ndarray
    """Full minus sliding-window attention core, forward (0 without windows): attention_core_s is the layers' mean,
    and a rank with more full layers than the model's share pays this per extra one (StageLayers)."""
    window_gap_backward_s: np.ndarray

    @property
    def forward_s(self) -> np.ndarray:
        return self.gemm_s + self.attention_core_s + self.elementwise_s

    @property
    def backward_s(self) -> np.ndarray:
        """Both gradient GEMMs, the attention core's backward and the elementwise work at twice the forward's, as
        rank_compute adds them (no recompute)."""
        gemms = self.gemm_input_grad_s + self.gemm_weight_grad_s
        return gemms + self.attention_core_backward_s + 2.0 * self.elementwise_s


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
    attention_core_backward_s: np.ndarray
    recompute_s: np.ndarray
    """The recomputed forward work inside backward_input_s (full: the layers; selective: the attention core)."""

    @property
    def total_s(self) -> np.ndarray:
        return self.forward_s + self.backward_input_s + self.backward_weight_s


FP4_CAST_BYTES_PER_ELEMENT = 2.5
"""Quantising one 16-bit GEMM input to FP4: read 2 bytes, write 0.5; scales, the column-wise copy and NVFP4's
Hadamard transform are left out."""


def cast_bytes_per_element(precision: Precision, recipe: Fp8Recipe, tn_only: bool) -> float:
    """HBM bytes one quantisation of a 16-bit GEMM input moves: the source read (twice under current scaling) plus
    the FP8 copies written (a transposed one where GEMMs are TN-only; MXFP8 and blockwise write both, with their
    scales). Per recipe: docs/cost-model.md#compute-casts (Transformer Engine docs @3ceb248,
    docs/features/low_precision_training)."""
    if precision is Precision.FP4:
        return FP4_CAST_BYTES_PER_ELEMENT
    if precision is not Precision.FP8:
        return 0.0
    if recipe is Fp8Recipe.MXFP8:
        return BYTES_16BIT + 2 * (1.0 + 1.0 / 32)
    if recipe is Fp8Recipe.BLOCKWISE:
        return BYTES_16BIT + 2 * (1.0 + 4.0 / 128)
    reads = 2 if recipe is Fp8Recipe.TENSORWISE else 1
    return reads * BYTES_16BIT + (2.0 if tn_only else 1.0)


def _elementwise_bytes_per_token(model: ModelSpec, moe: bool, cast: float) -> tuple[float, float]:
    """(bytes ÷σ, bytes ÷tp) one token's forward elementwise kernels move in one layer: norms, residual adds,
    rotary, the activation function, an MoE layer's permute, unpermute and combine of its k routed copies, and
    under FP8/FP4 every GEMM input at `cast` bytes per element. Byte counts: docs/cost-model.md#compute-elementwise."""
    if not moe:
        return _layer_bytes_per_token(model, float(model.ffn_hidden), cast)
    per_sigma, per_tp = _layer_bytes_per_token(model, float(model.shared_ffn * model.shared_experts), cast)
    routed = (model.expert_ffn_hidden or 0) * model.top_k
    per_sigma += model.top_k * (8.0 * model.hidden + 2.0 * model.hidden) + cast * model.top_k * model.hidden
    return per_sigma, per_tp + ((6.0 if model.gated_mlp else 4.0) + cast) * routed


def _layer_bytes_per_token(model: ModelSpec, ffn: float, cast: float) -> tuple[float, float]:
    """`_elementwise_bytes_per_token` of a layer without routed experts whose MLP (or shared experts) is `ffn`
    wide: the part of an MoE layer outside cost.moe.MoeBlock's routed copies."""
    h = model.hidden
    q = model.heads * model.dim_per_head
    per_sigma = 8.0 * h + 12.0 * h + cast * 2 * h
    per_tp = (6.0 if model.gated_mlp else 4.0) * ffn + 4.0 * (model.heads + 2 * model.num_kv_heads) * model.dim_per_head
    if rope_unfused(model):
        per_tp += (UNFUSED_ROPE_BYTES - 4.0) * (model.heads + model.num_kv_heads) * model.dim_per_head
    return per_sigma, per_tp + cast * (q + ffn)


UNFUSED_ROPE_BYTES = 24.0
"""Forward bytes per element of q and k of Megatron-Core's unfused RoPE (rope_utils._apply_rotary_pos_emb_bshd
@2edffadb): t·cos, rotate_half's negate and cat, ·sin, the sum, the closing cat (docs/cost-model.md#compute-rope)."""


def rope_unfused(model: ModelSpec) -> bool:
    """Whether Megatron-Core runs the model's RoPE unfused: TE's fused kernel takes no YaRN attention factor, so
    apply_rotary_pos_emb falls back to PyTorch ops when it is not 1 (rope_utils.py @2edffadb); MLA applies its own."""
    scaling = model.rope_scaling
    return model.mla is None and scaling is not None and abs(scaling.attention_factor - 1.0) > 1e-9


UNFUSED_SCORE_BYTES = {False: (4.0, 6.0), True: (9.0, 11.0)}
"""(forward, backward) bytes each 16-bit attention score moves through HBM without FlashAttention, by whether
the model has dropout: softmax read + write 2 + 2 (backward: read gradient and output, write gradient 6);
dropout read + write + 1-byte mask 5 (backward: read gradient and mask, write gradient 5)."""


@dataclass(frozen=True)
class _Shapes:
    """What every per-layer formula reads: tokens per micro-batch on this GPU and the split sizes (shape (N,))."""

    tokens: np.ndarray
    tp: np.ndarray
    sigma: np.ndarray
    lay: Layouts
    rates: KernelRates
    rates16: KernelRates
    """The same GPU at 16-bit: the attention core, router and output layer."""
    fp8_attention: Fp8AttentionRatio | None
    """FP8 attention's measured time over the 16-bit core's, causal (TrainSpec.fp8_attention; None: 16-bit)."""
    fp8_window: Fp8AttentionRatio | None
    """The same over the model's sliding window, where measured at that window (None: the causal rule applies)."""
    load: np.ndarray
    """The busiest EP rank's routed load over the mean (cost.routing; 1 for dense models)."""


@dataclass(frozen=True)
class _AttentionCore:
    """One layer's attention core for one micro-batch on one GPU (seconds, shape (N,))."""

    forward_s: np.ndarray
    """The layers' mean: windowed and full layers weighted by their share (ModelSpec.windowed_layers)."""
    backward_s: np.ndarray
    window_gap_s: np.ndarray
    """Full minus windowed forward (0 without windows): what a rank pays per full layer beyond the model's share."""
    window_gap_backward_s: np.ndarray


def _attention_core(model: ModelSpec, train: TrainSpec, x: _Shapes) -> _AttentionCore:
    """One layer's attention core: fused over a causal or sliding-window mask, or unfused over the whole score matrix
    (docs/cost-model.md#attention-core)."""
    if train.flash_attention:
        forward, backward = _fused_core(model, train, x, None)
        share = model.windowed_layers / model.layers
        zero = np.zeros_like(forward)
        if not share:
            return _AttentionCore(forward, backward, zero, zero)
        window_forward, window_backward = _fused_core(model, train, x, model.sliding_window)
        return _AttentionCore((1.0 - share) * forward + share * window_forward,
                              (1.0 - share) * backward + share * window_backward,
                              forward - window_forward, backward - window_backward)
    heads = model.heads / x.tp * x.lay.mbs
    s_c = train.seq_len / x.lay.cp
    d = float(model.dim_per_head)
    gemm = gemm_s(x.rates16, s_c, train.seq_len, d, heads) + gemm_s(x.rates16, s_c, d, train.seq_len, heads)
    scores = heads * s_c * train.seq_len
    fwd_bytes, bwd_bytes = UNFUSED_SCORE_BYTES[model.dropout]
    zero = np.zeros(x.lay.size)
    return _AttentionCore(gemm + memory_s(x.rates16, scores * fwd_bytes),
                          2.0 * gemm + memory_s(x.rates16, scores * bwd_bytes), zero, zero)


def _fused_core(model: ModelSpec, train: TrainSpec, x: _Shapes, window: int | None) -> tuple[np.ndarray, np.ndarray]:
    """A fused kernel's (forward, backward) seconds over a causal or a sliding `window` mask: the kernel visits only
    the key blocks the mask reaches, so a window of W runs at the measured curve's rate for chunks of W keys. FP8
    attention (x.fp8_attention) scales each pass by its measured ratio to 16-bit at that length, and its backward
    visits every causal block, whatever the window (docs/cost-model.md#fp8-attention)."""
    flops = attention_core_flops_per_layer(model, train.seq_len, causal=True, window=window) * x.tokens / x.tp
    chunk = train.seq_len / x.lay.cp
    keys = np.minimum(chunk, window) if window is not None else chunk
    forward, backward = attention_core_s(x.rates16, flops, keys)
    if x.fp8_attention is None:
        return forward, backward
    if window is not None and x.fp8_window is not None:  # measured over this window, by sequence length, each pass
        forward_ratio, backward_ratio = x.fp8_window.at(chunk)  # over the 16-bit sum (the window model's claim)
        return (forward + backward) * forward_ratio, (forward + backward) * backward_ratio
    forward = forward * x.fp8_attention.at(keys)[0]
    if window is not None:  # FP8's backward visits every causal block, whatever the window
        causal = attention_core_flops_per_layer(model, train.seq_len, causal=True) * x.tokens / x.tp
        backward, keys = attention_core_s(x.rates16, causal, chunk)[1], chunk
    return forward, backward * x.fp8_attention.at(keys)[1]


def _attention_linears(model: ModelSpec, x: _Shapes) -> tuple[LinearTimes, LinearTimes]:
    """(all attention projections, the MLA up-projections alone: zero without MLA) of one micro-batch."""
    t = x.tokens
    h = model.hidden
    n = model.heads
    if model.mla is None:
        qkv = linear_s(x.rates, t, h, (n + 2 * model.num_kv_heads) * model.dim_per_head / x.tp)
        return qkv + linear_s(x.rates, t, n * model.dim_per_head / x.tp, h), linear_s(x.rates, t, h, 0.0)
    a = model.mla
    down = linear_s(x.rates, t, h, (a.q_lora_rank or 0) + a.kv_lora_rank + a.qk_rope_head_dim)
    q_in = a.q_lora_rank or h
    up = (linear_s(x.rates, t, q_in, n * model.qk_head_dim / x.tp)
          + linear_s(x.rates, t, a.kv_lora_rank, n * (a.qk_nope_head_dim + a.v_head_dim) / x.tp))
    return down + up + linear_s(x.rates, t, n * model.value_head_dim / x.tp, h), up


def _mlp(model: ModelSpec, x: _Shapes, tokens: np.ndarray, ffn: np.ndarray | float) -> LinearTimes:
    """fc1 and fc2 of a tensor-parallel MLP at ffn per GPU (cost.moe.mlp_linears)."""
    return mlp_linears(model, x.rates, tokens, ffn)


def _shapes(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts,
            constants: Constants) -> tuple[_Shapes, float]:
    """The per-layer shapes and rates of one micro-batch, and the recipe's bytes per quantized element."""
    gpu = cluster.gpu
    sustained = constants.step.sustained_compute_fraction
    recipe = gpu.fp8_recipe(train)
    cast = cast_bytes_per_element(train.precision, recipe, gpu.fp8_writes_transpose)
    tokens = (train.seq_len / lay.cp * lay.mbs).astype(float)
    return _Shapes(tokens=tokens, tp=lay.tp.astype(float), sigma=np.where(lay.sp, lay.tp, 1).astype(float), lay=lay,
                   rates=KernelRates.of(gpu, train.precision, sustained, recipe, train.attention_kernel),
                   rates16=KernelRates.of(gpu, Precision.BF16, sustained, attention=train.attention_kernel),
                   fp8_attention=gpu.efficiency.fp8_attention_ratio(recipe, model.qk_head_dim)
                   if train.fp8_attention else None,
                   fp8_window=gpu.efficiency.fp8_attention_ratio(recipe, model.qk_head_dim, model.sliding_window)
                   if train.fp8_attention and model.sliding_window is not None else None,
                   load=busiest_rank_load(model, train, lay, tokens, constants.moe)), cast


def moe_block_of(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts,
                 constants: Constants) -> MoeBlock:
    """The MoE block of one micro-batch as `layer_times` prices it (cost.moe; the explain listing reads it)."""
    x, cast = _shapes(model, cluster, train, lay, constants)
    return moe_block(model, train.moe_grouped_gemm_impl, lay, x.rates, x.rates16, x.tokens, x.load, cast)


@reads("tp", "cp", "mbs", "sp", "etp", "ep")
def layer_times(
    model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts, constants: Constants
) -> tuple[LayerTimes, LayerTimes, LayerTimes]:
    """Times of a dense layer, an MoE layer and the output layer for one micro-batch, with the tensor-core peaks
    times the sustained fraction (KernelRates.of) and the experts at the busiest rank's load (cost.routing)."""
    x, cast = _shapes(model, cluster, train, lay, constants)
    attention_core = _attention_core(model, train, x)
    core, core_bwd = attention_core.forward_s, attention_core.backward_s
    attention, up = _attention_linears(model, x)
    h = model.hidden

    def elementwise(ffn: float) -> np.ndarray:
        per_sigma, per_tp = _layer_bytes_per_token(model, ffn, cast)
        return memory_s(x.rates, x.tokens * (per_sigma / x.sigma + per_tp / x.tp))

    def activation(ffn: float) -> np.ndarray:  # read (m−1)·f, write f, 16-bit
        return memory_s(x.rates, x.tokens * (6.0 if model.gated_mlp else 4.0) * ffn / x.tp)

    norms = memory_s(x.rates, x.tokens * 8.0 * h / x.sigma)  # two norms: read and write 2·2h bytes each
    mlp = _mlp(model, x, x.tokens, model.ffn_hidden / x.tp)
    dense_act = activation(model.ffn_hidden)
    zero = np.zeros(lay.size)
    dense = _layer(attention + mlp, core, core_bwd, elementwise(model.ffn_hidden), norms, up.forward_s, dense_act,
                   mlp.forward_s + dense_act, zero, attention_core)
    moe = _layer(LinearTimes(zero, zero, zero), zero, zero, zero, zero, zero, zero, zero, zero,
                 _AttentionCore(zero, zero, zero, zero))
    if model.is_moe:
        block = moe_block(model, train.moe_grouped_gemm_impl, lay, x.rates, x.rates16, x.tokens, x.load, cast)
        shared = model.shared_ffn * model.shared_experts
        moe_elementwise = (elementwise(shared) + block.permute_s + block.cast_s + block.activation_s
                           + block.expert_bias_s)
        moe = _layer(attention + block.linears, core, core_bwd, moe_elementwise, norms, up.forward_s,
                     block.activation_s + activation(shared), zero, block.after_sync_s, attention_core)
    head = _OutputHead.of(train, x, cast)
    return dense, moe, _output_times(model, x, moe if model.is_moe else dense, head)


def _layer(linears: LinearTimes, core: np.ndarray, core_bwd: np.ndarray, elementwise: np.ndarray,
           norms: np.ndarray, up: np.ndarray, activation: np.ndarray, dense_mlp: np.ndarray,
           after_sync: np.ndarray, attention: _AttentionCore) -> LayerTimes:
    return LayerTimes(linears.forward_s, linears.input_grad_s, linears.weight_grad_s, core, core_bwd, elementwise,
                      norms, up, activation, dense_mlp, after_sync, attention.window_gap_s,
                      attention.window_gap_backward_s)


@dataclass(frozen=True)
class _OutputHead:
    """How the logits GEMMs run: 16-bit, or MXFP8 with their input and output gradient quantized
    (TrainSpec.fp8_output_proj, docs/cost-model.md#compute-output)."""

    rates: KernelRates
    cast: float
    """Bytes per quantized element (0 at 16-bit)."""

    @staticmethod
    def of(train: TrainSpec, x: _Shapes, cast: float) -> _OutputHead:
        return _OutputHead(x.rates, cast) if train.fp8_output_proj else _OutputHead(x.rates16, 0.0)


def _output_times(model: ModelSpec, x: _Shapes, last_kind: LayerTimes, head: _OutputHead) -> LayerTimes:
    """The output layer (logits GEMM at `head`'s precision, fp32 softmax and cross-entropy) and the MTP modules the
    last stage runs (DeepSeek-V3 §2.2: per module a 2h→h projection, one layer of the last layer's kind and the
    shared head again). An MXFP8 head quantizes its h-wide input in the forward (an elementwise input cast, as every
    FP8 linear's, on the sequence-parallel shard before the gather) and its V/tp-wide output gradient in the
    backward, priced with the input-gradient GEMM that reads it first."""
    h = model.hidden
    mtp = model.mtp_layers
    vocab = model.vocab / x.tp
    logits = linear_s(head.rates, x.tokens, h, vocab)
    gradient_cast = memory_s(x.rates16, x.tokens * head.cast * vocab)
    logits = LinearTimes(logits.forward_s, logits.input_grad_s + gradient_cast, logits.weight_grad_s)
    # fp32 softmax + CE: write, read, write; an MXFP8 head's input is quantized on its sequence-parallel shard
    loss = memory_s(x.rates16, x.tokens * (3 * 4.0 * vocab + head.cast * h / x.sigma))
    linears = logits.scaled(1 + mtp) + linear_s(x.rates, x.tokens, 2 * h, h / x.tp).scaled(mtp)
    k = last_kind
    return LayerTimes(
        linears.forward_s + mtp * k.gemm_s, linears.input_grad_s + mtp * k.gemm_input_grad_s,
        linears.weight_grad_s + mtp * k.gemm_weight_grad_s, mtp * k.attention_core_s,
        mtp * k.attention_core_backward_s, (1 + mtp) * loss + mtp * k.elementwise_s, mtp * k.norm_s,
        mtp * k.up_proj_s, mtp * k.activation_s, mtp * k.dense_mlp_s, mtp * k.after_sync_s,
        0.0 * k.window_gap_s, 0.0 * k.window_gap_backward_s,
    )


@reads("cuda_graphs", "recompute", "recompute_norm", "recompute_mla_up", "recompute_moe_act", "recompute_mlp",
       "ep")
def rank_compute(
    lay: Layouts, layers: StageLayers, times: tuple[LayerTimes, LayerTimes, LayerTimes], launch_overhead_us: float,
) -> RankCompute:
    """One micro-batch on one pipeline rank: forward, input-gradient backward (with recompute) and
    weight-gradient backward, summed over its dense and MoE layers and, on the last rank, the output. The host's
    side (launches, an MoE layer's wait for its token counts) is cost.host's."""
    dense, moe, logits = times
    has_moe = bool(layers.moe.any())  # else every MoE term is 0 · 0: skipped, with the same sums
    def total(field: str) -> np.ndarray:
        value: np.ndarray = layers.dense * getattr(dense, field)
        if has_moe:
            value = value + layers.moe * getattr(moe, field)
        value = value + layers.last * getattr(logits, field)
        return value

    gemm = total("gemm_s")
    # the layers' mean attention core, plus the full layers this rank holds beyond the model's share (StageLayers)
    excess = layers.full_attention_excess
    core = total("attention_core_s") + excess * dense.window_gap_s
    elementwise = total("elementwise_s")
    gaps = np.where(lay.cuda_graphs, 0.0, launch_overhead_us * US)  # a replayed graph launches no kernel
    elementwise = elementwise + (layers.dense + layers.moe) * gaps
    forward = gemm + core + elementwise
    layers_forward = forward - layers.last * logits.forward_s
    modules = (lay.recompute_norm * total("norm_s") + lay.recompute_mla_up * total("up_proj_s")
               + lay.recompute_moe_act * (total("activation_s") - layers.dense * dense.activation_s)
               + lay.recompute_mlp * total("dense_mlp_s"))
    recompute = np.where(lay.recompute == Recompute.FULL.code, layers_forward,
                         np.where(lay.recompute == Recompute.SELECTIVE.code, core, 0.0) + modules)
    core_backward = total("attention_core_backward_s") + excess * dense.window_gap_backward_s
    backward_input = total("gemm_input_grad_s") + core_backward + 2.0 * elementwise + recompute
    return RankCompute(forward, backward_input, total("gemm_weight_grad_s"), core, core_backward, recompute)
