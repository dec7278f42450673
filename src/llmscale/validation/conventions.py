"""The FLOP-counting conventions published sources used behind their printed TFLOP/s and MFU, reproduced formula
by formula (`published_flops_per_token`), so a published figure can be compared with llmscale's own count
(`llmscale.cost.flops`) on the same footing.

Notation as in docs/notation.md; every count is per token, 2 FLOPs per multiply-add.
"""

from __future__ import annotations

from enum import Enum

from llmscale.cost.params import count_params
from llmscale.specs.model import ModelSpec


class FlopsFormula(str, Enum):
    """FLOP-counting convention behind a source's printed TFLOP/s and MFU (the `flops_formula` IDs
    of published_runs.yaml)."""

    MEG2021 = "MEG2021"
    """Narayanan et al. 2021 Eq. 3: four GEMM passes (full recompute), hardware-FLOP-like."""
    KORT2022 = "KORT2022"
    """Korthikanti et al. 2022: model FLOPs (hardware FLOPs with selective recompute as a flag)."""
    MEG2024 = "MEG2024"
    """Megatron-LM 2024 `num_floating_point_operations`: model FLOPs, no causal halving."""
    MEG2025 = "MEG2025"
    """Megatron-LM since 2025-03-06: causal-halved core, MLA, routed + shared experts, MTP."""
    NEMO = "NEMO1/NEMO2"
    """NeMo `flops_formulas.py`: full attention, fixed vocabulary per model family."""
    DGXC = "DGXC"
    """NVIDIA dgxc-benchmarking recipe READMEs (MoE recipe halves the attention core)."""
    BRIDGE2025 = "BRIDGE2025"
    """Megatron-Bridge `transformer_flops`: MEG2025 style, padded vocabulary."""
    PALM = "PALM"
    """Chowdhery et al. 2022 App. B: 6N + 12·L·n·d·s."""
    LLAMA3 = "Llama 3"
    """Llama 3 paper Table 4 ("Chowdhery et al." MFU): the PALM count with N = 405e9."""
    UNSPECIFIED = "unspecified"
    """The source does not say how it counts FLOPs; no conversion is possible."""


def padded_vocab(vocab: int, tp: int = 1, divisor: int = 128) -> int:
    """V rounded up to a multiple of divisor·tp (Megatron `make_vocab_size_divisible_by` × TP)."""
    multiple = divisor * tp
    return -(-vocab // multiple) * multiple


def meg2021_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """MEG2021 - Narayanan et al. 2021, Eq. 3: 96·L·h²·(1 + s/(6h) + V/(16·L·h)).

    Counts four GEMM passes (forward, recompute forward, two backward) and no causal halving, so it is
    hardware-FLOP-like. Assumes the GPT layout (f = 4h, MHA): ffn_hidden and kv_heads are not read."""
    L, h, V, s = model.layers, model.hidden, model.vocab, seq_len
    return 96.0 * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))


def kort2022_flops_per_token(model: ModelSpec, seq_len: int, *, selective_recompute: bool = False) -> float:
    """KORT2022 - Korthikanti et al. 2022. Model FLOPs 72·L·h²·(1 + s/(6h) + V/(12·h·L)); hardware
    FLOPs with selective recompute (`selective_recompute=True`) 72·L·h²·(1 + s/(3h) + V/(12·h·L)).

    GPT layout assumed (f = 4h, MHA). The hardware form adds 12·L·h·s, i.e. three times the attention
    core's forward, which is what reproduces the paper's printed HFU."""
    L, h, V, s = model.layers, model.hidden, model.vocab, seq_len
    attention = s / (3 * h) if selective_recompute else s / (6 * h)
    return 72.0 * L * h * h * (1 + attention + V / (12 * h * L))


def meg2024_flops_per_token(model: ModelSpec, seq_len: int, *, vocab: int) -> float:
    """MEG2024 - Megatron-LM 2024 (`num_floating_point_operations`, commit f2e5db402c44):
    12·L·h²·[(1 + g/n + s/h)·(q/h) + (f/h)·k·(1.5 if gated) + V/(2·L·h)], V padded (`vocab`).

    Model FLOPs, no recompute, no causal halving. MoE: every layer is taken as MoE with f = f_e and
    k = top_k (shared experts and dense layers are not counted, as in that commit)."""
    L, h, n, s = model.layers, model.hidden, model.heads, seq_len
    q = n * model.dim_per_head
    f, k = (model.expert_ffn_hidden or 0, model.top_k) if model.is_moe else (model.ffn_hidden, 1)
    gated = 1.5 if model.gated_mlp else 1.0
    attention = (1 + model.num_kv_heads / n + s / h) * (q / h)
    return 12.0 * L * h * h * (attention + (f / h) * k * gated + vocab / (2 * L * h))


