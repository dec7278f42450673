"""Bad input on the CLI: one line on stderr naming the field and the value, exit code 2, never a
traceback (docs/architecture.md principle 3). One test per case; each comment says why the value is bad.

A few cases run the real `python -m llmscale.cli.main` in a subprocess, to prove that nothing
reaches stderr but the one line; the rest call `main(argv)` in-process (typer's CliRunner on `app`
would skip main()'s LlmscaleError handler).
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

# A valid layout of GPT-3 175B on Selene (Narayanan et al. 2021 Table 1: tp 8, pp 8, batch 1536).
GPT3 = ["--model", "gpt3-175b", "--cluster", "selene", "--gbs", "1536"]
GPT3_LAYOUT = [*GPT3, "--tp", "8", "--pp", "8", "--dp", "24"]

TINY_MODEL: dict[str, Any] = {"name": "tiny", "layers": 4, "hidden": 256, "ffn_hidden": 1024, "heads": 8, "vocab": 1000}


def run_subprocess(*args: str) -> tuple[int, str]:
    """Exit code and stderr of the real CLI in a fresh interpreter."""
    env = {**os.environ, "COLUMNS": "200"}  # keep typer's usage box from wrapping the bad value
    proc = subprocess.run(
        [sys.executable, "-m", "llmscale.cli.main", *args], capture_output=True, text=True, env=env, timeout=60
    )
    return proc.returncode, proc.stderr


def run_inprocess(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Exit code and stderr of `main(argv)`; main always leaves through SystemExit."""
    with pytest.raises(SystemExit) as info:
        main(list(args))
    code = info.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def assert_one_line(code: int, stderr: str, *needles: str) -> str:
    """Exit code 2, no traceback, exactly one `error:` line containing every needle."""
    assert code == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith("error: "), line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


def model_file(tmp_path: Path, name: str = "model.yaml", drop: tuple[str, ...] = (), **changes: Any) -> str:
    data = {k: v for k, v in TINY_MODEL.items() if k not in drop} | changes
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return str(path)


def memory_on(path: str, *extra: str) -> list[str]:
    return ["memory", "--model", path, "--cluster", "selene", "--gpus", "8", *extra]


# ---- model files ---------------------------------------------------------------------------------


def test_unknown_key(tmp_path: Path) -> None:
    # `hiden` is a typo of `hidden`: ignoring it would plan a model without the size the user meant.
    path = model_file(tmp_path, drop=("hidden",), hiden=256)
    line = assert_one_line(*run_subprocess(*memory_on(path)), "hiden", "256", "unknown key")
    assert "did you mean 'hidden'" in line


def test_unknown_key_in_a_nested_spec_lists_that_spec_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `mla.rank` is not an MLASpec field; the allowed keys listed must be MLASpec's, not ModelSpec's.
    mla = {"kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "rank": 1}
    line = assert_one_line(*run_inprocess(capsys, *memory_on(model_file(tmp_path, mla=mla))), "mla.rank", "1")
    assert "kv_lora_rank" in line and "vocab" not in line


def test_wrong_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # layers is a count; "many" is not a number.
    path = model_file(tmp_path, layers="many")
    assert_one_line(*run_inprocess(capsys, *memory_on(path)), "layers", "'many'")


@pytest.mark.parametrize(("value", "shown"), [(True, "True"), ("4", "'4'")])
def test_bool_or_text_in_a_count_is_not_coerced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: object, shown: str
) -> None:
    # YAML `layers: true` would otherwise become 1 layer and `layers: "4"` 4: the user's value must not be
    # silently altered into another one.
    path = model_file(tmp_path, layers=value)
    assert_one_line(*run_inprocess(capsys, *memory_on(path)), f"layers = {shown}", "must be a number")


def test_hidden_not_divisible_by_heads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 250 / 8 heads = 31.25: heads cannot split the hidden size evenly (and no head_dim is given).
    path = model_file(tmp_path, hidden=250)
    assert_one_line(*run_inprocess(capsys, *memory_on(path)), "hidden = 250", "heads (8)")


def test_kv_heads_not_dividing_heads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GQA groups the 8 query heads over the KV heads; 3 KV heads cannot share 8 query heads evenly.
    path = model_file(tmp_path, kv_heads=3)
    assert_one_line(*run_inprocess(capsys, *memory_on(path)), "kv_heads = 3", "heads (8)")


