"""Export one layout as a training framework's own launch arguments: Megatron-LM flags or a torchtitan TOML.

Pure functions of a validated job (`JobInputs`); nothing is imported from either framework. Every flag and
key written here was checked against the framework's own definitions at one commit (the *_SOURCE
constants); tests/test_export.py freezes the verified names. What a framework cannot express (a schedule it
does not have, a ZeRO stage it maps differently, an offload it lacks) becomes a `#` note in the output —
the export never silently drops a planned setting.

Only the model shape, the parallel layout, the batch and the precision are exported: data, tokenizer,
learning-rate and checkpoint settings are the run's own.
"""

from __future__ import annotations

import json
import shlex
from enum import Enum

import numpy as np

from llmscale import __version__
from llmscale.inputs import JobInputs
from llmscale.specs.layout import Layout, RankOrder, Recompute, Schedule
from llmscale.specs.model import ModelSpec, Norm
from llmscale.specs.train import Optimizer, Precision
from llmscale.stages import chunk_bounds

MEGATRON_SOURCE = "NVIDIA/Megatron-LM megatron/training/arguments.py @ 000c4ac24f61159c138b0975def722c65245983c"
TORCHTITAN_SOURCE = "pytorch/torchtitan torchtitan/config/job_config.py @ 0a8d2b0a6b4ebadee4f99e7cbc924714adf4a0d1"


class ExportFormat(str, Enum):
    """Which framework's launch arguments `llmscale export` writes."""

    MEGATRON = "megatron"
    """Megatron-LM `pretrain_gpt.py` command-line flags."""
    TORCHTITAN = "torchtitan"
    """torchtitan JobConfig TOML sections ([training], [parallelism], [activation_checkpoint], fp8)."""


# Every flag megatron_args can emit (tests/test_export.py checks each against arguments.py).
MEGATRON_FLAGS = (
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--pipeline-model-parallel-layout",
    "--num-virtual-stages-per-pipeline-rank",
    "--context-parallel-size", "--expert-model-parallel-size", "--expert-tensor-parallel-size",
    "--sequence-parallel", "--tp-comm-overlap", "--overlap-moe-expert-parallel-comm",
    "--micro-batch-size", "--global-batch-size", "--seq-length",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
    "--use-distributed-optimizer", "--use-megatron-fsdp", "--data-parallel-sharding-strategy",
    "--no-gradient-accumulation-fusion", "--ckpt-format", "--overlap-grad-reduce", "--overlap-param-gather",
    "--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--optimizer",
    "--bf16", "--fp16", "--fp8-format", "--fp8-recipe", "--fp4-format", "--fp4-recipe", "--grad-reduce-in-bf16",
    "--attention-backend",
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--group-query-attention",
    "--num-query-groups", "--kv-channels", "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank",
    "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--vocab-size", "--position-embedding-type",
    "--max-position-embeddings", "--normalization", "--swiglu", "--disable-bias-linear",
    "--untie-embeddings-and-output-weights", "--attention-dropout", "--hidden-dropout",
    "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
    "--moe-layer-freq", "--moe-expert-capacity-factor", "--moe-token-dispatcher-type", "--mtp-num-layers",
)

# Every `section.key` torchtitan_toml can emit (tests/test_export.py checks each against job_config.py).
TORCHTITAN_KEYS = (
    "training.local_batch_size", "training.global_batch_size", "training.seq_len", "training.dtype",
    "training.enable_cpu_offload",
    "parallelism.data_parallel_replicate_degree", "parallelism.data_parallel_shard_degree",
    "parallelism.fsdp_reshard_after_forward", "parallelism.tensor_parallel_degree",
    "parallelism.enable_async_tensor_parallel", "parallelism.pipeline_parallel_degree",
    "parallelism.pipeline_parallel_schedule", "parallelism.pipeline_parallel_microbatch_size",
    "parallelism.pipeline_parallel_layers_per_stage", "parallelism.pipeline_parallel_first_stage_less_layers",
    "parallelism.pipeline_parallel_last_stage_less_layers", "parallelism.context_parallel_degree",
    "parallelism.expert_parallel_degree", "parallelism.expert_tensor_parallel_degree",
    "activation_checkpoint.mode", "activation_checkpoint.selective_ac_option",
    "model.converters", "compile.enable", "compile.components",
    "quantize.dense.float8.recipe_name", "quantize.dense.float8.enable_fsdp_float8_all_gather",
    "quantize.dense.float8.precompute_float8_dynamic_scale_for_fsdp", "quantize.dense.float8.filter_fqns",
    "quantize.moe.float8.fqns",
)

