"""ModelSpec: the architecture of a decoder-only transformer, dense or mixture-of-experts.

Field names follow Megatron-LM / Hugging Face usage; see docs/notation.md for the symbols used in
formulas (L layers, h hidden, f ffn_hidden, n heads, g kv_heads, d head_dim, V vocab, E experts,
k top_k, f_e expert_ffn_hidden).
"""

from __future__ import annotations

import math
from enum import Enum

from pydantic import Field, PositiveInt, model_validator

from llmscale.specs.base import FieldProblem, Spec
from llmscale.specs.bounds import (
    MAX_EXPERTS,
    MAX_GPUS,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_POSITIONS,
    MAX_RATIO,
    MAX_ROPE_THETA,
    MAX_VOCAB,
)


class Norm(str, Enum):
    """Normalisation layer."""

    RMSNORM = "rmsnorm"
    """RMSNorm: one weight vector of size h."""
    LAYERNORM = "layernorm"
    """LayerNorm: weight and bias vectors of size h."""


class RopeScalingKind(str, Enum):
    """How the rotary frequencies are stretched beyond the pre-training context (HF `rope_scaling.rope_type`)."""

    LLAMA3 = "llama3"
    """Llama 3.1: low frequencies divided by `factor`, high kept, a smooth ramp between (HF
    `_compute_llama3_parameters`; Megatron-LM RotaryEmbedding._apply_scaling)."""
    YARN = "yarn"
    """YaRN (Peng et al. 2023, arXiv:2309.00071 §3): NTK-by-parts interpolation plus an attention temperature."""


class RopeScalingSpec(Spec):
    """RoPE context extension. Fields follow HF config.json `rope_scaling`; which kind reads which is noted."""

    kind: RopeScalingKind
    factor: float = Field(
        gt=0, le=MAX_RATIO, description="context extension factor (Llama 3.1: 8, DeepSeek-V3 YaRN: 40)"
    )
    original_max_positions: PositiveInt = Field(
        le=MAX_POSITIONS, description="pre-training context (original_max_position_embeddings)"
    )
    low_freq_factor: float = Field(1.0, gt=0, le=MAX_RATIO, description="llama3: wavelengths above orig/low are scaled")
    high_freq_factor: float = Field(4.0, gt=0, le=MAX_RATIO, description="llama3: wavelengths below orig/high are kept")
    beta_fast: float = Field(32.0, gt=0, le=MAX_RATIO, description="yarn: rotations where interpolation stops")
    beta_slow: float = Field(1.0, gt=0, le=MAX_RATIO, description="yarn: rotations where interpolation is full")
    mscale: float = Field(1.0, ge=0, le=MAX_RATIO, description="yarn: attention temperature coefficient")
    mscale_all_dim: float = Field(
        0.0, ge=0, le=MAX_RATIO, description="yarn: temperature coefficient of all dimensions (MLA)"
    )

    @property
    def attention_factor(self) -> float:
        """YaRN's attention temperature, the factor on cos and sin: (0.1·mscale·ln s + 1) / (0.1·mscale_all_dim·ln s
        + 1) for s = factor > 1 (arXiv:2309.00071 §3.4; Megatron-Core yarn_rotary_pos_embedding.py
        _yarn_get_concentration_factor @2edffadb); 1 for other kinds."""
        if self.kind is not RopeScalingKind.YARN or self.factor <= 1:
            return 1.0
        log = math.log(self.factor)
        return (0.1 * self.mscale * log + 1.0) / (0.1 * self.mscale_all_dim * log + 1.0)


class MLASpec(Spec):
    """DeepSeek multi-head latent attention dimensions (DeepSeek-V2 §2.1; HF DeepseekV3Config)."""

    q_lora_rank: PositiveInt | None = Field(
        None, le=MAX_HIDDEN, description="query compression rank; None = no q compression"
    )
    kv_lora_rank: PositiveInt = Field(le=MAX_HIDDEN, description="key/value compression rank")
    qk_nope_head_dim: PositiveInt = Field(le=MAX_HIDDEN, description="per-head query/key dims without rotary")
    qk_rope_head_dim: PositiveInt = Field(le=MAX_HIDDEN, description="per-head decoupled rotary dims")
    v_head_dim: PositiveInt = Field(le=MAX_HIDDEN, description="per-head value dims")


