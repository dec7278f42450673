"""What a torchtitan recipe cannot say about a job, one `# note:` line each, naming the layout or run field.

Read in pytorch/torchtitan @ b5bcd76c66d0acb1a08b176d9639425bc55e0b2a: torchtitan/config/configs.py
(ParallelismConfig has no expert-TP degree, no EP overlap, no rank order; TrainingConfig.mixed_precision_param is
bfloat16 or float32, mixed_precision_reduce float32 only), torchtitan/trainer.py (CUDA graphs refuse PP),
torchtitan/distributed/activation_checkpoint.py (FullAC per block, SelectiveAC per op), torchtitan/models/common/
moe.py (auxiliary-loss-free balancing by expert bias, load_balance_coeff 1e-3, in every MoE), torchtitan/distributed/
fsdp.py (`fully_shard` per transformer block: FSDP2 gathers whole layers), torchtitan/components/quantization/
(float8.py, mx.py: no FP8 all-gather of the weights), torchtitan/components/loss.py (`cross_entropy_loss` casts
the logits to float32, `pred.float()`; no fused cross-entropy).
"""

from __future__ import annotations

from llmscale.io.resolve import Job
from llmscale.io.torchtitan_names import FLAVOR_OF_MODEL, FLAVORS, SCHEDULE_NAMES, split_settings, stages_per_rank
from llmscale.specs.layout import RankOrder, Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import AttentionKernel, Fp8Cache, Fp8Recipe, Optimizer, Precision, Routing, Zero3Gather


def torchtitan_notes(job: Job) -> list[str]:
    """What the recipe cannot say, one line each."""
    lay = job.resolved_layout
    notes = [f"launch on {job.num_gpus:,} GPUs: torchtitan takes the world size from torchrun (NGPU × nodes); the "
             f"degrees multiply to it: dp {lay.dp} × tp {lay.tp} × pp {lay.pp} × cp {lay.cp}"]
    notes += _model_notes(job)
    if lay.zero == 1 and lay.pp == 1:
        notes.append("zero 1 has no torchtitan equivalent without a pipeline (FSDP2 shards gradients too): the recipe "
                     "runs ZeRO-2's FSDP with fsdp_reshard_after_forward 'never', less memory and more reduce-scatter "
                     "than planned; read back it is zero 2")
    if lay.zero >= 2 and lay.pp > 1:
        notes.append(f"zero {lay.zero} with a pipeline: torch pipelining keeps FSDP2's weights and gradients unsharded "
                     "across micro-batches (torch/distributed/pipelining/stage.py backward_maybe_with_nosync), so the "
                     "run needs ZeRO-1's memory, more than planned; plan it as zero 1")
    notes += _pipeline_notes(job)
    if job.model.is_moe and lay.resolved_etp != 1:
        notes.append(f"etp {lay.resolved_etp}: torchtitan has no expert tensor parallel degree (experts shard "
                     "over efsdp × ep of the dense ranks, etp 1)")
    if lay.ep_comm_overlap and job.model.is_moe:
        notes.append("ep_comm_overlap has no torchtitan field at this commit (no EP all-to-all overlap): not set")
    if lay.rank_order is not RankOrder.TP_CP_EP_DP_PP:
        notes.append(f"rank_order {lay.rank_order.value}: torchtitan's device mesh keeps pipeline outermost "
                     "(pp, dp, cp, tp); the run gets tp-cp-dp-pp placement")
    if lay.offload_optimizer or lay.offload_params:
        notes.append("enable_cpu_offload is FSDP CPU offload of parameters, gradients and optimizer state together "
                     "(offload_optimizer and offload_params read back both on)")
    return notes + _memory_notes(job) + _buffer_notes(job) + _run_notes(job)


def _model_notes(job: Job) -> list[str]:
    flavor = FLAVOR_OF_MODEL.get(job.model.name)
    if flavor is None:
        m = job.model
        known = ", ".join(f"{f.family} {f.flavor}" for f in FLAVORS)
        return [f"model {m.name} has no torchtitan flavor at this commit (mapped: {known}): model_spec is None; "
                f"build a ModelSpec of its shape (layers {m.layers}, hidden {m.hidden}, heads {m.heads}, kv_heads "
                f"{m.kv_heads or m.heads}, ffn_hidden {m.ffn_hidden}, vocab {m.vocab}, experts {m.experts}"
                + _window_text(m) + ") from its family's model_registry"]
    notes = [f"model {job.model.name} is torchtitan's {flavor.family} flavor {flavor.flavor}"]
    if flavor.differs:
        notes[0] += f"; the flavor sets {flavor.differs}"
    if job.model.sliding_window is not None:
        notes.append(f"the flavor attends causally to the whole sequence; this model's{_window_text(job.model)[1:]}"
                     " is not set by the recipe")
    return notes


def _window_text(m: ModelSpec) -> str:
    if m.sliding_window is None:
        return ""
    every = f", full attention every {m.full_attention_every} layers" if m.full_attention_every else ""
    return f", sliding window {m.sliding_window}{every}"


