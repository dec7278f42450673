"""torchtitan recipe for one layout: a Python module with one function returning `Trainer.Config`, the way a run
is configured in torchtitan now (torchtitan/config/README.md: a recipe is picked with `--module`/`--config`; the
`--section.option` flags are frozen and will be removed; no TOML file is read any more).

Every class, field, registry argument and flavor written here was checked against pytorch/torchtitan at one
commit (`TORCHTITAN_SOURCE`); tests/test_torchtitan_export.py freezes the names (`scripts/torchtitan_fields.py`
extracts them) and checks every name a generated recipe uses. What torchtitan cannot express is a `# note:` line
naming the layout or run field. Notes: `export.torchtitan_notes`.
"""

from __future__ import annotations

import math

from llmscale import __version__
from llmscale.io.resolve import Job
from llmscale.io.torchtitan_names import FLAVOR_OF_MODEL, SCHEDULE_NAMES, split_settings
from llmscale.launch.torchtitan_notes import torchtitan_notes
from llmscale.launch.torchtitan_source import Call, Name, call, identifier, recipe_source
from llmscale.specs.layout import Layout, Recompute
from llmscale.specs.train import Fp8Recipe, Precision, Routing

__all__ = ["LAYOUT_KEYS", "TORCHTITAN_KEYS", "stage_split", "torchtitan_notes", "torchtitan_recipe"]

TORCHTITAN_KEYS = (
    "Trainer.Config.model_spec", "Trainer.Config.training", "Trainer.Config.parallelism",
    "Trainer.Config.activation_checkpoint", "Trainer.Config.compile", "Trainer.Config.debug",
    "Trainer.Config.optimizer", "OptimizersContainer.Config.implementation",
    "TrainingConfig.num_tokens_per_microbatch_per_dp_rank", "TrainingConfig.num_tokens_per_train_step",
    "TrainingConfig.max_context_length", "TrainingConfig.steps", "TrainingConfig.dtype",
    "TrainingConfig.mixed_precision_param", "TrainingConfig.enable_cpu_offload", "TrainingConfig.disable_cuda_graphs",
    "ParallelismConfig.data_parallel_replicate_degree", "ParallelismConfig.data_parallel_shard_degree",
    "ParallelismConfig.fsdp_reshard_after_forward", "ParallelismConfig.tensor_parallel_degree",
    "ParallelismConfig.enable_sequence_parallel", "ParallelismConfig.pipeline_parallel_degree",
    "ParallelismConfig.pipeline_parallel_schedule", "ParallelismConfig.num_pp_microbatches",
    "ParallelismConfig.pipeline_parallel_layers_per_stage",
    "ParallelismConfig.pipeline_parallel_first_stage_less_layers",
    "ParallelismConfig.pipeline_parallel_last_stage_less_layers", "ParallelismConfig.context_parallel_degree",
    "ParallelismConfig.expert_parallel_degree",
    "CompileConfig.enable", "CompileConfig.components", "CompileConfig.enable_async_tensor_parallel",
    "DebugConfig.moe_force_load_balance",
    "Float8LinearConverter.Config.recipe_name", "Float8LinearConverter.Config.filter_fqns",
    "Float8LinearConverter.Config.model_compile_enabled", "Float8GroupedExpertsConverter.Config.model_compile_enabled",
    "MXFP8LinearConverter.Config.model_compile_enabled", "MXFP8GroupedExpertsConverter.Config.model_compile_enabled",
    "NVFP4LinearConverter.Config.fqns", "NVFP4LinearConverter.Config.model_compile_enabled",
    "llama3.model_registry(flavor)", "llama3.model_registry(converters)", "deepseek_v3.model_registry(flavor)",
    "deepseek_v3.model_registry(converters)", "deepseek_v3.model_registry(num_mtp_layers)",
    "qwen3.model_registry(flavor)", "qwen3.model_registry(converters)",
)  # fmt: skip
"""Every `Class.field` and registry argument torchtitan_recipe can write (tests check each against the source)."""

