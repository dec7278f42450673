"""FLOPs per token: llmscale's own count by op class.

2 FLOPs per parameter a token uses (cost.params), plus the attention core 2·s·n·(d_qk + d_v) per layer (halved when
causal) and the logits 2·h·V; model FLOPs = 3 × forward (PaLM, Chowdhery et al. 2022, App. B). What is left out and
hardware FLOPs: docs/cost-model.md#flops; published sources' conventions: `llmscale.validation.conventions`."""

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


def attention_core_flops_per_layer(model: ModelSpec, seq_len: int, causal: bool = False,
                                   window: int | None = None) -> float:
    """QKᵀ (2·s·n·d_qk) plus AV (2·s·n·d_v) per token per layer; half of it under a causal mask when
    `causal` (FlashAttention skips the masked blocks; Megatron-LM 2025 counts it so, PaLM does not).
    MLA: d_qk = qk_nope + qk_rope head dims, d_v = v_head_dim (DeepSeek-V2 §2.1). A sliding `window` (causal)
    sees min(i + 1, W) keys at position i: W − W(W − 1)/2s keys per token on average instead of s/2."""
    core = 2.0 * seq_len * model.heads * (model.qk_head_dim + model.value_head_dim)
    if window is not None and window < seq_len:
        return core * (window - window * (window - 1) / (2.0 * seq_len)) / seq_len
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
    n_dense = counts.num_dense_layers
    n_moe = counts.num_moe_layers
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
    """Hardware FLOPs per token for an array of `Recompute` codes (shape (N,) in, (N,) out): model FLOPs plus the
    recomputed forward — the layers' under full recompute, the attention core's under selective (Korthikanti et al.
    2022 §4.2; for GPT with full recompute Narayanan et al. 2021 Eq. 3, MEG2021). KORT2022 counts selective
    otherwise: docs/cost-model.md#flops-model-hardware."""
    fwd = forward_flops_per_token(model, seq_len, causal, include_mtp)
    codes = np.asarray(recompute)
    extra = np.where(
        codes == Recompute.FULL.code,
        fwd.layers_flops,
        np.where(codes == Recompute.SELECTIVE.code, fwd.attention_core_flops, 0.0),
    )
    return 3.0 * fwd.total + extra
