"""FLOPs per token: llmscale's own count by op class.

Notation (docs/notation.md): L layers, h hidden, f ffn_hidden, n heads, g kv_heads (query groups),
d head_dim, q = n·d, V vocab, s sequence length, E routed experts, k top_k, S shared experts,
f_e / f_s routed / shared expert ffn size, N parameters. Every count is per token; 2 FLOPs per
multiply-add; multiply by global_batch · seq_len for a step.

llmscale's count (`forward_flops_per_token`) is built from `llmscale.cost.params`: every linear layer costs
2 FLOPs per parameter a token uses, so parameter counts and FLOPs cannot drift apart. On top of that:
    attention core = 2·s·n·(d_qk + d_v) per layer (QKᵀ and AV), halved only when causal=True
    logits         = 2·h·V
Model FLOPs = 3 × forward (forward + backward at 2× forward), PaLM's MFU definition (Chowdhery et al.
2022, App. B). Hardware FLOPs add the recomputed forward work (Korthikanti et al. 2022 §4-5).
Left out: softmax, norms, activations, residual adds, the embedding lookup, optimizer FLOPs.

The FLOP-counting conventions of published sources, which differ from this count, live in
`llmscale.validation.conventions`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from llmscale.cost.params import ParamCounts, count_params
from llmscale.specs.layout import Recompute
from llmscale.specs.model import ModelSpec


@dataclass(frozen=True)
class ForwardFlops:
    """Forward-pass FLOPs per token by op class (2 FLOPs per multiply-add)."""

    attention_proj_flops: float
    """Q, K, V and output projections (MLA: down/up projections and their norms), all layers."""
    attention_core_flops: float
    """QKᵀ and AV: 2·s·n·(d_qk + d_v) per layer, halved when causal."""
    dense_mlp_flops: float
    """MLPs of the dense layers: 2·m·h·f per dense layer."""
    expert_flops: float
    """The k routed experts a token is sent to plus the shared experts, all MoE layers."""
    router_flops: float
    """Router (gate) GEMM: 2·h·E per MoE layer."""
    logits_flops: float
    """Output projection to the vocabulary: 2·h·V."""
    mtp_flops: float = 0.0
    """DeepSeek-V3 multi-token-prediction modules (0 unless counted explicitly)."""

    @property
    def layers_flops(self) -> float:
        """The transformer layers (everything but logits and MTP): what full recompute repeats."""
        return (
            self.attention_proj_flops + self.attention_core_flops + self.dense_mlp_flops
            + self.expert_flops + self.router_flops
        )

    @property
    def total(self) -> float:
        return self.layers_flops + self.logits_flops + self.mtp_flops

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"total_flops": self.total}


def attention_core_flops_per_layer(model: ModelSpec, seq_len: int, causal: bool = False) -> float:
    """QKᵀ (2·s·n·d_qk) plus AV (2·s·n·d_v) per token per layer; half of it under a causal mask when
    `causal` (FlashAttention skips the masked blocks; Megatron-LM 2025 counts it so, PaLM does not).
    MLA: d_qk = qk_nope + qk_rope head dims, d_v = v_head_dim (DeepSeek-V2 §2.1)."""
    if model.mla is not None:
        d_qk = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
        d_v = model.mla.v_head_dim
    else:
        d_qk = d_v = model.dim_per_head
    core = 2.0 * seq_len * model.heads * (d_qk + d_v)
    return core / 2 if causal else core


def _moe_layer_linear_params(counts: ParamCounts) -> int:
    """Linear parameters one token uses in an MoE layer's MLP part (k routed + shared experts)."""
    return counts.active_routed_per_moe_layer + counts.moe_layer.shared_experts


def _mtp_forward_flops(model: ModelSpec, counts: ParamCounts, core_per_layer: float) -> float:
    """One DeepSeek-V3 MTP module (DeepSeek-V3 §2.2): a 2h→h projection, one transformer layer of the
    last layer's kind, and the shared output head (its logits are computed again)."""
    h = model.hidden
    if model.is_moe:
        layer = counts.moe_layer.attention + _moe_layer_linear_params(counts) + counts.moe_layer.router
    else:
        layer = counts.dense_layer.attention + counts.dense_layer.dense_mlp
    return model.mtp_layers * (2.0 * (2 * h * h + layer + h * model.vocab) + core_per_layer)


def forward_flops_per_token(
    model: ModelSpec, seq_len: int, causal: bool = False, include_mtp: bool = False
) -> ForwardFlops:
    """Forward FLOPs per token by op class: 2 × the linear parameters a token uses (llmscale.cost.params)
    plus the attention core (see `attention_core_flops_per_layer`). `include_mtp` adds DeepSeek-V3's
    multi-token-prediction modules (model.mtp_layers); off by default, as in DeepSeek's 671B/37B counts."""
    counts = count_params(model)
    core = attention_core_flops_per_layer(model, seq_len, causal)
    n_dense, n_moe = counts.num_dense_layers, counts.num_moe_layers
    return ForwardFlops(
        attention_proj_flops=2.0 * (counts.dense_layer.attention * n_dense + counts.moe_layer.attention * n_moe),
        attention_core_flops=core * model.layers,
        dense_mlp_flops=2.0 * counts.dense_layer.dense_mlp * n_dense,
        expert_flops=2.0 * _moe_layer_linear_params(counts) * n_moe,
        router_flops=2.0 * counts.moe_layer.router * n_moe,
        logits_flops=2.0 * model.hidden * model.vocab,
        mtp_flops=_mtp_forward_flops(model, counts, core) if include_mtp else 0.0,
    )


def model_flops_per_token(
    model: ModelSpec, seq_len: int, causal: bool = False, include_mtp: bool = False
) -> float:
    """Model FLOPs per token = 3 × forward (backward = 2 × forward: input and weight gradients), no
    recompute. The numerator of MFU as Chowdhery et al. 2022 App. B define it."""
    return 3.0 * forward_flops_per_token(model, seq_len, causal, include_mtp).total


def hardware_flops_per_token(
    model: ModelSpec,
    seq_len: int,
    recompute: np.ndarray,
    causal: bool = False,
    include_mtp: bool = False,
) -> np.ndarray:
    """Hardware FLOPs per token for an array of `Recompute` codes (shape (N,) in, (N,) out):
    model FLOPs + the recomputed forward work — the transformer layers' forward for full recompute
    (logits and MTP modules are not recomputed), the attention core's forward for selective
    (Korthikanti et al. 2022 §4.2). For GPT layouts with full recompute this is Narayanan et al. 2021
    Eq. 3 (MEG2021). Note that KORT2022's printed hardware count charges selective recompute 3× the
    attention-core forward (`kort2022_flops_per_token`)."""
    fwd = forward_flops_per_token(model, seq_len, causal, include_mtp)
    codes = np.asarray(recompute)
    extra = np.where(
        codes == Recompute.FULL.code,
        fwd.layers_flops,
        np.where(codes == Recompute.SELECTIVE.code, fwd.attention_core_flops, 0.0),
    )
    return 3.0 * fwd.total + extra
