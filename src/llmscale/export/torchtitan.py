"""torchtitan configuration for one layout: JobConfig TOML sections, with `#` notes for what they cannot say.

Every `section.key` written here was checked against torchtitan's config definitions at one commit
(`TORCHTITAN_SOURCE`); tests/test_export.py freezes the verified names.
"""

from __future__ import annotations

import json

import numpy as np

from llmscale.io.resolve import Job
from llmscale.layout.stages import chunk_bounds
from llmscale.specs.layout import Layout, RankOrder, Recompute, Schedule
from llmscale.specs.train import Fp8Cache, Optimizer, Precision

TORCHTITAN_SOURCE = "pytorch/torchtitan torchtitan/config/job_config.py @ 0a8d2b0a6b4ebadee4f99e7cbc924714adf4a0d1"

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


LAYOUT_KEYS: dict[str, tuple[str, ...]] = {
    "tp": ("parallelism.tensor_parallel_degree",), "pp": ("parallelism.pipeline_parallel_degree",),
    "dp": ("parallelism.data_parallel_replicate_degree", "parallelism.data_parallel_shard_degree"),
    "cp": ("parallelism.context_parallel_degree",), "ep": ("parallelism.expert_parallel_degree",),
    "etp": ("parallelism.expert_tensor_parallel_degree",),
    "vpp": ("parallelism.pipeline_parallel_layers_per_stage",),
    "mbs": ("parallelism.pipeline_parallel_microbatch_size", "training.local_batch_size"),
    "zero": ("parallelism.data_parallel_shard_degree", "parallelism.fsdp_reshard_after_forward"),
    "recompute": ("activation_checkpoint.mode", "activation_checkpoint.selective_ac_option"),
    # torchtitan's checkpointing is per layer or per op, with no module-level choice: notes
    "recompute_norm": (), "recompute_mla_up": (), "recompute_moe_act": (), "recompute_mlp": (),
    "sp": (),  # torchtitan's TP always shards the sequence: a note
    "schedule": ("parallelism.pipeline_parallel_schedule",),
    "offload_optimizer": ("training.enable_cpu_offload",), "offload_params": ("training.enable_cpu_offload",),
    "offload_activations": (),  # enable_cpu_offload moves parameters, gradients and optimizer state only: a note
    "cuda_graphs": (),  # no CUDA-graph key at the pinned commit: a note
    "tp_comm_overlap": ("parallelism.enable_async_tensor_parallel",),
    "ep_comm_overlap": (),  # no key at the pinned commit: a note
    "rank_order": (),  # the device mesh keeps pipeline outermost: a note
}
"""How every layout field reaches torchtitan: the keys that carry it, or () where a note says why none does
(tests/test_export.py checks that every field of the layout definition is here)."""

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


def torchtitan_toml(job: Job) -> str:
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


def _titan_training(job: Job) -> dict[str, object]:
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


def _titan_parallelism(job: Job) -> dict[str, object]:
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


def _titan_stage_split(job: Job) -> dict[str, object]:
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


def _titan_fp8(job: Job) -> dict[str, dict[str, object]]:
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


def _titan_compile(job: Job) -> dict[str, dict[str, object]]:
    """torch.compile is what makes float8 fast and what async TP runs under."""
    lay = job.resolved_layout
    if job.train.precision is Precision.FP8 or (lay.tp_comm_overlap and lay.tp > 1):
        return {"compile": {"enable": True, "components": ["model", "loss"]}}
    return {}


def torchtitan_notes(job: Job) -> list[str]:
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
    return notes + _titan_memory_notes(job)


def _titan_memory_notes(job: Job) -> list[str]:
    """Module recompute and optimizer-state settings the TOML cannot carry."""
    lay, train = job.resolved_layout, job.train
    notes = [f"{name} has no torchtitan key (activation checkpointing is per layer or per op): the run keeps "
             "that module's activations, more memory than planned"
             for name in ("recompute_norm", "recompute_mla_up", "recompute_moe_act", "recompute_mlp")
             if getattr(lay, name)]
    if lay.cuda_graphs:
        notes.append("cuda_graphs has no torchtitan key at this commit: the run launches every kernel, slower than "
                     "planned")
    if lay.offload_activations:
        notes.append(f"offload_activations {lay.offload_activations}: torchtitan has no activation offload key "
                     "(enable_cpu_offload is FSDP's parameter offload): the run keeps them on the GPU")
    if train.bf16_moments:
        notes.append("bf16_moments: torchtitan keeps Adam's moments in float32 (no switch): more memory than planned")
    if train.precision is Precision.FP8 and train.fp8_cache is Fp8Cache.FINE_GRAINED:
        notes.append("fp8_cache fine-grained has no torchtitan key: torchao float8 keeps other tensors in bfloat16")
    return notes


def _titan_pipeline_notes(job: Job) -> list[str]:
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
