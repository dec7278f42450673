"""The published MFU record (catalog/published_mfu.yaml) and the flag on predictions above it.

The record is data, not a fit: every value must be what the shipped runs reached in llmscale's MFU convention, so this
test recomputes it from data/published_runs.yaml (through validate, the same row building and convention)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import pytest

from llmscale.cost.step import STEP_PARTS, estimate_step
from llmscale.io.catalog import load_constants, load_gpu, load_published_mfu
from llmscale.io.resolve import Job, JobRequest, resolve
from llmscale.search.plausibility import mfu_excess
from llmscale.specs.cluster import Generation
from llmscale.specs.record import MfuRecord, PrecisionClass
from llmscale.specs.train import Precision
from llmscale.validation.jobs import job_from_run
from llmscale.validation.record import feature
from llmscale.validation.runs import load_rows, load_runs
from llmscale.validation.validate import ValidationRow, validate_rows
from tests.conftest import run_cli, run_cli_json

CONSTANTS = load_constants()


def test_every_record_is_the_best_published_run_of_its_generation_and_precision() -> None:
    best: dict[tuple[str, str], tuple[float, str]] = defaultdict(lambda: (0.0, ""))
    for row in validate_rows(*load_rows()).rows:
        generation = load_gpu(row.gpu).generation
        assert generation is not None, row.gpu
        key = (generation.value, PrecisionClass.of(row.precision).value)
        best[key] = max(best[key], (row.published_mfu, row.name))
    record = {(r.generation.value, r.precision.value): (r.mfu, r.run) for r in load_published_mfu().records}
    assert set(record) == set(best)
    for key, (mfu, run) in best.items():
        assert record[key][1] == run, key
        assert record[key][0] == pytest.approx(mfu, abs=5e-4), key


def test_a_prediction_above_the_record_is_flagged() -> None:
    base = dict(name="r", framework="f", gpu="h100-sxm", model_type="dense", num_gpus=8, cluster="c",
                precision=Precision.BF16, predicted_tokens_per_s_per_gpu=1.0, published_tokens_per_s_per_gpu=1.0,
                recompute="none", fits=True, memory_bytes=1.0, capacity_bytes=2.0)
    assert ValidationRow(**base, predicted_mfu=0.60, best_published_mfu=0.495).above_published
    assert not ValidationRow(**base, predicted_mfu=0.40, best_published_mfu=0.495).above_published
    assert not ValidationRow(**base, predicted_mfu=0.90, best_published_mfu=None).above_published  # no record
    # The record's Hopper 16-bit entry is the one a Hopper bf16 prediction is held against.
    best = load_published_mfu().best(load_gpu("h800").generation, Precision.BF16)
    assert best is not None and best.run == "Megatron-Core r0.8 weak scaling GPT 16B on 192 H100"


def _explain(capsys: pytest.CaptureFixture[str], *layout: str) -> dict[str, Any]:
    job = ["--model", "gpt3-175b", "--cluster", "selene", "--gpus", "1536", "--seq-len", "2048", *layout]
    return run_cli_json(capsys, "explain", *job)


def test_explain_names_the_terms_above_the_record(capsys: pytest.CaptureFixture[str]) -> None:
    # A no-recompute ZB-V layout at a 20k-sequence batch: no published A100 run reached its predicted MFU
    # (record 56.3 %, Korthikanti et al. 2022 Table 5, 1T on 512 A100), and what it gains over that run's own
    # layout is the bubble (ZB-V at 640 micro-batches: 20,480 over dp 32) and the recompute it no longer pays.
    above = _explain(capsys, "--tp", "4", "--pp", "12", "--mbs", "1", "--recompute", "none", "--schedule", "zbv",
                     "--gbs", "20480")["above_published_mfu"]
    assert above is not None and above["best_published_mfu"] == 0.563
    terms = {t["term"]: t for t in above["terms"]}
    assert "bubble_s" in terms and terms["bubble_s"]["value"] < terms["bubble_s"]["record_value"]
    assert "Korthikanti 2022 1T" in above["note"] and "bubble" in above["note"]
    # Each term names what this layout has that the record run lacked: here its schedule and micro-batches
    # (Korthikanti et al. ran 1F1B on pp 64) and no recompute (they recomputed selectively).
    assert terms["bubble_s"]["feature"].startswith("zbv v1 over 640 micro-batches, pp 12 vs the record's 1f1b")
    assert all(t["feature"] for t in above["terms"])


def test_a_published_layout_below_the_record_is_not_flagged(capsys: pytest.CaptureFixture[str]) -> None:
    # Narayanan et al. 2021 Table 1: GPT-3 175B on 1,536 A100 (tp 8, pp 8, batch 1,536) reached 163 TFLOP/s per
    # GPU (52 % of peak), below the A100 record; the same layout predicted here must not be flagged.
    assert _explain(capsys, "--tp", "8", "--pp", "8", "--mbs", "1", "--gbs", "1536")["above_published_mfu"] is None


def test_the_carrying_terms_account_for_the_whole_gain() -> None:
    # ln(MFU / MFU_record-run) = ln(kernel-MFU ratio) + ln(compute-share ratio), the second split over the parts:
    # with every term kept, the gains add up to the log ratio exactly.
    run = next(r for r in load_runs() if r.name == "Megatron-Core r0.8 weak scaling GPT 1.7B on 48 H100")
    job = job_from_run(run, CONSTANTS)
    step = estimate_step(job.model, job.cluster, job.train, job.layouts, CONSTANTS)
    record = MfuRecord(generation=Generation.HOPPER, precision=PrecisionClass.BIT16, mfu=0.01, run="a low record")
    ref_run = next(r for r in load_runs() if r.name == "Megatron-Core r0.8 weak scaling GPT 16B on 192 H100")
    ref = job_from_run(ref_run, CONSTANTS)
    ref_step = estimate_step(ref.model, ref.cluster, ref.train, ref.layouts, CONSTANTS)
    excess = mfu_excess(step, 0, record, ref_step, max_terms=len(STEP_PARTS) + 1)
    assert excess is not None
    full = sum(t.log_gain for t in excess.terms)
    assert full >= math.log(float(step.mfu[0]) / float(ref_step.mfu[0])) - 1e-9


def test_the_terminal_prints_the_note_beside_the_mfu(capsys: pytest.CaptureFixture[str]) -> None:
    # The same layout as above: explain's table carries the JSON document's note, naming the record run.
    code, out, err = run_cli(capsys, "explain", "--model", "gpt3-175b", "--cluster", "selene", "--gpus", "1536",
                             "--seq-len", "2048", "--tp", "4", "--pp", "12", "--mbs", "1", "--recompute", "none",
                             "--schedule", "zbv", "--gbs", "20480")
    assert code == 0, err
    assert "above the best published 56.3%" in " ".join(out.split()) and "Korthikanti" in out


def test_features_name_recomputed_modules_and_the_shapes_behind_tp_exposure() -> None:
    # Same TP degree and overlap on both sides: the exposed share of the step still differs with the layer's shape (TP
    # bytes grow with the hidden size, GEMM time with its square), so the feature names hidden size and tokens per
    # micro-batch; a module recompute counts as recompute.
    def job(model: str, **layout: object) -> Job:
        return resolve(JobRequest(model=model, cluster="h100-sxm:64", gpus=64, framework="any",
                                  layout={"tp": 8, "sp": True, "tp_comm_overlap": True, "mbs": 1, **layout}))

    mine, record = job("llama3-70b"), job("llama3-8b", recompute_norm=True, recompute_mlp=True)
    sides = (mine, mine.resolved_layout, 1.0), (record, record.resolved_layout, 1.0)
    assert feature("tp_exposed_s", *sides) == (
        "tp 8, TP overlap on, hidden 8192, 4,096 tokens per micro-batch vs the record's tp 8, TP overlap on, "
        "hidden 4096, 4,096 tokens per micro-batch")
    assert feature("recompute_s", *sides) == ("recompute none, no module recompute vs the record's recompute none, "
                                               "recomputed modules: norms, MLPs")
    assert feature("recompute_s", sides[0], sides[0]) == ""
