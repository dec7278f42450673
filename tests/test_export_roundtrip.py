"""Plan → export → parse back → the same predicted step (issue 13, item 2), through Megatron-LM flags.

Each case resolves a job (a plan's best layout or a fixed one), writes it with `export --format megatron`, reads the
text back with `io.megatron_args.parse_megatron_args`, and predicts the step of the parsed job with `estimate_step`.
The two steps must agree to 1e-9 relative: a flag the exporter dropped (a layout flag, the MoE pattern, the
precision) changes the parsed job and with it the step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmscale.cli.main import main
from llmscale.cost.step import estimate_step
from llmscale.errors import SpecError
from llmscale.io.megatron_args import KNOWN_FLAGS, parse_megatron_args
from llmscale.io.resolve import Job, JobRequest, resolve
from llmscale.launch.document import ExportFormat, export_text
from llmscale.launch.megatron import MEGATRON_FLAGS, megatron_args
from llmscale.specs.train import TrainSpec

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "tests" / "fixtures" / "hf"


def step_s(job: Job) -> float:
    return float(estimate_step(job.model, job.cluster, job.train, job.layouts, job.constants).step_time_s[0])


def round_trip(job: Job) -> tuple[float, float, Job]:
    text = export_text(job, ExportFormat.MEGATRON)
    back = resolve(parse_megatron_args(text).request(cluster=job.cluster))
    return step_s(job), step_s(back), back


def plan_best(capsys: pytest.CaptureFixture[str], tmp_path: Path, *args: str) -> Job:
    """The best layout of `llmscale plan --json`, resolved again through --from-plan."""
    with pytest.raises(SystemExit):
        main(["plan", *args, "--json"])
    out, _ = capsys.readouterr()
    path = tmp_path / "plan.json"
    path.write_text(out, encoding="utf-8")
    return resolve(JobRequest(from_plan=path))


def yaml_model(tmp_path: Path) -> Path:
    # A 24-layer GQA model with its own RoPE base and epsilon, written as a llmscale model file.
    path = tmp_path / "m24.yaml"
    path.write_text(yaml.safe_dump({"name": "m24", "layers": 24, "hidden": 2048, "ffn_hidden": 5632, "heads": 16,
                                    "kv_heads": 4, "vocab": 32000, "rope_theta": 250000.0, "norm_eps": 1e-6}),
                    encoding="utf-8")
    return path


CASES: dict[str, Any] = {
    "a-catalog-plan": lambda tmp, cap: plan_best(cap, tmp, "--model", "llama3-8b", "--cluster", "eos-h100",
                                                 "--gpus", "64", "--gbs", "512", "--seq-len", "8192"),
    "b-yaml-model": lambda tmp, cap: resolve(JobRequest(model=yaml_model(tmp), cluster="eos-h100", gpus=32,
                                                        train={"global_batch": 256, "seq_len": 4096},
                                                        layout={"tp": 2, "pp": 4, "dp": 4, "vpp": 3})),
    "c-hf-config": lambda tmp, cap: resolve(JobRequest(model=HF / "Llama-3.1-8B" / "config.json", cluster="eos-h100",
                                                       gpus=64, train={"global_batch": 512, "seq_len": 8192},
                                                       layout={"tp": 4, "pp": 2, "dp": 8, "recompute": "full"})),
    "d-fp8": lambda tmp, cap: resolve(JobRequest(model="llama3-405b", cluster="eos-h100", gpus=8192,
                                                 train={"global_batch": 2048, "seq_len": 8192, "precision": "fp8"},
                                                 layout={"tp": 8, "pp": 16, "vpp": 4, "cp": 1, "zero": 1})),
    # DeepSeek-V3's 61 layers on pp 16 (not divisible): the uneven split travels in --pipeline-model-parallel-layout.
    "e-moe-ep-uneven-pp": lambda tmp, cap: resolve(JobRequest(
        model="deepseek-v3", cluster="deepseek-v3-h800", gpus=2048,
        train={"global_batch": 15360, "seq_len": 4096, "precision": "fp8", "routing": "loss-free"},
        layout={"pp": 16, "dp": 128, "ep": 64, "recompute_mla_up": True})),
    # Megatron-FSDP (zero 3) with FP8 weights gathered in FP8 and the double-buffer pool, as the Bridge Llama 3 70B
    # GB200 FP8 rows run it: --fp8-param-gather and --fsdp-double-buffer carry the two fields the memory prices.
    "f-fsdp-fp8-params": lambda tmp, cap: resolve(JobRequest(
        model="llama3-70b", cluster="gb200-nvl72", gpus=64,
        train={"global_batch": 128, "seq_len": 8192, "precision": "fp8", "fp8_recipe": "tensorwise",
               "fp8_params": True, "fsdp_double_buffer": True},
        layout={"tp": 1, "pp": 1, "dp": 64, "zero": 3})),
    # GPT-OSS on H100 as the Bridge 26.04.01 table ran it (ep 8, pp 4): a sliding window on every other layer and the
    # experts' GLU clamp travel as --window-size, --window-attn-skip-freq and --activation-func-clamp-value.
    "g-gpt-oss-window-clamp": lambda tmp, cap: resolve(JobRequest(
        model="gpt-oss-120b", cluster="h100-sxm:64", gpus=64,
        train={"global_batch": 1280, "seq_len": 4096},
        layout={"pp": 4, "dp": 16, "ep": 8, "mbs": 1})),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_round_trip_predicts_the_same_step(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = CASES[case](tmp_path, capsys)
    before, after, back = round_trip(job)
    print(f"{case}: step {before:.9f} s → {after:.9f} s (model {job.model.name}, {job.num_gpus} GPUs)")
    assert after == pytest.approx(before, rel=1e-9)
    assert back.resolved_layout == job.resolved_layout
    # Megatron-LM's flags name no model family (it only picks a release's rules, and the flags state each setting),
    # and they cannot ask for Transformer Engine's fused cross-entropy, which Megatron-LM refuses at the exported
    # commit: the export writes the native fusion and a note (launch/megatron.py), a memory difference only.
    assert back.model.model_dump(exclude={"name", "source", "family"}) == job.model.model_dump(
        exclude={"name", "source", "family"})
    unread = {"total_tokens", "fused_cross_entropy"}
    assert _priced(back).model_dump(exclude=unread) == _priced(job).model_dump(exclude=unread)


def _priced(job: Job) -> TrainSpec:
    """The run as the cost model prices it: a recipe left to the GPU's native one is written out by export
    (`--fp8-recipe` always), so it comes back named; of a release's pipeline splits only the layout's own is read."""
    recipe = job.cluster.gpu.fp8_recipe(job.train)
    lay = job.resolved_layout
    own = job.train.pipeline_split(lay.pp, lay.vpp)
    return job.train.model_copy(update={"fp8_recipe": recipe, "pipeline_splits": (own,) if own else ()})


def test_the_uneven_case_is_uneven_and_has_ep() -> None:
    # Case (e) must exercise what its name says: 61 layers over 16 stages, experts spread over 64 ranks.
    job = CASES["e-moe-ep-uneven-pp"](None, None)
    assert job.model.layers % job.resolved_layout.pp and job.resolved_layout.ep == 64
    assert "--pipeline-model-parallel-layout" in megatron_args(job)


def same_job(job: Job, back: Job) -> bool:
    """What test_round_trip_predicts_the_same_step holds: the step, the layout, the model and the run agree."""
    lay = job.resolved_layout
    return (step_s(back) == pytest.approx(step_s(job), rel=1e-9) and back.resolved_layout == job.resolved_layout
            and back.model.model_dump(exclude={"name", "source", "family"}) == job.model.model_dump(
                exclude={"name", "source", "family"})
            and back.train.model_dump(exclude=_NOT_EXPORTED) == job.train.model_dump(exclude=_NOT_EXPORTED)
            # a release's splits for other pp × vpp do not travel: the layout string carries this layout's
            and back.train.pipeline_split(lay.pp, lay.vpp) == job.train.pipeline_split(lay.pp, lay.vpp))


_NOT_EXPORTED = {"total_tokens", "fused_cross_entropy", "pipeline_splits"}


@pytest.mark.parametrize(("case", "flag"), [
    ("f-fsdp-fp8-params", "--fp8-param-gather"), ("f-fsdp-fp8-params", "--fsdp-double-buffer"),
    ("d-fp8", "--pipeline-model-parallel-layout"),  # 126 layers on pp 16 × vpp 4: the layout carries vpp
    ("d-fp8", "--rotary-base"), ("d-fp8", "--fp8-format"), ("d-fp8", "--use-distributed-optimizer"),
    ("e-moe-ep-uneven-pp", "--expert-model-parallel-size"), ("e-moe-ep-uneven-pp", "--moe-layer-freq"),
    ("e-moe-ep-uneven-pp", "--recompute-modules"), ("e-moe-ep-uneven-pp", "--moe-router-enable-expert-bias"),
    ("g-gpt-oss-window-clamp", "--activation-func-clamp-value"), ("g-gpt-oss-window-clamp", "--window-size"),
])  # fmt: skip
def test_a_dropped_flag_fails_the_round_trip(case: str, flag: str) -> None:
    # The round trip can fail: without one of these flags the parsed job is another job.
    job = CASES[case](None, None)
    args = megatron_args(job)
    i = args.index(flag)
    j = next((k for k in range(i + 1, len(args)) if args[k].startswith("--")), len(args))
    text = f"# llmscale export megatron · model m · cluster c · {job.num_gpus:,} GPUs\n" + " ".join(args[:i] + args[j:])
    try:
        back = resolve(parse_megatron_args(text).request(cluster=job.cluster))
    except SpecError:
        return  # refused outright is a failure too
    assert not same_job(job, back)


def test_dropping_rotary_base_changes_the_model() -> None:
    # --rotary-base does not move the step, but without it Megatron trains Llama 3 with θ = 10000.
    job = CASES["d-fp8"](None, None)
    text = export_text(job, ExportFormat.MEGATRON).replace("--rotary-base 500000 \\\n", "")
    assert parse_megatron_args(text).model.rope_theta == 10000.0


def test_fused_cross_entropy_reads_back_as_the_fusion_megatron_runs() -> None:
    # Megatron-LM @d98e8a64 refuses TE's fusion (arguments.py:1697), so export writes the native one, whose fp32
    # logits (megatron/core/tensor_parallel/cross_entropy.py calculate_logits_max: .float()) are the unfused
    # loss's: read back, fused_cross_entropy is false. A command of an older Megatron with `te` reads back true.
    train = {"global_batch": 128, "seq_len": 8192, "precision": "fp8", "fused_cross_entropy": True}
    exported = resolve(JobRequest(model="llama3-70b", cluster="gb200-nvl72", gpus=64, train=train,
                                  layout={"tp": 1, "pp": 1, "dp": 64, "zero": 3}))
    text = export_text(exported, ExportFormat.MEGATRON)
    assert parse_megatron_args(text).train["fused_cross_entropy"] is False
    te = text.replace("--cross-entropy-fusion-impl native", "--cross-entropy-fusion-impl te")
    assert parse_megatron_args(te).train["fused_cross_entropy"] is True
    unfused = text.replace("--cross-entropy-loss-fusion \\\n", "")  # the impl alone fuses nothing
    assert unfused != text and "fused_cross_entropy" not in parse_megatron_args(unfused).train


def test_reader_knows_every_exported_flag() -> None:
    assert set(MEGATRON_FLAGS) <= KNOWN_FLAGS


@pytest.mark.parametrize(("text", "named"), [
    ("--num-layers 4 --frobnicate", "--frobnicate"),  # not a flag llmscale writes: refused, not skipped
    ("--num-layers 4 --num-layers 8", "--num-layers"),  # given twice
    ("--num-layers four", "--num-layers"),
    ("--position-embedding-type rope --moe-layer-freq '__import__(\"os\")'", "--moe-layer-freq"),  # not evaluated
])  # fmt: skip
def test_bad_arguments_are_one_line(text: str, named: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_megatron_args(text)
    assert named in str(info.value) and "\n" not in str(info.value)


def test_read_megatron_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = CASES["e-moe-ep-uneven-pp"](tmp_path, capsys)
    path = tmp_path / "launch.sh"
    path.write_text(export_text(job, ExportFormat.MEGATRON), encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        main(["read-megatron", str(path), "--json"])
    out, _ = capsys.readouterr()
    assert info.value.code in (0, None)
    assert json.loads(out)["step_time_s"] == pytest.approx(step_s(job), rel=1e-9)


@pytest.mark.skipif(not os.environ.get("MEGATRON_LM_GIT"), reason="set MEGATRON_LM_GIT to a Megatron-LM clone")
def test_frozen_megatron_flags_are_defined_at_the_cited_commit() -> None:
    from tests.test_export import MEGATRON_COMMIT, VERIFIED_MEGATRON_FLAGS

    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "megatron_flags.py"), "--git",
                           os.environ["MEGATRON_LM_GIT"], "--commit", MEGATRON_COMMIT], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) >= VERIFIED_MEGATRON_FLAGS


@pytest.mark.parametrize(("old", "new", "flag"), [
    ("--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 0", "--pipeline-model-parallel-size"),
    ("--hidden-dropout 0.0", "--hidden-dropout abc", "--hidden-dropout"),
])
def test_read_megatron_refuses_a_zero_degree_or_a_non_number(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             old: str, new: str, flag: str) -> None:
    # Found by the fuzz suite (issue 14): a ZeroDivisionError and a ValueError traceback.
    text = export_text(resolve(JobRequest(model="llama3-8b", cluster="h100-sxm:64", gpus=64, layout={"tp": 8})),
                       ExportFormat.MEGATRON)
    assert old in text
    path = tmp_path / "launch.sh"
    path.write_text(text.replace(old, new), encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        main(["read-megatron", str(path)])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and err.startswith("error:") and flag in err and len(err.splitlines()) == 1