_NO_SCHEDULE_FLAG = (Schedule.ZB_H1, Schedule.ZB_V, Schedule.DUALPIPE)


# ---- Megatron-LM ----------------------------------------------------------------------------------


def megatron_args(job: JobInputs) -> list[str]:
    """The job as Megatron-LM argv tokens (flag, then its values), in the order a launch script groups them."""
    return _megatron_parallel(job) + _megatron_memory(job) + _megatron_precision(job) + _megatron_model(job)


def _megatron_parallel(job: JobInputs) -> list[str]:
    lay, train = job.resolved_layout, job.train
    args = ["--tensor-model-parallel-size", str(lay.tp), "--pipeline-model-parallel-size", str(lay.pp)]
    if lay.pp > 1 and job.model.layers % (lay.pp * lay.vpp):
        args += ["--pipeline-model-parallel-layout", pipeline_layout(job.model, lay)]
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
    if lay.ep_comm_overlap and job.model.is_moe and lay.ep > 1:
        args.append("--overlap-moe-expert-parallel-comm")
    args += ["--micro-batch-size", str(lay.mbs), "--global-batch-size", str(train.global_batch),
             "--seq-length", str(train.seq_len)]
    return args


def _megatron_memory(job: JobInputs) -> list[str]:
    """Recompute, ZeRO, overlap and offload. ZeRO-1 is Megatron's distributed optimizer; ZeRO-2/3 are
    Megatron-FSDP with the flags its user guide requires (docs/discussions/megatron-fsdp-user-guide,
    NVIDIA/Megatron-LM @ f6f94c70974acffa8141a1886fbc076a68e44190)."""
    lay = job.resolved_layout
    args: list[str] = []
    if lay.recompute is Recompute.SELECTIVE:
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
    if job.train.optimizer is Optimizer.SGD_MOMENTUM:
        args += ["--optimizer", "sgd"]
    return args


def _megatron_precision(job: JobInputs) -> list[str]:
    train = job.train
    args = ["--fp16"] if train.precision is Precision.FP16 else ["--bf16"]
    if train.precision is Precision.FP8:
        # MXFP8 is Blackwell's native recipe; per-tensor current scaling runs on Hopper and later.
        recipe = "mxfp8" if job.cluster.gpu.peak_fp4_tflops is not None else "tensorwise"
        args += ["--fp8-format", "hybrid", "--fp8-recipe", recipe]
    elif train.precision is Precision.FP4:
        args += ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
    if not train.fp32_grads and train.precision is not Precision.FP16:
        args.append("--grad-reduce-in-bf16")
    if not train.flash_attention:
        args += ["--attention-backend", "unfused"]
    return args


