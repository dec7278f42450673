"""FP8 attention (TrainSpec.fp8_attention): the attention core priced at cuDNN's measured FP8-over-16-bit ratios, the
window its backward ignores, what it saves for the backward, the checks that refuse it, and the release profiles that
turn it on."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.cost.activations import layer_activations
from llmscale.cost.compute import layer_times
from llmscale.errors import LlmscaleError, SpecError
from llmscale.io.catalog import load_cluster, load_gpu
from llmscale.io.resolve import Job, JobRequest, resolve
from llmscale.launch.megatron import megatron_notes
from llmscale.layout.arrays import Layouts
from llmscale.specs.train import Fp8Recipe, TrainSpec
from tests.conftest import run_cli


def _job(model: str, cluster: str, fp8_attention: bool, recipe: str = "mxfp8", **layout: int) -> Job:
    return resolve(JobRequest(model=model, cluster=cluster, gpus=int(cluster.split(":")[1]),
                              train={"global_batch": 256, "seq_len": 4096, "precision": "fp8", "fp8_recipe": recipe,
                                     "fp8_attention": fp8_attention},
                              layout={"mbs": 1, **layout}, framework="any"))


def _core(job: Job) -> tuple[float, float]:
    dense, moe, _ = layer_times(job.model, job.cluster, job.train, job.layouts, job.constants)
    kind = moe if job.model.is_moe else dense
    return float(kind.attention_core_s[0]), float(kind.attention_core_backward_s[0])


# NVIDIA/cudnn-frontend@3929da2ef4c1 benchmark/sdpa_benchmark_training/results, cuDNN 9.22.0, causal, seq 4096,
# time_ms of the `mxfp8` and `bfloat16` rows: dsv3/gb200/dsv3_20260424_101009.csv (MLA, head dim 192/128) and
# llama3.1/gb200/llama3.1_20260424_100750.csv (head dim 128). MLA gains in both passes; Llama's backward loses.
@pytest.mark.parametrize(
    ("model", "forward_ms", "backward_ms"),
    [
        ("deepseek-v3", (0.977, 0.714), (3.383, 2.620)),
        ("llama3-70b", (0.391, 0.326), (1.198, 1.305)),
    ],
)
def test_the_core_takes_cudnns_measured_mxfp8_ratio_at_the_models_head_dim(
        model: str, forward_ms: tuple[float, float], backward_ms: tuple[float, float]) -> None:
    layout: dict[str, int] = {"ep": 64, "dp": 64} if model == "deepseek-v3" else {"tp": 8}
    cluster = "gb200:64" if model == "deepseek-v3" else "gb200:8"
    bf16 = _core(_job(model, cluster, False, "mxfp8", **layout))
    fp8 = _core(_job(model, cluster, True, "mxfp8", **layout))
    assert fp8[0] / bf16[0] == pytest.approx(forward_ms[1] / forward_ms[0], rel=0.002)
    assert fp8[1] / bf16[1] == pytest.approx(backward_ms[1] / backward_ms[0], rel=0.002)


def _window_backward_ms(job: Job) -> tuple[float, float]:
    """(windowed, full) layers' attention backward of `job` (layer_times gives their mean and the gap)."""
    dense, _, _ = layer_times(job.model, job.cluster, job.train, job.layouts, job.constants)
    windowed = job.model.windowed_layers / job.model.layers
    gap = float(dense.window_gap_backward_s[0])
    window = float(dense.attention_core_backward_s[0]) - (1 - windowed) * gap
    return window * 1e3, (window + gap) * 1e3


def test_the_fp8_backward_over_a_sliding_window_costs_the_causal_backward() -> None:
    # cudnn-frontend@3929da2 gpt_oss/gb200/gpt_oss_20260424_100011.csv, window 128, seq 4096: MXFP8 backward 2.080 ms
    # against BF16's 0.465, 4.5x (7.427 against 0.911 at 8192: it grows as the square of the length, so the FP8
    # kernel visits every causal block). The model takes the full causal backward at the head-dim-128 ratio, which
    # falls short of GPT-OSS's head-dim-64 FP8 kernel; it must still cost most of the measured 4.5x.
    bf16 = _window_backward_ms(_job("gpt-oss-120b", "gb200:64", False, ep=64, dp=64))
    fp8 = _window_backward_ms(_job("gpt-oss-120b", "gb200:64", True, ep=64, dp=64))
    assert 0.5 * 2.080 / 0.465 < fp8[0] / bf16[0] < 2.080 / 0.465
    assert fp8[0] == pytest.approx(fp8[1], rel=1e-12)  # windowed layers cost what full ones do


