"""Megatron-LM launch flags for one layout (`pretrain_gpt.py` arguments), with `#` notes for what the flags cannot say.

Every flag written here was checked against Megatron-LM's own argument definitions at one commit
(`MEGATRON_SOURCE`); tests/test_export.py freezes the verified names. What Megatron cannot express (a schedule it
does not have, an offload it lacks) becomes a note — a planned setting is never dropped silently.
"""

from __future__ import annotations

import shlex

import numpy as np

from llmscale.cost.memory import logits_bytes
from llmscale.io.resolve import Job
from llmscale.launch.megatron_model import model_args, model_notes
from llmscale.layout.stages import Splits, split_bounds
from llmscale.specs.layout import Layout, RankOrder, Recompute, Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import AttentionKernel, CudaGraphScope, Fp8Cache, Fp8Recipe, Optimizer, Precision, Zero3Gather
from llmscale.units import GIB

MEGATRON_SOURCE = "NVIDIA/Megatron-LM megatron/training/arguments.py @ d98e8a64ddf34856e74b24714e3bedb2f5a39553"

# Every flag megatron_args can emit (tests/test_export.py checks each against arguments.py).
MEGATRON_FLAGS = (
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--pipeline-model-parallel-layout",
    "--num-virtual-stages-per-pipeline-rank",
    "--context-parallel-size", "--expert-model-parallel-size", "--expert-tensor-parallel-size",
    "--sequence-parallel", "--tp-comm-overlap", "--overlap-moe-expert-parallel-comm",
    "--micro-batch-size", "--global-batch-size", "--seq-length",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--recompute-modules",
    "--use-distributed-optimizer", "--use-tp-pp-dp-mapping", "--use-megatron-fsdp", "--data-parallel-sharding-strategy",
    "--no-gradient-accumulation-fusion", "--ckpt-format", "--overlap-grad-reduce", "--overlap-param-gather",
    "--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--exp-avg-dtype", "--exp-avg-sq-dtype",
    "--optimizer", "--cpu-offloading-num-layers", "--cuda-graph-impl",
    "--fp8-param-gather", "--fsdp-double-buffer", "--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl",
    "--bf16", "--fp16", "--fp8-format", "--fp8-recipe", "--fp8-output-proj", "--fp4-format", "--fp4-recipe",
    "--grad-reduce-in-bf16",
    "--attention-backend",
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--group-query-attention",
    "--num-query-groups", "--kv-channels", "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank",
    "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--vocab-size", "--position-embedding-type",
    "--max-position-embeddings", "--rotary-base", "--use-rope-scaling", "--rope-scaling-factor", "--rope-type",
    "--rotary-scaling-factor", "--mscale", "--mscale-all-dim", "--yarn-original-max-position-embeddings",
    "--yarn-beta-fast", "--yarn-beta-slow", "--normalization", "--norm-epsilon", "--swiglu", "--disable-bias-linear",
    "--untie-embeddings-and-output-weights", "--attention-dropout", "--hidden-dropout",
    "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
    "--moe-layer-freq", "--moe-expert-capacity-factor", "--moe-token-dispatcher-type", "--mtp-num-layers",
    "--moe-grouped-gemm", "--moe-router-load-balancing-type", "--moe-router-dtype",
    "--moe-pad-expert-input-to-capacity",
    "--moe-router-num-groups", "--moe-router-group-topk", "--moe-router-enable-expert-bias",
    "--moe-router-score-function", "--moe-router-force-load-balancing", "--train-samples",
    "--moe-flex-dispatcher-backend", "--moe-permute-fusion", "--moe-router-fusion", "--use-transformer-engine-op-fuser",
    "--cuda-graph-modules", "--window-size", "--window-attn-skip-freq", "--activation-func-clamp-value",
)

