"""The Python API (issue 13 item 5): `import llmscale` gives plan, explain, memory, export, goodput, allocate and
validate; they take catalog names, paths or spec objects, return typed results whose `to_dict()` is the command's
`--json` document, and `to_frame()` tables; bad input is a SpecError, as on the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import llmscale
from llmscale.errors import LlmscaleError, SpecError
from llmscale.io.catalog import load_model
from llmscale.specs.layout import Layout
from tests.conftest import run_cli_json

FIXTURES = Path(__file__).parent / "fixtures"
LLAMA = {"model": "llama3-70b", "cluster": "eos-h100"}


def test_import_llmscale_exposes_the_api() -> None:
    for name in ("plan", "explain", "memory", "export", "goodput", "allocate", "validate"):
        assert callable(getattr(llmscale, name))
    with pytest.raises(AttributeError):
        _ = llmscale.no_such_function  # type: ignore[attr-defined]


def test_plan_returns_typed_results_and_the_cli_document(capsys: pytest.CaptureFixture[str]) -> None:
    result = llmscale.plan("llama3-70b", "eos-h100", gpus=256, train={"global_batch": 512},
                           rules={"tp": 8, "pp": [2, 4]}, top=3)
    best = result.best
    assert best is not None and isinstance(best.layout, Layout)
    assert best.layout.tp == 8 and best.layout.pp in (2, 4) and len(result.top) <= 3
    assert best.tokens_per_s_per_gpu == result.to_dict()["top"][0]["tokens_per_s_per_gpu"]
    assert result.gpus_per_job == 256 and "megatron-core" in best.frameworks
    cli = run_cli_json(capsys, "plan", "--model", "llama3-70b", "--cluster", "eos-h100", "--gpus", "256", "--gbs",
                       "512", "--tp", "8", "--pp", "2,4", "--top", "3")
    api = result.to_dict()
    for key in ("input_sha256", "top", "jobs", "framework"):  # the same search, the same document
        assert json.dumps(api[key], sort_keys=True) == json.dumps(cli[key], sort_keys=True), key


def test_plan_to_frame_has_one_row_per_top_layout() -> None:
    frame = llmscale.plan("llama3-8b", "eos-h100", gpus=64, train={"global_batch": 256}, top=4).to_frame()
    assert len(frame) == 4
    for column in ("layout.tp", "layout.pp", "mfu", "tokens_per_s_per_gpu", "memory_fraction", "step.compute_s"):
        assert column in frame.columns
    assert frame["tokens_per_s_per_gpu"].is_monotonic_decreasing


def test_explain_takes_spec_objects_and_paths() -> None:
    by_name = llmscale.explain(**LLAMA, layout={"tp": 8, "pp": 4}, gpus=512, train={"global_batch": 1024})
    by_spec = llmscale.explain(load_model("llama3-70b"), "eos-h100", layout=Layout(tp=8, pp=4), gpus=512,
                               train={"global_batch": 1024})
    assert by_name.step_time_s == by_spec.step_time_s and by_name.fits
    parts = by_name.to_frame()
    assert abs(parts["seconds"].sum() - by_name.step_time_s) < 1e-9 * by_name.step_time_s
    hf = llmscale.explain(FIXTURES / "hf" / "Llama-3.1-8B" / "config.json", "eos-h100", layout={"tp": 1}, gpus=8)
    assert hf.mfu > 0


def test_memory_export_goodput_validate_allocate() -> None:
    mem = llmscale.memory(**LLAMA, layout={"tp": 8, "pp": 4}, gpus=512, train={"global_batch": 1024})
    assert mem["total_bytes"] > 0 and len(mem.to_frame()) == 1
    text = llmscale.export(**LLAMA, layout={"tp": 8, "pp": 4}, gpus=512, fmt="megatron")
    assert "--tensor-model-parallel-size 8" in text
    gp = llmscale.goodput("llama3-16k", 4096, "llama3-70b", days=30, intervals_min=[5, 10, 30], trials=200)
    assert 0 < gp["goodput"] <= 1 and len(gp.to_frame()) == len(gp["policies"])
    val = llmscale.validate()
    assert len(val.to_frame()) == len(val["rows"]) > 50
    pure = llmscale.allocate(flops=1e24)
    assert pure["compute_optimal"]["params"] > 0


def test_bad_input_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="objective"):
        llmscale.plan("llama3-8b", "eos-h100", gpus=64, objective="fastest")
    with pytest.raises(SpecError, match="--tp"):
        llmscale.plan("llama3-8b", "eos-h100", gpus=64, rules={"tp": "eight"})
    with pytest.raises(LlmscaleError):
        llmscale.explain("no-such-model", "eos-h100")
    with pytest.raises(SpecError, match="days"):
        llmscale.goodput("llama3-16k", 4096, days=float("inf"))
    # Python values the CLI would never send: refused, not coerced.
    for call in (lambda: llmscale.plan("llama3-8b", "eos-h100", gpus=64.0),
                 lambda: llmscale.plan("llama3-8b", "eos-h100", gpus=64, top=True),
                 lambda: llmscale.plan("llama3-8b", "eos-h100", gpus=64, max_memory_fraction="0.9"),
                 lambda: llmscale.goodput("llama3-16k", 4096, intervals_min="15"),
                 lambda: llmscale.goodput("llama3-16k", 4096, trials=1.5),
                 lambda: llmscale.allocate("llama3-16k", seq_len=0)):
        with pytest.raises(SpecError):
            call()


def test_the_docs_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    # docs/api.md pastes this script and its output; it must keep running as written.
    import runpy

    runpy.run_path(str(Path(__file__).parent.parent / "docs" / "api_example.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "runs on megatron-core" in out and "tokens_per_s_per_gpu" in out and "--tensor-model-parallel-size 8" in out
