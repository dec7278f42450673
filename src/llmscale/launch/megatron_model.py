"""The model half of the Megatron-LM flags: shape, attention (GQA, MLA), RoPE base and scaling, norm, MLP, MoE.

Every flag is defined in NVIDIA/Megatron-LM megatron/training/arguments.py at the commit `megatron.MEGATRON_SOURCE`
names (directly, or through `ArgumentGroupFactory(TransformerConfig)`; scripts/megatron_flags.py lists them).
What a flag cannot say becomes a note (`model_notes`).
"""

from __future__ import annotations

from llmscale.io.resolve import Job
from llmscale.specs.layout import Layout
from llmscale.specs.model import ModelSpec, Norm, RopeScalingKind, RopeScalingSpec
from llmscale.specs.train import GroupedGemm, MoeDispatcher, Routing

# Megatron-LM RotaryEmbedding._apply_scaling (megatron/core/models/common/embeddings/rotary_pos_embedding.py)
# fixes the Llama 3.1 ramp: only the factor is a flag.
LLAMA3_FIXED = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_positions": 8192}
# MLATransformerConfig's YaRN defaults (megatron/core/transformer/transformer_config.py): for MLA only the factor
# and the two mscales are flags (--rotary-scaling-factor, --mscale, --mscale-all-dim).
MLA_YARN_FIXED = {"original_max_positions": 4096, "beta_fast": 32.0, "beta_slow": 1.0}


