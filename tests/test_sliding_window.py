"""GPT-OSS's attention: sliding windows (the ModelSpec fields, the fused kernel's time against cuDNN's published
sliding-window timings, GPT-OSS from its config.json, the Megatron flags both ways) and YaRN's unfused RoPE.

cuDNN timings: NVIDIA/cudnn-frontend@3929da2ef4c1dba1bb8acb68727b9134f26f40c0
benchmark/sdpa_benchmark_training/results — gpt_oss/gb200/gpt_oss_20260424_100011.csv and
gpt_oss/gb300/gpt_oss_20260424_100022.csv (cuDNN 9.22, BF16, batch 2, 128 query and 128 KV heads of 64, top-left
causal mask with a 128-token window, non-deterministic backward) and h200_919_only_cudnn/gpt_oss_20260227_034819.csv
(cuDNN 9.19, 64 query / 8 KV heads of 64, window 1024). None of them was used to build the attention curves, which come
from the Llama 3.1 (head dim 128, full causal) files of the same directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmscale.cli.main import main
from llmscale.cost.flops import attention_core_flops_per_layer
from llmscale.cost.kernels import KernelRates, attention_core_s
from llmscale.errors import SpecError
from llmscale.io.catalog import load_gpu, load_model
from llmscale.io.megatron_args import parse_megatron_args
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Precision

GPT_OSS_CONFIG = Path(__file__).parent / "fixtures" / "hf" / "gpt-oss-120b" / "config.json"


def _model(heads: int, kv_heads: int, window: int) -> ModelSpec:
    return ModelSpec(name="probe", layers=2, hidden=heads * 64, ffn_hidden=64, heads=heads, kv_heads=kv_heads,
                     head_dim=64, vocab=128, sliding_window=window)


@pytest.mark.parametrize(
    ("gpu", "heads", "kv_heads", "window", "seq", "forward_ms", "backward_ms"),
    [
        ("gb200", 128, 128, 128, 4096, 0.210, 0.465),
        ("gb200", 128, 128, 128, 8192, 0.414, 0.911),
        ("gb200", 128, 128, 128, 16384, 0.822, 1.818),
        ("gb300", 128, 128, 128, 2048, 0.104, 0.227),
        ("gb300", 128, 128, 128, 8192, 0.397, 0.862),
        ("h200", 64, 8, 1024, 4096, 0.358, 1.042),
        ("h200", 64, 8, 1024, 16384, 1.499, 4.392),
        ("h200", 64, 8, 1024, 32768, 3.021, 9.045),
    ],
)
def test_a_window_runs_at_the_curves_rate_for_chunks_of_the_window(
        gpu: str, heads: int, kv_heads: int, window: int, seq: int, forward_ms: float, backward_ms: float) -> None:
    """The fused kernel visits only the key blocks inside the window: cost.compute prices a windowed layer at
    the window's FLOPs and at the measured (full-causal, head dim 128) curve's rate for chunks of W keys. Forward
    plus backward lands within 20 % of cuDNN's sliding-window kernel on three GPUs and two windows: 7-17 % above it
    on GB200 and GB300 (their windowed backward takes 2.2x the forward, the model 2.5x), -6 to +8 % on H200."""
    model = _model(heads, kv_heads, window)
    tokens = 2 * seq  # batch 2
    flops = attention_core_flops_per_layer(model, seq, causal=True, window=window) * tokens
    forward, backward = attention_core_s(KernelRates.of(load_gpu(gpu), Precision.BF16), flops, min(window, seq))
    measured = (forward_ms + backward_ms) / 1e3
    assert float(forward + backward) == pytest.approx(measured, rel=0.20)


def test_window_flops_count_the_keys_each_query_sees() -> None:
    """Position i sees min(i + 1, W) keys: over s positions W·s − W(W − 1)/2, against s(s + 1)/2 ≈ s²/2 causal."""
    model = _model(8, 8, 4)
    full = attention_core_flops_per_layer(model, 16, causal=False)  # per token, every key: 2·s·n·(d + d)
    windowed = attention_core_flops_per_layer(model, 16, causal=True, window=4)
    assert windowed == pytest.approx(full * (4 * 16 - 4 * 3 / 2) / 16 / 16)
    # a window as long as the sequence is plain causal attention
    assert attention_core_flops_per_layer(model, 16, causal=True, window=16) == full / 2


def test_windowed_layers_follow_megatrons_skip_frequency() -> None:
    """Megatron-Core is_layer_window_attention (transformer/utils.py @d98e8a6): with --window-attn-skip-freq N the
    layers whose 1-based number is a multiple of N attend fully; without it every layer is windowed."""
    base = dict(name="m", layers=36, hidden=256, ffn_hidden=256, heads=4, vocab=128)
    assert ModelSpec(**base).windowed_layers == 0
    assert ModelSpec(**base, sliding_window=128).windowed_layers == 36
    assert ModelSpec(**base, sliding_window=128, full_attention_every=2).windowed_layers == 18
    assert ModelSpec(**base, sliding_window=128, full_attention_every=6).windowed_layers == 30  # Gemma 3's 5:1
    with pytest.raises(ValueError, match="needs sliding_window"):
        ModelSpec(**base, full_attention_every=2)


def test_gpt_oss_config_json_reads_as_the_catalog_model() -> None:
    """openai/gpt-oss-120b config.json (Hugging Face; its keys as a public serving engine's test quotes the file
    read 2026-10-02): 116.83B parameters (OpenAI's gpt-oss model card, Table 1), a 128-token window on the
    'sliding_attention' layers, every other layer from the first."""
    from llmscale.cost.params import count_params

    model = load_model(str(GPT_OSS_CONFIG))
    assert (model.sliding_window, model.full_attention_every, model.windowed_layers) == (128, 2, 18)
    assert model.model_dump(exclude={"name", "source"}) == load_model("gpt-oss-120b").model_dump(
        exclude={"name", "source"})
    assert count_params(model).total == pytest.approx(116.83e9, rel=0.005)


def test_layer_types_that_do_not_repeat_are_one_clear_error(tmp_path: Path) -> None:
    import json

    data = json.loads(GPT_OSS_CONFIG.read_text(encoding="utf-8"))
    data["layer_types"] = ["sliding_attention", "full_attention", "full_attention"] + ["sliding_attention"] * 33
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SpecError, match="layer_types"):
        load_model(str(path))


def test_megatron_flags_carry_the_window_both_ways(capsys: pytest.CaptureFixture[str]) -> None:
    """Exported as Megatron-Bridge's GPT-OSS bridge sets them (window_size (sliding_window - 1, 0),
    window_attn_skip_freq 2: NVIDIA-NeMo/Megatron-Bridge@3743c703 gpt_oss_bridge.py) and read back the same."""
    with pytest.raises(SystemExit) as info:
        main(["export", "--model", "gpt-oss-120b", "--cluster", "dgx-b200", "--gpus", "64", "--dp", "64",
              "--ep", "8", "--format", "megatron"])
    text = capsys.readouterr().out
    assert info.value.code == 0
    assert "--window-size 127,0" in text and "--window-attn-skip-freq 2" in text
    # the clamp travels as --activation-func-clamp-value (TransformerConfig.activation_func_clamp_value, a flag
    # through ArgumentGroupFactory at MEGATRON_SOURCE; explicit in arguments.py at 0d8e0714) and reads back
    assert "--activation-func-clamp-value 7" in text
    model = parse_megatron_args(text).model
    assert (model.sliding_window, model.full_attention_every, model.glu_clamp) == (128, 2, 7.0)


@pytest.mark.parametrize("value", ["127", "127,5", "-2,0", "a,0"])
def test_a_window_llmscale_cannot_hold_is_refused(value: str) -> None:
    text = ("--num-layers 2 --hidden-size 256 --ffn-hidden-size 256 --num-attention-heads 4 --vocab-size 128 "
            f"--position-embedding-type rope --window-size {value}")
    with pytest.raises(SpecError, match="--window-size"):
        parse_megatron_args(text)


def test_yarn_attention_factor_sends_megatrons_rope_down_the_unfused_path() -> None:
    """Megatron-Core's concentration factor (yarn_rotary_pos_embedding.py _yarn_get_concentration_factor @2edffadb):
    0.1·ln(32) + 1 = 1.3466 for GPT-OSS (no mscale keys); DeepSeek-V3's mscale = mscale_all_dim = 1 gives 1, and
    its MLA applies rotary itself. Only a factor other than 1 leaves TE's fused RoPE (rope_utils.py)."""
    from llmscale.cost.compute import rope_unfused

    gpt_oss, deepseek, llama = (load_model(name) for name in ("gpt-oss-120b", "deepseek-v3", "llama3-405b"))
    assert gpt_oss.rope_scaling is not None and deepseek.rope_scaling is not None
    assert gpt_oss.rope_scaling.attention_factor == pytest.approx(1.3465736, rel=1e-6)
    assert deepseek.rope_scaling.attention_factor == pytest.approx(1.0)
    assert [rope_unfused(m) for m in (gpt_oss, deepseek, llama)] == [True, False, False]