def _megatron_model(job: JobInputs) -> list[str]:
    m, seq_len = job.model, job.train.seq_len
    args = ["--num-layers", str(m.layers), "--hidden-size", str(m.hidden), "--ffn-hidden-size", str(m.ffn_hidden),
            "--num-attention-heads", str(m.heads)]
    if m.mla is not None:
        args.append("--multi-latent-attention")
        if m.mla.q_lora_rank is not None:
            args += ["--q-lora-rank", str(m.mla.q_lora_rank)]
        args += ["--kv-lora-rank", str(m.mla.kv_lora_rank), "--qk-head-dim", str(m.mla.qk_nope_head_dim),
                 "--qk-pos-emb-head-dim", str(m.mla.qk_rope_head_dim), "--v-head-dim", str(m.mla.v_head_dim)]
    else:
        if m.num_kv_heads < m.heads:
            args += ["--group-query-attention", "--num-query-groups", str(m.num_kv_heads)]
        if m.head_dim is not None:
            args += ["--kv-channels", str(m.head_dim)]
    args += ["--vocab-size", str(m.vocab)]
    if m.learned_position_embeddings:
        args += ["--position-embedding-type", "learned_absolute",
                 "--max-position-embeddings", str(m.learned_position_embeddings)]
    else:
        args += ["--position-embedding-type", "rope", "--max-position-embeddings", str(seq_len)]
    args += ["--normalization", "RMSNorm" if m.norm is Norm.RMSNORM else "LayerNorm"]
    if m.gated_mlp:
        args.append("--swiglu")
    if not m.linear_bias:
        args.append("--disable-bias-linear")
    if not m.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not m.dropout:
        args += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    return args + _megatron_moe(m, job.resolved_layout)


def _megatron_moe(m: ModelSpec, lay: Layout) -> list[str]:
    args: list[str] = []
    if m.is_moe:
        args += ["--num-experts", str(m.experts), "--moe-router-topk", str(m.top_k),
                 "--moe-ffn-hidden-size", str(m.expert_ffn_hidden)]
        if m.shared_experts:
            args += ["--moe-shared-expert-intermediate-size", str(m.shared_experts * m.shared_ffn)]
        if m.first_dense_layers or m.moe_layer_freq > 1:
            args += ["--moe-layer-freq", moe_layer_pattern(m)]
        if m.capacity_factor is not None:
            args += ["--moe-expert-capacity-factor", str(m.capacity_factor)]
        if lay.ep > 1:
            args += ["--moe-token-dispatcher-type", "alltoall"]  # arguments.py: recommended with EP
    if m.mtp_layers:
        args += ["--mtp-num-layers", str(m.mtp_layers)]
    return args


def pipeline_layout(m: ModelSpec, lay: Layout) -> str:
    """Megatron --pipeline-model-parallel-layout for llmscale's split (stages.chunk_bounds: chunk k = j·pp + r,
    the shortfall on the last and first rank); E = embedding on the first chunk, m = MTP and L = loss on the
    last. Grammar: megatron/core/transformer/pipeline_parallel_layer_layout.py (stages split by "|", "t*n" = n
    decoder layers, commas cosmetic; stage i on pp rank i mod pp) @ 00caa53af30912914981c86f39db123961678bbd."""
    sizes = np.diff(chunk_bounds(m.layers, lay.pp, lay.vpp)).tolist()
    stages = []
    for c, n in enumerate(sizes):
        parts = (["E"] if c == 0 else []) + ([f"t*{n}"] if n > 1 else ["t"] * n)
        if c == len(sizes) - 1:
            parts += ["m"] * m.mtp_layers + ["L"]
        stages.append(",".join(parts))
    return "|".join(stages)


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