def _bridge_attention_per_layer(model: ModelSpec, seq_len: int) -> float:
    """Megatron-Bridge attention per layer: GQA 6·(h·(q + 2·g·d) + q·h) + 6·q·s; MLA
    6·[q_lora·(h + n·(d_qk + d_rope) + 1) + kv_lora·(h + n·(d_qk + d_v) + 1) + h·d_rope + n·d_v·h
    + s·n·(d_qk + d_rope)/2 + s·n·d_v/2] (q_lora absent: h·n·(d_qk + d_rope))."""
    h, n, s = model.hidden, model.heads, seq_len
    if model.mla is None:
        d, g = model.dim_per_head, model.num_kv_heads
        q = n * d
        return 6.0 * (h * (q + 2 * g * d) + q * h) + 6.0 * q * s
    a = model.mla
    d_qk_all = a.qk_nope_head_dim + a.qk_rope_head_dim
    q_term = h * n * d_qk_all if a.q_lora_rank is None else a.q_lora_rank * (h + n * d_qk_all + 1)
    kv_term = a.kv_lora_rank * (h + n * (a.qk_nope_head_dim + a.v_head_dim) + 1)
    core = s * n * d_qk_all / 2 + s * n * a.v_head_dim / 2
    return 6.0 * (q_term + kv_term + h * a.qk_rope_head_dim + n * a.v_head_dim * h + core)


def bridge2025_flops_per_token(model: ModelSpec, seq_len: int, *, vocab: int, mtp_layers: int) -> float:
    """BRIDGE2025 - Megatron-Bridge `flop_utils.py` (`transformer_flops`), the MEG2025 style with the
    causal attention core halved. Per token, dense GQA: 18·L·h·f (gated) + 6·L·(h·(q + 2·g·d) + q·h)
    + 6·L·q·s + 6·h·V_pad. MoE: the dense-layer MLP term for `first_dense_layers`, and
    6·h·3·(k·expert_ffn_hidden + shared_experts·expert_ffn_hidden) for each MoE layer. MLA: see
    `_bridge_attention_per_layer`. A multi-token-prediction layer adds one more MoE layer + attention
    layer, 6·(3h + 2h²) and one more logit term. `vocab` is V_pad (`padded_vocab`).

    Also MEG2025 (Megatron-LM since commit 8873b55d6a, 2025-03-06), which Bridge ports. Non-gated
    MLPs use 2 matrices instead of 3; the router GEMM is not counted."""
    h, m = model.hidden, model.mlp_matrices
    dense_mlp = 6.0 * h * m * model.ffn_hidden
    moe_mlp = 6.0 * h * m * (model.top_k * (model.expert_ffn_hidden or 0) + model.shared_experts * model.shared_ffn)
    last_mlp = moe_mlp if model.is_moe else dense_mlp
    attention = _bridge_attention_per_layer(model, seq_len)
    layers = (
        model.layers * attention + model.num_dense_layers * dense_mlp + model.num_moe_layers * moe_mlp
    )
    mtp = mtp_layers * (attention + last_mlp + 6.0 * (3 * h + 2 * h * h))
    return layers + mtp + 6.0 * h * vocab * (mtp_layers + 1)


def nemo_flops_per_token(
    model: ModelSpec, seq_len: int, *, vocab: int, query_groups: int, halve_attention: bool = False
) -> float:
    """NEMO1/NEMO2 - NeMo `nemo/utils/flops_formulas.py`, full (non-causal) attention term.
    Llama-style: L·h²·(12 + 12·g/n + 18·f/h + 12·s/h + 6·V/(L·h)); GPT-3: 72·L·h² + 12·L·s·h
    + 6·h·V; Nemotron (squared-ReLU, non-gated): 12·f/h instead of 18·f/h; MoE (NeMo's mixtral
    family): 18·k·f/h. NeMo fixes V per family (gpt3 51200, llama2 32000, llama3 128256, nemotron
    256000, mixtral 32000): pass it as `vocab`. `query_groups` is g (NVIDIA's Llama 3.1 405B counts
    use 16 although the model has 8). GPT-3 is the non-gated form with g = n and f = 4h.

    `halve_attention` gives s/(2h) in the attention term (DGXC's MoE recipe)."""
    L, h, n, s = model.layers, model.hidden, model.heads, seq_len
    mlp_factor = 18.0 if model.gated_mlp else 12.0
    f_over_h = (model.top_k * (model.expert_ffn_hidden or 0) if model.is_moe else model.ffn_hidden) / h
    attention = 12.0 * s / h / (2 if halve_attention else 1)
    per_layer = 12.0 + 12.0 * query_groups / n + mlp_factor * f_over_h + attention
    return L * h * h * per_layer + 6.0 * vocab * h