def test_per_tensor_fp8_attention_saves_q_k_v_in_one_byte() -> None:
    # TE v2.18 FusedAttnFunc.forward: current scaling saves q_fp8, k_fp8, v_fp8 and a 16-bit O
    # (NVTE_DPA_FP8CS_O_in_F16 = 1); MXFP8 quantizes Q and K row- and column-wise, as many bytes as 16-bit.
    gpt = _job("llama3-70b", "h100-sxm:8", False, "tensorwise", tp=8)
    lay = Layouts.from_columns(tp=8, dp=1, mbs=1)
    model = gpt.model
    qkv = (model.heads + 2 * model.num_kv_heads) * model.dim_per_head
    tokens = 4096
    plain = layer_activations(model, gpt.train, lay).dense_bytes[0]
    for recipe, saved in ((Fp8Recipe.TENSORWISE, qkv), (Fp8Recipe.DELAYED, qkv + model.heads * model.dim_per_head),
                          (Fp8Recipe.MXFP8, 0)):
        train = gpt.train.model_copy(update={"fp8_attention": True, "fp8_recipe": recipe})
        fp8 = layer_activations(model, train, lay).dense_bytes[0]
        assert plain - fp8 == pytest.approx(tokens * saved / 8, rel=1e-12)


@pytest.mark.parametrize(
    ("model", "cluster", "train", "field_text"),
    [
        ("llama3-70b", "h100-sxm:8", {"precision": "bf16"}, "precision is bf16"),
        ("llama3-70b", "h100-sxm:8", {"precision": "fp8", "flash_attention": False}, "unfused"),
        ("llama3-70b", "h100-sxm:8", {"precision": "fp8", "attention_kernel": "flash2"}, "FlashAttention-2"),
        ("llama3-70b", "h100-sxm:8", {"precision": "fp8", "fp8_recipe": "blockwise"}, "blockwise"),
        ("gpt-oss-120b", "h100-sxm:8", {"precision": "fp8"}, "head dim 128 only"),
        ("deepseek-v3", "h800:64", {"precision": "fp8"}, "head dim 128 only"),
    ],
)
def test_fp8_attention_is_refused_where_it_cannot_run_or_was_not_measured(
        model: str, cluster: str, train: dict[str, object], field_text: str) -> None:
    with pytest.raises(SpecError, match=field_text) as info:
        resolve(JobRequest(model=model, cluster=cluster, gpus=8, train={**train, "fp8_attention": True},
                           layout={"tp": 8}, framework="any"))
    assert info.value.field == "fp8_attention"


def test_a_gpu_without_a_measurement_refuses_fp8_attention() -> None:
    h100 = load_cluster("h100-sxm:8")
    efficiency = h100.gpu.efficiency.model_copy(update={"fp8_attention": ()})
    bare = h100.model_copy(update={"gpu": h100.gpu.model_copy(update={"efficiency": efficiency})})
    with pytest.raises(SpecError, match="no tensorwise FP8 attention measurement"):
        resolve(JobRequest(model="llama3-70b", cluster=bare, gpus=8, layout={"tp": 8}, framework="any",
                           train={"precision": "fp8", "fp8_recipe": "tensorwise", "fp8_attention": True}))


def test_the_cli_names_the_field_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "explain", "-m", "llama3-70b", "-c", "h100-sxm:8", "--gpus", "8", "--tp", "8",
                           "--fp8-attention", "--framework", "any")
    assert code == 2 and "fp8_attention" in err and "precision is bf16" in err and "Traceback" not in err


def test_a_named_measurement_set_must_exist(tmp_path) -> None:  # type: ignore[no-untyped-def]
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text("name: X\ngeneration: blackwell\npeak_bf16_tflops: 2000\npeak_fp8_tflops: 4000\nmemory_gib: 180\n"
                   "memory_bandwidth_gb_per_s: 8000\nscaleup_bandwidth_gb_per_s: 900\n"
                   "efficiency: {fp8_attention: cudnn-9.99-x}\n")
    with pytest.raises(LlmscaleError, match=r"cudnn-9\.22-gb200"):
        load_gpu(str(gpu))