def megatron_notes(job: JobInputs) -> list[str]:
    """What the flags cannot say, one line each."""
    lay, m = job.resolved_layout, job.model
    notes = [f"launch on {job.num_gpus:,} GPUs: Megatron derives data-parallel size {lay.dp} = "
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
    if lay.rank_order is not RankOrder.TP_CP_EP_DP_PP:
        notes.append(f"rank_order {lay.rank_order.value}: Megatron-LM's --use-tp-pp-dp-mapping selects this order in "
                     "initialize_model_parallel; the flag is not verified against the pinned arguments.py: not emitted")
    if not job.train.fp32_master_weights:
        notes.append("fp32_master_weights = false has no Megatron-LM flag: it always keeps a main copy "
                     "(fp32, or fp16 via --use-precision-aware-optimizer --main-params-dtype fp16)")
    if m.learned_position_embeddings and m.learned_position_embeddings < job.train.seq_len:
        notes.append(f"seq_len {job.train.seq_len} exceeds the {m.learned_position_embeddings} learned positions: "
                     "Megatron requires --max-position-embeddings ≥ --seq-length")
    notes.append(f"--vocab-size {m.vocab} is before padding; Megatron pads it to a multiple of "
                 f"--make-vocab-size-divisible-by (128) × tp")
    return notes


def _shell_lines(args: list[str]) -> list[str]:
    """One flag and its values per line, shell-quoted, joined by line continuations."""
    lines: list[list[str]] = []
    for token in args:
        if token.startswith("--") or not lines:
            lines.append([token])
        else:
            lines[-1].append(token)
    text = [" ".join(shlex.quote(t) for t in line) for line in lines]
    return [line + " \\" for line in text[:-1]] + text[-1:]


# ---- torchtitan -----------------------------------------------------------------------------------

# torch.distributed.pipelining names (get_schedule_class). ZB-H1 keeps one stage per rank, and torchtitan's
# only zero-bubble schedules are multi-stage (InterleavedZeroBubble needs ≥ 2 stages per rank): it runs 1F1B.
# ZB-V and DualPipe hold two stages per rank in a V, as ZBVZeroBubble and DualPipeV do.
_TORCHTITAN_SCHEDULES = {
    Schedule.ONE_F_ONE_B: "1F1B",
    Schedule.INTERLEAVED: "Interleaved1F1B",
    Schedule.ZB_H1: "1F1B",
    Schedule.ZB_V: "ZBVZeroBubble",
    Schedule.DUALPIPE: "DualPipeV",
}


def torchtitan_toml(job: JobInputs) -> str:
    """The job as torchtitan JobConfig TOML: [training], [parallelism], [activation_checkpoint] and, for
    fp8, the float8 converters. Notes on what does not map are `#` comments at the top."""
    sections = {"training": _titan_training(job), "parallelism": _titan_parallelism(job),
                "activation_checkpoint": _titan_recompute(job.resolved_layout)} | _titan_fp8(job) | _titan_compile(job)
    lines = [f"# note: {note}" for note in torchtitan_notes(job)]
    for name, table in sections.items():
        lines += ["", f"[{name}]"] + [f"{key} = {_toml_value(value)}" for key, value in table.items()]
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)  # an ASCII JSON string is a valid TOML basic string
    return str(value)


def _titan_training(job: JobInputs) -> dict[str, object]:
    """torchtitan's local_batch_size is per data-parallel rank. Without PP it is one micro-batch and
    global_batch_size / (local · dp) sets gradient accumulation; with PP all micro-batches of a step go
    through the pipeline at once, as in Megatron, so local = gbs / dp split into mbs-sized micro-batches."""
    lay, train = job.resolved_layout, job.train
    dp = lay.dp or 1
    local = lay.mbs if lay.pp == 1 else train.global_batch // dp
    table: dict[str, object] = {"local_batch_size": local, "global_batch_size": train.global_batch,
                                "seq_len": train.seq_len}
    if not train.fp32_master_weights:
        table["dtype"] = "bfloat16"  # all of params, grads and optimizer state in bf16, no fp32 copy
    if lay.offload_optimizer or lay.offload_params:
        table["enable_cpu_offload"] = True
    return table


def _titan_parallelism(job: JobInputs) -> dict[str, object]:
    # torchtitan shards with FSDP2 only: ZeRO-1/2 map to FSDP with parameters kept gathered from forward
    # through backward ("never" reshard), ZeRO-3 to FSDP's default resharding; ZeRO-0 is DDP (replicate).
    lay = job.resolved_layout
    dp = lay.dp or 1
    table: dict[str, object] = {
        "data_parallel_replicate_degree": dp if lay.zero == 0 else 1,
        "data_parallel_shard_degree": 1 if lay.zero == 0 else dp,
    }
    if lay.zero in (1, 2):
        table["fsdp_reshard_after_forward"] = "never"
    # Async TP is torchtitan's TP/GEMM overlap (micro-pipelined collectives; effective only under compile).
    table |= {"tensor_parallel_degree": lay.tp, "enable_async_tensor_parallel": lay.tp_comm_overlap and lay.tp > 1,
              "pipeline_parallel_degree": lay.pp}
    if lay.pp > 1:
        table |= {"pipeline_parallel_schedule": _TORCHTITAN_SCHEDULES[lay.resolved_schedule],
                  "pipeline_parallel_microbatch_size": lay.mbs} | _titan_stage_split(job)
    table["context_parallel_degree"] = lay.cp
    if job.model.is_moe:
        table |= {"expert_parallel_degree": lay.ep, "expert_tensor_parallel_degree": lay.resolved_etp}
    return table