def number(value: float) -> str:
    """A flag value: integral floats without a fraction (500000), others as Python writes them (1e-06)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def model_args(job: Job) -> list[str]:
    """Shape, attention, positions, norm, MLP and MoE flags."""
    m = job.model
    args = ["--num-layers", str(m.layers), "--hidden-size", str(m.hidden), "--ffn-hidden-size", str(m.ffn_hidden),
            "--num-attention-heads", str(m.heads)]
    if m.mla is not None:
        args.append("--multi-latent-attention")
        if m.mla.q_lora_rank is not None:
            args += ["--q-lora-rank", str(m.mla.q_lora_rank)]
        args += ["--kv-lora-rank", str(m.mla.kv_lora_rank), "--qk-head-dim", str(m.mla.qk_nope_head_dim),
                 "--qk-pos-emb-head-dim", str(m.mla.qk_rope_head_dim), "--v-head-dim", str(m.mla.v_head_dim)]
    elif m.num_kv_heads < m.heads:
        args += ["--group-query-attention", "--num-query-groups", str(m.num_kv_heads)]
    if m.head_dim is not None:  # for MLA Megatron's kv_channels is v_head_dim (its DeepSeek configs set 128)
        args += ["--kv-channels", str(m.head_dim)]
    args += ["--vocab-size", str(m.vocab), *_position_args(m, job.train.seq_len), *_window_args(m)]
    args += ["--normalization", "RMSNorm" if m.norm is Norm.RMSNORM else "LayerNorm",
             "--norm-epsilon", number(m.norm_eps)]
    if m.gated_mlp:
        args.append("--swiglu")
    if m.glu_clamp is not None:
        args += ["--activation-func-clamp-value", number(m.glu_clamp)]
    if not m.linear_bias:
        args.append("--disable-bias-linear")
    if not m.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not m.dropout:
        args += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    return args + moe_args(job)


def _position_args(m: ModelSpec, seq_len: int) -> list[str]:
    """Learned positions, or RoPE with its base (--rotary-base is an int flag) and scaling."""
    if m.learned_position_embeddings:
        return ["--position-embedding-type", "learned_absolute",
                "--max-position-embeddings", str(m.learned_position_embeddings)]
    scaling = m.rope_scaling
    yarn = scaling is not None and scaling.kind is RopeScalingKind.YARN
    kind = "yarn" if yarn and m.mla is None else "rope"
    args = ["--position-embedding-type", kind, "--max-position-embeddings", str(seq_len),
            "--rotary-base", str(round(m.rope_theta))]
    if scaling is None:  # MLA defaults to YaRN in Megatron (MLATransformerConfig.rope_type)
        return args + (["--rope-type", "rope"] if m.mla is not None else [])
    if scaling.kind is RopeScalingKind.LLAMA3:
        return [*args, "--use-rope-scaling", "--rope-scaling-factor", number(scaling.factor)]
    args += ["--rotary-scaling-factor", number(scaling.factor), "--mscale", number(scaling.mscale),
             "--mscale-all-dim", number(scaling.mscale_all_dim)]
    if m.mla is not None:
        return [*args, "--rope-type", "yarn"]
    return [*args, "--yarn-original-max-position-embeddings", str(scaling.original_max_positions),
            "--yarn-beta-fast", number(scaling.beta_fast), "--yarn-beta-slow", number(scaling.beta_slow)]


def _window_args(m: ModelSpec) -> list[str]:
    """Sliding-window attention: Megatron's --window-size is (left, right) keys beside the query itself
    (NVIDIA/Megatron-LM@d98e8a6 megatron/training/arguments.py; Megatron-Bridge's GPT-OSS bridge passes
    (sliding_window - 1, 0)), --window-attn-skip-freq N makes every N-th layer full attention."""
    if m.sliding_window is None:
        return []
    args = ["--window-size", f"{m.sliding_window - 1},0"]
    return args + (["--window-attn-skip-freq", str(m.full_attention_every)] if m.full_attention_every else [])


def router_groups(m: ModelSpec, lay: Layout, domain_ranks: int) -> int:
    """Megatron's group-limited routing: `--moe-router-num-groups` = the model's expert groups where it has them
    (moe_router_groups, DeepSeek-V3's 8), else the scale-up domains of `domain_ranks` GPUs an EP group spans (the
    nodes of TransformerConfig's docstring of moe_router_num_groups; an NVL72 rack, not a 4-GPU tray, as the cost
    model prices the limit), so that `--moe-router-group-topk` = moe_max_nodes bounds the domains a token reaches. 0
    when that limit does not bind (the group spans no more of them than the limit) or cannot be set."""
    if m.moe_router_groups is not None and m.moe_max_nodes is not None:
        return m.moe_router_groups
    nodes = -(-lay.ep // domain_ranks)
    if m.moe_max_nodes is None or nodes <= m.moe_max_nodes or m.experts % nodes:
        return 0
    return nodes


ROUTING_ARGS = {
    Routing.AUX_LOSS: ("--moe-router-load-balancing-type", "aux_loss"),
    Routing.LOSS_FREE: ("--moe-router-load-balancing-type", "none", "--moe-router-enable-expert-bias",
                        "--moe-router-score-function", "sigmoid"),
    Routing.FORCED: ("--moe-router-force-load-balancing",),
}
"""How each routing reaches Megatron: its auxiliary loss (aux_loss, the default), DeepSeek-V3's expert bias (which
TransformerConfig allows with the sigmoid score only), or the forced random routing of its benchmarks."""


def moe_args(job: Job) -> list[str]:
    """Experts, top-k, grouped GEMM, dispatcher, shared experts, layer pattern, balancing, capacity, groups, MTP."""
    m, lay, domain_ranks = job.model, job.resolved_layout, job.cluster.tiers[0].ranks
    args: list[str] = []
    if m.is_moe:
        args += ["--num-experts", str(m.experts), "--moe-router-topk", str(m.top_k),
                 "--moe-ffn-hidden-size", str(m.expert_ffn_hidden), *moe_kernel_args(job)]
        if m.shared_experts:
            args += ["--moe-shared-expert-intermediate-size", str(m.shared_experts * m.shared_ffn)]
        if m.first_dense_layers or m.moe_layer_freq > 1:
            args += ["--moe-layer-freq", moe_layer_pattern(m)]
        args += [*ROUTING_ARGS[job.train.routing], "--moe-router-dtype", "fp32"]
        if m.capacity_factor is not None:
            args += ["--moe-expert-capacity-factor", number(m.capacity_factor)]
            if m.pad_to_capacity:
                args.append("--moe-pad-expert-input-to-capacity")
        groups = router_groups(m, lay, domain_ranks)
        if groups:
            args += ["--moe-router-num-groups", str(groups), "--moe-router-group-topk", str(m.moe_max_nodes)]
    if m.mtp_layers:
        args += ["--mtp-num-layers", str(m.mtp_layers)]
    return args


DISPATCHER_ARGS = {
    MoeDispatcher.ALLTOALL: ("--moe-token-dispatcher-type", "alltoall"),
    MoeDispatcher.ALLGATHER: ("--moe-token-dispatcher-type", "allgather"),
    MoeDispatcher.FLEX_DEEPEP: ("--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep"),
    MoeDispatcher.FLEX_HYBRIDEP: ("--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep"),
}
"""How each dispatcher reaches Megatron (TransformerConfig moe_token_dispatcher_type, moe_flex_dispatcher_backend
@ d98e8a64)."""


def moe_kernel_args(job: Job) -> list[str]:
    """Grouped GEMM (--moe-grouped-gemm: TEGroupedMLP; with --use-transformer-engine-op-fuser the fused grouped MLP;
    none: SequentialMLP), dispatcher, permute and router fusion (TransformerConfig @ d98e8a64)."""
    train = job.train
    impl = train.moe_grouped_gemm_impl
    args = [] if impl is GroupedGemm.CUBLAS_LOOP else ["--moe-grouped-gemm"]
    if impl is GroupedGemm.TE_FUSED:
        args.append("--use-transformer-engine-op-fuser")
    args += DISPATCHER_ARGS[train.moe_dispatcher]
    fusions = ["--moe-permute-fusion"] * train.moe_permute_fusion + ["--moe-router-fusion"] * train.moe_router_fusion
    return args + fusions


def moe_layer_pattern(m: ModelSpec) -> str:
    """Megatron --moe-layer-freq for this model: an integer N (layer i is MoE iff i % N == 0) when no layer
    leads densely, else a list expression, 1 = MoE layer (DeepSeek-V3: "([0]*3+[1]*58)")."""
    if not m.first_dense_layers:
        return str(m.moe_layer_freq)
    rest, freq = m.layers - m.first_dense_layers, m.moe_layer_freq
    parts = [f"[0]*{m.first_dense_layers}"]
    if freq == 1:
        parts.append(f"[1]*{rest}")
    else:
        full, left = divmod(rest, freq)
        if full:
            parts.append(f"([1]+[0]*{freq - 1})*{full}")
        if left:
            parts.append("[1]" + (f"+[0]*{left - 1}" if left > 1 else ""))
    return "(" + "+".join(parts) + ")"


def _fixed_differs(scaling: RopeScalingSpec, fixed: dict[str, float]) -> list[str]:
    return [f"{name} {getattr(scaling, name):g} (Megatron fixes {value:g})" for name, value in fixed.items()
            if float(getattr(scaling, name)) != value]


def model_notes(job: Job) -> list[str]:
    """What the model flags cannot say, one line each."""
    m, notes = job.model, []
    if not m.learned_position_embeddings and not float(m.rope_theta).is_integer():
        notes.append(f"rope_theta {m.rope_theta:g}: Megatron's --rotary-base is an integer; "
                     f"{round(m.rope_theta)} is exported")
    scaling = m.rope_scaling
    if scaling is not None and not m.learned_position_embeddings:
        fixed = LLAMA3_FIXED if scaling.kind is RopeScalingKind.LLAMA3 else MLA_YARN_FIXED if m.mla else {}
        differs = _fixed_differs(scaling, fixed)
        if differs:
            notes.append(f"rope_scaling {scaling.kind.value}: " + ", ".join(differs) + ": no flag carries it")
    if m.glu_clamp is not None:
        notes.append("glu_clamp: llmscale prices the eager clamp of Megatron's quick-GEGLU experts (GPT-OSS: "
                     "--quick-geglu --glu-linear-offset 1.0, which ModelSpec does not carry); under the --swiglu "
                     "written here Megatron-Core fuses the clamp into its SwiGLU kernel")
    lay = job.resolved_layout
    if m.is_moe and m.moe_max_nodes is not None and not router_groups(m, lay, job.cluster.tiers[0].ranks):
        notes.append(f"moe_max_nodes {m.moe_max_nodes}: the EP group (ep {job.resolved_layout.ep}) spans no more "
                     "scale-up domains than that, so no --moe-router-num-groups/--moe-router-group-topk is set")
    if m.is_moe and job.train.fp8_dispatch:
        notes.append("fp8_dispatch (DeepEP FP8 dispatch) has no Megatron-LM flag at this commit: tokens travel in bf16")
    if m.is_moe and job.train.moe_grouped_gemm_impl is GroupedGemm.LEGACY:
        notes.append("moe_grouped_gemm_impl legacy (nv-grouped-gemm's GroupedMLP) has no flag at this commit "
                     "(removed in Megatron-Core 0.17): --moe-grouped-gemm runs TE's per-expert GEMMs, as te")
    if m.is_moe and job.train.moe_grouped_gemm_impl is GroupedGemm.TE_FUSED:
        notes.append("moe_grouped_gemm_impl te-fused: set NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 in the environment (TE "
                     "reads it; no flag) beside --use-transformer-engine-op-fuser, or TE runs the unfused grouped MLP")
    return notes
