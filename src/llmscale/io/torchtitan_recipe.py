"""A torchtitan recipe read back into a job: the module `llmscale export --format torchtitan` writes (or any recipe
of the same shape) as a model, a run, a layout and a GPU count. Read with `ast` (io.torchtitan_syntax), never run.

Defaults are torchtitan's, not llmscale's, as ParallelismConfig, TrainingConfig and Trainer.Config define them at
pytorch/torchtitan @ b5bcd76c66d0acb1a08b176d9639425bc55e0b2a (torchtitan/config/configs.py, torchtitan/trainer.py):
no activation_checkpoint is SelectiveAC, no disable_cuda_graphs is CUDA graphs on, first/last stage less layers 1.
A field this reader does not know is an error naming it; the Trainer.Config sections with no llmscale field (data,
tokenizer, loss, checkpointing, ...) are read and listed in `ParsedRecipe.inert`. The model is the flavor's
catalog model (io.torchtitan_names.FLAVORS), else the one the export preamble names, else the caller's.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from llmscale.errors import SpecError
from llmscale.io.catalog import load_model
from llmscale.io.megatron_args import ParsedLaunch
from llmscale.io.torchtitan_names import (
    CONVERTERS,
    FP4_CONVERTERS,
    MODEL_OF_FLAVOR,
    SCHEDULE_OF_NAME,
    V_SCHEDULES,
    split_settings,
    stages_per_rank,
)
from llmscale.io.torchtitan_syntax import WHERE, Called, read_tree
from llmscale.specs.model import ModelSpec

_READ: dict[str, frozenset[str]] = {
    "Trainer.Config": frozenset({"model_spec", "training", "parallelism", "activation_checkpoint", "compile", "debug",
                                 "optimizer"}),
    "TrainingConfig": frozenset({"num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step", "steps",
                                 "max_context_length", "dtype", "mixed_precision_param", "enable_cpu_offload",
                                 "disable_cuda_graphs", "max_norm", "gc_freq"}),
    "ParallelismConfig": frozenset({"data_parallel_replicate_degree", "data_parallel_shard_degree",
                                    "fsdp_reshard_after_forward", "tensor_parallel_degree", "enable_sequence_parallel",
                                    "pipeline_parallel_degree", "pipeline_parallel_schedule", "num_pp_microbatches",
                                    "pipeline_parallel_layers_per_stage", "pipeline_parallel_first_stage_less_layers",
                                    "pipeline_parallel_last_stage_less_layers", "context_parallel_degree",
                                    "expert_parallel_degree"}),
    "CompileConfig": frozenset({"enable", "components", "enable_async_tensor_parallel", "backend"}),
    "DebugConfig": frozenset({"moe_force_load_balance", "seed"}),
}
"""The fields read of each config class (max_norm, gc_freq, backend and seed steer torchtitan only)."""
_INERT_SECTIONS = frozenset({"hf_assets_path", "dump_folder", "profiler", "metrics", "tokenizer", "dataloader",
                             "lr_scheduler", "checkpoint", "comm", "validator", "override", "loss"})


@dataclass(frozen=True)
class ParsedRecipe(ParsedLaunch):
    """A recipe read back: the job it describes (`request`, as a Megatron launch's), the function it came from and the
    Trainer.Config sections read without a llmscale field (`inert`)."""

    function: str = ""
    origin: ClassVar[str] = WHERE
    framework: ClassVar[str] = "torchtitan"


def _kwargs(value: Any, cls: str, name: str) -> dict[str, Any]:
    """The keywords of a `cls(...)` call (an absent section: {}), each one this reader knows."""
    if value is None:
        return {}
    if not isinstance(value, Called) or value.func != cls or value.args:
        raise SpecError(name, getattr(value, "func", value), f"must be {cls}(keyword=...)", where=WHERE)
    for key in value.kwargs:
        if key not in _READ[cls]:
            raise SpecError(f"{cls}.{key}", value.kwargs[key], "is not a field llmscale reads back "
                            "(see docs/export.md)", where=WHERE)
    return value.kwargs


def parse_torchtitan_recipe(text: str, model: str | ModelSpec | None = None) -> ParsedRecipe:
    """The job a recipe describes (module docstring); one SpecError line for what does not fit."""
    tree = read_tree(text)
    head = re.search(r"· model (\S+) · cluster (\S+) · ([\d,]+) GPUs", text)
    top = tree.config.kwargs
    unknown = set(top) - _READ["Trainer.Config"] - _INERT_SECTIONS
    if unknown:
        raise SpecError(f"Trainer.Config.{sorted(unknown)[0]}", None, "is not a field llmscale reads back", where=WHERE)
    spec, precision = _model(top.get("model_spec"), model if model is not None else head[1] if head else None)
    training = _kwargs(top.get("training"), "TrainingConfig", "training")
    par = _kwargs(top.get("parallelism"), "ParallelismConfig", "parallelism")
    gpus = int(head[3].replace(",", "")) if head else None
    layout = _layout(par, gpus, spec)
    split = layout.pop(SPLIT_KEY, None)
    train = _train(training, layout, par, spec, precision) | ({"pipeline_splits": [split]} if split else {})
    _run(top, tree.assigned, spec, layout, train)
    layout["cuda_graphs"] = not training.get("disable_cuda_graphs", False)
    if training.get("enable_cpu_offload"):
        layout["offload_optimizer"] = layout["offload_params"] = True
    inert = tuple(sorted(set(top) & _INERT_SECTIONS))
    return ParsedRecipe(spec, train, layout, gpus, head[2] if head else None, inert, function=tree.function)


def _model(value: Any, fallback: str | ModelSpec | None) -> tuple[ModelSpec, str]:
    """The model of `model_registry(flavor, ...)` and the precision its converters set."""
    if value is None:
        if fallback is None:
            raise SpecError("model_spec", None, "is None and no model is named (give --model)", where=WHERE)
        return (fallback if isinstance(fallback, ModelSpec) else load_model(fallback)), "bf16"
    if not (isinstance(value, Called) and value.func == "model_registry" and len(value.args) == 1):
        raise SpecError("model_spec", getattr(value, "func", value), "must be model_registry(flavor, ...)", where=WHERE)
    family, flavor = value.module.removeprefix("torchtitan.models."), value.args[0]
    if (family, flavor) not in MODEL_OF_FLAVOR:
        allowed = ", ".join(f"{f} {v}" for f, v in MODEL_OF_FLAVOR)
        raise SpecError("model_registry", f"{family} {flavor}", f"llmscale maps {allowed}", where=WHERE)
    spec = load_model(MODEL_OF_FLAVOR[family, flavor])
    unknown = set(value.kwargs) - {"converters", "num_mtp_layers"}
    if unknown:
        raise SpecError(f"model_registry.{sorted(unknown)[0]}", None, "is not read back", where=WHERE)
    if family == "deepseek_v3":
        spec = spec.model_copy(update={"mtp_layers": _whole(value.kwargs, "num_mtp_layers", 0)})
    names = [getattr(c, "func", str(c)).removesuffix(".Config") for c in value.kwargs.get("converters", [])]
    if set(names) - set(CONVERTERS):
        raise SpecError("converters", ", ".join(sorted(set(names) - set(CONVERTERS))), "are not read back",
                        where=WHERE)
    return spec, "fp4" if set(names) & set(FP4_CONVERTERS) else "fp8" if names else "bf16"


def _zero(shard: int, reshard: Any, pp: int) -> int:
    """The ZeRO stage of a data-parallel setting: DDP is 0; FSDP2 over pipeline stages with 'default' is ZeRO-1
    (launch.torchtitan._parallelism); else 'never' is 2 and 'always' (or 'default' without a pipeline) 3."""
    if shard == 1 and reshard is None:
        return 0
    if pp > 1 and reshard in (None, "default"):
        return 1
    return 2 if reshard == "never" else 3


def _whole(section: dict[str, Any], key: str, default: int) -> int:
    """A whole-number setting of the recipe (`default` when absent); a text, a fraction or a bool is one SpecError
    naming it (int('') raised ValueError, int(1.5) read 1)."""
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(key, value, "must be a whole number", where=WHERE)
    return value


def _layout(par: dict[str, Any], gpus: int | None, model: ModelSpec) -> dict[str, Any]:
    """Degrees, ZeRO stage, sequence parallel, schedule and virtual stages (torchtitan's defaults when absent)."""
    tp, pp, cp = (_whole(par, k, 1) for k in ("tensor_parallel_degree", "pipeline_parallel_degree",
                                              "context_parallel_degree"))
    replicate, shard = _whole(par, "data_parallel_replicate_degree", 1), _whole(par, "data_parallel_shard_degree", -1)
    if shard == -1:  # torchtitan: the leftover ranks
        if gpus is None:
            raise SpecError("data_parallel_shard_degree", -1, "needs the GPU count (give --gpus)", where=WHERE)
        shard = gpus // (replicate * tp * pp * cp)
    if replicate > 1 and shard > 1:
        raise SpecError("data_parallel_replicate_degree", replicate, "with data_parallel_shard_degree > 1 is HSDP, "
                        "which llmscale does not model", where=WHERE)
    reshard = par.get("fsdp_reshard_after_forward")
    zero = _zero(shard, reshard, pp)
    layout: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "dp": replicate * shard, "zero": zero,
                              "ep": _whole(par, "expert_parallel_degree", 1)}
    if model.is_moe:
        layout["etp"] = 1
    if tp > 1 and "enable_sequence_parallel" in par:
        layout["sp"] = bool(par["enable_sequence_parallel"])
    if pp > 1:
        _stages(par, layout, model.layers)
    return layout


SPLIT_KEY = "_pipeline_split"
"""Where _stages leaves a run's own split for the train spec (popped before the layout is read)."""


def _stages(par: dict[str, Any], layout: dict[str, Any], layers: int) -> None:
    name = str(par.get("pipeline_parallel_schedule", "1F1B"))
    if name not in SCHEDULE_OF_NAME:
        raise SpecError("pipeline_parallel_schedule", name, f"llmscale reads {', '.join(SCHEDULE_OF_NAME)}",
                        where=WHERE)
    layout["schedule"] = SCHEDULE_OF_NAME[name].value
    pp, per_stage = layout["pp"], par.get("pipeline_parallel_layers_per_stage")
    keys = ("pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers")
    first, last = (_whole(par, k, 1) for k in keys)
    stages = math.ceil((layers + first + last) / per_stage) if per_stage else pp * (1 if name == "1F1B" else 2)
    vpp = stages // pp if name == "Interleaved1F1B" else 1
    if stages % pp or stages_per_rank(name, vpp) != stages // pp:
        raise SpecError("pipeline_parallel_layers_per_stage", per_stage, f"gives {stages} stages, not "
                        f"{stages_per_rank(name, vpp)} per rank of pp {pp} under {name}", where=WHERE)
    given = {"pipeline_parallel_layers_per_stage": per_stage, keys[0]: first, keys[1]: last}
    layout["vpp"] = vpp
    if per_stage is None or split_settings(layers, pp, name, vpp) == given:
        return
    # equal stages but the first and last (what export writes for a run's own split): read back as that split
    sizes = [per_stage - first] + [per_stage] * (stages - 2) + [per_stage - last]
    if name in V_SCHEDULES or stages < 2 or stages * per_stage != layers + first + last or min(sizes) < 0:
        raise SpecError("pipeline_parallel_layers_per_stage", per_stage, "with these first/last settings is neither "
                        "llmscale's split nor equal stages between the first and last", where=WHERE)
    layout[SPLIT_KEY] = {"pp": pp, "vpp": vpp, "layers": sizes}


def _train(training: dict[str, Any], layout: dict[str, Any], par: dict[str, Any], model: ModelSpec,
           precision: str) -> dict[str, Any]:
    seq = _whole(training, "max_context_length", 2048)
    micro = _whole(training, "num_tokens_per_microbatch_per_dp_rank", 16384)
    for name, value in (("max_context_length", seq), ("num_tokens_per_microbatch_per_dp_rank", micro)):
        if value < 1:
            raise SpecError(name, value, "must be a positive number of tokens", where=WHERE)
    if micro % seq:
        raise SpecError("num_tokens_per_microbatch_per_dp_rank", micro, f"is not whole sequences of {seq}",
                        where=WHERE)
    layout["mbs"] = micro // seq
    per_step = _whole(training, "num_tokens_per_train_step", -1)
    microbatches = _whole(par, "num_pp_microbatches", 1) if layout["pp"] > 1 else 1
    gbs = per_step // seq if per_step > 0 else layout["mbs"] * microbatches * layout["dp"]
    train: dict[str, Any] = {"seq_len": seq, "global_batch": gbs, "precision": precision,
                             "total_tokens": float(_whole(training, "steps", 10000) * gbs * seq),
                             "fp32_master_weights": training.get("dtype", "float32") != "bfloat16"}
    if model.is_moe:
        train["routing"] = "loss-free"  # torchtitan's MoE: expert-bias balancing (models/common/moe.py)
    return train


def _run(top: dict[str, Any], assigned: dict[str, Any], model: ModelSpec, layout: dict[str, Any],
         train: dict[str, Any]) -> None:
    """Recompute, async TP, forced balancing and bf16 optimizer states."""
    ac = top.get("activation_checkpoint", Called("SelectiveAC.Config", ""))  # Trainer.Config's default
    modes = {"SelectiveAC.Config": "selective", "FullAC.Config": "full"}
    if ac is not None and getattr(ac, "func", None) not in modes:
        raise SpecError("activation_checkpoint", getattr(ac, "func", ac), "llmscale reads None, SelectiveAC.Config(), "
                        "FullAC.Config()", where=WHERE)
    layout["recompute"] = "none" if ac is None else modes[ac.func]
    compiled = _kwargs(top.get("compile"), "CompileConfig", "compile")
    layout["tp_comm_overlap"] = bool(compiled.get("enable_async_tensor_parallel", False))
    if _kwargs(top.get("debug"), "DebugConfig", "debug").get("moe_force_load_balance") and model.is_moe:
        train["routing"] = "forced"
    optimizer = top.get("optimizer")
    if optimizer is not None and getattr(optimizer, "func", None) != "default_adamw":
        raise SpecError("optimizer", getattr(optimizer, "func", optimizer), "llmscale reads default_adamw(...)",
                        where=WHERE)
    unknown = set(assigned) - {"optimizer.implementation"}
    if unknown:
        raise SpecError(f"config.{sorted(unknown)[0]}", None, "is not an assignment llmscale reads back", where=WHERE)
    train["bf16_moments"] = assigned.get("optimizer.implementation") == "fused_opt_states_bf16"
