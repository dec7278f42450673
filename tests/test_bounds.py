"""Issue 14 items 1 and 5: every spec field and numeric flag bounded, no int64 overflow at the bounds, and no
command running away on a large-but-valid input. One test per failure class; each comment says why the value is
bad (the bounds and their reasons: src/llmscale/specs/bounds.py)."""

from __future__ import annotations

import json
import math
import time
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmscale.errors import SpecError
from llmscale.io.files import parse_spec
from llmscale.io.hfconfig import model_from_hf_config
from llmscale.specs.base import Spec
from llmscale.specs.cluster import ClusterSpec, EfficiencySpec, GPUSpec, NetworkTier, NodeSpec, PowerSpec, StorageSpec
from llmscale.specs.failures import FailureCause, FailureSpec, MitigationSpec
from llmscale.specs.layout import Layout
from llmscale.specs.model import MLASpec, ModelSpec, RopeScalingSpec
from llmscale.specs.train import TrainSpec
from tests.conftest import run_cli
from tests.test_cli_errors import assert_one_line, run_inprocess

USER_SPECS: tuple[type[Spec], ...] = (ModelSpec, MLASpec, RopeScalingSpec, ClusterSpec, GPUSpec, EfficiencySpec,
                                      NodeSpec, NetworkTier, StorageSpec, PowerSpec, TrainSpec, FailureSpec,
                                      FailureCause, MitigationSpec, Layout)
"""The specs a user's file or flags fill (model, cluster, run, failure profile, layout)."""

TINY: dict[str, Any] = {"name": "tiny", "layers": 4, "hidden": 256, "ffn_hidden": 1024, "heads": 8, "vocab": 1000}


def _is_number(annotation: Any) -> bool:
    args = typing.get_args(annotation)
    return annotation in (int, float) or any(_is_number(a) for a in args)


def test_every_number_field_of_a_user_spec_has_an_upper_bound() -> None:
    # A field without one takes 2⁶³ layers or 10³⁰⁸ B/s, which the array code cannot hold.
    unbounded = []
    for spec in USER_SPECS:
        for name, info in spec.model_fields.items():
            if not _is_number(info.annotation):
                continue
            if not any(getattr(m, "le", None) is not None or getattr(m, "lt", None) is not None
                       for m in info.metadata):
                unbounded.append(f"{spec.__name__}.{name}")
    assert unbounded == []


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_a_non_finite_float_is_refused_naming_the_field(value: float) -> None:
    # `capacity_factor: .inf` once gave step_time_s NaN; no float of a spec may be infinite or NaN.
    with pytest.raises(SpecError) as info:
        parse_spec(ModelSpec, {**TINY, "capacity_factor": value}, "model.yaml")
    assert info.value.field == "capacity_factor"


@pytest.mark.parametrize(("spec", "data", "field"), [
    (ModelSpec, {**TINY, "layers": 2**63}, "layers"),  # 10⁴ layers is two orders past any published model
    (ModelSpec, {**TINY, "vocab": 10**30}, "vocab"),
    (NetworkTier, {"name": "ib", "ranks": 16, "bandwidth_gb_per_s": 1e-300, "latency_us": 5}, "bandwidth_gb_per_s"),
    (NetworkTier, {"name": "ib", "ranks": 16, "bandwidth_gb_per_s": 1e308, "latency_us": 5}, "bandwidth_gb_per_s"),
    (NetworkTier, {"name": "ib", "ranks": 16, "bandwidth_gb_per_s": 50, "latency_us": 2e6}, "latency_us"),  # 2 s
    (PowerSpec, {"pue": 5.0}, "pue"),  # a PUE of 5 is worse than any data centre surveyed
    (TrainSpec, {"total_tokens": 1e20}, "total_tokens"),
    (Layout, {"mbs": 2**63}, "mbs"),
    (Layout, {"tp": 10**9}, "tp"),
])
def test_a_value_past_its_bound_is_refused(spec: type[Spec], data: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(spec, data, "file.yaml")
    assert info.value.field == field


def test_a_model_file_with_2_63_layers_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump({**TINY, "layers": 2**63}))
    assert_one_line(*run_inprocess(capsys, "explain", "--model", str(path)), "layers", str(2**63))


@pytest.mark.parametrize(("args", "needle"), [
    (["plan", "--tokens", "1e400"], "--tokens"),  # overflows a float
    (["plan", "--tokens", "1e17"], "--tokens"),  # ~300× the largest published run
    (["plan", "--max-global-batch-tokens", "inf"], "--max-global-batch-tokens"),
    (["plan", "--top", str(10**20)], "--top"),
    (["goodput", "--days", "inf"], "days"),
    (["goodput", "--days", "1e9"], "days"),  # once ran for minutes
    (["goodput", "--seed", "-1"], "--seed"),
    (["goodput", "--step-s", "1e300"], "step_s"),  # once hung the Monte Carlo
    (["allocate", "--flops", "1e300"], "--flops"),
    (["explain", "--gpus", "1e9"], "--gpus"),  # 10× the GPU bound
    (["export", "--format", "megatron", "--mbs", str(2**63)], "mbs"),  # once a raw pydantic ValidationError
])
def test_a_numeric_flag_out_of_bounds_is_one_line(capsys: pytest.CaptureFixture[str], args: list[str],
                                                  needle: str) -> None:
    assert_one_line(*run_inprocess(capsys, *args), needle)