LAYOUT_FLAGS: dict[str, tuple[str, ...]] = {
    "tp": ("--tensor-model-parallel-size",), "pp": ("--pipeline-model-parallel-size",),
    "dp": (),  # derived by Megatron from WORLD_SIZE: a note
    "cp": ("--context-parallel-size",), "ep": ("--expert-model-parallel-size",),
    "etp": ("--expert-tensor-parallel-size",),
    "vpp": ("--num-virtual-stages-per-pipeline-rank", "--pipeline-model-parallel-layout"),
    "mbs": ("--micro-batch-size",),
    "zero": ("--use-distributed-optimizer", "--use-megatron-fsdp", "--data-parallel-sharding-strategy"),
    "recompute": ("--recompute-granularity", "--recompute-method", "--recompute-num-layers"),
    "recompute_norm": ("--recompute-modules",), "recompute_mla_up": ("--recompute-modules",),
    "recompute_moe_act": ("--recompute-modules",), "recompute_mlp": ("--recompute-modules",),
    "sp": ("--sequence-parallel",), "schedule": (),  # no zero-bubble or DualPipe flag: a note
    "offload_optimizer": ("--optimizer-cpu-offload", "--use-precision-aware-optimizer"),
    "offload_params": (),  # no flag: a note
    "offload_activations": ("--cpu-offloading-num-layers",), "cuda_graphs": ("--cuda-graph-impl",),
    "tp_comm_overlap": ("--tp-comm-overlap",), "ep_comm_overlap": ("--overlap-moe-expert-parallel-comm",),
    "rank_order": ("--use-tp-pp-dp-mapping",),
}
"""How every layout field reaches Megatron-LM: the flags that carry it, or () where a note says why none does
(tests/test_export.py checks that every field of the layout definition is here)."""

_NO_SCHEDULE_FLAG = (Schedule.ZB_H1, Schedule.ZB_V, Schedule.DUALPIPE)


def megatron_args(job: Job) -> list[str]:
    """The job as Megatron-LM argv tokens (flag, then its values), in the order a launch script groups them."""
    return (_megatron_parallel(job) + _megatron_memory(job) + _megatron_buffers(job) + _megatron_precision(job)
            + model_args(job))


def _ep_overlap(job: Job) -> bool:
    """Whether --overlap-moe-expert-parallel-comm is written (an MoE with expert parallelism)."""
    lay = job.resolved_layout
    return lay.ep_comm_overlap and job.model.is_moe and lay.ep > 1


def _megatron_parallel(job: Job) -> list[str]:
    lay, train = job.resolved_layout, job.train
    args = ["--tensor-model-parallel-size", str(lay.tp), "--pipeline-model-parallel-size", str(lay.pp)]
    own = train.pipeline_split(lay.pp, lay.vpp)
    if lay.pp > 1 and (job.model.layers % (lay.pp * lay.vpp) or own is not None):
        args += ["--pipeline-model-parallel-layout", pipeline_layout(job.model, lay, train.pipeline_splits)]
    elif lay.vpp > 1:
        # Current Megatron prefers the stage count to --num-layers-per-virtual-pipeline-stage (it also
        # allows uneven first/last stages); --virtual-pipeline-model-parallel-size is no longer a flag.
        args += ["--num-virtual-stages-per-pipeline-rank", str(lay.vpp)]
    args += ["--context-parallel-size", str(lay.cp)]
    if job.model.is_moe:
        args += ["--expert-model-parallel-size", str(lay.ep), "--expert-tensor-parallel-size", str(lay.resolved_etp)]
    if lay.resolved_sp and lay.tp > 1:
        args.append("--sequence-parallel")
        if lay.tp_comm_overlap:
            args.append("--tp-comm-overlap")  # validate_args: TP overlap needs sequence parallel
    if _ep_overlap(job):
        args.append("--overlap-moe-expert-parallel-comm")
    if lay.rank_order is RankOrder.TP_CP_EP_PP_DP:
        args.append("--use-tp-pp-dp-mapping")  # megatron/training/initialize.py: order tp-cp-ep-pp-dp
    args += ["--micro-batch-size", str(lay.mbs), "--global-batch-size", str(train.global_batch),
             "--seq-length", str(train.seq_len), "--train-samples", str(round(train.total_tokens / train.seq_len))]
    return args


