"""FP8 recipes (TrainSpec.fp8_recipe): what quantizing costs, the MXFP8 GEMM rate, and where a recipe is refused.

Expected numbers come from Transformer Engine's own documents, not from llmscale:
  - docs/features/low_precision_training/*.rst @3ceb248 (NVIDIA/TransformerEngine): current scaling reads a tensor
    twice (amax, then cast), delayed scaling once; Hopper's FP8 GEMMs need a physical transpose for the column-wise
    copy, Blackwell reads one layout both ways; MXFP8 (1×32) and 1D blockwise (1×128) quantize the row- and
    column-wise copies separately.
  - docs/examples/gemm_profiling/gemm_profiling.rst @1609c89: GEMM benchmark on a B300 for a 5B config (hidden 4096,
    intermediate 16384, M = 31 × 512 = 15,872 tokens); per-layer GEMM totals pre-quantized (kernels only) and in
    autocast (kernels + quantization of every operand of every GEMM call).
"""

from __future__ import annotations

import json

import pytest

from llmscale.cli.main import main
from llmscale.cost.compute import cast_bytes_per_element
from llmscale.cost.kernels import KernelRates, gemm_s, memory_s
from llmscale.io.catalog import load_constants, load_gpu
from llmscale.specs.calibration import GemmCalibration
from llmscale.specs.train import Fp8Recipe, Precision
from llmscale.units import BYTES_16BIT
from llmscale.validation.jobs import job_from_run
from llmscale.validation.runs import load_runs

BLACKWELL = ("b200", "gb200", "b300", "gb300")
EXPLAIN_70B = ["explain", "--model", "llama3-70b", "--cluster", "eos-h100", "--gpus", "64", "--tp", "8", "--dp", "8",
               "--precision", "fp8"]

# TE gemm_profiling.rst @1609c89, B300 SXM6, per-layer GEMM time (ms).
TE_B300_PREQUANTIZED_MS = {"tensorwise": 6.812, "mxfp8": 7.161}
TE_B300_AUTOCAST_MS = {"tensorwise": 9.147, "delayed": 7.802, "mxfp8": 8.984}
TE_SHAPES = ((15872, 4096, 12288), (15872, 4096, 4096), (15872, 4096, 16384), (15872, 16384, 4096))
"""(M, K, N) of the tutorial's QKV, attention-out, MLP-up and MLP-down GEMMs."""


def test_quantization_bytes_follow_the_te_documents() -> None:
    # One 2-byte read and a 1-byte write; current scaling adds a second read for its amax; Hopper writes a transposed
    # copy beside the row-wise one.
    assert cast_bytes_per_element(Precision.FP8, Fp8Recipe.DELAYED, tn_only=False) == 2 + 1
    assert cast_bytes_per_element(Precision.FP8, Fp8Recipe.TENSORWISE, tn_only=False) == 2 + 2 + 1
    assert cast_bytes_per_element(Precision.FP8, Fp8Recipe.DELAYED, tn_only=True) == 2 + 1 + 1
    assert cast_bytes_per_element(Precision.FP8, Fp8Recipe.TENSORWISE, tn_only=True) == 2 + 2 + 1 + 1
    # Block-scaled: both copies quantized from one read, each with its scales (E8M0 per 32, fp32 per 128).
    mx, block = (cast_bytes_per_element(Precision.FP8, r, tn_only=tn) for r, tn in
                 ((Fp8Recipe.MXFP8, False), (Fp8Recipe.BLOCKWISE, True)))
    assert mx == pytest.approx(2 + 2 * (1 + 1 / 32))
    assert block == pytest.approx(2 + 2 * (1 + 4 / 128))
    assert cast_bytes_per_element(Precision.BF16, Fp8Recipe.TENSORWISE, tn_only=True) == 0.0


@pytest.mark.parametrize("gpu", BLACKWELL)
def test_mxfp8_gemm_ceiling_is_the_te_tutorial_ratio(gpu: str) -> None:
    eff = load_gpu(gpu).efficiency
    measured = TE_B300_PREQUANTIZED_MS["tensorwise"] / TE_B300_PREQUANTIZED_MS["mxfp8"]
    assert eff.gemm_mxfp8 is not None
    assert eff.gemm_mxfp8 / eff.gemm_fp8 == pytest.approx(measured, abs=0.002)


@pytest.mark.parametrize("gpu", ("h100-sxm", "h800", "h200", "a100-80gb"))
def test_gpus_before_blackwell_have_no_mxfp8(gpu: str) -> None:
    assert load_gpu(gpu).efficiency.gemm_mxfp8 is None