LAYOUT_KEYS: dict[str, tuple[str, ...]] = {
    "tp": ("ParallelismConfig.tensor_parallel_degree",), "pp": ("ParallelismConfig.pipeline_parallel_degree",),
    "dp": ("ParallelismConfig.data_parallel_replicate_degree", "ParallelismConfig.data_parallel_shard_degree"),
    "cp": ("ParallelismConfig.context_parallel_degree",), "ep": ("ParallelismConfig.expert_parallel_degree",),
    "etp": (),  # torchtitan has no expert-TP degree (experts use efsdp × ep of the dense ranks): a note
    "vpp": ("ParallelismConfig.pipeline_parallel_layers_per_stage",
            "ParallelismConfig.pipeline_parallel_first_stage_less_layers",
            "ParallelismConfig.pipeline_parallel_last_stage_less_layers"),
    "mbs": ("TrainingConfig.num_tokens_per_microbatch_per_dp_rank", "ParallelismConfig.num_pp_microbatches"),
    "zero": ("ParallelismConfig.data_parallel_shard_degree", "ParallelismConfig.fsdp_reshard_after_forward"),
    "recompute": ("Trainer.Config.activation_checkpoint",),
    # torchtitan's checkpointing is per block (FullAC) or per op (SelectiveAC), with no module-level choice: notes
    "recompute_norm": (), "recompute_mla_up": (), "recompute_moe_act": (), "recompute_mlp": (),
    "sp": ("ParallelismConfig.enable_sequence_parallel",),
    "schedule": ("ParallelismConfig.pipeline_parallel_schedule",),
    "offload_optimizer": ("TrainingConfig.enable_cpu_offload",),
    "offload_params": ("TrainingConfig.enable_cpu_offload",),
    "offload_activations": (),  # enable_cpu_offload moves parameters, gradients and optimizer state only: a note
    "cuda_graphs": ("TrainingConfig.disable_cuda_graphs",),
    "tp_comm_overlap": ("CompileConfig.enable_async_tensor_parallel",),
    "ep_comm_overlap": (),  # no EP all-to-all overlap field: a note
    "rank_order": (),  # the device mesh keeps pipeline outermost: a note
}  # fmt: skip
"""How every layout field reaches torchtitan: the fields that carry it, or () where a note says why none does
(tests/test_layout_definition.py checks that every field of the layout definition is here)."""


def recipe_function(job: Job) -> str:
    """The recipe function's name: model and layout, a valid identifier (`llama3_70b_tp8_pp4_vpp2_dp16`)."""
    lay = job.resolved_layout
    parts = [job.model.name, f"tp{lay.tp}", f"pp{lay.pp}"] + ([f"vpp{lay.vpp}"] if lay.vpp > 1 else [])
    parts += [f"dp{lay.dp}"] + [f"{k}{v}" for k, v in (("cp", lay.cp), ("ep", lay.ep)) if v > 1]
    return identifier("_".join(parts))


def torchtitan_recipe(job: Job) -> str:
    """The recipe module (its `#` preamble comes from export.document)."""
    function, flavor = recipe_function(job), FLAVOR_OF_MODEL.get(job.model.name)
    kwargs: dict[str, object] = {"model_spec": Name("model_spec"), "training": _training(job),
                                 "parallelism": _parallelism(job),
                                 "activation_checkpoint": _recompute(job.resolved_layout),
                                 "optimizer": call("default_adamw")}
    compile_config = _compile(job)
    if compile_config is not None:
        kwargs["compile"] = compile_config
    if job.model.is_moe and job.train.routing is Routing.FORCED:
        kwargs["debug"] = call("DebugConfig", moe_force_load_balance=True)
    after: list[tuple[str, object]] = [("optimizer.implementation", "fused_opt_states_bf16")] if (
        job.train.bf16_moments) else []
    module = identifier(f"llmscale_{job.model.name}")
    doc = (f"torchtitan recipe for {job.model.name} on {job.num_gpus:,} GPUs of {job.cluster.name}, written by "
           f"llmscale {__version__}.\n\nSave as torchtitan_recipes/{module}.py and launch from the torchtitan root "
           f"with\n    NGPU=<GPUs per node> MODULE=torchtitan_recipes.{module} CONFIG={function} ./run_train.sh\n"
           "on every node (torchrun). Data, tokenizer, loss, learning rate and checkpointing are Trainer.Config's "
           "defaults\nand default_adamw's: set them for your run.\n")
    return recipe_source(function, flavor.family if flavor else None, _model_spec(job),
                         call("Trainer.Config", **kwargs), after, doc)


def _model_spec(job: Job) -> object:
    """model_registry(flavor, converters=..., num_mtp_layers=...) for a catalog model with a flavor, else None
    (a note says what to build)."""
    flavor = FLAVOR_OF_MODEL.get(job.model.name)
    if flavor is None:
        return None
    kwargs: dict[str, object] = {}
    converters = _converters(job)
    if converters:
        kwargs["converters"] = converters
    if flavor.family == "deepseek_v3" and job.model.mtp_layers:
        kwargs["num_mtp_layers"] = job.model.mtp_layers
    return call("model_registry", flavor.flavor, **kwargs)


def _converters(job: Job) -> list[Call]:
    """fp8: torchao rowwise Float8 (Hopper) or MXFP8 (Blackwell: MXFP8 needs compute capability 10.0) on the
    Linears, and on the experts' grouped GEMMs of an MoE; fp4: NVFP4 on the layers' Linears, lm_head kept in bf16
    (as llama3's nvfp4 recipes). Each under torch.compile, which the converters need to be fast."""
    precision, moe = job.train.precision, job.model.is_moe
    if precision is Precision.FP8 and job.cluster.gpu.fp8_recipe(job.train) is Fp8Recipe.MXFP8:
        return [call("MXFP8LinearConverter.Config", model_compile_enabled=True)] + (
            [call("MXFP8GroupedExpertsConverter.Config", model_compile_enabled=True)] if moe else [])
    if precision is Precision.FP8:
        return [call("Float8LinearConverter.Config", recipe_name="rowwise", filter_fqns=["lm_head"],
                     model_compile_enabled=True)] + (
            [call("Float8GroupedExpertsConverter.Config", model_compile_enabled=True)] if moe else [])
    if precision is Precision.FP4:
        return [call("NVFP4LinearConverter.Config", fqns=["layers"], model_compile_enabled=True)]
    return []