_TITAN_V_SCHEDULES = ("ZBVZeroBubble", "DualPipeV")
"""torchtitan schedules that place stages in a V: rank r runs stages r and 2·pp − 1 − r."""


def _titan_stages_per_rank(lay: Layout) -> int:
    name = _TORCHTITAN_SCHEDULES[lay.resolved_schedule]
    return 1 if name == "1F1B" else 2 if name in _TITAN_V_SCHEDULES else lay.vpp


def _titan_stage_split(job: JobInputs) -> dict[str, object]:
    """Layers per virtual stage and the first/last stage's shortfall, so that torchtitan builds the stages of
    llmscale's split (stages.chunk_bounds; torchtitan counts ceil((L + first_less + last_less) /
    layers_per_stage) stages, interior stages equal). Empty when the interior stages differ, and for V-shaped
    schedules unless every stage is equal: there torchtitan's first and last stage both land on rank 0, which
    the looped split llmscale costs does not."""
    lay = job.resolved_layout
    sizes = np.diff(chunk_bounds(job.model.layers, lay.pp, _titan_stages_per_rank(lay)))
    per_stage = int(sizes.max())
    uneven_inside = len(sizes) > 2 and bool((sizes[1:-1] != per_stage).any())
    v_shaped = _TORCHTITAN_SCHEDULES[lay.resolved_schedule] in _TITAN_V_SCHEDULES
    if uneven_inside or (v_shaped and bool((sizes != per_stage).any())):
        return {}
    return {"pipeline_parallel_layers_per_stage": per_stage,
            "pipeline_parallel_first_stage_less_layers": per_stage - int(sizes[0]),
            "pipeline_parallel_last_stage_less_layers": per_stage - int(sizes[-1])}


def _titan_recompute(lay: Layout) -> dict[str, object]:
    if lay.recompute is Recompute.SELECTIVE:
        # op-level SAC keeps matmul and attention outputs and recomputes the cheap ops around them — the
        # closest torchtitan policy to Korthikanti's selective recompute (the default "2" is full AC on
        # every 2nd layer).
        return {"mode": "selective", "selective_ac_option": "op"}
    return {"mode": lay.recompute.value}


def _titan_fp8(job: JobInputs) -> dict[str, dict[str, object]]:
    """fp8 through torchao float8 converters (tensorwise scaling, float8 all-gather under FSDP)."""
    if job.train.precision is not Precision.FP8:
        return {}
    fsdp = job.resolved_layout.zero >= 1 and (job.resolved_layout.dp or 1) > 1
    converters = ["quantize.dense.float8"] + (["quantize.moe.float8"] if job.model.is_moe else [])
    sections: dict[str, dict[str, object]] = {
        "model": {"converters": converters},
        "quantize.dense.float8": {"recipe_name": "tensorwise", "enable_fsdp_float8_all_gather": fsdp,
                                  "precompute_float8_dynamic_scale_for_fsdp": fsdp, "filter_fqns": ["output"]},
    }
    if job.model.is_moe:
        sections["quantize.moe.float8"] = {"fqns": ["experts"]}
    return sections


def _titan_compile(job: JobInputs) -> dict[str, dict[str, object]]:
    """torch.compile is what makes float8 fast and what async TP runs under."""
    lay = job.resolved_layout
    if job.train.precision is Precision.FP8 or (lay.tp_comm_overlap and lay.tp > 1):
        return {"compile": {"enable": True, "components": ["model", "loss"]}}
    return {}