def _one_copy_bytes(recipe: Fp8Recipe) -> float:
    """Bytes of one quantization that writes a single copy, from the code's rule for training
    (`cast_bytes_per_element`, Blackwell: one layout read both ways): the block-scaled recipes write their two
    copies there, a GEMM call in autocast needs one of them."""
    both = cast_bytes_per_element(Precision.FP8, recipe, tn_only=False)
    if recipe is Fp8Recipe.MXFP8:
        return BYTES_16BIT + (both - BYTES_16BIT) / 2
    return both


def _autocast_quantization_ms(recipe: Fp8Recipe) -> float:
    """The model's quantization time of one B300 layer of the tutorial in autocast: every GEMM call quantizes its
    two operands in the one direction it reads them (fprop X, W; dgrad dY, W; wgrad X, dY)."""
    rates = KernelRates.of(load_gpu("b300"), Precision.FP8, recipe=recipe)
    elements = sum(m * k + k * n + m * n + k * n + m * k + m * n for m, k, n in TE_SHAPES)
    return float(memory_s(rates, elements * _one_copy_bytes(recipe))) * 1e3


def test_quantization_overhead_against_the_te_tutorial() -> None:
    """Measured overhead = autocast − pre-quantized (2.335 ms current scaling, 1.823 MXFP8; delayed scaling has no
    pre-quantized run and is taken against the current-scaling kernels, which TE calls of similar throughput). The
    byte rules get current and delayed scaling within 25 % and the order of the recipes right."""
    measured = {r: TE_B300_AUTOCAST_MS[r] - TE_B300_PREQUANTIZED_MS["mxfp8" if r == "mxfp8" else "tensorwise"]
                for r in TE_B300_AUTOCAST_MS}
    model = {r: _autocast_quantization_ms(Fp8Recipe(r)) for r in measured}
    assert model["tensorwise"] == pytest.approx(measured["tensorwise"], rel=0.25)
    assert model["delayed"] == pytest.approx(measured["delayed"], rel=0.25)
    assert model["tensorwise"] > model["mxfp8"] and measured["tensorwise"] > measured["mxfp8"]
    # REGRESSION PIN of a known miss, not a golden value: MXFP8's quantization kernels run further below the HBM
    # roofline than its bytes say, so the model is 30-40 % low there (left out of the model; the note says so).
    assert 0.55 < model["mxfp8"] / measured["mxfp8"] < 0.75


def test_mxfp8_gemms_run_slower_by_the_measured_ratio() -> None:
    """Compute-bound shapes of the tutorial: the model's MXFP8 / tensorwise GEMM time is the tutorial's 7.161/6.812."""
    gpu = load_gpu("b300")
    tensorwise, mx = (KernelRates.of(gpu, Precision.FP8, recipe=r) for r in (Fp8Recipe.TENSORWISE, Fp8Recipe.MXFP8))
    total = {r: sum(float(gemm_s(rates, m, n, k)) for m, k, n in TE_SHAPES) for r, rates in
             (("tensorwise", tensorwise), ("mxfp8", mx))}
    assert total["mxfp8"] / total["tensorwise"] == pytest.approx(
        TE_B300_PREQUANTIZED_MS["mxfp8"] / TE_B300_PREQUANTIZED_MS["tensorwise"], rel=0.005)


def test_mxfp8_on_hopper_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["explain", "--model", "llama3-70b", "--cluster", "eos-h100", "--gpus", "64", "--tp", "8", "--dp", "8",
              "--precision", "fp8", "--fp8-recipe", "mxfp8"])
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert "Traceback" not in err and "fp8_recipe" in err and "MXFP8" in err


def test_the_recipe_changes_the_step(capsys: pytest.CaptureFixture[str]) -> None:
    """On H100, tensorwise (two reads and a transpose per cast) predicts a slower step than delayed (one read) with
    the same GEMMs; blockwise casts cheaper but its forward GEMMs keep the split accumulator that per-tensor scaling
    drops (Transformer Engine: fast accumulation only for per-tensor forward GEMMs), so it is the slowest on Hopper;
    the JSON echoes the recipe given."""
    steps, recipes = {}, {}
    for recipe in ("delayed", "blockwise", "tensorwise"):
        with pytest.raises(SystemExit):
            main([*EXPLAIN_70B, "--fp8-recipe", recipe, "--json"])
        document = json.loads(capsys.readouterr().out)
        steps[recipe], recipes[recipe] = document["step_time_s"], document["train"]["fp8_recipe"]
    assert steps["delayed"] < steps["tensorwise"] < steps["blockwise"]
    assert recipes == {"delayed": "delayed", "blockwise": "blockwise", "tensorwise": "tensorwise"}


