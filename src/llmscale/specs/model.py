"""ModelSpec: the architecture of a decoder-only transformer, dense or mixture-of-experts.

Field names follow Megatron-LM / Hugging Face usage; see docs/notation.md for the symbols used in
formulas (L layers, h hidden, f ffn_hidden, n heads, g kv_heads, d head_dim, V vocab, E experts,
k top_k, f_e expert_ffn_hidden).
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field, PositiveInt, model_validator

from llmscale.specs.base import FieldProblem, Spec


class Norm(str, Enum):
    """Normalisation layer."""

    RMSNORM = "rmsnorm"
    """RMSNorm: one weight vector of size h."""
    LAYERNORM = "layernorm"
    """LayerNorm: weight and bias vectors of size h."""


class MLASpec(Spec):
    """DeepSeek multi-head latent attention dimensions (DeepSeek-V2 §2.1; HF DeepseekV3Config)."""

    q_lora_rank: PositiveInt | None = Field(None, description="query compression rank; None = no q compression")
    kv_lora_rank: PositiveInt = Field(description="key/value compression rank")
    qk_nope_head_dim: PositiveInt = Field(description="per-head query/key dims without rotary")
    qk_rope_head_dim: PositiveInt = Field(description="per-head decoupled rotary dims")
    v_head_dim: PositiveInt = Field(description="per-head value dims")


class ModelSpec(Spec):
    """A decoder-only transformer. MoE when experts > 0."""

    name: str = Field(min_length=1)
    layers: PositiveInt
    hidden: PositiveInt
    ffn_hidden: PositiveInt = Field(description="inner size of a dense MLP (for MoE: of the dense layers)")
    heads: PositiveInt
    kv_heads: PositiveInt | None = Field(None, description="key/value heads (GQA); None = heads (MHA)")
    head_dim: PositiveInt | None = Field(None, description="None = hidden / heads")
    vocab: PositiveInt
    tied_embeddings: bool = False
    gated_mlp: bool = Field(True, description="SwiGLU-style 3-matrix MLP; False = 2-matrix GELU MLP")
    norm: Norm = Norm.RMSNORM
    linear_bias: bool = Field(False, description="biases on the attention and MLP linear layers (GPT-3)")
    learned_position_embeddings: int = Field(0, ge=0, description="rows of a learned position table; 0 = RoPE")
    dropout: bool = Field(False, description="dropout layers present (their masks are stored activations)")
    experts: int = Field(0, ge=0, description="routed experts per MoE layer; 0 = dense model")
    top_k: int = Field(0, ge=0, description="routed experts per token")
    shared_experts: int = Field(0, ge=0, description="always-active shared experts per MoE layer")
    expert_ffn_hidden: PositiveInt | None = Field(None, description="inner size of one routed expert")
    shared_expert_ffn_hidden: PositiveInt | None = Field(None, description="None = expert_ffn_hidden")
    first_dense_layers: int = Field(0, ge=0, description="dense layers before the first MoE layer")
    moe_layer_freq: PositiveInt = Field(1, description="after first_dense_layers, every k-th layer is MoE")
    capacity_factor: float | None = Field(None, gt=0, description="expert capacity factor; None = dropless")
    pad_to_capacity: bool = Field(False, description="every expert's input padded to its capacity (Megatron "
                                  "--moe-pad-expert-input-to-capacity)")
    moe_max_nodes: PositiveInt | None = Field(
        None, description="node-limited routing: a token's experts span at most this many nodes (DeepSeek-V3: 4)"
    )
    mla: MLASpec | None = None
    mtp_layers: int = Field(0, ge=0, description="multi-token-prediction modules (DeepSeek-V3: 1)")
    source: str = ""

    @model_validator(mode="after")
    def _check_shape(self) -> ModelSpec:
        if self.head_dim is None and self.mla is None and self.hidden % self.heads:
            raise FieldProblem(
                "hidden", self.hidden,
                f"not divisible by heads ({self.heads}); set head_dim if heads × head_dim ≠ hidden",
            )
        if self.heads % self.num_kv_heads:
            raise FieldProblem("kv_heads", self.kv_heads, f"must divide heads ({self.heads})")
        if self.experts:
            if self.top_k < 1 or self.top_k > self.experts:
                raise FieldProblem("top_k", self.top_k, f"must be in 1..experts ({self.experts}) for an MoE model")
            if self.expert_ffn_hidden is None:
                raise FieldProblem("expert_ffn_hidden", None, "required when experts > 0")
            if self.first_dense_layers >= self.layers:
                raise FieldProblem("first_dense_layers", self.first_dense_layers, f"must be < layers ({self.layers})")
        elif self.top_k or self.shared_experts:
            raise FieldProblem("top_k", self.top_k, "top_k and shared_experts need experts > 0")
        return self

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def num_kv_heads(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def dim_per_head(self) -> int:
        """d: per-head query/key/value size for MHA/GQA (hidden / heads unless head_dim is set)."""
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @property
    def num_moe_layers(self) -> int:
        """MoE layers: those at index ≥ first_dense_layers with (i − first_dense_layers) % freq == 0."""
        if not self.is_moe:
            return 0
        return -(-(self.layers - self.first_dense_layers) // self.moe_layer_freq)

    @property
    def num_dense_layers(self) -> int:
        return self.layers - self.num_moe_layers

    @property
    def shared_ffn(self) -> int:
        """Inner size of one shared expert."""
        if self.shared_expert_ffn_hidden is not None:
            return self.shared_expert_ffn_hidden
        return self.expert_ffn_hidden or 0

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices in one MLP or expert: 3 for gated (SwiGLU), 2 otherwise."""
        return 3 if self.gated_mlp else 2
