"""CLI smoke tests: the commands run, `memory --json` carries the keys and totals the issue asks for,
`input_sha256` is the hash of the canonical resolved inputs, and the flags of `memory` are frozen."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from llmscale.cli.main import app, main
from llmscale.io.catalog import Kind, entry, load_model, names
from llmscale.specs.fingerprint import sha256_of

# GPT-3 175B on Selene as Narayanan et al. 2021 (arXiv:2104.04473) Table 1 ran it: tp 8, pp 8, batch 1536.
GPT3 = ["--model", "gpt3-175b", "--cluster", "selene", "--tp", "8", "--pp", "8", "--dp", "24", "--gbs", "1536"]


def run(capsys: pytest.CaptureFixture[str], *args: str, codes: tuple[int | None, ...] = (0, None)) -> str:
    """stdout of `main(argv)`, which must exit with one of `codes` (0 unless told)."""
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    assert info.value.code in codes, err
    return out


def memory_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """The memory document; a layout that does not fit in memory exits 3 with the document printed all the same."""
    document: dict[str, Any] = json.loads(run(capsys, "memory", *args, "--json", codes=(0, None, 3)))
    return document


def test_catalog_lists_every_entry(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "catalog")
    for kind in Kind:
        assert f"catalog {kind.value}" in out
    assert "gpt3-175b" in out and "selene" in out and "h100-sxm" in out


def test_show_deepseek_v3_parameter_counts(capsys: pytest.CaptureFixture[str]) -> None:
    # DeepSeek-V3 technical report (arXiv:2412.19437) §4.2: "671B total parameters, of which 37B are
    # activated for each token" (the main model; the MTP module is counted apart). Tolerance: 1% / 2%,
    # the report rounds to whole billions.
    document = json.loads(run(capsys, "show", "model", "deepseek-v3", "--json"))
    assert document["spec"]["name"] == "deepseek-v3"
    assert document["total_params"] == pytest.approx(671e9, rel=0.01)
    assert document["active_params"] == pytest.approx(37e9, rel=0.02)


def test_memory_json_keys_and_total(capsys: pytest.CaptureFixture[str]) -> None:
    document = memory_json(capsys, *GPT3)
    required = {"weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "other_bytes",
                "total_bytes", "capacity_bytes", "fits", "input_sha256"}
    assert required <= document.keys()
    parts = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "other_bytes")
    assert document["total_bytes"] == pytest.approx(sum(document[k] for k in parts), rel=1e-12)
    others = ("comm_buffer_bytes", "runtime_bytes", "fragmentation_bytes")
    assert document["other_bytes"] == pytest.approx(sum(document[k] for k in others), rel=1e-12)
    assert document["fits"] == (document["total_bytes"] <= document["capacity_bytes"])
    assert document["num_gpus"] == 8 * 8 * 24
    assert len(document["input_sha256"]) == 64


def test_input_sha256_is_stable_across_processes(capsys: pytest.CaptureFixture[str]) -> None:
    # A fresh interpreter (another hash seed, another import order) must hash the same inputs the same.
    here = memory_json(capsys, *GPT3)["input_sha256"]
    proc = subprocess.run([sys.executable, "-m", "llmscale.cli.main", "memory", *GPT3, "--json"],
                          capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(proc.stdout)["input_sha256"] == here
    assert memory_json(capsys, *GPT3)["input_sha256"] == here


def test_input_sha256_same_for_catalog_name_and_equivalent_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The raw catalog entry, keys reversed and defaults left out, resolves to the same spec as the name.
    raw = entry(Kind.MODELS, "gpt3-175b")
    path = tmp_path / "gpt3.yaml"
    path.write_text(yaml.safe_dump(dict(reversed(list(raw.items()))), sort_keys=False), encoding="utf-8")
    by_name = memory_json(capsys, *GPT3)["input_sha256"]
    by_file = memory_json(capsys, *GPT3, "--model", str(path))["input_sha256"]
    assert by_file == by_name


def test_input_sha256_same_when_defaults_are_spelled_out(capsys: pytest.CaptureFixture[str]) -> None:
    # etp defaults to tp, sp to on with tp > 1, schedule to 1f1b: stating them changes nothing.
    base = memory_json(capsys, *GPT3)["input_sha256"]
    explicit = memory_json(capsys, *GPT3, "--etp", "8", "--sp", "--schedule", "1f1b", "--zero", "1")
    assert explicit["input_sha256"] == base


@pytest.mark.parametrize(
    "change",
    [
        ["--model", "megatron-1t"],
        ["--cluster", "llama3-16k"],
        ["--mbs", "2"],
        ["--vpp", "2"],
        ["--zero", "0"],
        ["--recompute", "selective"],
        ["--no-sp"],
        ["--precision", "fp16"],
        ["--seq-len", "2048"],
        ["--gbs", "3072"],
        ["--offload-optimizer"],
        ["--offload-params"],
    ],
    ids=lambda change: " ".join(change),
)
def test_input_sha256_changes_with_any_flag(change: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    base = memory_json(capsys, *GPT3)["input_sha256"]
    assert memory_json(capsys, *GPT3, *change)["input_sha256"] != base


def test_expect_sha256_with_the_right_value_runs(capsys: pytest.CaptureFixture[str]) -> None:
    digest = memory_json(capsys, *GPT3)["input_sha256"]
    assert memory_json(capsys, *GPT3, "--expect-sha256", digest)["input_sha256"] == digest
    assert memory_json(capsys, *GPT3, "--expect-sha256", digest.upper())["input_sha256"] == digest


def test_memory_table_runs(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "memory", *GPT3)
    assert "gpt3-175b" in out and "selene" in out and ("FITS" in out or "OUT OF MEMORY" in out)


def test_hash_prints_the_digest_of_the_loaded_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gpt3.yaml"
    path.write_text(yaml.safe_dump(entry(Kind.MODELS, "gpt3-175b")), encoding="utf-8")
    digest, printed_path = run(capsys, "hash", str(path)).split()
    assert printed_path == str(path)
    assert digest == sha256_of(model=load_model(str(path)))
    assert digest == sha256_of(model=load_model("gpt3-175b"))


def test_memory_flags_are_frozen() -> None:
    # Renaming or dropping a flag breaks every script and plan that uses it: change this set on purpose.
    command = typer.main.get_command(app)
    assert isinstance(command, typer.core.TyperGroup)
    params = command.commands["memory"].params
    flags = {opt for param in params for opt in (*param.opts, *param.secondary_opts)}
    assert flags == {
        "--model", "-m", "--cluster", "-c", "--gpus",
        "--tp", "--pp", "--dp", "--cp", "--ep", "--etp", "--vpp", "--mbs",
        "--gbs", "--seq-len", "--zero", "--recompute", "--sp", "--no-sp", "--schedule", "--precision",
        "--recompute-norm", "--recompute-mla-up", "--recompute-moe-act", "--recompute-mlp", "--offload-activations",
        "--cuda-graphs", "--no-recompute-norm", "--no-recompute-mla-up", "--no-recompute-moe-act", "--no-recompute-mlp",
        "--no-cuda-graphs", "--no-offload-optimizer", "--no-offload-params", "--no-tp-comm-overlap",
        "--no-ep-comm-overlap",  # off as well as on: a framework release may turn them on (catalog/frameworks.yaml)
        "--offload-optimizer", "--offload-params", "--tp-comm-overlap", "--ep-comm-overlap", "--rank-order",
        "--flash-attention", "--no-flash-attention", "--bf16-moments", "--fp32-moments", "--fp8-cache",
        "--routing", "--fp8-dispatch", "--bf16-dispatch", "--fp8-recipe", "--attention-kernel",
        "--fp8-attention", "--bf16-attention", "--fp8-output-proj", "--bf16-output-proj",
        "--json", "--expect-sha256", "--calibration", "--force-calibration", "--allow-unsealed", "--from-plan",
        "--framework",
    }  # fmt: skip


def test_every_catalog_model_shows(capsys: pytest.CaptureFixture[str]) -> None:
    for name in names(Kind.MODELS):
        document = json.loads(run(capsys, "show", "model", name, "--json"))
        assert document["total_params"] >= document["active_params"] > 0


def test_explain_takes_the_rank_order(capsys: pytest.CaptureFixture[str]) -> None:
    # tp 2 × pp 4 on 8-GPU nodes: with the pipeline inside data parallel a replica's stages share a node, so the
    # stage-to-stage sends get cheaper; the layout reports the order it was given.
    job = ["--model", "llama3-8b", "--cluster", "eos-h100", "--tp", "2", "--pp", "4", "--dp", "4", "--gbs", "64",
           "--seq-len", "8192"]
    default = json.loads(run(capsys, "explain", *job, "--json"))
    pp_inner = json.loads(run(capsys, "explain", *job, "--rank-order", "tp-cp-ep-pp-dp", "--json"))
    assert default["layout"]["rank_order"] == "tp-cp-ep-dp-pp"
    assert pp_inner["layout"]["rank_order"] == "tp-cp-ep-pp-dp"
    assert pp_inner["breakdown"]["pp_exposed_s"] < default["breakdown"]["pp_exposed_s"]


def test_explain_without_flash_attention_matches_the_2021_gpt3_step(capsys: pytest.CaptureFixture[str]) -> None:
    # Narayanan et al. 2021 (arXiv:2104.04473): GPT-3 175B, TP 8 PP 8 on 1536 A100, full recompute, batch 1536 ×
    # 2048, 153 TFLOP/s per GPU under their Eq. 3 → 19.2 s per step; Megatron-LM of 2021 had no FlashAttention.
    args = ["--model", "gpt3-175b", "--cluster", "selene", "--tp", "8", "--pp", "8", "--dp", "24", "--vpp", "6",
            "--recompute", "full", "--no-sp", "--gbs", "1536", "--seq-len", "2048", "--precision", "fp16", "--json",
            "--framework", "megatron-lm@2021"]  # the paper's software: its release profile runs the unfused core
    unfused = json.loads(run(capsys, "explain", *args))
    fused = json.loads(run(capsys, "explain", *args, "--flash-attention"))
    assert unfused["train"]["flash_attention"] is False and fused["train"]["flash_attention"] is True
    assert unfused["step_time_s"] == pytest.approx(19.2, rel=0.05)
    assert unfused["step_time_s"] > fused["step_time_s"]


def test_routing_and_fp8_dispatch_flags_reach_the_cost_model(capsys: pytest.CaptureFixture[str]) -> None:
    # An aux-loss router leaves its busiest EP rank more tokens than a forced-balanced one (arXiv:2408.15664
    # Table 5 MaxVio), so its expert GEMMs and all-to-alls take longer; FP8 dispatch halves the dispatch bytes.
    job = ["--model", "deepseek-v3", "--cluster", "eos-h100", "--gpus", "1024", "--tp", "1", "--pp", "8",
           "--ep", "64", "--mbs", "1", "--gbs", "8192", "--precision", "fp8", "--recompute", "full", "--json"]
    # (full recompute: without it the layout needs 126 GiB of 80, and explain refuses a layout that does not fit)
    forced = json.loads(run(capsys, "explain", *job, "--routing", "forced"))
    aux = json.loads(run(capsys, "explain", *job, "--routing", "aux-loss"))
    fp8 = json.loads(run(capsys, "explain", *job, "--routing", "forced", "--fp8-dispatch"))
    assert (forced["train"]["routing"], aux["train"]["routing"], fp8["train"]["fp8_dispatch"]) == (
        "forced", "aux-loss", True)
    assert aux["breakdown"]["compute_s"] > forced["breakdown"]["compute_s"]
    assert aux["breakdown"]["ep_exposed_s"] > forced["breakdown"]["ep_exposed_s"] > fp8["breakdown"]["ep_exposed_s"]