def _pipeline_notes(job: Job) -> list[str]:
    lay = job.resolved_layout
    if lay.pp == 1:
        return []
    notes = []
    if lay.resolved_schedule is Schedule.ZB_H1:
        notes.append("schedule zb-h1 keeps one stage per rank and torchtitan's zero-bubble schedules need two or "
                     "more (InterleavedZeroBubble, ZBVZeroBubble): the recipe runs 1F1B, with its larger bubble")
    if lay.resolved_schedule is Schedule.DUALPIPE:
        notes.append("schedule dualpipe: torchtitan has DualPipeV, DualPipe's V-shaped half with one weight copy "
                     "(llmscale costs two); read back it is zbv")
    name = SCHEDULE_NAMES[lay.resolved_schedule]
    if not split_settings(job.model.layers, lay.pp, name, lay.vpp, job.train.pipeline_splits):
        notes.append(f"vpp: {job.model.layers} layers over pp {lay.pp} × {stages_per_rank(name, lay.vpp)} stages "
                     "cannot be the priced split in torchtitan's layers_per_stage/first/last settings; its default "
                     "split is used, so the stages differ from the plan")
    if lay.cuda_graphs:
        notes.append("cuda_graphs: torchtitan's CUDA graphs do not support pipeline parallelism yet (trainer.py): "
                     "disable_cuda_graphs is set, launch gaps as without graphs")
    return notes


def _memory_notes(job: Job) -> list[str]:
    """Module recompute and offload settings the recipe cannot carry."""
    lay, train = job.resolved_layout, job.train
    notes = [f"{name} has no torchtitan field (activation checkpointing is per block or per op): the run keeps "
             "that module's activations, more memory than planned"
             for name in ("recompute_norm", "recompute_mla_up", "recompute_moe_act", "recompute_mlp")
             if getattr(lay, name)]
    if lay.offload_activations:
        notes.append(f"offload_activations {lay.offload_activations}: torchtitan has no activation offload "
                     "(enable_cpu_offload is FSDP's parameter offload): the run keeps them on the GPU")
    if train.precision is Precision.FP8 and train.fp8_cache is Fp8Cache.FINE_GRAINED:
        notes.append("fp8_cache fine-grained has no torchtitan field: torchao float8 keeps other tensors in bfloat16")
    recipe = job.cluster.gpu.fp8_recipe(train)
    if train.precision is Precision.FP8 and recipe is not Fp8Recipe.MXFP8:
        notes.append(f"fp8_recipe {recipe.value}: torchtitan runs torchao's rowwise Float8 instead, whose casts and "
                     "GEMMs the prediction did not price")
    return notes


def _buffer_notes(job: Job) -> list[str]:
    """zero3_gather, zero3_synchronous, fp8_params, fsdp_double_buffer and fused_cross_entropy, none of which
    torchtitan has."""
    lay, train = job.resolved_layout, job.train
    notes = []
    if train.zero3_gather is Zero3Gather.MODULE and lay.zero == 3:
        notes.append("zero3_gather module (DeepSpeed ZeRO-3's per-module gathers) has no torchtitan field: FSDP2 "
                     "gathers each transformer block (distributed/fsdp.py), more memory than planned")
    if train.zero3_synchronous and lay.zero == 3:
        notes.append("zero3_synchronous (DeepSpeed 2021's per-tensor ZeRO-3 collectives, the device synchronized "
                     "around each) has no torchtitan field: FSDP2 prefetches and overlaps each block's all-gather, "
                     "so the run is faster than planned")
    if train.fp8_params and train.precision is Precision.FP8:
        more = ", more memory than planned" if lay.zero == 3 else ""
        notes.append("fp8_params has no torchtitan field at this commit (its Float8 and MXFP8 converters keep "
                     f"bfloat16 weights, FSDP2 gathers them so){more}")
    if train.fsdp_double_buffer:
        notes.append("fsdp_double_buffer is Megatron-FSDP's buffer pool; torchtitan's FSDP2 has no such field: "
                     "not set")
    if train.fused_cross_entropy:
        notes.append("fused_cross_entropy has no torchtitan field: its cross-entropy casts the logits to float32 "
                     "(components/loss.py), more memory than planned")
    return notes


def _run_notes(job: Job) -> list[str]:
    train = job.train
    notes = []
    if train.precision is Precision.FP16:
        notes.append("precision fp16: torchtitan's mixed_precision_param is bfloat16 or float32; the recipe "
                     "trains in bfloat16")
    if train.precision is Precision.FP4 and job.model.is_moe:
        notes.append("precision fp4: torchtitan has no NVFP4 grouped-experts converter; the experts run in bfloat16")
    if not train.fp32_grads:
        notes.append("fp32_grads = false: torchtitan reduces gradients in float32 only (mixed_precision_reduce)")
    if train.optimizer is Optimizer.SGD_MOMENTUM:
        notes.append("optimizer sgd: the recipe writes default_adamw(); set an SGD param group yourself")
    if not train.flash_attention:
        notes.append("flash_attention = false has no torchtitan switch (every attn_backend is fused)")
    elif train.attention_kernel is AttentionKernel.FLASH2:
        notes.append("attention_kernel flash2: torchtitan's sdpa backend tries cuDNN attention first "
                     "(models/common/attention.py sdpa_backends = [CUDNN_ATTENTION, FLASH_ATTENTION, MATH]); set "
                     "ScaledDotProductAttention.sdpa_backends = [SDPBackend.FLASH_ATTENTION] to run FlashAttention-2; "
                     "read back it is fastest")
    if job.model.is_moe and train.routing is Routing.AUX_LOSS:
        notes.append("routing aux-loss: torchtitan's MoE balances by expert bias (auxiliary-loss-free, "
                     "load_balance_coeff); read back it is loss-free")
    if job.model.is_moe and train.fp8_dispatch:
        notes.append("fp8_dispatch has no torchtitan field: tokens are dispatched in bfloat16")
    if train.fp8_attention:
        notes.append("fp8_attention has no field in the torchtitan config written here: attention runs in bfloat16, "
                     "which the plan priced in FP8")
    if train.fp8_output_proj:
        notes.append("fp8_output_proj has no field in the torchtitan config written here: the output layer runs in "
                     "bfloat16, which the plan priced in MXFP8")
    return notes