def _gpt_oss_job(model: ModelSpec | None = None):  # type: ignore[no-untyped-def]
    from llmscale.io.resolve import JobRequest, resolve

    return resolve(JobRequest(model=model or load_model("gpt-oss-120b"), cluster="b200:64", gpus=64,
                              train={"global_batch": 1280, "seq_len": 4096}, layout={"ep": 8, "mbs": 4}))


def test_the_step_prices_half_the_layers_at_the_window() -> None:
    """GPT-OSS alternates window and full layers: cost.compute's attention core of a layer is the mean of the two,
    each as the kernel functions price it; without the window both halves are full."""
    from llmscale.cost.compute import layer_times

    job = _gpt_oss_job()
    _, windowed, _ = layer_times(job.model, job.cluster, job.train, job.layouts, job.constants)
    plain = job.model.model_copy(update={"sliding_window": None, "full_attention_every": None})
    _, full, _ = layer_times(plain, job.cluster, job.train, job.layouts, job.constants)
    rates = KernelRates.of(job.cluster.gpu, Precision.BF16, job.constants.step.sustained_compute_fraction,
                           attention=job.train.attention_kernel)
    tokens = 4 * 4096
    window = attention_core_s(rates, attention_core_flops_per_layer(job.model, 4096, causal=True, window=128) * tokens,
                              128)
    assert float(windowed.attention_core_s[0]) == pytest.approx(
        0.5 * float(full.attention_core_s[0]) + 0.5 * float(window[0]), rel=1e-9)
    assert float(windowed.attention_core_backward_s[0]) == pytest.approx(
        0.5 * float(full.attention_core_backward_s[0]) + 0.5 * float(window[1]), rel=1e-9)


