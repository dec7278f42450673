"""Activation memory of one transformer layer and of a pipeline stage, vectorized over layouts.

Shape legend: every returned array has shape (N,), one element per layout; bytes per GPU.

Per layer and micro-batch, 16-bit activations (Korthikanti et al. 2022, arXiv:2205.05198, §4.1 and
Table 2, generalised to GQA/MLA, gated MLPs and MoE). With s_c = s / cp tokens per CP rank, b = mbs,
t = tp, and σ = t when sequence parallelism is on (else 1):

    replicated-or-SP terms (÷σ):  LN inputs 2·2sbh, QKV input 2sbh, MLP input 2sbh, dropout masks sbh each
    TP-sharded terms (÷t):        Q 2·s·b·n·d_q, K and V 2·s·b·g·d each, output-projection input 2·s·b·n·d_v,
                                  MLP fc1 output 2·s·b·(m−1)·f, activation output 2·s·b·f
    attention core (÷t):          softmax 2·n·s_c·s·b (+ dropout mask n·s_c·s·b and output 2·n·s_c·s·b);
                                  removed by selective recompute or flash attention (which keeps an fp32
                                  log-sum-exp 4·s·b·n instead)

For GPT-3 (f = 4h, MHA, dropout) this is exactly Korthikanti's sbh·(34 + 5·a·s/h), 10 + 24/t with TP, 34/t with
TP+SP. MoE layers (a term Megatron's estimator lacks: NVIDIA/Megatron-LM@00caa53
megatron/training/theoretical_memory_usage.py has no MoE activation term): router input 2sbh and fp32 probabilities
4·s·b·E (÷σ); per GPU the expert part handles tok_e = s_c·b·k·etp/t routed token copies (× capacity factor when
tokens are dropped), storing the permuted input 2·tok_e·h, fc1 output 2·tok_e·(m−1)·f_e/etp, activation output
2·tok_e·f_e/etp and the expert output 2·tok_e·h; shared experts are dense MLPs of S·f_s (÷t). Full recompute keeps
only each layer's input, 2sbh/σ. FP8/FP4 recipes keep every saved GEMM input (QKV, output-projection, fc1, fc2 and
expert inputs) quantised at 1 byte (`gemm_input_bytes`).

In-flight micro-batches on pipeline rank r (Narayanan et al. 2021, arXiv:2104.04473: 1F1B stashes at most p;
sail-sg/zero-bubble-pipeline-parallelism README: ZB-H1 and ZB-V store as much as 1F1B): 1F1B, ZB-H1, ZB-V keep
min(m, p − r); interleaved keeps min(m·v, 2(p−1−r) + (v−1)·p + 1)/v stage-equivalents (Megatron's warm-up count; on
rank 0 this is p·(1 + (p−1)/(p·v)), the factor in theoretical_memory_usage.py); DualPipe keeps p + 1 of its two
half-size chunks (DeepSeek-V3 Table 2). Left out: the embedding's int64 token ids and attention masks (small),
activation offload, and activations of the MTP module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.layout.arrays import Layouts
from llmscale.specs.layout import Recompute, Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Precision, TrainSpec
from llmscale.units import BYTES_16BIT, BYTES_FP32


@dataclass(frozen=True)
class LayerActivations:
    """Activation bytes one layer keeps for one micro-batch, per GPU, by layer kind."""

    dense_bytes: np.ndarray
    """A dense layer with the layout's recompute setting (none or selective)."""
    moe_bytes: np.ndarray
    """An MoE layer with the layout's recompute setting (none or selective)."""
    input_bytes: np.ndarray
    """The layer input kept under full recompute."""
    routed_tokens_per_gpu: np.ndarray
    """Routed token copies per GPU per micro-batch in an MoE layer (0 for dense models)."""


def gemm_input_bytes(train: TrainSpec) -> float:
    """Bytes per saved GEMM-input element: FP8/FP4 recipes keep the quantised copy of a Linear's input for the
    weight-gradient GEMM (TransformerEngine saves the FP8 input tensor instead of the 16-bit one), 1 byte;
    16-bit recipes keep 2. FP4 is taken at 1 byte too (block scales ignored; conservative)."""
    return 1.0 if train.precision in (Precision.FP8, Precision.FP4) else float(BYTES_16BIT)


