"""Parameter counts by class, for dense, GQA, MLA and MoE transformers.

Per layer: attention h·n·d + 2·h·g·d + n·d·h (MHA/GQA), dense MLP m·h·f, MoE E·m·h·f_e + S·m·h·f_s + h·E (Megatron-LM
`theoretical_memory_usage.py` at 00caa53, Narayanan et al. 2021 Eq. 2); MTP modules apart from `total`. MLA, norms,
embeddings and biases: docs/cost-model.md#params."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.specs.model import ModelSpec, Norm


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one transformer layer by class."""

    attention: int
    """Attention projections (and their biases)."""
    norms: int
    """The layer's two normalisation layers."""
    dense_mlp: int
    """Dense MLP (0 in an MoE layer)."""
    routed_experts: int
    """All routed experts of the layer (0 in a dense layer)."""
    shared_experts: int
    """Shared experts of the layer."""
    router: int
    """Router (gate) weights."""

    @property
    def non_expert(self) -> int:
        """Parameters replicated/sharded like dense weights (everything but routed experts)."""
        return self.attention + self.norms + self.dense_mlp + self.shared_experts + self.router

    @property
    def total(self) -> int:
        return self.non_expert + self.routed_experts


@dataclass(frozen=True)
class ParamCounts:
    """Whole-model parameter counts by class."""

    embedding: int
    """Input embedding (+ learned position table)."""
    output: int
    """Output projection (0 when tied to the input embedding)."""
    final_norm: int
    dense_layer: LayerParams
    moe_layer: LayerParams
    num_dense_layers: int
    num_moe_layers: int
    mtp: int
    """Multi-token-prediction modules (not in `total`)."""
    active_routed_per_moe_layer: int
    """Routed-expert parameters one token uses in one MoE layer (k experts)."""

    @property
    def attention(self) -> int:
        return self.dense_layer.attention * self.num_dense_layers + self.moe_layer.attention * self.num_moe_layers

    @property
    def routed_experts(self) -> int:
        return self.moe_layer.routed_experts * self.num_moe_layers

    @property
    def layers(self) -> int:
        return self.dense_layer.total * self.num_dense_layers + self.moe_layer.total * self.num_moe_layers

    @property
    def total(self) -> int:
        return self.embedding + self.output + self.final_norm + self.layers

    @property
    def active(self) -> int:
        """Parameters one token touches: all but the routed experts it is not sent to."""
        inactive = (self.moe_layer.routed_experts - self.active_routed_per_moe_layer) * self.num_moe_layers
        return self.total - inactive

    def as_dict(self) -> dict[str, int]:
        return {
            "total_params": self.total,
            "active_params": self.active,
            "embedding_params": self.embedding,
            "output_params": self.output,
            "attention_params": self.attention,
            "dense_mlp_params": self.dense_layer.dense_mlp * self.num_dense_layers,
            "routed_expert_params": self.routed_experts,
            "shared_expert_params": self.moe_layer.shared_experts * self.num_moe_layers,
            "router_params": self.moe_layer.router * self.num_moe_layers,
            "norm_params": self.final_norm
            + self.dense_layer.norms * self.num_dense_layers
            + self.moe_layer.norms * self.num_moe_layers,
            "mtp_params": self.mtp,
        }


def attention_params(model: ModelSpec) -> int:
    """Q, K, V and output projections of one layer (MHA, GQA or MLA), with biases if any."""
    h = model.hidden
    n = model.heads
    if model.mla is not None:
        a = model.mla
        qk = model.qk_head_dim
        q = h * n * qk if a.q_lora_rank is None else h * a.q_lora_rank + a.q_lora_rank * n * qk + a.q_lora_rank
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank * n * (a.qk_nope_head_dim + a.v_head_dim)
        return q + kv + a.kv_lora_rank + n * model.value_head_dim * h
    d = model.dim_per_head
    g = model.num_kv_heads
    weights = h * n * d + 2 * h * g * d + n * d * h
    biases = (n * d + 2 * g * d + h) if model.linear_bias else 0
    return weights + biases


def mlp_params(model: ModelSpec, ffn: int) -> int:
    """One MLP or expert of inner size `ffn`: m·h·f weights (+ biases)."""
    weights = model.mlp_matrices * model.hidden * ffn
    biases = ((model.mlp_matrices - 1) * ffn + model.hidden) if model.linear_bias else 0
    return weights + biases


def norm_params(model: ModelSpec) -> int:
    return model.hidden * (2 if model.norm is Norm.LAYERNORM else 1)


def tensors_per_layer(model: ModelSpec, moe: bool, ep: np.ndarray | int = 1) -> tuple[int, np.ndarray | int]:
    """(non-expert, expert) parameter tensors one GPU holds of one dense (moe False) or MoE layer, each weight, bias
    and norm on its own, as a framework that handles tensors one by one sees them (Megatron's fused QKV and fc1;
    the E/ep local experts' MLPs are the expert tensors); the embedding, output layer and final norm are left out.
    What counts: docs/cost-model.md#params-tensors."""
    bias = 2 if model.linear_bias else 1
    norm = 2 if model.norm is Norm.LAYERNORM else 1
    if model.mla is not None:
        low_rank_q = model.mla.q_lora_rank is not None  # q down + q up and the q norm, else one q projection
        attention = (5 if low_rank_q else 4) * bias + (2 if low_rank_q else 1) * norm
    else:
        attention = 2 * bias
    mlp = 2 * bias
    if not moe:
        return attention + mlp + 2 * norm, 0
    shared = mlp if model.shared_experts else 0
    return attention + 1 + shared + 2 * norm, -(-model.experts // np.maximum(ep, 1)) * mlp


def count_params(model: ModelSpec) -> ParamCounts:
    """Parameter counts by class (formulas: docs/cost-model.md#params-formulas)."""
    attn = attention_params(model)
    norms = 2 * norm_params(model)
    dense = LayerParams(attn, norms, mlp_params(model, model.ffn_hidden), 0, 0, 0)
    if model.is_moe:
        expert = mlp_params(model, model.expert_ffn_hidden or 0)
        moe = LayerParams(
            attention=attn,
            norms=norms,
            dense_mlp=0,
            routed_experts=model.experts * expert,
            shared_experts=model.shared_experts * mlp_params(model, model.shared_ffn),
            router=model.hidden * model.experts,
        )
        active_routed = model.top_k * expert
    else:
        moe = LayerParams(0, 0, 0, 0, 0, 0)
        active_routed = 0
    h = model.hidden
    last_layer = moe if model.is_moe else dense
    # DeepSeek-V3 MTP module: two norms + a 2h→h projection + one transformer layer (§2.2).
    mtp = model.mtp_layers * (2 * norm_params(model) + 2 * h * h + last_layer.total)
    return ParamCounts(
        embedding=model.vocab * h + model.learned_position_embeddings * h,
        output=0 if model.tied_embeddings else model.vocab * h,
        final_norm=norm_params(model),
        dense_layer=dense,
        moe_layer=moe,
        num_dense_layers=model.num_dense_layers,
        num_moe_layers=model.num_moe_layers,
        mtp=mtp,
        active_routed_per_moe_layer=active_routed,
    )