def dgxc_flops_per_token(model: ModelSpec, seq_len: int, *, query_groups: int, halve_attention: bool) -> float:
    """DGXC - NVIDIA dgxc-benchmarking recipe READMEs: FLOPs per token = 12·L·h²·(1 + g/n + s/h)
    + 18·L·f·h + 6·V·h for SwiGLU models; GPT-3 and Nemotron-4 (treated as MHA with a 4h non-gated
    MLP): 24·L·h² + 12·L·h·s + 48·L·h² + 6·V·h; the MoE recipe uses s/(2h) in the attention term and
    multiplies the MLP term by top-k. MFU is measured against 989 TFLOP/s for BF16 runs and 1979 for
    FP8 runs (H100). The Llama 3.1 405B constant uses 16 query groups; for Nemotron-4 pass g = n."""
    return nemo_flops_per_token(
        model, seq_len, vocab=model.vocab, query_groups=query_groups, halve_attention=halve_attention
    )


def palm_flops_per_token(model: ModelSpec, seq_len: int, *, n_params: float) -> float:
    """PALM - Chowdhery et al. 2022, App. B: FLOPs per token = 6·N + 12·L·n·head_dim·s (no causal
    halving); MFU = tokens/s x that / (chips x peak). HFU adds rematerialisation (not counted here).

    Also "Llama 3" - Llama 3 paper Table 4: "BF16 MFU (Chowdhery et al.)", formula not printed; the
    PALM count with N = 405e9 is used."""
    return 6.0 * n_params + 12.0 * model.layers * model.heads * model.dim_per_head * seq_len


def published_flops_per_token(
    formula: FlopsFormula,
    model: ModelSpec,
    seq_len: int,
    *,
    tp: int = 1,
    vocab_divisor: int = 128,
    nemo_family_vocab: int | None = None,
    query_groups: int | None = None,
    n_params: float | None = None,
    mtp_layers: int | None = None,
    selective_recompute: bool = False,
    halve_attention: bool | None = None,
) -> float:
    """FLOPs per token under a published convention (FlopsFormula: Narayanan et al. 2021 Eq. 3, Korthikanti et al. 2022,
    NVIDIA/Megatron-LM `num_floating_point_operations`, NeMo `nemo/utils/flops_formulas.py`, NVIDIA's
    dgxc-benchmarking recipe READMEs, Megatron-Bridge `flop_utils.py`, PaLM App. B, Llama 3 Table 4; each member's
    docstring names its source), with its quirks as arguments: `tp` and `vocab_divisor` pad V to a multiple of
    vocab_divisor·tp (MEG2024, MEG2025, BRIDGE2025; Bridge's DeepSeek-V3 provider uses 1280); `nemo_family_vocab` is
    NeMo's fixed V per family (None: model.vocab); `query_groups` overrides g in NEMO/DGXC (NVIDIA's Llama 3.1 405B:
    16); `n_params` is PALM/Llama 3's N (None: the model's active parameters); `mtp_layers` the MTP layers counted
    by MEG2025/BRIDGE2025 (None: model.mtp_layers); `selective_recompute` picks KORT2022's hardware count;
    `halve_attention` the DGXC attention halving (None: the recipe's, i.e. MoE only)."""
    pad = padded_vocab(model.vocab, tp, vocab_divisor)
    groups = query_groups if query_groups is not None else model.num_kv_heads
    if formula is FlopsFormula.MEG2021:
        return meg2021_flops_per_token(model, seq_len)
    if formula is FlopsFormula.KORT2022:
        return kort2022_flops_per_token(model, seq_len, selective_recompute=selective_recompute)
    if formula is FlopsFormula.MEG2024:
        return meg2024_flops_per_token(model, seq_len, vocab=pad)
    if formula in (FlopsFormula.MEG2025, FlopsFormula.BRIDGE2025):
        mtp = mtp_layers if mtp_layers is not None else model.mtp_layers
        return bridge2025_flops_per_token(model, seq_len, vocab=pad, mtp_layers=mtp)
    if formula is FlopsFormula.NEMO:
        vocab = nemo_family_vocab if nemo_family_vocab is not None else model.vocab
        return nemo_flops_per_token(model, seq_len, vocab=vocab, query_groups=groups)
    if formula is FlopsFormula.DGXC:
        halve = halve_attention if halve_attention is not None else model.is_moe
        return dgxc_flops_per_token(model, seq_len, query_groups=groups, halve_attention=halve)
    if formula in (FlopsFormula.PALM, FlopsFormula.LLAMA3):
        n = n_params if n_params is not None else float(count_params(model).active)
        return palm_flops_per_token(model, seq_len, n_params=n)
    raise ValueError(f"flops_formula {formula.value!r} defines no FLOP count; no conversion is possible")