class ModelSpec(Spec):
    """A decoder-only transformer. MoE when experts > 0."""

    name: str = Field(min_length=1)
    family: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9.-]*$",
                               description="model family a framework's recipes are written for (llama3, deepseek-v3, "
                               "qwen3-moe, gpt-oss, …; release profiles condition on it); None: none known")
    layers: PositiveInt = Field(le=MAX_LAYERS, description="transformer blocks (bounds and reasons: specs.bounds)")
    hidden: PositiveInt = Field(le=MAX_HIDDEN, description="model width h")
    ffn_hidden: PositiveInt = Field(
        le=MAX_HIDDEN, description="inner size of a dense MLP (for MoE: of the dense layers)"
    )
    heads: PositiveInt = Field(le=MAX_HEADS, description="attention (query) heads")
    kv_heads: PositiveInt | None = Field(None, le=MAX_HEADS, description="key/value heads (GQA); None = heads (MHA)")
    head_dim: PositiveInt | None = Field(None, le=MAX_HIDDEN, description="None = hidden / heads")
    vocab: PositiveInt = Field(le=MAX_VOCAB, description="vocabulary size V")
    tied_embeddings: bool = False
    gated_mlp: bool = Field(True, description="SwiGLU-style 3-matrix MLP; False = 2-matrix GELU MLP")
    norm: Norm = Norm.RMSNORM
    norm_eps: float = Field(1e-5, gt=0, lt=1, description="epsilon of every norm (HF rms_norm_eps; Megatron's default)")
    rope_theta: float = Field(
        10000.0, gt=0, le=MAX_ROPE_THETA, description="RoPE base θ (HF rope_theta; Llama 3: 500000)"
    )
    rope_scaling: RopeScalingSpec | None = Field(None, description="RoPE context extension; None = none")
    linear_bias: bool = Field(False, description="biases on the attention and MLP linear layers (GPT-3)")
    sliding_window: PositiveInt | None = Field(
        None, le=MAX_POSITIONS, description="tokens a query of a windowed layer attends to, itself included (HF "
        "sliding_window; Megatron --window-size W-1,0; GPT-OSS: 128); None = every layer attends causally to the "
        "whole sequence")
    full_attention_every: PositiveInt | None = Field(
        None, le=MAX_LAYERS, description="with sliding_window: one layer in every N attends to the whole sequence, "
        "the others to the window (Megatron --window-attn-skip-freq N; GPT-OSS: 2); None = every layer is windowed")
    glu_clamp: float | None = Field(
        None, gt=0, le=1e4, description="the gated MLP's inputs clamped to this limit before the activation (HF "
        "swiglu_limit; Megatron --activation-func-clamp-value; GPT-OSS: 7.0), priced as Megatron's quick-GEGLU "
        "experts clamp it; None = no clamp")
    learned_position_embeddings: int = Field(
        0, ge=0, le=MAX_POSITIONS, description="rows of a learned position table; 0 = RoPE"
    )
    dropout: bool = Field(False, description="dropout layers present (their masks are stored activations)")
    experts: int = Field(0, ge=0, le=MAX_EXPERTS, description="routed experts per MoE layer; 0 = dense model")
    top_k: int = Field(0, ge=0, le=MAX_EXPERTS, description="routed experts per token")
    shared_experts: int = Field(0, ge=0, le=MAX_EXPERTS, description="always-active shared experts per MoE layer")
    expert_ffn_hidden: PositiveInt | None = Field(None, le=MAX_HIDDEN, description="inner size of one routed expert")
    shared_expert_ffn_hidden: PositiveInt | None = Field(None, le=MAX_HIDDEN, description="None = expert_ffn_hidden")
    first_dense_layers: int = Field(0, ge=0, le=MAX_LAYERS, description="dense layers before the first MoE layer")
    moe_layer_freq: PositiveInt = Field(
        1, le=MAX_LAYERS, description="after first_dense_layers, every k-th layer is MoE"
    )
    capacity_factor: float | None = Field(
        None, gt=0, le=MAX_RATIO, description="expert capacity factor; None = dropless"
    )
    pad_to_capacity: bool = Field(False, description="every expert's input padded to its capacity (Megatron "
                                  "--moe-pad-expert-input-to-capacity)")
    moe_max_nodes: PositiveInt | None = Field(
        None, le=MAX_GPUS,
        description="node-limited routing: a token's experts span at most this many nodes (DeepSeek-V3: 4); with "
                    "moe_router_groups, this many of those groups",
    )
    moe_router_groups: PositiveInt | None = Field(
        None, le=MAX_GPUS,
        description="expert groups of group-limited routing (HF n_group, Megatron --moe-router-num-groups; "
                    "DeepSeek-V3: 8), moe_max_nodes of them picked per token; None: one per node of the EP group",
    )
    mla: MLASpec | None = None
    mtp_layers: int = Field(0, ge=0, le=MAX_LAYERS, description="multi-token-prediction modules (DeepSeek-V3: 1)")
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
            if self.moe_router_groups is not None and self.moe_max_nodes is None:
                raise FieldProblem("moe_router_groups", self.moe_router_groups,
                                   "needs moe_max_nodes, the number of these groups a token's experts come from")
            if self.moe_router_groups is not None and (self.experts % self.moe_router_groups
                                                       or (self.moe_max_nodes or 0) >= self.moe_router_groups):
                raise FieldProblem("moe_router_groups", self.moe_router_groups,
                                   f"must divide experts ({self.experts}) and exceed moe_max_nodes "
                                   f"({self.moe_max_nodes}), the groups a token's experts are picked from")
        elif self.top_k or self.shared_experts:
            raise FieldProblem("top_k", self.top_k, "top_k and shared_experts need experts > 0")
        if self.full_attention_every is not None and self.sliding_window is None:
            raise FieldProblem("full_attention_every", self.full_attention_every,
                               "needs sliding_window (the window of the other layers)")
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
    def qk_head_dim(self) -> int:
        """The query/key head dim the attention kernel computes over (MLA: no-rotary and rotary parts together)."""
        return self.dim_per_head if self.mla is None else self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim

    @property
    def value_head_dim(self) -> int:
        """The value (and attention output) head dim (MLA: v_head_dim, DeepSeek-V2 §2.1)."""
        return self.dim_per_head if self.mla is None else self.mla.v_head_dim

    @property
    def windowed_layers(self) -> int:
        """Layers whose attention sees only the last sliding_window tokens: all but every full_attention_every-th
        (Megatron-Core transformer/utils.py is_layer_window_attention: layer_number % N != 0, 1-based)."""
        if self.sliding_window is None:
            return 0
        every = self.full_attention_every
        return self.layers - (self.layers // every if every is not None else 0)

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