def test_unfused_rope_adds_its_bytes_to_every_layer() -> None:
    """24 B instead of the fused kernel's 4 per element of q and k ((64 + 8) heads of 64 for GPT-OSS), at the HBM
    roofline, forward, in the dense and the MoE layer alike."""
    from llmscale.cost.compute import layer_times
    from llmscale.cost.kernels import memory_s

    job = _gpt_oss_job()
    _, unfused, _ = layer_times(job.model, job.cluster, job.train, job.layouts, job.constants)
    plain = job.model.model_copy(update={"rope_scaling": None})
    _, fused, _ = layer_times(plain, job.cluster, job.train, job.layouts, job.constants)
    rates = KernelRates.of(job.cluster.gpu, job.train.precision, job.constants.step.sustained_compute_fraction)
    extra = memory_s(rates, 4 * 4096 * 20.0 * (64 + 8) * 64)
    assert float(unfused.elementwise_s[0] - fused.elementwise_s[0]) == pytest.approx(float(extra), rel=1e-9)


@pytest.mark.parametrize(("edit", "named"), [
    ({"layer_types": ["sliding_attention", "full_attention"] * 3}, "layer_types"),  # 6 entries for 36 layers
    ({"sliding_window": None}, "sliding_window"),  # sliding layers named, no window
])
def test_a_config_json_whose_window_does_not_add_up_is_one_error(tmp_path: Path, edit: dict[str, object],
                                                                 named: str) -> None:
    import json

    data = json.loads(GPT_OSS_CONFIG.read_text(encoding="utf-8")) | edit
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SpecError, match=named):
        load_model(str(path))