def test_ratio_lookup_takes_the_nearest_measured_head_dim_and_holds_beyond_the_lengths() -> None:
    eff = load_gpu("b200").efficiency  # GB200's tables (same die)
    assert eff.fp8_attention_ratio(Fp8Recipe.MXFP8, 64).head_dim == 128  # type: ignore[union-attr]
    assert eff.fp8_attention_ratio(Fp8Recipe.TENSORWISE, 192).head_dim == 192  # type: ignore[union-attr]
    assert eff.fp8_attention_ratio(Fp8Recipe.BLOCKWISE, 128) is None
    table = eff.fp8_attention_ratio(Fp8Recipe.MXFP8, 128)
    assert table is not None
    forward, backward = table.at(np.array([128.0, 2048.0, 2896.3, 4096.0, 1e6]))
    assert forward[0] == forward[1] == table.forward[0] and backward[-1] == table.backward[-1]
    assert min(table.backward[:2]) < backward[2] < max(table.backward[:2])  # between 2048 and 4096 in log length


def _applied(framework: str, model: str, cluster: str, gpus: int, recipe: str) -> bool:
    job = resolve(JobRequest(model=model, cluster=cluster, gpus=gpus,
                             train={"precision": "fp8", "fp8_recipe": recipe, "seq_len": 4096}, framework=framework))
    return job.train.fp8_attention


@pytest.mark.parametrize(
    ("framework", "model", "cluster", "gpus", "recipe", "on"),
    [
        # Megatron-Bridge v0.6.0 (26.08) perf_recipes: qwen/common.py:55 _enable_hybridep_full_iteration_mxfp8,
        # gpt_oss/common.py:44, deepseek/gb300/deepseek_v3.py:157 and b300:154 (fp8_dot_product_attention=True);
        # deepseek/gb200/deepseek_v3.py:160 leaves it False; MixedPrecisionConfig defaults it False (:58)
        ("megatron-bridge@26.08", "qwen3-30b-a3b", "b200:8", 8, "mxfp8", True),
        ("megatron-bridge@26.08", "gpt-oss-120b", "gb200:64", 64, "mxfp8", True),
        ("megatron-bridge@26.08", "deepseek-v3", "gb300:256", 256, "mxfp8", True),
        ("megatron-bridge@26.08", "deepseek-v3", "gb200:256", 256, "mxfp8", False),
        ("megatron-bridge@26.08", "llama3-70b", "gb200:64", 64, "mxfp8", False),
        ("megatron-bridge@26.08", "qwen3-30b-a3b", "h100-sxm:16", 16, "tensorwise", False),
        ("megatron-bridge@26.04.01", "qwen3-30b-a3b", "b200:8", 8, "mxfp8", False),
        ("megatron-core@0.19", "qwen3-30b-a3b", "b200:8", 8, "mxfp8", False),
    ],
)
def test_release_profiles_turn_fp8_attention_on_where_their_recipes_do(
        framework: str, model: str, cluster: str, gpus: int, recipe: str, on: bool) -> None:
    assert _applied(framework, model, cluster, gpus, recipe) is on


def test_megatron_export_says_the_flag_does_not_exist() -> None:
    job = _job("llama3-70b", "gb200:8", True, tp=8)
    assert any("fp8_attention has no Megatron-LM flag" in note for note in megatron_notes(job))
    assert not TrainSpec().fp8_attention


def test_the_catalog_table_is_the_published_time_ratio() -> None:
    # cudnn-frontend@3929da2 dsv3/gb300/dsv3_20260424_101002.csv, cuDNN 9.22.0, causal, non-deterministic, time_ms
    # (bfloat16, mxfp8) at 2048..32768: the catalog's GB300 MLA MXFP8 table is their quotient, to 3 decimals
    forward = ((0.268, 0.166), (0.864, 0.546), (3.013, 1.944), (11.178, 7.336), (44.189, 29.731))
    backward = ((0.977, 0.772), (3.127, 2.348), (11.074, 8.030), (43.911, 31.002), (177.494, 122.768))
    table = load_gpu("gb300").efficiency.fp8_attention_ratio(Fp8Recipe.MXFP8, 192)
    assert table is not None and table.seq == (2048, 4096, 8192, 16384, 32768)
    assert table.forward == pytest.approx([fp8 / bf16 for bf16, fp8 in forward], abs=5e-4)
    assert table.backward == pytest.approx([fp8 / bf16 for bf16, fp8 in backward], abs=5e-4)