def torchtitan_notes(job: JobInputs) -> list[str]:
    """What the TOML cannot say, one line each."""
    lay, train = job.resolved_layout, job.train
    notes = [f"launch on {job.num_gpus:,} GPUs; set [model] name/flavor, data and optimizer in your own config"]
    if lay.zero in (1, 2):
        notes.append(f"ZeRO-{lay.zero} maps to FSDP2 (torchtitan has no ZeRO-1/2): parameters are resharded "
                     "after each backward, so memory is lower and all-gather traffic higher than planned")
    notes += _titan_pipeline_notes(job)
    if lay.tp > 1 and not lay.resolved_sp:
        notes.append("sp = false: torchtitan's tensor parallelism always shards the sequence (no switch)")
    if lay.ep_comm_overlap and job.model.is_moe:
        notes.append("ep_comm_overlap has no torchtitan key at this commit (no EP all-to-all overlap): not set")
    if job.model.is_moe and lay.resolved_etp not in (1, lay.tp):
        notes.append(f"etp {lay.resolved_etp}: torchtitan supports expert tensor parallel = 1 or = tp ({lay.tp})")
    if train.precision is Precision.FP4:
        notes.append("fp4 has no torchtitan float8/mx converter at this commit: the TOML trains in bf16")
    if train.precision is Precision.FP16:
        notes.append("fp16: torchtitan's mixed_precision_param is bfloat16 or float32; the TOML keeps bfloat16")
    if lay.offload_optimizer or lay.offload_params:
        notes.append("enable_cpu_offload is FSDP CPU offload of parameters, gradients and optimizer state together")
    if not train.fp32_grads:
        notes.append("fp32_grads = false: torchtitan reduces gradients in float32 only (mixed_precision_reduce)")
    if train.optimizer is Optimizer.SGD_MOMENTUM:
        notes.append("optimizer sgd: set [optimizer] name yourself; llmscale exports no optimizer section")
    if not train.flash_attention:
        notes.append("flash_attention = false has no torchtitan switch (attention comes from the model flavor)")
    if lay.rank_order is not RankOrder.TP_CP_EP_DP_PP:
        notes.append(f"rank_order {lay.rank_order.value}: torchtitan's device mesh keeps pipeline outermost "
                     "(pp, dp, cp, tp); the run gets tp-cp-dp-pp placement")
    return notes


def _titan_pipeline_notes(job: JobInputs) -> list[str]:
    lay = job.resolved_layout
    if lay.pp == 1:
        return []
    notes = []
    if lay.resolved_schedule is Schedule.ZB_H1:
        notes.append("zb-h1 keeps one stage per rank and torchtitan's zero-bubble schedules need two or more "
                     "(InterleavedZeroBubble, ZBVZeroBubble): the TOML runs 1F1B, with its larger bubble")
    if lay.resolved_schedule is Schedule.DUALPIPE:
        notes.append("DualPipeV needs a PyTorch whose pipelining get_schedule_class knows it (2.9 or later)")
    if not _titan_stage_split(job):
        notes.append(f"{job.model.layers} layers: torchtitan's first/last-stage settings cannot express llmscale's "
                     f"split over pp {lay.pp} × {_titan_stages_per_rank(lay)} stages; its default split is used")
    return notes


# ---- the whole document ---------------------------------------------------------------------------


def export_text(job: JobInputs, fmt: ExportFormat) -> str:
    """The text `llmscale export` prints: a `#` preamble (version, inputs, source verified), then the body."""
    preamble = [f"# llmscale {__version__} export {fmt.value} · model {job.model.name} · cluster {job.cluster.name} "
                f"· {job.num_gpus:,} GPUs · input_sha256 {job.input_sha256}"]
    if fmt is ExportFormat.MEGATRON:
        preamble.append(f"# flags verified against {MEGATRON_SOURCE}")
        preamble += [f"# note: {note}" for note in megatron_notes(job)]
        return "\n".join(preamble + _shell_lines(megatron_args(job))) + "\n"
    preamble.append(f"# keys verified against {TORCHTITAN_SOURCE}")
    return "\n".join(preamble) + "\n" + torchtitan_toml(job)
