"""The MXFP8 output layer (TrainSpec.fp8_output_proj, Megatron-Core fp8_output_proj): the logits GEMMs at the MXFP8
rate with their input and output gradient quantized, the checks that refuse it, the releases that turn it on, and the
Megatron flag that carries it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from llmscale.cost import compute
from llmscale.cost.host import layer_calls
from llmscale.cost.memory import memory_breakdown
from llmscale.errors import SpecError
from llmscale.io.catalog import load_cluster, load_model
from llmscale.io.megatron_args import parse_megatron_args
from llmscale.io.releases import fill, find_release
from llmscale.io.resolve import Job, JobRequest, resolve
from llmscale.launch.megatron import megatron_args
from llmscale.layout.arrays import Layouts
from llmscale.layout.rules import Reason, conditions
from llmscale.specs.framework import ProfileRule, ProfileSettings
from llmscale.specs.train import TrainSpec
from tests.conftest import run_cli

# Transformer Engine's MXFP8 (docs/features/low_precision_training/mxfp8/mxfp8.rst): a 16-bit tensor is read once and
# written twice, row- and column-wise (the data- and weight-gradient GEMMs reduce over different dims), 1 B per
# element plus an E8M0 scale per 32 elements each.
MXFP8_CAST_BYTES = 2 + 2 * (1 + 1 / 32)


def _job(fp8_output_proj: bool, model: str = "gpt-oss-120b", cluster: str = "gb200:64") -> Job:
    return resolve(JobRequest(model=model, cluster=cluster, gpus=64, framework="any",
                              train={"global_batch": 256, "seq_len": 4096, "precision": "fp8", "fp8_recipe": "mxfp8",
                                     "fp8_output_proj": fp8_output_proj},
                              layout={"ep": 64, "dp": 64, "mbs": 4}))


def _output(job: Job) -> compute.LayerTimes:
    return compute.layer_times(job.model, job.cluster, job.train, job.layouts, job.constants)[2]


def test_the_logits_gemm_runs_at_the_mxfp8_rate() -> None:
    # GB200's catalog GEMM ceilings (catalog/gpus.yaml, from MAMF sweeps): BF16 0.747 of 2450 TFLOP/s, MXFP8 0.705
    # of 4900. GPT-OSS's logits GEMM (16,384 x 201,088 x 2,880) fills every tile, so its time goes with the ceiling.
    bf16, mxfp8 = _output(_job(False)), _output(_job(True))
    expected = (4900 * 0.705) / (2450 * 0.747)
    assert float(bf16.gemm_s[0] / mxfp8.gemm_s[0]) == pytest.approx(expected, rel=0.01)
    assert float(bf16.gemm_weight_grad_s[0] / mxfp8.gemm_weight_grad_s[0]) == pytest.approx(expected, rel=0.01)


def test_the_head_quantizes_its_input_forward_and_its_vocab_wide_gradient_backward() -> None:
    job = _job(True)
    shapes, cast = compute._shapes(job.model, job.cluster, job.train, job.layouts, job.constants)
    assert cast == pytest.approx(MXFP8_CAST_BYTES)
    head = compute._OutputHead.of(job.train, shapes, cast)
    last = _output(job)  # any layer kind: GPT-OSS has no MTP modules, so the head alone is priced
    quantized = compute._output_times(job.model, shapes, last, head)
    bare = compute._output_times(job.model, shapes, last, compute._OutputHead(head.rates, 0.0))
    bandwidth = 8000e9 * job.cluster.gpu.efficiency.hbm  # GB200: 8 TB/s (catalog/gpus.yaml) at the achievable share
    tokens = 4 * 4096
    gradient = tokens * 201_088 * MXFP8_CAST_BYTES / bandwidth
    assert float(quantized.gemm_input_grad_s[0] - bare.gemm_input_grad_s[0]) == pytest.approx(gradient, rel=1e-6)
    assert float(quantized.elementwise_s[0] - bare.elementwise_s[0]) == pytest.approx(
        tokens * 2880 * MXFP8_CAST_BYTES / bandwidth, rel=1e-6)
    np.testing.assert_array_equal(quantized.gemm_s, bare.gemm_s)


def test_a_16bit_head_is_unchanged_by_the_recipe() -> None:
    head = _output(_job(False))
    bf16 = resolve(JobRequest(model="gpt-oss-120b", cluster="gb200:64", gpus=64, framework="any",
                              train={"global_batch": 256, "seq_len": 4096, "precision": "bf16"},
                              layout={"ep": 64, "dp": 64, "mbs": 4}))
    out = _output(bf16)
    for field in ("gemm_s", "gemm_input_grad_s", "gemm_weight_grad_s"):
        assert float(getattr(head, field)[0]) == pytest.approx(float(getattr(out, field)[0]), rel=1e-9)


def test_the_quantizer_is_one_more_host_call_each_pass() -> None:
    # io: the output layer is three other ops and one GEMM (4 forward, 5 backward calls); a quantized GEMM input is
    # one more call each pass (docs/cost-model.md#host-calls)
    plain, quantized = (layer_calls(job.model, job.train, job.layouts) for job in (_job(False), _job(True)))
    assert (float(plain.output_forward[0]), float(plain.output_backward[0])) == (4.0, 5.0)
    assert (float(quantized.output_forward[0]), float(quantized.output_backward[0])) == (5.0, 6.0)


@pytest.mark.parametrize(
    ("train", "text"),
    [
        # Megatron-Core d98e8a64 transformer_config.py:1569-1575: fp8 mode and fp8_recipe 'mxfp8' only
        ({"precision": "bf16"}, "this run is precision bf16"),
        ({"precision": "fp8", "fp8_recipe": "tensorwise"}, "under tensorwise"),
        ({"precision": "fp4"}, "this run is precision fp4"),
    ],
)
def test_it_needs_the_mxfp8_recipe(train: dict[str, object], text: str) -> None:
    with pytest.raises(SpecError, match=text) as info:
        resolve(JobRequest(model="gpt-oss-120b", cluster="gb200:64", gpus=64, framework="any",
                           train={**train, "fp8_output_proj": True}, layout={"ep": 64, "dp": 64}))
    assert info.value.field == "fp8_output_proj"


def test_hopper_has_no_mxfp8_head() -> None:
    with pytest.raises(SpecError, match="under tensorwise"):
        resolve(JobRequest(model="llama3-70b", cluster="h100-sxm:8", gpus=8, framework="any", layout={"tp": 8},
                           train={"precision": "fp8", "fp8_output_proj": True}))


def _tied(model: str, gpus: int, **layout: int) -> Job:
    return resolve(JobRequest(model=model, cluster=f"gb200:{gpus}", gpus=gpus, framework="any", layout=layout,
                              train={"precision": "fp8", "fp8_recipe": "mxfp8", "fp8_output_proj": True}))


def test_a_tied_output_layer_needs_a_pipeline() -> None:
    # NVIDIA/Megatron-LM@d98e8a64: on the stage that holds the embedding a tied output layer skips its weight
    # (gpt_model.py:289), which TELMHeadColumnParallelLinear refuses (extensions/transformer_engine.py:1826); on a
    # later stage it allocates its own (language_module.py:361-362 returns it) and runs
    with pytest.raises(SpecError, match="needs pp > 1") as info:
        _tied("gpt3-175b", 8, tp=8)
    assert info.value.field == "pp"
    assert _tied("gpt3-175b", 64, tp=8, pp=8).train.fp8_output_proj
    tied = load_model("gpt3-175b")
    lay = Layouts.from_columns(tp=np.array([8, 8]), pp=np.array([1, 8]), dp=np.array([8, 1]))
    train = TrainSpec(precision="fp8", fp8_recipe="mxfp8", fp8_output_proj=True)
    reasons = dict(conditions(tied, train, 64, lay))
    assert reasons[Reason.TIED_OUTPUT].tolist() == [True, False]
    untied = dict(conditions(tied.model_copy(update={"tied_embeddings": False}), train, 64, lay))
    assert not untied[Reason.TIED_OUTPUT].any()


def test_a_tied_output_layer_beside_mtp_is_refused_at_every_depth() -> None:
    # the MTP stage passes the embedding's weight to the output layer (language_module.py:352-360), which the MXFP8
    # layer refuses as a runtime weight (extensions/transformer_engine.py:1889)
    tied = load_model("deepseek-v3").model_copy(update={"tied_embeddings": True})
    with pytest.raises(SpecError, match="beside MTP modules") as info:
        resolve(JobRequest(model=tied, cluster="gb200:256", gpus=256, framework="any",
                           layout={"pp": 4, "ep": 64, "dp": 64},
                           train={"precision": "fp8", "fp8_recipe": "mxfp8", "fp8_output_proj": True}))
    assert info.value.field == "fp8_output_proj"


def test_the_cli_names_the_field_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "explain", "-m", "llama3-70b", "-c", "gb200:8", "--gpus", "8", "--tp", "8",
                           "--fp8-output-proj", "--framework", "any")
    assert code == 2 and "fp8_output_proj" in err and "precision bf16" in err and "Traceback" not in err


FP8 = {"precision": "fp8", "fp8_recipe": "mxfp8"}


@pytest.mark.parametrize(
    ("release", "model", "cluster", "train", "layout", "on"),
    [
        # NVIDIA-NeMo/Megatron-Bridge@51885cf perf_recipes: deepseek/common.py:71 sets it from the argument the
        # GB200 (gb200/deepseek_v3.py:160), GB300 (:157) and B300 (b300:154) fp8mx recipes pass as True;
        # gpt_oss/common.py:28 in the GB200/GB300 fp8mx helper
        ("26.08", "deepseek-v3", "gb200:256", FP8, {"pp": 4, "ep": 64}, True),
        ("26.08", "deepseek-v3", "gb300:256", FP8, {"pp": 2, "ep": 32}, True),
        ("26.08", "deepseek-v3", "b300:256", FP8, {"pp": 8, "ep": 8}, True),
        ("26.08", "gpt-oss-120b", "gb200:64", FP8, {"ep": 64}, True),
        ("26.08", "gpt-oss-120b", "gb300:64", FP8, {"ep": 16}, True),
        ("26.08", "deepseek-v3", "b200:256", FP8, {"pp": 8, "ep": 32}, False),  # TE graphs, not the helper
        ("26.08", "gpt-oss-120b", "b300:64", FP8, {"ep": 8}, False),  # B300 recipe: no helper, no head in MXFP8
        ("26.08", "qwen3-30b-a3b", "gb200:8", FP8, {"ep": 8}, False),  # the Qwen3 helper does not set it
        ("26.08", "deepseek-v3", "gb200:256", {"precision": "fp8", "fp8_recipe": "tensorwise"},
         {"pp": 4, "ep": 64}, False),
        ("26.04.01", "deepseek-v3", "gb200:256", FP8, {"pp": 4, "ep": 64}, False),  # no such setting yet
    ],
)
def test_release_profiles_turn_the_mxfp8_head_on_where_their_recipes_do(
        release: str, model: str, cluster: str, train: dict[str, str], layout: dict[str, int], on: bool) -> None:
    gpus = int(cluster.split(":")[1])
    filled = fill(find_release(f"megatron-bridge@{release}"), load_model(model), load_cluster(cluster), train,
                  layout, gpus)
    assert bool(filled.train.get("fp8_output_proj", False)) is on


def test_the_release_setting_yields_to_a_tied_output_layer() -> None:
    tied = load_model("gpt-oss-120b").model_copy(update={"tied_embeddings": True})
    filled = fill(find_release("megatron-bridge@26.08"), tied, load_cluster("gb200:64"), FP8, {"ep": 64}, 64)
    assert "fp8_output_proj" not in filled.train
    assert filled.application.dropped == ("fp8_output_proj",)


def test_megatron_export_writes_the_flag_and_reads_it_back() -> None:
    # --fp8-output-proj: ArgumentGroupFactory's store_true flag of TransformerConfig.fp8_output_proj
    # (NVIDIA/Megatron-LM@d98e8a64 megatron/training/arguments.py:2373, argument_utils.py:191)
    args = megatron_args(_job(True))
    assert "--fp8-output-proj" in args and "--fp8-output-proj" not in megatron_args(_job(False))
    parsed = parse_megatron_args(" ".join(args))
    assert parsed.train["fp8_output_proj"] is True


def _cast_s(job: Job, mine: compute._OutputHead | None = None) -> tuple[float, float]:
    """(backward, forward) seconds the head's casts add: its times with `job`'s head minus with a cast-free one."""
    shapes, cast = compute._shapes(job.model, job.cluster, job.train, job.layouts, job.constants)
    head = compute._OutputHead.of(job.train, shapes, cast)
    last = _output(job)
    quantized = compute._output_times(job.model, shapes, last, head)
    bare = compute._output_times(job.model, shapes, last, compute._OutputHead(head.rates, 0.0))
    return (float(quantized.gemm_input_grad_s[0] - bare.gemm_input_grad_s[0]),
            float(quantized.elementwise_s[0] - bare.elementwise_s[0]))


def test_under_tensor_and_sequence_parallelism_each_gpu_casts_its_share() -> None:
    # tp 8 with sequence parallelism: the gradient is V/8 wide on each GPU, and the input is quantized on its
    # sequence shard before the all-gather (TE v2.18 module/linear.py, the input quantizer ahead of the gather)
    job = resolve(JobRequest(model="llama3-70b", cluster="gb200:64", gpus=64, framework="any",
                             layout={"tp": 8, "sp": True, "mbs": 1},
                             train={"global_batch": 256, "precision": "fp8", "fp8_recipe": "mxfp8",
                                    "fp8_output_proj": True}))
    bandwidth = 8000e9 * job.cluster.gpu.efficiency.hbm
    backward, forward = _cast_s(job)
    assert backward == pytest.approx(4096 * 128_256 / 8 * MXFP8_CAST_BYTES / bandwidth, rel=1e-6)
    assert forward == pytest.approx(4096 * 8192 / 8 * MXFP8_CAST_BYTES / bandwidth, rel=1e-6)


def test_the_mtp_module_runs_the_same_head_and_pays_its_casts_too() -> None:
    # DeepSeek-V3's MTP module reuses the output layer (Megatron-Core gpt_model.py passes self.output_layer)
    job = resolve(JobRequest(model="deepseek-v3", cluster="gb200:256", gpus=256, framework="any",
                             layout={"pp": 4, "ep": 64, "dp": 64, "mbs": 1},
                             train={"global_batch": 4096, "precision": "fp8", "fp8_recipe": "mxfp8",
                                    "fp8_output_proj": True}))
    assert job.model.mtp_layers == 1
    bandwidth = 8000e9 * job.cluster.gpu.efficiency.hbm
    assert _cast_s(job)[0] == pytest.approx(2 * 4096 * 129_280 * MXFP8_CAST_BYTES / bandwidth, rel=1e-6)


def test_the_head_adds_its_quantized_gradient_and_weight_copies_to_the_last_stage() -> None:
    # TE quantizes the output gradient row- and column-wise (module/linear.py:852-854) and caches both copies of
    # the weight (the weight workspace): 2.0625 B per element each way, beside the 16-bit logits and weight
    plain, quantized = (memory_breakdown(job.model, job.cluster, job.train, job.layouts, job.constants)
                        for job in (_job(False), _job(True)))
    added = 2 * (1 + 1 / 32) * (4 * 4096 + 2880) * 201_088  # pp = 1: the one stage is the last
    fragmentation = 1 + _job(True).constants.memory.fragmentation_fraction
    assert float(quantized.total_bytes[0] - plain.total_bytes[0]) == pytest.approx(added * fragmentation, rel=1e-6)


def test_a_flag_the_user_gave_is_not_dropped_beside_a_tied_output_layer() -> None:
    # the release's setting yields to a tied layer; the user's own flag stays, and where it cannot run (one stage)
    # the run is refused rather than quietly trained in 16-bit
    tied = load_model("gpt-oss-120b").model_copy(update={"tied_embeddings": True})
    filled = fill(find_release("megatron-bridge@26.08"), tied, load_cluster("gb200:64"),
                  FP8 | {"fp8_output_proj": True}, {"ep": 64}, 64)
    assert filled.train["fp8_output_proj"] is True and filled.application.dropped == ()
    with pytest.raises(SpecError, match="needs pp > 1"):
        resolve(JobRequest(model=tied, cluster="gb200:64", gpus=64, framework="megatron-bridge@26.08",
                           layout={"ep": 64, "dp": 64}, train=FP8 | {"fp8_output_proj": True}))


def test_a_release_that_ties_the_output_layer_drops_its_own_mxfp8_head() -> None:
    release = find_release("megatron-bridge@26.08")
    ties = ProfileRule(set=ProfileSettings(tied_embeddings=True), source=release.rules[0].source, read="a test")
    tying = release.model_copy(update={"rules": [*release.rules, ties]})
    filled = fill(tying, load_model("gpt-oss-120b"), load_cluster("gb200:64"), FP8, {"ep": 64}, 64)
    assert filled.model.tied_embeddings and "fp8_output_proj" not in filled.train
    assert filled.application.dropped == ("fp8_output_proj",)


def test_explain_and_memory_say_what_runs_and_what_was_dropped(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    flags = ("-c", "gb200:64", "--gpus", "64", "--ep", "64", "--precision", "fp8", "--fp8-recipe", "mxfp8",
             "--framework", "megatron-bridge@26.08")
    code, out, err = run_cli(capsys, "explain", "-m", "gpt-oss-120b", *flags)
    assert code == 0, err
    text = " ".join(out.split())
    assert "· MXFP8 output layer" in text and "fp8_output_proj on (bridge-v0.6.0-gptoss-common)" in text
    tied = load_model("gpt-oss-120b").model_copy(update={"tied_embeddings": True, "name": "gpt-oss-tied"})
    path = tmp_path / "tied.yaml"
    path.write_text(yaml.safe_dump(tied.model_dump(mode="json", exclude_none=True)), encoding="utf-8")
    for command in ("explain", "memory"):
        code, out, err = run_cli(capsys, command, "-m", str(path), *flags)
        assert code == 0, err
        text = " ".join(out.split())
        assert "# not turned on: fp8_output_proj (the output layer is tied to the input embedding)" in text
        assert "MXFP8 output layer" not in text
    code, out, err = run_cli(capsys, "memory", "-m", "gpt-oss-120b", *flags)
    assert code == 0 and "· MXFP8 output layer" in " ".join(out.split())


def test_megatron_core_keeps_the_head_in_16bit_unless_asked(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "explain", "-m", "gpt-oss-120b", "-c", "gb200:64", "--gpus", "64", "--ep", "64",
                             "--precision", "fp8", "--fp8-recipe", "mxfp8", "--framework", "megatron-core@0.19")
    assert code == 0, err
    assert "fp8_output_proj off (mlm-d98e8a6-transformer-config)" in " ".join(out.split())


def test_the_torchtitan_export_says_the_head_runs_in_bfloat16(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "export", "--format", "torchtitan", "-m", "gpt-oss-120b", "-c", "gb200:64",
                             "--gpus", "64", "--ep", "64", "--precision", "fp8", "--fp8-recipe", "mxfp8",
                             "--fp8-output-proj", "--framework", "any")
    assert code == 0, err
    assert "# note: fp8_output_proj has no field in the torchtitan config" in out