def _megatron_memory(job: Job) -> list[str]:
    """Recompute, ZeRO, overlap and offload. ZeRO-1 is Megatron's distributed optimizer; ZeRO-2/3 are
    Megatron-FSDP with the flags its user guide requires (docs/discussions/megatron-fsdp-user-guide,
    NVIDIA/Megatron-LM @ f6f94c70974acffa8141a1886fbc076a68e44190)."""
    lay = job.resolved_layout
    args: list[str] = []
    modules = [name for on, name in ((lay.recompute_norm, "layernorm"), (lay.recompute_mla_up, "mla_up_proj"),
                                     (lay.recompute_moe_act, "moe_act"), (lay.recompute_mlp, "mlp")) if on]
    if modules:  # selective granularity with the modules named; core_attn too when recompute is selective
        core = ["core_attn"] if lay.recompute is Recompute.SELECTIVE else []
        args += ["--recompute-granularity", "selective", "--recompute-modules", *core, *modules]
    elif lay.recompute is Recompute.SELECTIVE:
        args += ["--recompute-granularity", "selective"]  # default --recompute-modules core_attn
    elif lay.recompute is Recompute.FULL:
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if lay.zero >= 1:
        args.append("--use-distributed-optimizer")
    if lay.zero >= 2:
        strategy = "optim_grads" if lay.zero == 2 else "optim_grads_params"
        args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", strategy,
                 "--no-gradient-accumulation-fusion", "--ckpt-format", "fsdp_dtensor"]
    if (lay.dp or 1) > 1:
        # step.py hides the gradient reduce-scatter (and the ZeRO parameter all-gather) behind compute.
        args.append("--overlap-grad-reduce")
        if lay.zero >= 1:
            args.append("--overlap-param-gather")
    if lay.offload_optimizer:
        args += ["--optimizer-cpu-offload", "--use-precision-aware-optimizer"]  # validate_args requires both
    if lay.offload_activations:
        args += ["--cpu-offloading-num-layers", str(lay.offload_activations)]  # sets --cpu-offloading itself
    if lay.cuda_graphs:
        args += ["--cuda-graph-impl", _cuda_graph_impl(job), *GRAPH_MODULES.get(job.train.cuda_graph_scope, ())]
    if job.train.bf16_moments:
        precision_aware = [] if lay.offload_optimizer else ["--use-precision-aware-optimizer"]
        args += [*precision_aware, "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
    if job.train.optimizer is Optimizer.SGD_MOMENTUM:
        args += ["--optimizer", "sgd"]
    return args


def fp8_param_gather(job: Job) -> bool:
    """Whether train.fp8_params is written as --fp8-param-gather: only where Megatron-LM accepts it (@d98e8a64):
    with fp8 (transformer_config.py:1566 "fp8_param must be used together with fp8 mode"), with the distributed
    optimizer or Megatron-FSDP, zero >= 1 here (arguments.py:1095), and with --optimizer-cpu-offload only under
    the delayed recipe (arguments.py:1889). Otherwise a note says why it is not set."""
    train, lay = job.train, job.resolved_layout
    offload_ok = not lay.offload_optimizer or job.cluster.gpu.fp8_recipe(job.train) is Fp8Recipe.DELAYED
    return train.fp8_params and train.precision is Precision.FP8 and lay.zero >= 1 and offload_ok


def fsdp_double_buffer(job: Job) -> bool:
    """Whether train.fsdp_double_buffer is written as --fsdp-double-buffer: under Megatron-FSDP (zero >= 2 here)
    and not beside --overlap-moe-expert-parallel-comm, which Megatron-FSDP refuses with it
    (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py:178 @d98e8a64)."""
    return job.train.fsdp_double_buffer and job.resolved_layout.zero >= 2 and not _ep_overlap(job)


def _megatron_buffers(job: Job) -> list[str]:
    """FP8 parameter gather, the Megatron-FSDP double buffer, and the cross-entropy fusion. Megatron-LM @d98e8a64
    refuses Transformer Engine's fusion (arguments.py:1697, "disabled due to stability issues"), so
    fused_cross_entropy writes the native one, which keeps fp32 logits like the unfused loss: a note says so."""
    args = ["--fp8-param-gather"] if fp8_param_gather(job) else []
    if fsdp_double_buffer(job):
        args.append("--fsdp-double-buffer")
    if job.train.fused_cross_entropy:
        args += ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "native"]
    return args


def _megatron_precision(job: Job) -> list[str]:
    train = job.train
    args = ["--fp16"] if train.precision is Precision.FP16 else ["--bf16"]
    if train.precision is Precision.FP8:
        args += ["--fp8-format", "hybrid", "--fp8-recipe", job.cluster.gpu.fp8_recipe(job.train).value]
        args += ["--fp8-output-proj"] if train.fp8_output_proj else []
    elif train.precision is Precision.FP4:
        args += ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
    if not train.fp32_grads and train.precision is not Precision.FP16:
        args.append("--grad-reduce-in-bf16")
    if not train.flash_attention:
        args += ["--attention-backend", "unfused"]
    elif train.attention_kernel is AttentionKernel.FLASH2:
        args += ["--attention-backend", "flash"]
    return args