def test_megatron_reads_no_limit_and_a_lone_skip_frequency_as_full_attention() -> None:
    """Megatron (and Transformer Engine) read a left window of -1 as no limit; --window-attn-skip-freq without a
    window steers nothing, so it is listed as read with no field, not dropped in silence."""
    base = ("--num-layers 2 --hidden-size 256 --ffn-hidden-size 256 --num-attention-heads 4 --vocab-size 128 "
            "--position-embedding-type rope --bf16 ")
    unlimited = parse_megatron_args(base + "--window-size -1,0 --window-attn-skip-freq 2")
    assert unlimited.model.sliding_window is None and unlimited.model.full_attention_every is None
    assert "--window-attn-skip-freq" in unlimited.inert
    windowed = parse_megatron_args(base + "--window-size 63,0 --window-attn-skip-freq 2")
    assert (windowed.model.sliding_window, windowed.model.full_attention_every) == (64, 2)
    assert "--window-attn-skip-freq" not in windowed.inert


def test_the_probe_refuses_a_window_it_would_not_build() -> None:
    from llmscale.measure.probe_model import unsupported_fields

    assert [name for name, _, _ in unsupported_fields(load_model("gpt-oss-120b"))] == ["linear_bias",
                                                                                       "sliding_window"]


def test_torchtitan_says_when_its_flavor_drops_the_window() -> None:
    from llmscale.io.resolve import JobRequest, resolve
    from llmscale.launch.torchtitan_notes import torchtitan_notes

    windowed = load_model("llama3-8b").model_copy(update={"sliding_window": 1024})
    job = resolve(JobRequest(model=windowed, cluster="eos-h100", gpus=8, layout={"dp": 8}))
    assert any("sliding window 1024" in note and "not set by the recipe" in note for note in torchtitan_notes(job))


def test_a_stage_pays_for_the_full_layers_it_holds() -> None:
    """36 GPT-OSS layers over pp 4: rank 0 holds layers 1-9 (full: 2, 4, 6, 8 — half a layer below the model's
    share), ranks 1-3 hold 10-18, 19-27, 28-36 (five full each: half a layer above). The step adds that excess times
    full minus windowed core to the layers' mean."""
    from llmscale.cost.compute import layer_times, rank_compute
    from llmscale.io.resolve import JobRequest, resolve
    from llmscale.layout.stages import RankOf, stage_layers

    job = resolve(JobRequest(model="gpt-oss-120b", cluster="b200:64", gpus=64,
                             train={"global_batch": 1280, "seq_len": 4096}, layout={"ep": 8, "pp": 4}))
    excess = [float(stage_layers(job.model, job.layouts, which).full_attention_excess[0]) for which in RankOf]
    assert excess == [-0.5, 0.5, 0.5, 0.5]  # FIRST, SECOND, LAST, BUSIEST
    times = layer_times(job.model, job.cluster, job.train, job.layouts, job.constants)
    second = stage_layers(job.model, job.layouts, RankOf.SECOND)
    rank = rank_compute(job.layouts, second, times, job.constants.step.launch_overhead_us)
    dense, moe, _ = times
    assert float(rank.attention_core_forward_s[0]) == pytest.approx(
        9 * float(moe.attention_core_s[0]) + 0.5 * float(dense.window_gap_s[0]), rel=1e-12)
    plain = load_model("llama3-8b")
    assert not stage_layers(plain, job.layouts, RankOf.SECOND).full_attention_excess.any()


def test_mfu_says_it_counts_windowed_layers_as_full() -> None:
    """The headline MFU keeps PaLM's count (full attention on every layer, as Megatron-Bridge's GPT-OSS count does);
    explain says how many layers do less."""
    from llmscale.cost.step import estimate_step
    from llmscale.report.mfu_conventions import mfu_conventions

    job = _gpt_oss_job()
    step = estimate_step(job.model, job.cluster, job.train, job.layouts, job.constants)
    lines = mfu_conventions(job.model, job.cluster, job.train, step).lines()
    assert any("18 layers attend to a 128-token window" in line for line in lines)
    plain = job.model.model_copy(update={"sliding_window": None, "full_attention_every": None})
    assert not any("window" in line for line in mfu_conventions(plain, job.cluster, job.train, step).lines())
