"""The published MFU record (catalog/published_mfu.yaml) and the flag on predictions above it.

The record is data, not a fit: every value must be what the shipped runs reached in llmscale's MFU convention, so this
test recomputes it from data/published_runs.yaml (through validate, the same row building and convention)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from llmscale.io.catalog import load_gpu, load_published_mfu
from llmscale.specs.record import PrecisionClass
from llmscale.specs.train import Precision
from llmscale.validation.runs import load_rows
from llmscale.validation.validate import ValidationRow, validate_rows


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
                recompute="none", fits=True)
    assert ValidationRow(**base, predicted_mfu=0.60, best_published_mfu=0.495).above_published
    assert not ValidationRow(**base, predicted_mfu=0.40, best_published_mfu=0.495).above_published
    assert not ValidationRow(**base, predicted_mfu=0.90, best_published_mfu=None).above_published  # no record
    # The record's Hopper 16-bit entry is the one a Hopper bf16 prediction is held against.
    best = load_published_mfu().best(load_gpu("h800").generation, Precision.BF16)
    assert best is not None and best.run == "Megatron-Core r0.8 weak scaling GPT 16B on 192 H100"
