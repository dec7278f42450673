"""The kernel model (cost/kernels.py) against published kernel measurements it was not derived from, and the
derivation of the catalog's constants (scripts/derive_gemm_ceilings.py) held to its sources."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.cost.kernels import KernelRates, attention_core_s, gemm_s, linear_s
from llmscale.io.catalog import load_gpu
from llmscale.specs.train import Fp8Recipe, Precision
from llmscale.units import TERA

H800_FP8 = KernelRates.of(load_gpu("h800"), Precision.FP8)


def tflops(rates: KernelRates, m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k / float(gemm_s(rates, m, n, k)) / TERA


# deepseek-ai/DeepGEMM@327ec92f6977 README.md, dense FP8 GEMMs on H800 SXM5. Not used by the derivation of η (which
# reads MAMF's cuBLASLt sweeps on H100): rows where one term of the model dominates — memory-bound rows moving
# ≥ 100 MB (M ≤ 128, K = 16384) and compute-bound rows with K ≥ 7168 and N ≥ 4096 (whole waves). Rows with a few MB
# or K = 512 are left out: DeepGEMM's non-persistent kernel pays ~3-5 µs per call there that the model (tuned to
# cuBLAS's persistent kernels, t_w = 0) does not count.
@pytest.mark.parametrize(
    ("m", "n", "k", "published", "tolerance"),
    [
        (64, 7168, 16384, 336, 0.03),  # memory-bound: 2668 GB/s of 3350, the catalog's hbm 0.80 comes from it
        (128, 7168, 16384, 645, 0.05),
        (4096, 4096, 7168, 1410, 0.05),  # compute-bound: DeepGEMM's kernel is ~5 % faster than cuBLAS's
        (4096, 7168, 16384, 1520, 0.08),
    ],
)
def test_deepgemm_rows_where_one_bound_dominates(m: int, n: int, k: int, published: float, tolerance: float) -> None:
    assert tflops(H800_FP8, m, n, k) == pytest.approx(published, rel=tolerance)


# The derivation must reproduce the measurement it started from (stas00/ml-engineering@744d01e18b79
# compute/accelerator/README.md, MAMF table): a check that the catalog's η and SM counts are consistent with it.
@pytest.mark.parametrize(
    ("gpu", "precision", "shape", "measured"),
    [
        ("a100-80gb", Precision.BF16, (1024, 10240, 5120), 271.2),
        ("h100-sxm", Precision.BF16, (2048, 2048, 13312), 794.5),
        ("h100-sxm", Precision.FP8, (1024, 9216, 14336), 1402.6),
        ("b200", Precision.FP8, (15360, 4096, 3072), 3432.5),
        ("gb200", Precision.BF16, (4096, 9728, 2048), 1822.0),
    ],
)
def test_catalog_ceilings_reproduce_their_measurements(gpu: str, precision: Precision,
                                                       shape: tuple[int, int, int], measured: float) -> None:
    assert tflops(KernelRates.of(load_gpu(gpu), precision), *shape) == pytest.approx(measured, rel=0.005)


# NVIDIA/cudnn-frontend@3929da2 benchmark/sdpa_benchmark_training/results/llama3.1/{gb200,gb300}/*.csv, cuDNN 9.22,
# BF16 backward, non-deterministic, causal (top_left) and full (no_mask) at 2k-32k, all ten pairs: GB300 over GB200
# with the same software. The catalog takes the median over five models (scripts/derive_gemm_ceilings.py step 6).
LLAMA31_BACKWARD_GB200_GB300 = ((1226, 1490), (1262, 1427), (1328, 1507), (1374, 1536), (1332, 1435), (1404, 1531),
                                (1148, 1248), (1350, 1429), (885, 967), (1124, 1213))


@pytest.mark.parametrize(("precision", "recipe"), [(Precision.BF16, Fp8Recipe.TENSORWISE),
                                                   (Precision.FP8, Fp8Recipe.TENSORWISE),
                                                   (Precision.FP8, Fp8Recipe.MXFP8)])
def test_gb300_gemm_ceiling_is_gb200_measured_times_the_cudnn_backward_ratio(precision: Precision,
                                                                            recipe: Fp8Recipe) -> None:
    ratios = [b / a for a, b in LLAMA31_BACKWARD_GB200_GB300]
    rates = {gpu: KernelRates.of(load_gpu(gpu), precision, recipe=recipe).gemm_fraction for gpu in ("gb200", "gb300")}
    assert min(ratios) <= rates["gb300"] / rates["gb200"] <= max(ratios)
    assert rates["gb300"] / rates["gb200"] == pytest.approx(float(np.median(ratios)), abs=0.03)


@pytest.mark.parametrize(
    ("gpu", "precision", "recipe", "low", "high"),
    [
        # pytorch/ao issue #2377: fast accumulation speeds an FP8 GEMM 1.1-1.2x (torchao's float8 benchmark).
        ("h100-sxm", Precision.FP8, Fp8Recipe.TENSORWISE, 1.1, 1.2),
        ("h100-sxm", Precision.FP8, Fp8Recipe.DELAYED, 1.1, 1.2),
        ("h200", Precision.FP8, Fp8Recipe.TENSORWISE, 1.1, 1.2),
        # Block-scaled GEMMs split the accumulator in every pass; 16-bit GEMMs and Blackwell have no such mode.
        ("h100-sxm", Precision.FP8, Fp8Recipe.BLOCKWISE, 1.0, 1.0),
        ("h100-sxm", Precision.BF16, Fp8Recipe.TENSORWISE, 1.0, 1.0),
        ("b200", Precision.FP8, Fp8Recipe.TENSORWISE, 1.0, 1.0),
        ("b200", Precision.FP8, Fp8Recipe.MXFP8, 1.0, 1.0),
    ],
)
def test_only_per_tensor_forward_gemms_run_with_fast_accumulation_on_hopper(
        gpu: str, precision: Precision, recipe: Fp8Recipe, low: float, high: float) -> None:
    """Transformer Engine runs a per-tensor scaled FP8 linear's forward GEMM with cuBLASLt fast accumulation and its
    two backward GEMMs with the split accumulator (NVIDIA/TransformerEngine@d0067d0 module/base.py _2X_ACC_FPROP
    False, _2X_ACC_DGRAD and _2X_ACC_WGRAD True): the forward of a square GEMM is that much faster than its
    input-gradient GEMM of the same shape."""
    times = linear_s(KernelRates.of(load_gpu(gpu), precision, recipe=recipe), 8192, 8192, 8192)
    ratio = float(times.input_grad_s / times.forward_s)
    assert low - 1e-9 <= ratio <= high + 1e-9


def test_a_partial_last_wave_costs_a_whole_wave() -> None:
    # NVIDIA Matrix Multiplication Background guide §3.2: one tile more than the SMs can hold adds a wave.
    rates = KernelRates(**{**H800_FP8.__dict__, "hbm_bytes_per_s": np.inf})
    full = float(gemm_s(rates, 256 * 132, 256, 8192))  # whole waves on the H800's 132 SMs, whatever the tile
    over = float(gemm_s(rates, 256 * 133, 256, 8192))  # 0.75 % more rows: a partial wave more
    assert over / full > 133 / 132 + 0.05


def test_fused_attention_follows_flashattention3_on_h100() -> None:
    # FlashAttention-3 (arXiv:2407.08608) Fig. 5, H100 SXM5 BF16 causal forward, head dim 128: 521 / 579 / 602 /
    # 616 TFLOP/s at 2k / 4k / 8k / 16k. The catalog's curve comes from cuDNN 9.19 on H200 (the kernel Transformer
    # Engine runs), a different kernel: they agree within 15 % over the training range.
    rates = KernelRates.of(load_gpu("h100-sxm"), Precision.BF16)
    for seq, published in ((2048, 521), (4096, 579), (8192, 602), (16384, 616)):
        forward, _ = attention_core_s(rates, np.array(1e12), seq)
        assert 1e12 / float(forward) / TERA == pytest.approx(published, rel=0.15), seq
