"""FP8 attention (TrainSpec.fp8_attention): the attention core priced at cuDNN's measured FP8-over-16-bit ratios, the
window its backward ignores, what it saves for the backward, the checks that refuse it, and the release profiles that
turn it on."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmscale.cost.activations import MXFP8_BOTH_COPIES_BYTES, layer_activations
from llmscale.cost.compute import layer_times
from llmscale.cost.memory import memory_breakdown
from llmscale.errors import LlmscaleError, SpecError
from llmscale.io.catalog import load_cluster, load_gpu, load_model
from llmscale.io.releases import fill, find_release
from llmscale.io.resolve import Job, JobRequest, resolve
from llmscale.launch.megatron import megatron_notes
from llmscale.layout.arrays import Layouts
from llmscale.specs.train import Fp8Recipe
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


# NVIDIA/cudnn-frontend@3929da2ef4c1 benchmark/sdpa_benchmark_training/results, cuDNN 9.22.0 (H200: 9.19.1), causal,
# non-deterministic, seq 4096, time_ms (16-bit, FP8) forward and backward: dsv3/gb200/dsv3_20260424_101009.csv (MLA,
# head dim 192/128), llama3.1/{gb200,gb300}/llama3.1_*.csv (head dim 128), h200_919_only_cudnn/llama3.1_*.csv. MLA
# gains in both passes; Llama's MXFP8 backward loses; H200's per-tensor backward breaks even.
@pytest.mark.parametrize(
    ("model", "cluster", "recipe", "forward_ms", "backward_ms"),
    [
        ("deepseek-v3", "gb200:64", "mxfp8", (0.977, 0.714), (3.383, 2.620)),
        ("deepseek-v3", "gb200:64", "tensorwise", (0.977, 0.656), (3.383, 2.112)),
        ("llama3-70b", "gb200:8", "mxfp8", (0.391, 0.326), (1.198, 1.305)),
        ("llama3-70b", "gb300:8", "tensorwise", (0.323, 0.217), (1.101, 0.985)),
        ("llama3-70b", "h200:8", "delayed", (0.465, 0.322), (1.450, 1.459)),
    ],
)
def test_the_core_takes_cudnns_measured_ratio_at_the_models_head_dim(
        model: str, cluster: str, recipe: str, forward_ms: tuple[float, float],
        backward_ms: tuple[float, float]) -> None:
    layout: dict[str, int] = {"ep": 64, "dp": 64} if model == "deepseek-v3" else {"tp": 8}
    bf16 = _core(_job(model, cluster, False, recipe, **layout))
    fp8 = _core(_job(model, cluster, True, recipe, **layout))
    assert fp8[0] / bf16[0] == pytest.approx(forward_ms[1] / forward_ms[0], rel=0.002)
    assert fp8[1] / bf16[1] == pytest.approx(backward_ms[1] / backward_ms[0], rel=0.002)


def _window_ms(job: Job) -> tuple[float, float, float]:
    """(windowed forward, windowed backward, full backward) attention of `job`'s layers (layer_times gives their mean
    and the gap)."""
    dense, _, _ = layer_times(job.model, job.cluster, job.train, job.layouts, job.constants)
    full_share = 1 - job.model.windowed_layers / job.model.layers
    gap, gap_backward = float(dense.window_gap_s[0]), float(dense.window_gap_backward_s[0])
    window = float(dense.attention_core_s[0]) - full_share * gap
    window_backward = float(dense.attention_core_backward_s[0]) - full_share * gap_backward
    return window * 1e3, window_backward * 1e3, (window_backward + gap_backward) * 1e3


@pytest.mark.parametrize(
    ("cluster", "forward_ms", "backward_ms"),
    [("gb200:64", (0.210, 0.210), (0.465, 2.080)), ("gb300:64", (0.202, 0.175), (0.442, 1.871))],
)
def test_gpt_oss_windowed_layers_take_the_table_measured_over_their_window(
        cluster: str, forward_ms: tuple[float, float], backward_ms: tuple[float, float]) -> None:
    # cudnn-frontend@3929da2 gpt_oss/{gb200,gb300}/gpt_oss_*.csv: head dim 64, window 128, seq 4096, (BF16, MXFP8)
    # time_ms. The MXFP8 backward visits every causal block: 4.5x the windowed BF16 one (it grows as the square of
    # the length, 7.427 against 0.911 ms at 8192 on GB200). Each FP8 pass is priced over the model's windowed BF16
    # forward + backward, the sum the 16-bit window model claims.
    bf16 = _window_ms(_job("gpt-oss-120b", cluster, False, ep=64, dp=64))
    fp8 = _window_ms(_job("gpt-oss-120b", cluster, True, ep=64, dp=64))
    measured_sum = forward_ms[0] + backward_ms[0]
    assert fp8[0] / (bf16[0] + bf16[1]) == pytest.approx(forward_ms[1] / measured_sum, abs=0.001)
    assert fp8[1] / (bf16[0] + bf16[1]) == pytest.approx(backward_ms[1] / measured_sum, abs=0.001)


def test_past_the_longest_length_measured_the_windowed_backward_grows_with_the_length() -> None:
    # FP8's windowed backward visits every causal block (time ∝ s², cudnn-frontend@3929da2 gpt_oss/gb200: 2.080,
    # 7.427, 27.940 ms at 4k, 8k, 16k) where the 16-bit one visits the window's (∝ s: 0.465, 0.911, 1.818)
    table = load_gpu("gb200").efficiency.fp8_attention_ratio(Fp8Recipe.MXFP8, 64, 128)
    assert table is not None
    forward, backward = table.at(np.array([16384.0, 65536.0]))
    assert backward[1] == pytest.approx(4 * backward[0], rel=1e-12) and forward[1] == forward[0]


def test_without_a_table_at_its_window_a_layer_pays_the_causal_backward() -> None:
    # GB200's tables measured no 64-token window: the windowed layers' FP8 backward is then the full causal one at
    # the causal ratio, so windowed and full layers cost alike; the forward keeps the window at the causal ratio
    # held below 2048 tokens (cuDNN's MXFP8 over BF16 at head dim 128 and 2048 tokens: 0.103 / 0.125 ms).
    gpu = load_gpu("gb200")
    table = gpu.efficiency.fp8_attention_ratio(Fp8Recipe.MXFP8, 64)
    assert table is not None and gpu.efficiency.fp8_attention_ratio(Fp8Recipe.MXFP8, 64, 64) is None

    def job(fp8: bool) -> Job:
        request = JobRequest(model="gpt-oss-120b", cluster="gb200:64", gpus=64, framework="any",
                             train={"global_batch": 256, "seq_len": 4096, "precision": "fp8", "fp8_recipe": "mxfp8",
                                    "fp8_attention": fp8}, layout={"mbs": 1, "ep": 64, "dp": 64})
        resolved = resolve(request)
        return Job(**{**resolved.__dict__, "model": resolved.model.model_copy(update={"sliding_window": 64})})

    bf16, fp8 = _window_ms(job(False)), _window_ms(job(True))
    assert fp8[1] == pytest.approx(fp8[2], rel=1e-12)
    assert fp8[2] / bf16[2] == pytest.approx(table.at(4096.0)[1], rel=1e-12)
    assert fp8[0] / bf16[0] == pytest.approx(0.103 / 0.125, abs=0.001)


def test_fp8_attention_saves_q_k_v_by_scaling() -> None:
    # TE v2.18 FusedAttnFunc.forward: current scaling saves q_fp8, k_fp8, v_fp8 and a 16-bit O
    # (NVTE_DPA_FP8CS_O_in_F16 = 1), delayed an FP8 O too; MXFP8 keeps Q, K, V row- and column-wise (with scales).
    job = _job("llama3-70b", "gb200:8", False, "tensorwise", tp=8)
    lay = Layouts.from_columns(tp=8, dp=1, mbs=1)
    model = job.model
    qkv, o = (model.heads + 2 * model.num_kv_heads) * model.dim_per_head, model.heads * model.dim_per_head
    plain = layer_activations(model, job.train, lay).dense_bytes[0]
    for recipe, saved in ((Fp8Recipe.TENSORWISE, qkv), (Fp8Recipe.DELAYED, qkv + o),
                          (Fp8Recipe.MXFP8, (2 - 2 * (1 + 1 / 32)) * qkv)):
        train = job.train.model_copy(update={"fp8_attention": True, "fp8_recipe": recipe})
        fp8 = layer_activations(model, train, lay).dense_bytes[0]
        assert plain - fp8 == pytest.approx(4096 * saved / 8, rel=1e-9)
    assert MXFP8_BOTH_COPIES_BYTES == 2 * (1 + 1 / 32)


def test_memory_names_the_native_recipe_before_counting_what_attention_saves() -> None:
    # A run that names no recipe runs the GPU's native one (MXFP8 on Blackwell): FP8 attention keeps what it keeps
    # under that recipe named, Q, K and V row- and column-wise, a little more than 16-bit.
    job = _job("llama3-70b", "b200:8", False, "mxfp8", tp=8)
    native = job.train.model_copy(update={"fp8_attention": True, "fp8_recipe": None})
    named = native.model_copy(update={"fp8_recipe": Fp8Recipe.MXFP8})

    def total(train):  # type: ignore[no-untyped-def]
        return float(memory_breakdown(job.model, job.cluster, train, job.layouts, job.constants).total_bytes[0])

    assert total(native) == total(named) > total(job.train)


@pytest.mark.parametrize(
    ("model", "cluster", "train", "field_text"),
    [
        ("llama3-70b", "h100-sxm:8", {"precision": "bf16"}, "precision is bf16"),
        ("llama3-70b", "gb200:8", {"precision": "fp8", "flash_attention": False}, "unfused"),
        ("llama3-70b", "gb200:8", {"precision": "fp8", "fp8_recipe": "blockwise"}, "under blockwise"),
        # TE v2.18 utils.py get_attention_backend: below sm100 fused FP8 attention runs under delayed scaling only
        # (:604-607) and over no window (:1256-1266); cuDNN 9.19's FP8 backward takes head dim 128 only (H200 tables)
        ("llama3-70b", "h100-sxm:8", {"precision": "fp8"}, "delayed recipe only"),
        ("llama3-70b", "h100-sxm:8", {"precision": "fp8", "fp8_recipe": "tensorwise"}, "delayed recipe only"),
        ("gpt-oss-120b", "h100-sxm:8", {"precision": "fp8", "fp8_recipe": "delayed"}, "sliding-window"),
        ("deepseek-v3", "h800:64", {"precision": "fp8", "fp8_recipe": "delayed"}, "head dim 128 only"),
    ],
)
def test_fp8_attention_is_refused_where_it_cannot_run(
        model: str, cluster: str, train: dict[str, object], field_text: str) -> None:
    gpus = int(cluster.split(":")[1])
    layout = {"tp": 8} if gpus == 8 else {"ep": 64, "dp": 64}
    with pytest.raises(SpecError, match=field_text) as info:
        resolve(JobRequest(model=model, cluster=cluster, gpus=gpus, train={**train, "fp8_attention": True},
                           layout=layout, framework="any"))
    assert info.value.field == "fp8_attention"


def test_flashattention2_has_no_fp8_kernel() -> None:
    with pytest.raises(SpecError, match="FlashAttention-2"):
        resolve(JobRequest(model="llama3-70b", cluster="h100-sxm:8", gpus=8, layout={"tp": 8}, framework="any",
                           train={"precision": "fp8", "fp8_recipe": "delayed", "attention_kernel": "flash2",
                                  "fp8_attention": True}))


def test_a_gpu_without_a_measurement_refuses_fp8_attention() -> None:
    h100 = load_cluster("h100-sxm:8")
    efficiency = h100.gpu.efficiency.model_copy(update={"fp8_attention": ()})
    bare = h100.model_copy(update={"gpu": h100.gpu.model_copy(update={"efficiency": efficiency})})
    with pytest.raises(SpecError, match="no delayed FP8 attention measurement"):
        resolve(JobRequest(model="llama3-70b", cluster=bare, gpus=8, layout={"tp": 8}, framework="any",
                           train={"precision": "fp8", "fp8_recipe": "delayed", "fp8_attention": True}))


def test_the_cli_names_the_field_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "explain", "-m", "llama3-70b", "-c", "h100-sxm:8", "--gpus", "8", "--tp", "8",
                           "--fp8-attention", "--framework", "any")
    assert code == 2 and "fp8_attention" in err and "precision is bf16" in err and "Traceback" not in err


QWEN_B200 = ("explain", "-m", "qwen3-30b-a3b", "-c", "b200:8", "--gpus", "8", "--ep", "8", "--precision", "fp8",
             "--fp8-recipe", "mxfp8", "--framework", "megatron-bridge@26.08")


def test_a_release_setting_yields_to_the_attention_the_user_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    # Megatron-Bridge 26.08 turns FP8 attention on for Qwen3-MoE MXFP8 on B200; a user's unfused attention has no
    # FP8 kernel, so the release's setting is dropped and said so, not turned into an error the user did not cause.
    code, out, err = run_cli(capsys, *QWEN_B200)
    assert code == 0, err
    assert "· FP8 attention (mxfp8)" in out and "not turned on" not in out
    code, out, err = run_cli(capsys, *QWEN_B200, "--no-flash-attention")
    assert code == 0, err
    assert "# not turned on: fp8_attention (yields to the unfused" in out and "FP8 attention (" not in out
    # the user's own FP8 attention beside unfused attention is the user's contradiction: refused
    code, _, err = run_cli(capsys, *QWEN_B200, "--no-flash-attention", "--fp8-attention")
    assert code == 2 and "unfused" in err and "Traceback" not in err


def test_a_release_setting_yields_to_flashattention2() -> None:
    release = find_release("megatron-bridge@26.08")
    model, cluster = load_model("qwen3-30b-a3b"), load_cluster("b200:8")
    train = {"precision": "fp8", "fp8_recipe": "mxfp8", "seq_len": 4096}
    assert fill(release, model, cluster, train, {"ep": 8}, 8).train["fp8_attention"] is True
    flash2 = fill(release, model, cluster, train | {"attention_kernel": "flash2"}, {"ep": 8}, 8)
    assert "fp8_attention" not in flash2.train and flash2.application.dropped == ("fp8_attention",)


def test_a_named_measurement_set_must_exist(tmp_path) -> None:  # type: ignore[no-untyped-def]
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text("name: X\ngeneration: blackwell\npeak_bf16_tflops: 2000\npeak_fp8_tflops: 4000\nmemory_gib: 180\n"
                   "memory_bandwidth_gb_per_s: 8000\nscaleup_bandwidth_gb_per_s: 900\n"
                   "efficiency: {fp8_attention: cudnn-9.99-x}\n")
    with pytest.raises(LlmscaleError, match=r"gpu\.yaml: efficiency\.fp8_attention = 'cudnn-9\.99-x'"):
        load_gpu(str(gpu))


def test_ratio_lookup_takes_the_nearest_head_dim_and_interpolates_in_log_length() -> None:
    eff = load_gpu("b200").efficiency  # GB200's tables (same die)
    assert eff.fp8_attention_ratio(Fp8Recipe.MXFP8, 64).head_dim == 128  # type: ignore[union-attr]
    assert eff.fp8_attention_ratio(Fp8Recipe.MXFP8, 160).head_dim == 192  # type: ignore[union-attr]  # a tie
    assert eff.fp8_attention_ratio(Fp8Recipe.TENSORWISE, 192).head_dim == 192  # type: ignore[union-attr]
    assert eff.fp8_attention_ratio(Fp8Recipe.BLOCKWISE, 128) is None
    table = eff.fp8_attention_ratio(Fp8Recipe.MXFP8, 128)
    assert table is not None
    forward, backward = table.at(np.array([128.0, math.sqrt(2048 * 4096), 1e6]))
    assert forward[0] == table.forward[0] and backward[-1] == table.backward[-1]
    assert backward[1] == pytest.approx((table.backward[0] + table.backward[1]) / 2, rel=1e-12)


# One (16-bit, FP8) time_ms pair per catalog table, transcribed from the CSVs (cudnn-frontend@3929da2, causal,
# non-deterministic; gpt_oss: window 128): the table holds their quotient to three decimals.
@pytest.mark.parametrize(
    ("gpu", "recipe", "head_dim", "window", "seq", "backward", "bf16_ms", "fp8_ms"),
    [
        ("gb200", Fp8Recipe.TENSORWISE, 128, None, 32768, False, 21.692, 16.012),
        ("gb200", Fp8Recipe.MXFP8, 128, None, 2048, True, 0.389, 0.461),
        ("gb200", Fp8Recipe.TENSORWISE, 192, None, 16384, True, 50.424, 29.050),
        ("gb200", Fp8Recipe.MXFP8, 192, None, 4096, True, 3.383, 2.620),
        # windowed tables: over the 16-bit forward + backward (0.414 + 0.911, 0.109 + 0.237 ms)
        ("gb200", Fp8Recipe.TENSORWISE, 64, 128, 8192, True, 0.414 + 0.911, 6.176),
        ("gb200", Fp8Recipe.MXFP8, 64, 128, 2048, False, 0.109 + 0.237, 0.109),
        ("gb300", Fp8Recipe.TENSORWISE, 128, None, 8192, False, 1.185, 0.759),
        ("gb300", Fp8Recipe.MXFP8, 128, None, 32768, True, 59.024, 55.340),
        ("gb300", Fp8Recipe.TENSORWISE, 192, None, 2048, True, 0.977, 0.591),
        ("gb300", Fp8Recipe.MXFP8, 192, None, 32768, False, 44.189, 29.731),
        ("gb300", Fp8Recipe.TENSORWISE, 64, 128, 4096, False, 0.202 + 0.442, 0.167),
        ("gb300", Fp8Recipe.MXFP8, 64, 128, 16384, True, 0.790 + 1.712, 24.996),
        ("h200", Fp8Recipe.DELAYED, 128, None, 32768, True, 75.688, 118.729),
    ],
)
def test_each_catalog_table_is_the_published_time_ratio(gpu: str, recipe: Fp8Recipe, head_dim: int,
                                                        window: int | None, seq: int, backward: bool,
                                                        bf16_ms: float, fp8_ms: float) -> None:
    table = load_gpu(gpu).efficiency.fp8_attention_ratio(recipe, head_dim, window)
    assert table is not None and table.head_dim == head_dim and table.window == window
    values = table.backward if backward else table.forward
    assert values[table.seq.index(seq)] == pytest.approx(fp8_ms / bf16_ms, abs=5e-4)


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
        ("megatron-bridge@26.08", "gpt-oss-120b", "b300:64", 64, "mxfp8", False),
        ("megatron-bridge@26.08", "deepseek-v3", "gb300:256", 256, "mxfp8", True),
        # the 64-GPU FSDP recipe leaves it at its default (deepseek/gb300/deepseek_v3.py:270), the 128-GPU HSDP one
        # sets it off (:345); the 64-GPU Qwen3-235B B200 recipe calls no helper (qwen/b200/qwen3_moe.py:130)
        ("megatron-bridge@26.08", "deepseek-v3", "gb300:128", 128, "mxfp8", False),
        ("megatron-bridge@26.08", "qwen3-235b-a22b", "b200:64", 64, "mxfp8", False),
        ("megatron-bridge@26.08", "qwen3-235b-a22b", "b200:256", 256, "mxfp8", True),
        ("megatron-bridge@26.08", "qwen3-235b-a22b", "gb200:64", 64, "mxfp8", True),  # gb200/qwen3_moe.py:168
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
    assert any("fp8_attention has no Megatron-LM command-line flag" in note for note in megatron_notes(job))
    assert not any("fp8_attention" in note for note in megatron_notes(_job("llama3-70b", "gb200:8", False, tp=8)))