def _training(job: Job) -> Call:
    """Tokens per micro-batch per data-parallel rank (mbs sequences, before CP/TP sharding), per step (the global
    batch), the context length, the steps of the run, the dtypes, CPU offload and CUDA graphs (trainer.py: grad
    accumulation = tokens per step / (tokens per micro-batch · num_pp_microbatches · dp))."""
    lay, train = job.resolved_layout, job.train
    kwargs: dict[str, object] = {
        "num_tokens_per_microbatch_per_dp_rank": lay.mbs * train.seq_len,
        "num_tokens_per_train_step": train.global_batch * train.seq_len, "max_context_length": train.seq_len,
        "steps": math.ceil(train.total_tokens / train.tokens_per_step),
        # dtype bfloat16 keeps params, grads and optimizer state in bf16 with no fp32 copy (configs.py)
        "dtype": "float32" if train.fp32_master_weights else "bfloat16", "mixed_precision_param": "bfloat16",
    }
    if lay.offload_optimizer or lay.offload_params:
        kwargs["enable_cpu_offload"] = True
    # torchtitan captures the whole step in a CUDA graph unless disabled, and refuses to with PP (trainer.py).
    kwargs["disable_cuda_graphs"] = not lay.cuda_graphs or lay.pp > 1
    return call("TrainingConfig", **kwargs)


def _parallelism(job: Job) -> Call:
    """ZeRO-0 is DDP (replicate); ZeRO ≥ 1 is FSDP2 over the dp ranks. Without a pipeline ZeRO-3 reshards the
    parameters after forward ('always'), ZeRO-2 keeps them gathered from forward through backward ('never'), ZeRO-1
    has no FSDP equivalent and gets ZeRO-2's setting, with a note. With a pipeline FSDP2 is ZeRO-1 (torch pipelining
    keeps weights and gradients unsharded across micro-batches, catalog/frameworks.yaml): torchtitan's 'default'."""
    lay = job.resolved_layout
    dp = lay.dp or 1
    kwargs: dict[str, object] = {"data_parallel_replicate_degree": dp if lay.zero == 0 else 1,
                                 "data_parallel_shard_degree": 1 if lay.zero == 0 else dp}
    if lay.zero >= 1:
        kwargs["fsdp_reshard_after_forward"] = (
            "default" if lay.pp > 1 and lay.zero == 1 else "always" if lay.zero == 3 else "never")
    kwargs["tensor_parallel_degree"] = lay.tp
    if lay.tp > 1:
        kwargs["enable_sequence_parallel"] = lay.resolved_sp
    kwargs["pipeline_parallel_degree"] = lay.pp
    if lay.pp > 1:
        kwargs |= {"pipeline_parallel_schedule": SCHEDULE_NAMES[lay.resolved_schedule],
                   "num_pp_microbatches": job.train.global_batch // (dp * lay.mbs)} | stage_split(job)
    kwargs["context_parallel_degree"] = lay.cp
    if job.model.is_moe:
        kwargs["expert_parallel_degree"] = lay.ep
    return call("ParallelismConfig", **kwargs)


def stage_split(job: Job) -> dict[str, int]:
    """The pipeline_parallel_* stage settings that build llmscale's split, or {} (io.torchtitan_names.stage_split)."""
    lay = job.resolved_layout
    return split_settings(job.model.layers, lay.pp, SCHEDULE_NAMES[lay.resolved_schedule], lay.vpp,
                          job.train.pipeline_splits)


def _recompute(lay: Layout) -> object:
    """SelectiveAC saves matmul and attention outputs and recomputes the cheap ops around them — the nearest
    torchtitan policy to Korthikanti's selective recompute; FullAC recomputes each block; None keeps everything."""
    return {Recompute.NONE: None, Recompute.SELECTIVE: call("SelectiveAC.Config"),
            Recompute.FULL: call("FullAC.Config")}[lay.recompute]


def _compile(job: Job) -> Call | None:
    """torch.compile makes the float8/mx/nvfp4 converters fast, and async TP runs only under it (configs.py:
    async TP requires compile.enable and 'model' in components)."""
    lay = job.resolved_layout
    async_tp = lay.tp_comm_overlap and lay.tp > 1
    if job.train.precision in (Precision.FP8, Precision.FP4) or async_tp:
        kwargs: dict[str, object] = {"enable": True, "components": ["model", "loss"]}
        if async_tp:
            kwargs["enable_async_tensor_parallel"] = True
        return call("CompileConfig", **kwargs)
    return None
