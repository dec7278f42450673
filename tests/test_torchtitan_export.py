"""`llmscale export --format torchtitan`: a torchtitan recipe module (a function returning `Trainer.Config`), every
name it uses checked against torchtitan's source, and its round trip: export → parse back (io.torchtitan_recipe,
with `ast`, never run) → the same predicted step (`estimate_step`, 1e-9 relative).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llmscale.cli.main import main
from llmscale.cost.step import estimate_step
from llmscale.errors import SpecError
from llmscale.io.catalog import load_model
from llmscale.io.resolve import Job, JobRequest, resolve
from llmscale.io.torchtitan_names import FLAVORS
from llmscale.io.torchtitan_recipe import parse_torchtitan_recipe
from llmscale.launch.document import ExportFormat, export_text
from llmscale.launch.torchtitan import TORCHTITAN_KEYS, torchtitan_recipe


def TitanRequest(**given: Any) -> JobRequest:
    """A request under torchtitan's release profile: what a torchtitan recipe's run gets by default."""
    return JobRequest(**{"framework": "torchtitan", **given})

ROOT = Path(__file__).resolve().parent.parent

# Every name below is defined in pytorch/torchtitan at commit b5bcd76c66d0acb1a08b176d9639425bc55e0b2a, extracted with
# `python scripts/torchtitan_fields.py --git <torchtitan> --commit b5bcd76c66d0acb1a08b176d9639425bc55e0b2a`:
# Class.field (dataclass fields, inherited ones included: torchtitan/config/configs.py, torchtitan/trainer.py
# Trainer.Config, activation_checkpoint.py, components/quantization/*.py, components/optimizer/optimizer.py),
# module:Name (importable names), family.model_registry(arg) and family[flavor] (torchtitan/models/<family>/
# __init__.py). test_frozen_names_are_defined_at_the_cited_commit re-extracts them when TORCHTITAN_GIT names a clone.
TORCHTITAN_COMMIT = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
VERIFIED_TORCHTITAN_NAMES = frozenset({
    "CompileConfig.components", "CompileConfig.enable", "CompileConfig.enable_async_tensor_parallel",
    "DebugConfig.moe_force_load_balance", "Float8GroupedExpertsConverter.Config.model_compile_enabled",
    "Float8LinearConverter.Config.filter_fqns", "Float8LinearConverter.Config.model_compile_enabled",
    "Float8LinearConverter.Config.recipe_name", "MXFP8GroupedExpertsConverter.Config.model_compile_enabled",
    "MXFP8LinearConverter.Config.model_compile_enabled", "NVFP4LinearConverter.Config.fqns",
    "NVFP4LinearConverter.Config.model_compile_enabled", "OptimizersContainer.Config.implementation",
    "ParallelismConfig.context_parallel_degree", "ParallelismConfig.data_parallel_replicate_degree",
    "ParallelismConfig.data_parallel_shard_degree", "ParallelismConfig.enable_sequence_parallel",
    "ParallelismConfig.expert_parallel_degree", "ParallelismConfig.fsdp_reshard_after_forward",
    "ParallelismConfig.num_pp_microbatches", "ParallelismConfig.pipeline_parallel_degree",
    "ParallelismConfig.pipeline_parallel_first_stage_less_layers",
    "ParallelismConfig.pipeline_parallel_last_stage_less_layers",
    "ParallelismConfig.pipeline_parallel_layers_per_stage", "ParallelismConfig.pipeline_parallel_schedule",
    "ParallelismConfig.tensor_parallel_degree", "Trainer.Config.activation_checkpoint", "Trainer.Config.compile",
    "Trainer.Config.debug", "Trainer.Config.model_spec", "Trainer.Config.optimizer", "Trainer.Config.parallelism",
    "Trainer.Config.training", "TrainingConfig.disable_cuda_graphs", "TrainingConfig.dtype",
    "TrainingConfig.enable_cpu_offload", "TrainingConfig.max_context_length",
    "TrainingConfig.mixed_precision_param", "TrainingConfig.num_tokens_per_microbatch_per_dp_rank",
    "TrainingConfig.num_tokens_per_train_step", "TrainingConfig.steps", "deepseek_v3.model_registry(converters)",
    "deepseek_v3.model_registry(flavor)", "deepseek_v3.model_registry(num_mtp_layers)", "deepseek_v3[671B]",
    "llama3.model_registry(converters)", "llama3.model_registry(flavor)", "llama3[405B]", "llama3[70B]",
    "llama3[8B]", "qwen3.model_registry(converters)", "qwen3.model_registry(flavor)", "qwen3[235B-A22B]",
    "torchtitan.components.optimizer:default_adamw",
    "torchtitan.components.quantization:Float8GroupedExpertsConverter",
    "torchtitan.components.quantization:Float8LinearConverter",
    "torchtitan.components.quantization:MXFP8GroupedExpertsConverter",
    "torchtitan.components.quantization:MXFP8LinearConverter",
    "torchtitan.components.quantization:NVFP4LinearConverter", "torchtitan.config:CompileConfig",
    "torchtitan.config:DebugConfig", "torchtitan.config:ParallelismConfig", "torchtitan.config:TrainingConfig",
    "torchtitan.distributed.activation_checkpoint:FullAC",
    "torchtitan.distributed.activation_checkpoint:SelectiveAC", "torchtitan.models.deepseek_v3:model_registry",
    "torchtitan.models.llama3:model_registry", "torchtitan.models.qwen3:model_registry",
    "torchtitan.trainer:Trainer"
})  # fmt: skip

# Trainer.Config fields whose type a recipe sets attributes of (`config.optimizer.implementation = ...`):
# trainer.py @ b5bcd76 `optimizer: OptimizersContainer.Config`.
FIELD_TYPES = {"optimizer": "OptimizersContainer.Config"}
# torch.distributed.pipelining get_schedule_class names torchtitan imports at b5bcd76 (pipeline_parallel.py).
TORCH_SCHEDULES = frozenset({"1F1B", "Interleaved1F1B", "GPipe", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"})


def names_used(source: str) -> set[str]:
    """Every torchtitan name the recipe uses, in the frozen set's notation, read from its syntax tree."""
    tree = ast.parse(source)
    imported: dict[str, str] = {}
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                imported[alias.name] = str(node.module)
                used.add(f"{node.module}:{alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func == "model_registry":
                family = imported[func].removeprefix("torchtitan.models.")
                flavor = node.args[0]
                assert isinstance(flavor, ast.Constant)
                used |= {f"{family}[{flavor.value}]", f"{family}.model_registry(flavor)"}
                used |= {f"{family}.model_registry({k.arg})" for k in node.keywords}
            elif func != "default_adamw":  # called with no arguments
                assert func.split(".")[0] in imported, func
                used |= {f"{func}.{k.arg}" for k in node.keywords}
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute):
            section, field = ast.unparse(node.targets[0]).split(".")[1:]
            used |= {f"Trainer.Config.{section}", f"{FIELD_TYPES[section]}.{field}"}
    return used