def test_explain_names_the_recipe_it_priced_when_none_is_given(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(EXPLAIN_70B)
    assert "fp8 (tensorwise)" in capsys.readouterr().out


def test_a_recipe_without_fp8_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["explain", "--model", "llama3-70b", "--cluster", "eos-h100", "--gpus", "64", "--tp", "8", "--dp", "8",
              "--fp8-recipe", "blockwise"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err
    assert "fp8_recipe" in err and "bf16" in err


def test_read_megatron_keeps_a_recipe_without_fp8_as_inert() -> None:
    """Megatron ignores --fp8-recipe without --fp8-format; the reader lists it as read without a field."""
    from llmscale.io.megatron_args import parse_megatron_args
    from llmscale.io.resolve import JobRequest, resolve
    from llmscale.launch.megatron import megatron_args

    bf16 = resolve(JobRequest(model="llama3-8b", cluster="eos-h100", gpus=8, layout={"tp": 1, "dp": 8}))
    base = " ".join(megatron_args(bf16))
    parsed = parse_megatron_args(base + " --fp8-recipe mxfp8")
    assert "fp8_recipe" not in parsed.train and "--fp8-recipe" in parsed.inert
    parsed = parse_megatron_args(base + " --fp8-format hybrid --fp8-recipe blockwise")
    assert parsed.train["fp8_recipe"] == "blockwise" and "--fp8-recipe" not in parsed.inert


def test_a_calibrated_fp8_ceiling_carries_to_mxfp8() -> None:
    """A profile that scales the FP8 fraction (here through its 16-bit GEMM) moves the MXFP8 one with it, at the
    catalog's ratio, so a calibrated Blackwell's default recipe sees the measurement."""
    from llmscale.cost.calibrate import apply_calibration
    from llmscale.io.catalog import load_cluster, load_constants
    from llmscale.units import TERA
    from tests.test_measure import profile

    cluster = load_cluster("gb200-nvl72")
    before = cluster.gpu.efficiency
    gemm = GemmCalibration(dtype="bfloat16", precision=Precision.BF16, peak_flops_per_s=1200 * TERA, half_dim=8.0)
    after = apply_calibration(cluster, load_constants(), profile(gemm=(gemm,))).cluster.gpu.efficiency
    assert after.gemm_fp8 == pytest.approx(before.gemm_fp8 * after.gemm_bf16 / before.gemm_bf16)
    assert after.gemm_mxfp8 is not None and before.gemm_mxfp8 is not None
    assert after.gemm_mxfp8 / after.gemm_fp8 == pytest.approx(before.gemm_mxfp8 / before.gemm_fp8)


def test_bridge_rows_take_the_recipe_their_table_prints() -> None:
    """Megatron-Bridge's tables: per-tensor current scaling first, block-scaled FP8 in parentheses ([alt] rows):
    MXFP8 on Blackwell, 128×128/1×128 blockwise on H100; DeepSeek-V3's own run is blockwise (§3.3.2). Read from the
    table's printed label (validation.jobs.table_fp8_recipe), or the release's default where it names none."""
    runs = {run.name: run for run in load_runs()}
    constants = load_constants()

    def recipe(name: str) -> str | None:
        value = job_from_run(runs[name], constants).train.fp8_recipe
        return value.value if value is not None else None

    assert recipe("Megatron-Bridge 25.11 LLAMA3_8B on 8 B200 FP8-CS") == "tensorwise"
    assert recipe("Megatron-Bridge 25.11 LLAMA3_8B [alt] on 8 B200 FP8-MX") == "mxfp8"
    assert recipe("Megatron-Bridge 25.09 LLAMA3_8B on 8 B200 fp8") == "tensorwise"
    assert recipe("Megatron-Bridge 25.09 LLAMA3.1_405B [alt] on 128 B200 fp8") == "mxfp8"
    assert recipe("Megatron-Bridge 25.09 DeepSeekV3 (dropless) [alt] on 1024 H100 fp8") == "blockwise"
    assert recipe("Megatron-Bridge 26.04.01 DeepSeekV3 on 256 GB200 MXFP8") == "mxfp8"
    assert recipe("DeepSeek-V3 671B pre-training on 2048 H800") == "blockwise"
    # NeMo 24.07 (July 2024) predates Transformer Engine's current scaling (77fa1e596, 2025-03-07): delayed scaling,
    # its release profile's default (the table prints only "FP8").
    assert recipe("NeMo 24.07 LLAMA3-70B on 64 H100 FP8") == "delayed"


def test_native_recipe_is_what_export_writes() -> None:
    """A run naming no recipe is priced and exported with the GPU's native one."""
    from llmscale.specs.train import TrainSpec

    train = TrainSpec(precision=Precision.FP8)
    assert load_gpu("b200").fp8_recipe(train) is Fp8Recipe.MXFP8
    assert load_gpu("h100-sxm").fp8_recipe(train) is Fp8Recipe.TENSORWISE
