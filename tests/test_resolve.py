"""One way in: every command resolves its inputs through io.resolve — names, files, HF configs, spec objects, saved
plans — checks --expect-sha256 the same way, and a plan's JSON carries its resolved inputs, so `explain` and
`export --from-plan` run the planned job again even when it was planned from files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmscale.io.catalog import load_cluster, load_model
from llmscale.io.resolve import DEFAULT_CLUSTER, DEFAULT_MODEL, BatchDefault, JobRequest, resolve
from llmscale.search.plan import critical_batch_sequences
from tests.conftest import run_cli, run_cli_json

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def model_file(tmp_path: Path) -> Path:
    """A llmscale model file the catalog does not know: a 16-layer GQA model."""
    path = tmp_path / "small-gqa.yaml"
    path.write_text(yaml.safe_dump({"name": "small-gqa", "layers": 16, "hidden": 2048, "ffn_hidden": 5632,
                                    "heads": 16, "kv_heads": 4, "vocab": 32000}), encoding="utf-8")
    return path


def saved(tmp_path: Path, document: dict[str, Any], name: str = "plan.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


def test_defaults_and_spec_objects_resolve_alike() -> None:
    by_default = resolve(JobRequest())
    assert (by_default.model.name, by_default.cluster.name) == (DEFAULT_MODEL, DEFAULT_CLUSTER)
    by_spec = resolve(JobRequest(model=load_model(DEFAULT_MODEL), cluster=load_cluster(DEFAULT_CLUSTER)))
    assert by_spec.input_sha256 == by_default.input_sha256
    # A search takes the critical batch when none is given (DeepSeek LLM's law, search.plan).
    searched = resolve(JobRequest(batch=BatchDefault.CRITICAL))
    assert searched.batch_from_law and searched.train.global_batch == critical_batch_sequences(
        searched.model, by_default.train, searched.constants.search)


def test_a_corrected_citation_keeps_the_hash_and_a_changed_number_does_not() -> None:
    cluster = load_cluster(DEFAULT_CLUSTER)
    base = resolve(JobRequest(cluster=cluster)).input_sha256
    gpu = cluster.gpu
    recited = cluster.model_copy(update={"source": cluster.source + " (corrected page number)",
                                         "gpu": gpu.model_copy(update={"source": "vendor datasheet, rev. 2"})})
    assert resolve(JobRequest(cluster=recited)).input_sha256 == base  # provenance text is not an input
    bigger = cluster.model_copy(update={"gpu": gpu.model_copy(update={"memory_gib": gpu.memory_gib + 1})})
    assert resolve(JobRequest(cluster=bigger)).input_sha256 != base


@pytest.mark.parametrize("source", ["file", "hf"])
def test_a_plan_from_files_explains_and_exports_again(source: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    model = str(model_file(tmp_path)) if source == "file" else str(FIXTURES / "hf" / "Llama-3.1-8B" / "config.json")
    plan = run_cli_json(capsys, "plan", "--model", model, "--cluster", "eos-h100", "--gpus", "64", "--gbs", "128",
                    "--seq-len", "2048", "--top", "1")
    assert plan["inputs"]["model"]["layers"] in (16, 32)  # the resolved spec, not just a name
    path = saved(tmp_path, plan)
    explained = run_cli_json(capsys, "explain", "--from-plan", path)
    # The same job, so the same step: the plan's best layout, its GPUs, batch and sequence.
    assert explained["step_time_s"] == pytest.approx(plan["top"][0]["step_time_s"], rel=1e-12)
    assert explained["layout"] == plan["top"][0]["layout"] and explained["num_gpus"] == 64
    code, exported, err = run_cli(capsys, "export", "--format", "megatron", "--from-plan", path)
    assert code == 0, err
    assert "--global-batch-size 128" in exported and "--seq-length 2048" in exported
    # explain's own document is a saved job too.
    again = run_cli_json(capsys, "explain", "--from-plan", saved(tmp_path, explained, "explain.json"))
    assert again["input_sha256"] == explained["input_sha256"]


def test_an_fp8_plan_exports_fp8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = run_cli_json(capsys, "plan", "--model", "llama3-8b", "--cluster", "eos-h100", "--gpus", "64", "--gbs", "128",
                    "--precision", "fp8", "--top", "1")
    code, exported, err = run_cli(capsys, "export", "--format", "megatron", "--from-plan", saved(tmp_path, plan))
    assert code == 0, err
    assert "--fp8-format hybrid" in exported  # the plan's precision, not the flag default


def test_flags_that_contradict_a_saved_plan_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = run_cli_json(capsys, "plan", "--model", "llama3-8b", "--cluster", "eos-h100", "--gpus", "64", "--gbs", "128",
                    "--top", "1")
    path = saved(tmp_path, plan)
    same_tp = str(plan["top"][0]["layout"]["tp"])
    assert run_cli(capsys, "explain", "--from-plan", path, "--tp", same_tp)[0] == 0  # agreeing is fine
    for flags, named in ((["--model", "gpt3-175b"], "--model"), (["--tp", str(2 * int(same_tp))], "--tp"),
                         (["--gbs", "256"], "--gbs"), (["--precision", "fp8"], "--precision")):
        code, _, err = run_cli(capsys, "explain", "--from-plan", path, *flags)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and named in lines[0], err


LAYOUT = ["--model", "llama3-8b", "--cluster", "eos-h100", "--tp", "8", "--dp", "8", "--gbs", "64"]


@pytest.mark.parametrize("command", [
    ["memory", *LAYOUT], ["explain", *LAYOUT], ["export", "--format", "megatron", *LAYOUT],
    ["plan", "--model", "llama3-8b", "--cluster", "eos-h100", "--gpus", "64", "--gbs", "64"],
    ["goodput", "--model", "llama3-8b", "--cluster", "eos-h100", "--trials", "0"],
])
def test_every_command_checks_expect_sha256_the_same_way(command: list[str],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, *command, "--expect-sha256", "0" * 64)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "refusing to run" in lines[0], err


def test_a_calibrated_plan_carries_its_measured_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A profile's constants reach the plan; the plan embeds the calibrated cluster and constants, so explaining it
    # again needs no profile and gives the same step.
    from llmscale.io.calibration import write_profile
    from llmscale.specs.calibration import CalibrationProfile, DeviceInfo, Versions

    profile = tmp_path / "profile.yaml"
    write_profile(CalibrationProfile(device=DeviceInfo(kind="cuda", name="test", ranks=8), date="2026-01-01",
                                     versions=Versions(llmscale="0", torch="2.13.0", python="3.11"),
                                     constants={"step": {"step_overhead_s": 0.5}}), profile)
    plan = run_cli_json(capsys, "plan", "--model", "llama3-8b", "--cluster", "eos-h100", "--gpus", "64", "--gbs", "128",
                    "--top", "1", "--calibration", str(profile))
    assert plan["inputs"]["constants"]["step"]["step_overhead_s"] == 0.5
    explained = run_cli_json(capsys, "explain", "--from-plan", saved(tmp_path, plan))
    assert explained["breakdown"]["overhead_s"] == 0.5
    assert explained["step_time_s"] == pytest.approx(plan["top"][0]["step_time_s"], rel=1e-12)