def test_zero_layers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A model with no layers has nothing to train or to place on pipeline stages.
    path = model_file(tmp_path, layers=0)
    assert_one_line(*run_inprocess(capsys, *memory_on(path)), "layers = 0")


def test_negative_hidden(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A size cannot be negative.
    path = model_file(tmp_path, hidden=-256)
    assert_one_line(*run_inprocess(capsys, *memory_on(path)), "hidden = -256")


# ---- layout flags ---------------------------------------------------------------------------------


def test_tp_not_dividing_heads() -> None:
    # GPT-3 175B has 96 heads; tp 5 would give each rank 19.2 heads.
    code, err = run_subprocess("memory", *GPT3, "--tp", "5", "--pp", "8", "--dp", "24")
    assert_one_line(code, err, "tp = 5", "heads (96)")


def test_tp_not_dividing_kv_heads(capsys: pytest.CaptureFixture[str]) -> None:
    # Llama 3 8B has 32 query heads but only 8 KV heads; tp 16 would split a KV head across 2 ranks.
    code, err = run_inprocess(capsys, "memory", "--model", "llama3-8b", "--cluster", "selene", "--tp", "16",
                              "--dp", "1", "--gbs", "64")
    assert_one_line(code, err, "tp = 16", "kv_heads (8)")


def test_tp_zero(capsys: pytest.CaptureFixture[str]) -> None:
    # A parallel size counts ranks; 0 ranks cannot hold the model.
    assert_one_line(*run_inprocess(capsys, "memory", *GPT3, "--tp", "0"), "tp = 0")


def test_dp_breaks_the_gpu_count(capsys: pytest.CaptureFixture[str]) -> None:
    # tp 8 × pp 8 × dp 20 = 1280 GPUs, but the job was given 1536: 256 GPUs would sit unused.
    code, err = run_inprocess(capsys, "memory", *GPT3, "--tp", "8", "--pp", "8", "--dp", "20", "--gpus", "1536")
    assert_one_line(code, err, "dp (20)", "1,280", "1,536 GPUs", "dp 24 does")


def test_gbs_not_divisible_by_dp_mbs(capsys: pytest.CaptureFixture[str]) -> None:
    # 1000 sequences cannot be split evenly over dp 24 × mbs 1 = 24 micro-batch slots.
    code, err = run_inprocess(capsys, "memory", *GPT3_LAYOUT, "--gbs", "1000")
    assert_one_line(code, err, "dp = 24", "dp (24) does not divide", "global batch (1,000 sequences")


def test_ep_not_dividing_experts(capsys: pytest.CaptureFixture[str]) -> None:
    # Mixtral 8x7B has 8 experts; ep 3 would give the ranks 8/3 experts each.
    code, err = run_inprocess(capsys, "memory", "--model", "mixtral-8x7b", "--cluster", "selene",
                              "--ep", "3", "--dp", "3", "--gbs", "3")
    assert_one_line(code, err, "ep = 3", "experts (8)")


def test_ep_on_a_dense_model(capsys: pytest.CaptureFixture[str]) -> None:
    # GPT-3 has no experts to distribute; ep 2 has nothing to parallelize.
    code, err = run_inprocess(capsys, "memory", *GPT3, "--ep", "2", "--dp", "2", "--gbs", "2")
    assert_one_line(code, err, "ep = 2", "dense")


def test_sp_without_tp(capsys: pytest.CaptureFixture[str]) -> None:
    # Sequence parallelism splits the tp group's activations; with tp 1 there is no group to split over.
    code, err = run_inprocess(capsys, "memory", *GPT3, "--tp", "1", "--sp", "--dp", "8", "--gbs", "8")
    assert_one_line(code, err, "sp = True", "tp > 1")


def test_pp_times_vpp_exceeds_layers(capsys: pytest.CaptureFixture[str]) -> None:
    # pp 8 × vpp 16 = 128 virtual stages, but GPT-3 has only 96 layers to put in them.
    code, err = run_inprocess(capsys, "memory", *GPT3_LAYOUT, "--vpp", "16")
    assert_one_line(code, err, "pp = 8", "vpp (16)", "layers (96)")


def test_vpp_with_a_non_interleaved_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    # Virtual stages only exist in the interleaved schedule; 1f1b with vpp 2 is a contradiction.
    code, err = run_inprocess(capsys, "memory", *GPT3_LAYOUT, "--vpp", "2", "--schedule", "1f1b")
    assert_one_line(code, err, "schedule = '1f1b'", "vpp (2)")


def test_recompute_not_a_choice() -> None:
    # recompute is none|selective|full; typer rejects "bogus" itself (a usage error, several lines).
    code, err = run_subprocess("memory", *GPT3_LAYOUT, "--recompute", "bogus")
    assert code == 2
    assert "Traceback" not in err
    assert "--recompute" in err and "bogus" in err


# ---- files and names ----------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    # The path names no file: there is nothing to read.
    path = str(tmp_path / "nothere.yaml")
    assert_one_line(*run_subprocess("memory", "--model", path, "--cluster", "selene"), path, "no such file")


def test_hash_of_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `hash` reads files too, through the same boundary.
    path = str(tmp_path / "nothere.yaml")
    assert_one_line(*run_inprocess(capsys, "hash", path), path, "no such file")


def test_malformed_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `hidden` is indented under the scalar `layers: 4`: a mapping value where none is allowed.
    path = tmp_path / "bad.yaml"
    path.write_text("name: tiny\nlayers: 4\n  hidden: 256\n", encoding="utf-8")
    assert_one_line(*run_inprocess(capsys, *memory_on(str(path))), str(path), "malformed YAML", "line 3")


def test_malformed_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # JSON allows no trailing comma before the closing brace.
    path = tmp_path / "bad.json"
    path.write_text('{"name": "tiny", "layers": 4,}', encoding="utf-8")
    assert_one_line(*run_inprocess(capsys, *memory_on(str(path))), str(path), "malformed JSON", "line 1")


def test_top_level_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A spec is a mapping of fields; a list has no field names.
    path = tmp_path / "list.yaml"
    path.write_text("- layers: 4\n- hidden: 256\n", encoding="utf-8")
    assert_one_line(*run_inprocess(capsys, *memory_on(str(path))), str(path), "mapping", "got list")


@pytest.mark.parametrize(
    ("model", "cluster", "needle"),
    [("gpt-5", "selene", "unknown model 'gpt-5'"), ("gpt3-175b", "nowhere", "unknown cluster 'nowhere'")],
)
def test_unknown_catalog_name(model: str, cluster: str, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Not in the built-in catalog and not a path: there is no spec to load. The line lists the known names.
    code, err = run_inprocess(capsys, "memory", "--model", model, "--cluster", cluster)
    assert_one_line(code, err, needle, "gpt3-175b" if model != "gpt3-175b" else "selene")


def test_hf_config_of_an_unsupported_family(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GPT-2's config.json uses n_layer/n_embd keys that the HF loader does not map.
    path = tmp_path / "gpt2" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"model_type": "gpt2", "n_layer": 12, "n_embd": 768}), encoding="utf-8")
    code, err = run_inprocess(capsys, "memory", "--model", str(path), "--cluster", "selene")
    assert_one_line(code, err, "model_type = 'gpt2'", "llama")


def test_expect_sha256_mismatch() -> None:
    # The inputs hash differently from the plan the user meant to reproduce: refuse to run.
    code, err = run_subprocess("memory", *GPT3_LAYOUT, "--expect-sha256", "deadbeef")
    assert_one_line(code, err, "--expect-sha256", "deadbeef")


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        # GPT-3 has no MLA attention: there is no up-projection to recompute.
        (["--recompute-mla-up"], "recompute = 'none'"),
        # Full recompute already re-runs every module; Megatron takes modules only with selective granularity.
        (["--recompute", "full", "--recompute-norm"], "recompute = 'full'"),
        # Megatron-Core's CPU offload refuses pipeline parallelism (TransformerConfig.__post_init__).
        (["--offload-activations", "4"], "offload_activations = 4"),
    ],
)
def test_module_recompute_and_activation_offload_rules(capsys: pytest.CaptureFixture[str], flags: list[str],
                                                       needle: str) -> None:
    code, err = run_inprocess(capsys, "memory", *GPT3_LAYOUT, *flags)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