def _attention_bytes(model: ModelSpec, train: TrainSpec, lay: Layouts, tokens: np.ndarray) -> np.ndarray:
    """Attention block terms, already divided by t or σ; `tokens` = s_c·b per layout."""
    h, n, t = model.hidden, model.heads, lay.tp
    sigma = np.where(lay.sp, lay.tp, 1)
    gemm_in = gemm_input_bytes(train)
    if model.mla is not None:
        a = model.mla
        d_q = d_k = a.qk_nope_head_dim + a.qk_rope_head_dim
        d_v, g = a.v_head_dim, n
        latents = 2 * (a.q_lora_rank or 0) + 2 * a.kv_lora_rank + a.qk_rope_head_dim  # c_q, its norm, c_kv, k_rope
        replicated = BYTES_16BIT * tokens * (h + latents) + gemm_in * tokens * h  # LN input, latents, down-proj input
    else:
        d_q = d_k = d_v = model.dim_per_head
        g = model.num_kv_heads
        replicated = BYTES_16BIT * tokens * h + gemm_in * tokens * h  # LN input + QKV (GEMM) input
    if model.dropout:
        replicated = replicated + tokens * h  # attention-output dropout mask (1 byte)
    sharded = BYTES_16BIT * tokens * (n * d_q + g * d_k + g * d_v) + gemm_in * tokens * n * d_v  # Q K V; out-proj input
    seq_full = train.seq_len
    if train.flash_attention:
        core = BYTES_FP32 * tokens * n * np.ones_like(t)
    else:
        probs = (BYTES_16BIT + (1 + BYTES_16BIT if model.dropout else 0)) * n * tokens * seq_full
        core = np.where(lay.recompute == Recompute.SELECTIVE.code, 0, probs)
    return replicated / sigma + (sharded + core) / t


def _mlp_bytes(model: ModelSpec, tokens: np.ndarray, ffn: int, divisor: np.ndarray, gemm_in: float) -> np.ndarray:
    """fc1 output ((m−1)·f wide, 16-bit for the activation's backward) and activation output (f wide, the fc2
    GEMM input) of an MLP of inner size `ffn`, split `divisor` ways: tokens·(2·(m−1) + gemm_in)·f / divisor
    bytes (2·tokens·m·f in 16-bit recipes)."""
    return tokens * (BYTES_16BIT * (model.mlp_matrices - 1) + gemm_in) * ffn / divisor


def layer_activations(model: ModelSpec, train: TrainSpec, lay: Layouts) -> LayerActivations:
    """Per-layer activation bytes for one micro-batch (module docstring for the terms)."""
    h = model.hidden
    sigma = np.where(lay.sp, lay.tp, 1)
    tokens = (train.seq_len / lay.cp) * lay.mbs
    attention = _attention_bytes(model, train, lay, tokens)
    gemm_in = gemm_input_bytes(train)
    mlp_in = BYTES_16BIT * tokens * h + gemm_in * tokens * h  # LN input + MLP/router (GEMM) input
    if model.dropout:
        mlp_in = mlp_in + tokens * h
    dense = attention + mlp_in / sigma + _mlp_bytes(model, tokens, model.ffn_hidden, lay.tp, gemm_in)
    routed = np.zeros(lay.size)
    moe = np.zeros(lay.size)
    if model.is_moe:
        routed = tokens * model.top_k * lay.etp / lay.tp * (model.capacity_factor or 1.0)
        router = BYTES_FP32 * tokens * model.experts / sigma
        # permuted expert input (GEMM input) and un-permuted expert output (16-bit, for the combine's backward)
        experts = (gemm_in + BYTES_16BIT) * routed * h + _mlp_bytes(
            model, routed, model.expert_ffn_hidden or 0, lay.etp, gemm_in
        )
        shared = _mlp_bytes(model, tokens, model.shared_ffn * model.shared_experts, lay.tp, gemm_in)
        moe = attention + mlp_in / sigma + router + experts + shared
    return LayerActivations(
        dense_bytes=dense,
        moe_bytes=moe,
        input_bytes=BYTES_16BIT * tokens * h / sigma,
        routed_tokens_per_gpu=routed,
    )


def inflight_microbatches(lay: Layouts, num_micro: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Stage-equivalents of micro-batch activations held by pipeline rank `rank` at its peak."""
    p, v = lay.pp, lay.vpp
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