def pipeline_layout(m: ModelSpec, lay: Layout, splits: Splits = ()) -> str:
    """Megatron --pipeline-model-parallel-layout for the priced split (stages.split_bounds: the run's own for this pp
    and vpp, else llmscale's: chunk k = j·pp + r, the shortfall on the last and first rank); E = embedding on the
    first chunk, m = MTP and L = loss on the last. Grammar: megatron/core/transformer/pipeline_parallel_layer_layout.py
    (stages split by "|", "t*n" = n decoder layers, commas cosmetic; stage i on pp rank i mod pp)
    @ 00caa53af30912914981c86f39db123961678bbd."""
    sizes = np.diff(split_bounds(m.layers, lay.pp, lay.vpp, splits)).tolist()
    stages = []
    for c, n in enumerate(sizes):
        parts = (["E"] if c == 0 else []) + ([f"t*{n}"] if n > 1 else ["t"] * n)
        if c == len(sizes) - 1:
            parts += ["m"] * m.mtp_layers + ["L"]
        stages.append(",".join(parts))
    return "|".join(stages)


def _graphs_refused_per_layer(job: Job) -> bool:
    """Megatron-FSDP refuses per-layer CUDA graphs beside the 1F1B EP overlap (NVIDIA/Megatron-LM@d98e8a64
    megatron/core/distributed/fsdp/mcore_fsdp_adapter.py L182-187: cuda_graph_impl must be 'none' or
    'full_iteration')."""
    return job.resolved_layout.zero >= 2 and _ep_overlap(job)


def _cuda_graph_impl(job: Job) -> str:
    """Per-layer graphs (Transformer Engine's; no --cuda-graph-modules: whole layers), or the whole iteration where
    the run's scope says so or Megatron-FSDP refuses per-layer graphs."""
    whole = job.train.cuda_graph_scope is CudaGraphScope.ITERATION or _graphs_refused_per_layer(job)
    return "full_iteration" if whole else "transformer_engine"


GRAPH_MODULES = {CudaGraphScope.ATTN: ("--cuda-graph-modules", "attn"),
                 CudaGraphScope.MOE_ROUTER: ("--cuda-graph-modules", "moe_router", "moe_preprocess"),
                 CudaGraphScope.ATTN_MOE_ROUTER: ("--cuda-graph-modules", "attn", "moe_router", "moe_preprocess")}
"""Megatron's capture regions of each partial scope (CudaGraphModule, megatron/core/transformer/enums.py @ d98e8a64);
whole layers and the whole iteration take none."""


def megatron_notes(job: Job) -> list[str]:
    """What the flags cannot say, one line each."""
    lay, m = job.resolved_layout, job.model
    notes = [f"launch on {job.num_gpus:,} GPUs: Megatron derives data-parallel size dp {lay.dp} = "
             f"WORLD_SIZE / (tp {lay.tp} × pp {lay.pp} × cp {lay.cp}); there is no flag for it"]
    schedule = lay.resolved_schedule
    if schedule in _NO_SCHEDULE_FLAG:
        runs = "interleaved 1F1B" if lay.vpp > 1 else "1F1B"
        notes.append(f"schedule {schedule.value!r} has no Megatron-LM flag (no zero-bubble or DualPipe "
                     f"schedule in arguments.py): these flags run {runs}, with its larger bubble")
    if lay.tp_comm_overlap and lay.tp > 1 and not lay.resolved_sp:
        notes.append("tp_comm_overlap needs sequence parallel in Megatron-LM (--tp-comm-overlap asserts it): not set")
    if lay.offload_params:
        notes.append("offload_params has no Megatron-LM flag (--cpu-offloading-num-layers offloads activations)")
    if lay.cuda_graphs and _graphs_refused_per_layer(job):
        notes.append("cuda_graphs: Megatron-FSDP refuses per-layer graphs beside --overlap-moe-expert-parallel-comm "
                     "(mcore_fsdp_adapter.py): --cuda-graph-impl full_iteration captures the whole step instead, "
                     "whose graph memory the plan did not price")
    if not job.train.fp32_master_weights:
        notes.append("fp32_master_weights = false has no Megatron-LM flag: it always keeps a main copy "
                     "(fp32, or fp16 via --use-precision-aware-optimizer --main-params-dtype fp16)")
    if job.train.precision is Precision.FP8 and job.train.fp8_cache is Fp8Cache.FINE_GRAINED:
        notes.append("fp8_cache fine-grained (DeepSeek-V3's FP8 SwiGLU inputs and E5M6 attention output) has no "
                     "Megatron-LM flag: Transformer Engine keeps 16-bit copies there, more memory than planned")
    if m.learned_position_embeddings and m.learned_position_embeddings < job.train.seq_len:
        notes.append(f"seq_len {job.train.seq_len} exceeds the {m.learned_position_embeddings} learned positions: "
                     "Megatron requires --max-position-embeddings ≥ --seq-length")
    notes += buffer_notes(job) + model_notes(job)
    notes.append(f"--vocab-size {m.vocab} is before padding; Megatron pads it to a multiple of "
                 f"--make-vocab-size-divisible-by (128) × tp")
    return notes