def step_s(job: Job) -> float:
    return float(estimate_step(job.model, job.cluster, job.train, job.layouts, job.constants).step_time_s[0])


def same_job(job: Job, back: Job) -> bool:
    return (step_s(back) == pytest.approx(step_s(job), rel=1e-9) and back.resolved_layout == job.resolved_layout
            and back.model == job.model
            and back.train.model_dump(exclude={"total_tokens"}) == job.train.model_dump(exclude={"total_tokens"}))


def read_back(text: str, job: Job) -> Job:
    return resolve(parse_torchtitan_recipe(text).request(cluster=job.cluster))


CASES: dict[str, JobRequest] = {
    # Llama 3 70B with FSDP (ZeRO-3) × TP 8 × interleaved PP 4 × 5 virtual stages, full recompute.
    "a-dense-fsdp-tp-pp-interleaved": TitanRequest(
        model="llama3-70b", cluster="eos-h100", gpus=512, train={"global_batch": 512, "seq_len": 8192},
        layout={"tp": 8, "pp": 4, "vpp": 5, "zero": 3, "recompute": "full"}),
    # Llama 3.1 405B in FP8 (rowwise float8 converters), ZeRO-2, async TP, selective recompute, 126 layers on 16 × 4.
    "b-fp8": TitanRequest(
        model="llama3-405b", cluster="eos-h100", gpus=8192,
        train={"global_batch": 2048, "seq_len": 8192, "precision": "fp8"},
        layout={"tp": 8, "pp": 16, "vpp": 4, "zero": 2, "tp_comm_overlap": True, "recompute": "selective"}),
    # Qwen3-235B-A22B: 128 experts over EP 16, 94 layers on PP 4 (23/24/24/23: first/last one layer short); etp 1,
    # torchtitan's expert layout (experts shard over efsdp × ep, no expert TP: configs.py expert_parallel_degree).
    "c-moe-ep": TitanRequest(
        model="qwen3-235b-a22b", cluster="eos-h100", gpus=1024,
        train={"global_batch": 1024, "seq_len": 4096, "routing": "loss-free"},
        layout={"tp": 2, "pp": 4, "ep": 16, "etp": 1, "zero": 3, "recompute": "full"}),
    # DeepSeek-V3 in FP8 with MTP, forced balancing, bf16 Adam moments, ZeRO-0 (DDP).
    "d-moe-fp8-forced": TitanRequest(
        model="deepseek-v3", cluster="deepseek-v3-h800", gpus=2048,
        train={"global_batch": 15360, "seq_len": 4096, "precision": "fp8", "routing": "forced", "bf16_moments": True},
        layout={"pp": 2, "ep": 64, "zero": 0, "recompute": "full"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_round_trip_predicts_the_same_step(case: str) -> None:
    job = resolve(CASES[case])
    text = export_text(job, ExportFormat.TORCHTITAN)
    back = read_back(text, job)
    print(f"{case}: step {step_s(job):.9f} s → {step_s(back):.9f} s (model {job.model.name}, {job.num_gpus} GPUs)")
    assert step_s(back) == pytest.approx(step_s(job), rel=1e-9)
    assert back.resolved_layout == job.resolved_layout and back.model == job.model
    assert back.train.model_dump(exclude={"total_tokens"}) == job.train.model_dump(exclude={"total_tokens"})


def test_the_cases_exercise_what_they_say() -> None:
    # (a) shards, interleaves and splits by layers_per_stage; (b) converts to float8; (c) spreads experts.
    a, b, c = (torchtitan_recipe(resolve(CASES[k])) for k in ("a-dense-fsdp-tp-pp-interleaved", "b-fp8", "c-moe-ep"))
    assert 'fsdp_reshard_after_forward="always"' in a and '"Interleaved1F1B"' in a
    assert "pipeline_parallel_layers_per_stage=4" in a  # 80 layers = 20 stages of 4
    assert "Float8LinearConverter.Config(" in b and "enable_async_tensor_parallel=True" in b
    assert "expert_parallel_degree=16" in c and "pipeline_parallel_first_stage_less_layers=1" in c


def drop_keyword(text: str, name: str) -> str:
    """The recipe without keyword `name` (wherever it is given)."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            node.keywords = [k for k in node.keywords if k.arg != name]
    return ast.unparse(tree)


@pytest.mark.parametrize(("case", "name"), [
    ("d-moe-fp8-forced", "data_parallel_replicate_degree"),  # DDP over 1024 → dp 1
    ("a-dense-fsdp-tp-pp-interleaved", "pipeline_parallel_layers_per_stage"),  # 5 virtual stages → default 2
    ("a-dense-fsdp-tp-pp-interleaved", "activation_checkpoint"),  # full → torchtitan's default SelectiveAC
    ("a-dense-fsdp-tp-pp-interleaved", "tensor_parallel_degree"),
    ("b-fp8", "converters"), ("b-fp8", "num_tokens_per_microbatch_per_dp_rank"),
    ("c-moe-ep", "expert_parallel_degree"), ("d-moe-fp8-forced", "num_mtp_layers"),
    ("d-moe-fp8-forced", "debug"),
])  # fmt: skip
def test_a_dropped_field_fails_the_round_trip(case: str, name: str) -> None:
    job = resolve(CASES[case])
    text = export_text(job, ExportFormat.TORCHTITAN)
    preamble = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    dropped = drop_keyword(text, name)
    assert dropped != ast.unparse(ast.parse(text))  # the keyword was there
    try:
        back = read_back(preamble + "\n" + dropped, job)
    except SpecError:
        return  # refused outright is a failure too
    assert not same_job(job, back)


MAKES: list[JobRequest] = [*CASES.values(),
    TitanRequest(model="gpt3-175b", cluster="selene", train={"global_batch": 1536, "seq_len": 2048},
               layout={"tp": 8, "pp": 8, "dp": 24, "vpp": 4, "recompute": "selective", "offload_optimizer": True}),
    TitanRequest(model="llama3-8b", cluster="dgx-b200", gpus=64, train={"global_batch": 256, "precision": "fp4"},
               layout={"tp": 1, "dp": 64, "cuda_graphs": True}),
    TitanRequest(model="qwen3-235b-a22b", cluster="gb200-nvl72", gpus=1152, train={"global_batch": 1152,
               "precision": "fp8", "fp8_recipe": "mxfp8"},  # torchtitan's own default is rowwise Float8
               layout={"tp": 1, "pp": 8, "ep": 16, "zero": 3}),
    TitanRequest(model="deepseek-v3", cluster="deepseek-v3-h800", gpus=2048,
               train={"global_batch": 15360, "seq_len": 4096, "precision": "fp8"},
               layout={"pp": 16, "dp": 128, "ep": 64, "schedule": "dualpipe"}),
]  # fmt: skip


@pytest.mark.parametrize("request_", MAKES)
def test_every_name_a_recipe_uses_is_verified(request_: JobRequest) -> None:
    # A name torchtitan does not define fails the launch (an ImportError, a TypeError on an unknown keyword).
    source = torchtitan_recipe(resolve(request_))
    compile(source, "recipe.py", "exec")  # valid Python; never executed
    assert names_used(source) <= VERIFIED_TORCHTITAN_NAMES
    assert names_used(source) - {n for n in names_used(source) if ":" in n or "[" in n} <= set(TORCHTITAN_KEYS)


def test_torchtitan_key_tuple_is_verified() -> None:
    assert set(TORCHTITAN_KEYS) <= VERIFIED_TORCHTITAN_NAMES


# torchtitan's flavor dimensions as written in torchtitan/models/<family>/__init__.py @ b5bcd76 (_8b, _70b, _405b:
# dim, n_layers, n_heads, n_kv_heads, vocab_size, hidden_dim = compute_ffn_hidden_dim(dim, multiple_of, multiplier);
# _671b: dim 7168, 61 layers, 128 heads, vocab 129280, q/kv lora 1536/512, 256 experts of 2048, top 8, 3 dense;
# _235b_a22b: dim 4096, 94 layers, 64/4 heads, head_dim 128, 128 experts of 1536, top 8, vocab 151936).
FLAVOR_SHAPES = {
    ("llama3", "8B"): {"hidden": 4096, "layers": 32, "heads": 32, "kv_heads": 8, "vocab": 128256, "ffn_hidden": 14336},
    ("llama3", "70B"): {"hidden": 8192, "layers": 80, "heads": 64, "kv_heads": 8, "vocab": 128256, "ffn_hidden": 28672},
    ("llama3", "405B"): {"hidden": 16384, "layers": 126, "heads": 128, "kv_heads": 8, "vocab": 128256,
                         "ffn_hidden": 53248},
    ("deepseek_v3", "671B"): {"hidden": 7168, "layers": 61, "heads": 128, "vocab": 129280, "experts": 256,
                              "top_k": 8, "expert_ffn_hidden": 2048, "first_dense_layers": 3, "ffn_hidden": 18432},
    ("qwen3", "235B-A22B"): {"hidden": 4096, "layers": 94, "heads": 64, "kv_heads": 4, "head_dim": 128,
                             "vocab": 151936, "experts": 128, "top_k": 8, "expert_ffn_hidden": 1536},
}  # fmt: skip


@pytest.mark.parametrize("flavor", FLAVORS, ids=lambda f: f.model)
def test_each_flavor_has_its_catalog_models_shape(flavor: Any) -> None:
    model = load_model(flavor.model)
    shape = FLAVOR_SHAPES[flavor.family, flavor.flavor]
    assert {k: getattr(model, k) for k in shape} == shape


def test_fp8_on_blackwell_is_mxfp8() -> None:
    text = torchtitan_recipe(resolve(MAKES[-2]))
    assert "MXFP8LinearConverter.Config(" in text and "MXFP8GroupedExpertsConverter.Config(" in text


def test_zero_stages_map_to_ddp_and_fsdp() -> None:
    base = {"model": "gpt3-175b", "cluster": "selene", "train": {"global_batch": 1536, "seq_len": 2048}}
    zero0 = torchtitan_recipe(resolve(TitanRequest(**base, layout={"tp": 8, "pp": 8, "dp": 24, "zero": 0})))
    assert "data_parallel_replicate_degree=24" in zero0 and "data_parallel_shard_degree=1," in zero0
    # With a pipeline, FSDP2 runs as ZeRO-1 (torch 2.13 pipelining/stage.py keeps weights and gradients unsharded
    # across micro-batches): 'default', no note; it reads back as zero 1.
    zero1 = export_text(resolve(TitanRequest(**base, layout={"tp": 8, "pp": 8, "dp": 24})), ExportFormat.TORCHTITAN)
    assert 'fsdp_reshard_after_forward="default"' in zero1 and "no torchtitan equivalent" not in zero1
    assert parse_torchtitan_recipe(zero1).layout["zero"] == 1
    # Without one there is no optimizer-only sharding: ZeRO-2's setting and a note.
    flat = export_text(resolve(TitanRequest(**base, layout={"tp": 8, "pp": 1, "dp": 192})), ExportFormat.TORCHTITAN)
    assert 'fsdp_reshard_after_forward="never"' in flat and "# note: zero 1 has no torchtitan equivalent" in flat
    zero3 = export_text(resolve(TitanRequest(**base, layout={"tp": 8, "pp": 8, "dp": 24, "zero": 3})),
                        ExportFormat.TORCHTITAN)
    assert "plan it as zero 1" in zero3


def test_without_pipeline_the_step_accumulates_micro_batches() -> None:
    # No PP: 2 sequences per micro-batch, 1536 per step over dp 192: torchtitan accumulates 4 micro-batches.
    text = torchtitan_recipe(resolve(TitanRequest(model="gpt3-175b", cluster="selene", train={
        "global_batch": 1536, "seq_len": 2048}, layout={"tp": 8, "dp": 192, "mbs": 2})))
    assert "num_tokens_per_microbatch_per_dp_rank=4096" in text and "num_tokens_per_train_step=3145728" in text
    assert "num_pp_microbatches" not in text and "pipeline_parallel_schedule" not in text


def test_deepseek_dualpipe_is_dualpipev_with_notes() -> None:
    text = export_text(resolve(MAKES[-1]), ExportFormat.TORCHTITAN)
    assert '"DualPipeV"' in text and "# note: schedule dualpipe" in text
    # 61 layers over 16 ranks × 2 stages are not equal stages in a V: torchtitan's default split, and a note.
    assert "pipeline_parallel_layers_per_stage" not in text and "default split" in text


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "zb-h1", "zbv", "dualpipe"])
def test_schedule_names_are_torch_schedules(schedule: str) -> None:
    job = resolve(TitanRequest(model="gpt3-175b", cluster="selene", train={"global_batch": 1536, "seq_len": 2048},
                             layout={"tp": 8, "pp": 8, "dp": 24, "vpp": 2 if schedule == "interleaved" else 1,
                                     "schedule": schedule}))
    (value,) = [k.value for n in ast.walk(ast.parse(torchtitan_recipe(job))) if isinstance(n, ast.Call)
                for k in n.keywords if k.arg == "pipeline_parallel_schedule"]
    assert isinstance(value, ast.Constant) and value.value in TORCH_SCHEDULES


def test_a_model_without_flavor_is_a_note_and_read_back_by_name(tmp_path: Path) -> None:
    job = resolve(TitanRequest(model="mixtral-8x7b", cluster="eos-h100", gpus=64,
                             train={"global_batch": 256, "routing": "loss-free"},
                             layout={"dp": 64, "ep": 8, "zero": 3}))
    text = export_text(job, ExportFormat.TORCHTITAN)
    assert "model_spec = None" in text and "# note: model mixtral-8x7b has no torchtitan flavor" in text
    assert same_job(job, read_back(text, job))  # the preamble names the catalog model


@pytest.mark.parametrize(("source", "named"), [
    ("x = 1\n", "recipe"),  # no function
    ("from os import system\ndef f():\n    system('ls')\n    return 1\n", "system"),  # not an assignment: not run
    ("from torchtitan.trainer import Trainer\ndef f():\n    return Trainer.Config(frobnicate=1)\n", "frobnicate"),
    ("from torchtitan.trainer import Trainer\nfrom torchtitan.config import ParallelismConfig\ndef f():\n"
     "    return Trainer.Config(parallelism=ParallelismConfig(tensor_parallel_degree=2, foo=1))\n", "foo"),
    ("def f():\n    return Trainer.Config()\n", "Trainer.Config"),  # not imported
    # Found by the fuzz suite (issue 14): a zero sequence length divided by zero; inf named no field.
    ("from torchtitan.trainer import Trainer\nfrom torchtitan.config import ParallelismConfig, TrainingConfig\n"
     "def f():\n    return Trainer.Config(parallelism=ParallelismConfig(data_parallel_shard_degree=8),\n"
     "                          training=TrainingConfig(max_context_length=0))\n", "max_context_length"),
    ("from torchtitan.trainer import Trainer\nfrom torchtitan.config import TrainingConfig\ndef f():\n"
     "    return Trainer.Config(training=TrainingConfig(max_context_length=inf))\n", "max_context_length"),
])  # fmt: skip
def test_bad_recipes_are_one_line(source: str, named: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_torchtitan_recipe(source, "llama3-8b")
    assert named in str(info.value) and "\n" not in str(info.value)


def test_read_torchtitan_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = resolve(CASES["c-moe-ep"])
    path = tmp_path / "recipe.py"
    path.write_text(export_text(job, ExportFormat.TORCHTITAN), encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        main(["read-torchtitan", str(path), "--json"])
    out, _ = capsys.readouterr()
    assert info.value.code in (0, None)
    assert json.loads(out)["step_time_s"] == pytest.approx(step_s(job), rel=1e-9)


@pytest.mark.skipif(not os.environ.get("TORCHTITAN_GIT"), reason="set TORCHTITAN_GIT to a torchtitan clone")
def test_frozen_names_are_defined_at_the_cited_commit() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "torchtitan_fields.py"), "--git",
                           os.environ["TORCHTITAN_GIT"], "--commit", TORCHTITAN_COMMIT], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) >= VERIFIED_TORCHTITAN_NAMES


def test_fsdp_memory_settings_without_a_torchtitan_field_are_notes() -> None:
    # torchtitan @b5bcd76c has none of them: FSDP2 units are transformer blocks (torchtitan/distributed/fsdp.py
    # fully_shard per block), its Float8/MXFP8 converters have no FP8 all-gather (components/quantization/), and
    # cross_entropy_loss casts the logits to float32 (components/loss.py `pred.float()`).
    train = {"global_batch": 128, "seq_len": 8192, "precision": "fp8", "zero3_gather": "module", "fp8_params": True,
             "fsdp_double_buffer": True, "fused_cross_entropy": True, "zero3_synchronous": True}
    job = resolve(TitanRequest(model="llama3-70b", cluster="gb200-nvl72", gpus=64, train=train,
                             layout={"tp": 1, "pp": 1, "dp": 64, "zero": 3}))
    text = export_text(job, ExportFormat.TORCHTITAN)
    for field in ("zero3_gather module", "zero3_synchronous", "fp8_params", "fsdp_double_buffer",
                  "fused_cross_entropy"):
        assert f"# note: {field}" in text and "torchtitan" in text.split(f"# note: {field}")[1].splitlines()[0]
    plain = export_text(resolve(TitanRequest(model="llama3-70b", cluster="gb200-nvl72", gpus=64,
                                           train={"global_batch": 128, "seq_len": 8192, "precision": "fp8"},
                                           layout={"tp": 1, "pp": 1, "dp": 64, "zero": 3})), ExportFormat.TORCHTITAN)
    assert not any(f"# note: {f}" in plain for f in ("zero3_", "fp8_params", "fsdp_double", "fused_cross"))