HUGE_MOE: dict[str, Any] = {"name": "huge", "layers": 10_000, "hidden": 10**6, "ffn_hidden": 10**6, "heads": 10**5,
                            "vocab": 10**7, "experts": 10**5, "top_k": 100, "expert_ffn_hidden": 10**6}
"""A model at the bounds: 10⁴ layers × 10⁵ experts × 3·10¹² weights = 3·10²¹ parameters, past 2⁶³."""


def test_memory_at_the_bounds_does_not_wrap_negative(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # The expert parameters of one rank overflowed int64 (rank_params) and came out negative.
    path = tmp_path / "huge.yaml"
    path.write_text(yaml.safe_dump(HUGE_MOE))
    code, out, err = run_cli(capsys, "memory", "-m", str(path), "--tp", "8", "--pp", "1", "--dp", "1", "--ep", "8",
                             "--etp", "1", "--gpus", "8", "--gbs", "8", "--json")
    assert code == 3, err  # far out of memory (exit 3), and its document printed all the same
    doc = json.loads(out)
    sizes = {key: value for key, value in doc.items() if key.endswith("_bytes")}
    assert sizes and all(math.isfinite(v) and v >= 0 for v in sizes.values()), sizes
    assert doc["weights_bytes"] > 2**63  # the count really is past int64 (not a case that could not fail)


def test_hf_config_with_2_63_layers_is_refused_before_a_list_is_built() -> None:
    # _moe_fields built a list of every layer index: 2⁶³ of them never finish.
    data = {"model_type": "mixtral", "num_hidden_layers": 2**63, "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
            "num_experts_per_tok": 2}
    start = time.perf_counter()
    with pytest.raises(SpecError) as info:
        model_from_hf_config(data, "big")
    assert info.value.field == "num_hidden_layers"
    assert time.perf_counter() - start < 5


def test_hf_config_n_group_mapping_is_refused() -> None:
    # `topk_group < n_group` with a mapping raised TypeError in _deepseek_fields.
    data = {"model_type": "deepseek_v3", "num_hidden_layers": 8, "hidden_size": 1024, "intermediate_size": 4096,
            "num_attention_heads": 8, "vocab_size": 32000, "kv_lora_rank": 128, "q_lora_rank": 256,
            "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64, "n_routed_experts": 16,
            "num_experts_per_tok": 2, "moe_intermediate_size": 512, "first_k_dense_replace": 1,
            "topk_group": 2, "n_group": {"a": 1}}
    with pytest.raises(SpecError) as info:
        model_from_hf_config(data, "ds")
    assert info.value.field == "n_group"


def test_a_monte_carlo_beyond_its_work_limit_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # 100 trials × ~2.4M interruptions of a 10⁴-day run took over a minute; the estimate refuses it up front.
    start = time.perf_counter()
    line = assert_one_line(*run_inprocess(capsys, "goodput", "--days", "10000", "--trials", "100"), "trials", "--force")
    assert "interruptions" in line
    assert time.perf_counter() - start < 30


def test_plan_of_a_model_with_thousands_of_layers_finishes(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    # The layer table covered every pp ≤ 2¹³ × vpp ≤ 8 at O(pp) each: a 10⁴-layer model's plan ran for minutes.
    path = tmp_path / "deep.yaml"
    path.write_text(yaml.safe_dump({**TINY, "layers": 10_000}))
    start = time.perf_counter()
    code, _ = run_inprocess(capsys, "plan", "-m", str(path), "--cluster", "selene", "--top", "1")
    assert code in (0, 3), code
    assert time.perf_counter() - start < 60


@pytest.mark.parametrize("args", [
    ("bench", "gemm", "--block-ms", "inf"),  # hung: a timed block that never ends
    ("bench", "collectives", "--nproc", "0"),
    ("probe", "--nproc", "100000000000000000000"),  # crashed with exit 1
    ("probe", "--tolerance-pct", "nan"),  # ran 50 s, then exit 1
    ("probe", "--seq-len", "100000000000000000000"),
])
def test_measuring_flags_are_bounded(capsys: pytest.CaptureFixture[str], args: tuple[str, ...]) -> None:
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and err.startswith(f"error: {args[-2]} = ") and len(err.strip().splitlines()) == 1, err