def buffer_notes(job: Job) -> list[str]:
    """zero3_gather, zero3_synchronous, fp8_params, fsdp_double_buffer and fused_cross_entropy where the flags
    cannot say them."""
    lay, train = job.resolved_layout, job.train
    notes = []
    if train.zero3_gather is Zero3Gather.MODULE and lay.zero == 3:
        notes.append("zero3_gather module (DeepSpeed ZeRO-3's per-module gathers) has no Megatron-LM flag: "
                     "Megatron-FSDP gathers whole transformer layers (its fsdp_unit_modules), more memory than planned")
    if train.zero3_synchronous and lay.zero == 3:
        notes.append("zero3_synchronous (DeepSpeed 2021's per-tensor ZeRO-3 collectives, the device synchronized "
                     "around each) has no Megatron-LM flag: Megatron-FSDP overlaps its layer gathers with compute, "
                     "so the run is faster than planned")
    if train.fp8_params and not fp8_param_gather(job):
        notes.append(_fp8_params_refused(job))
    if train.precision is Precision.FP8 and not fp8_param_gather(job):
        notes.append("no --fp8-param-gather: Transformer Engine caches an FP8 weight and its transpose beside each "
                     "16-bit weight, +2 B per parameter this GPU holds, which the plan did not price (it assumes FP8 "
                     "primary weights: catalog/memory.yaml fp8_weight_cache_bytes_per_param); fp8_params writes "
                     "the flag where Megatron-LM accepts it")
    if train.fp8_attention:
        notes.append("fp8_attention has no Megatron-LM command-line flag (arguments.py:2333 @d98e8a64 keeps "
                     "TransformerConfig.fp8_dot_product_attention off it; Megatron-Bridge sets it as mixed_precision."
                     "fp8_dot_product_attention): these flags run attention in 16-bit, which the plan priced in FP8")
    if train.flash_attention and train.attention_kernel is AttentionKernel.FLASH2:
        notes.append("--attention-backend flash runs Transformer Engine's FlashAttention backend: FlashAttention-2, "
                     "as planned, unless FlashAttention-3 (flash_attn_3) is installed on Hopper, which runs faster")
    if train.fsdp_double_buffer and not fsdp_double_buffer(job):
        why = (f"is Megatron-FSDP's (zero 2 or 3), not set at zero {lay.zero}" if lay.zero < 2 else
               "is refused by Megatron-FSDP beside --overlap-moe-expert-parallel-comm (mcore_fsdp_adapter.py): "
               "not set")
        notes.append(f"fsdp_double_buffer {why}")
    if train.fused_cross_entropy:
        unfused = train.model_copy(update={"fused_cross_entropy": False})
        extra = logits_bytes(job.model, unfused, job.layouts) - logits_bytes(job.model, train, job.layouts)
        extra_gib = float(extra[0]) / GIB
        notes.append("fused_cross_entropy: Megatron-LM refuses Transformer Engine's fusion at this commit "
                     "(--cross-entropy-fusion-impl te, 'disabled due to stability issues'); the native fusion "
                     f"written keeps fp32 logits, {extra_gib:.2f} GiB more per micro-batch on the last stage than "
                     "planned; read back it is fused_cross_entropy = false")
    return notes


def _fp8_params_refused(job: Job) -> str:
    train, lay = job.train, job.resolved_layout
    if train.precision is not Precision.FP8:
        return (f"fp8_params needs precision fp8 (Megatron: fp8_param must be used together with fp8 mode): "
                f"--fp8-param-gather not set at {train.precision.value}")
    if lay.zero == 0:
        return ("fp8_params needs the distributed optimizer or Megatron-FSDP (--fp8-param-gather asserts it): "
                "not set at zero 0")
    more = ", the run gathers 16-bit weights, more memory than planned" if lay.zero == 3 else ""
    return (f"fp8_params with offload_optimizer needs --fp8-recipe delayed in Megatron-LM (--optimizer-cpu-offload "
            f"asserts it): --fp8-param-gather not set with {job.cluster.gpu.fp8_recipe(job.train).value}{more}")


def shell_lines(args: list[str]) -> list[str]:
    """One flag and its values per line, shell-quoted, joined by line continuations."""
    lines: list[list[str]] = []
    for token in args:
        if token.startswith("--") or not lines:
            lines.append([token])
        else:
            lines[-1].append(token)
    text = [" ".join(shlex.quote(t) for t in line) for line in lines]
    return [line + " \\" for line in text[:-1]] + text[-1:]
