"""Derive the kernel-model constants of catalog/gpus.yaml from published measurements, so they are reproducible.

1. The per-wave fixed cost t_w (EfficiencySpec.gemm_wave_overhead_us): DeepGEMM's dense FP8 table on H800 SXM5
   (deepseek-ai/DeepGEMM@327ec92f6977e7fee022cb76a8f273b75483c3d8 README.md, "Normal GEMMs for dense models", the
   M = 4096 rows): with 256×128 tiles on 132 SMs each row runs W waves; its time per wave t/W against K is a line
   whose intercept is the cost a wave pays whatever its K (prologue, epilogue, store) and whose slope is the
   main-loop rate. That is a kernel whose epilogue does not overlap the next tile. cuBLAS's persistent,
   warp-specialized kernels overlap it (NVIDIA/cutlass@7107b055 media/docs/cpp/efficient_gemm.md, "Warp-Specialized
   Persistent Ping-Pong"): MAMF measures B300 at 0.786 of its peak at K = 1024, where a 2.6 µs wave cost would allow
   at most 0.63 — so the catalog keeps t_w = 0 (`CATALOG_WAVE_OVERHEAD_US`) and this fit is printed for reference.
2. The main-loop fraction η (gemm_bf16, gemm_fp8, gemm_fp4) of each GPU with a GEMM sweep (GB300: step 6): the
   Maximum Achievable Matmul FLOPS (MAMF) stas00/ml-engineering@744d01e18b79512572f64a6bbd8b5f4a725203a7
   compute/accelerator/README.md measured (best shape
   of a torch.mm / torch._scaled_mm sweep, cuBLASLt), and DeepGEMM PR #348's cuBLASLt MXFP4 8192³ on B200 for FP4:
   the η at which llmscale's kernel model (cost/kernels.py, with t_w from step 1 and the catalog's peak and SM count)
   reproduces the measured time at the measured shape, found by bisection.

3. The fused-attention curves (attention, attention_half_seq, attention_backward, attention_backward_half_seq):
   TF(s) = T∞/(1 + s₀/s), least squares on relative error, on causal head-dim-128 series of the kernels the
   frameworks run — cuDNN through Transformer Engine (NVIDIA/cudnn-frontend@3929da2ef4c1dba1bb8acb68727b9134f26f40c0
   benchmark/sdpa_benchmark_training/results: H200 cuDNN 9.19.1 llama3.1_20260227_034703.csv, GB200 cuDNN 9.22.0
   llama3.1/gb200/llama3.1_20260424_100750.csv, GB300 cuDNN 9.22.0 llama3.1/gb300/llama3.1_20260424_100757.csv;
   B200 cuDNN 9.19.1 as FlashAttention-4, arXiv:2603.05451 Figs. 4 and 6, plots it) — and, for A100,
   FlashAttention-2's forward+backward series (arXiv:2307.08691 Fig. 4), split into forward and backward by the
   paper's stated maxima (§4: forward "up to 73%", §1: backward "up to 63%"). FlashAttention-2 on Hopper
   (EfficiencySpec.attention_flash2): its H100 SXM5 bars in FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608)
   Fig. 5 (forward, causal, head dim 128) and Fig. 6 (backward, head dim 128, the paper's one backward series of
   that head dim; whether it is causal was not verified, and a non-causal series flatters short chunks), BF16.

3b. FP8 attention (catalog/efficiency.yaml fp8_attention, EfficiencySpec.fp8_attention): the time cuDNN's FP8 fused
   attention takes over its 16-bit time, measured side by side in the same tables (causal `top_left`,
   non-deterministic backward): `fp8` (per-tensor scales) and `mxfp8` rows over `bfloat16` rows, at head dim 128
   (llama3.1: 64 query and 8 key/value heads, batch 2), at MLA's 192/128 (dsv3: 128 heads, batch 2) and over
   GPT-OSS's 128-token window at head dim 64 (gpt_oss: 128 heads, batch 2), GB200 and GB300 cuDNN 9.22.0
   (llama3.1, dsv3 and gpt_oss under {gb200,gb300}), H200 cuDNN 9.19.1 (h200_919_only_cudnn llama3.1: per-tensor
   FP8 at head dim 128 only; its gpt_oss FP8 rows fail, head dim 64 refused). Ratios, not curves: the 16-bit model
   keeps one head-dim-128 curve, and the FP8 gain differs by head dim (MLA's backward is 0.75-0.77x in MXFP8 at
   4096, Llama's 1.09x) and by mask (the windowed backward 4.5x).

4. The MXFP8 main-loop fraction (gemm_mxfp8) of the Blackwell GPUs: their FP8 η times the ratio of per-tensor to MXFP8
   GEMM kernel time that Transformer Engine's GEMM tutorial measured pre-quantized (kernels only) on a B300 for one
   layer of a 5B config, 6.812 / 7.161 ms (NVIDIA/TransformerEngine@1609c89
   docs/examples/gemm_profiling/gemm_profiling.rst); B300's own measurement, taken for every Blackwell die
   (ASSUMPTION: B200, GB200 and GB300 have no such table).

5. The FP8 fast-accumulation fraction (gemm_fp8_fast_accum) of the Hopper GPUs. MAMF's FP8 sweep calls
   torch._scaled_mm without use_fast_accum (stas00/ml-engineering@744d01e
   compute/accelerator/benchmarks/mamf-finder.py), so its η is the split-accumulator rate. Transformer Engine runs
   per-tensor scaled forward GEMMs with fast accumulation (cuBLASLt CUBLASLT_MATMUL_DESC_FAST_ACCUM;
   NVIDIA/TransformerEngine@d0067d0 transformer_engine/pytorch/module/base.py _2X_ACC_FPROP = False). Their FP8 η
   times 1.15, the middle of the 1.1-1.2x that fast accumulation measured on torchao's float8 GEMM benchmark
   (pytorch/ao issue #2377, 2025-06-14; ASSUMPTION: the middle of a reported range, cuBLAS per-tensor kernels alike).
   Blackwell has no such mode (its tensor cores accumulate in FP32: NVIDIA/TransformerEngine PR #2748 review, "there
   is no fastAccuMode for sm100").

6. GB300's GEMM main-loop fractions (gemm_bf16, gemm_fp8, gemm_mxfp8). No GEMM sweep of GB300 was found. GB300
   lists GB200's dense BF16 and FP8 peaks (2450, 4900) but has 1,400 W against 1,200 W to spend. The ratio is taken
   from one benchmark that ran both with the same software: cuDNN 9.22's BF16 attention backward
   (non-deterministic), head dims 128 and 192, every length and mask of five models (NVIDIA/cudnn-frontend@3929da2
   benchmark/sdpa_benchmark_training/results/{dsv3,kimiK26,llama3.1,ltx2,wan22}/{gb200,gb300}), the kernel there
   that leans least on the exponential units Blackwell Ultra doubled (the forward gains a median 1.18x; gpt_oss, a
   128-token window, and qwen35, forward only, are left out). GB300's η is GB200's measured η times the median of
   those 40 ratios. ASSUMPTION: GEMMs gain what that kernel gains; likely an upper estimate, since MAMF's GB200/B200,
   also +200 W, is 1.04-1.05x. FP4 is not scaled: GB300's FP4 peak is not GB200's, and GB200's FP4 η is B200's.

Run:  python scripts/derive_gemm_ceilings.py      (prints the values written into catalog/gpus.yaml)
"""

from __future__ import annotations

import numpy as np

from llmscale.cost.kernels import KernelRates, gemm_s
from llmscale.io.catalog import load_gpu
from llmscale.specs.train import Precision
from llmscale.units import TERA, US

DEEPGEMM_H800_FP8 = ((4096, 2112, 7168, 1127), (4096, 24576, 1536, 1212), (4096, 32768, 512, 775),
                     (4096, 7168, 16384, 1520), (4096, 4096, 7168, 1410), (4096, 7168, 2048, 1168))
"""(M, N, K, TFLOP/s) of DeepGEMM@327ec92 README.md's dense table, M = 4096 rows (H800 SXM5, FP8, NVCC 12.8)."""

CATALOG_WAVE_OVERHEAD_US = 0.0
"""The t_w the catalog uses (module docstring, step 1)."""

MEASURED = (
    # (catalog GPU, precision, TFLOP/s, (M, N, K), source)
    ("a100-80gb", Precision.BF16, 271.2, (1024, 10240, 5120), "MAMF A100 SXM, torch 2.6.0+cu126"),
    ("h100-sxm", Precision.BF16, 794.5, (2048, 2048, 13312), "MAMF H100 SXM, torch 2.7.0+cu126 ('H200 is the same')"),
    ("h100-sxm", Precision.FP8, 1402.6, (1024, 9216, 14336), "MAMF H100 SXM FP8, torch 2.7.0+cu126"),
    ("h200", Precision.FP8, 1453.4, (1280, 4096, 12032), "MAMF H200 SXM FP8, torch 2.7.1+cu128"),
    ("b200", Precision.BF16, 1745.0, (1792, 16128, 3072), "MAMF B200 SXM, torch 2.7.1+cu128"),
    ("b200", Precision.FP8, 3432.5, (15360, 4096, 3072), "MAMF B200 SXM FP8, torch 2.7.1+cu128"),
    ("b200", Precision.FP4, 5239.0, (8192, 8192, 8192), "deepseek-ai/DeepGEMM PR #348: cuBLASLt MXFP4 8192³ on B200"),
    ("gb200", Precision.BF16, 1822.0, (4096, 9728, 2048), "MAMF GB200, torch 2.10.0.dev20250916+cu130"),
    ("gb200", Precision.FP8, 3615.6, (19456, 5120, 1536), "MAMF GB200 FP8, torch 2.10.0.dev20250916+cu130"),
    ("b300", Precision.BF16, 1769.0, (12288, 18432, 1024), "MAMF B300 SXM, torch 2.9.1+cu130"),
    ("b300", Precision.FP8, 3353.3, (3072, 6144, 7168), "MAMF B300 SXM FP8, torch 2.9.1+cu130"),
)


ATTENTION_CAUSAL_D128 = {
    # series: (peak TFLOP/s, {sequence length: TFLOP/s})
    "h200 cuDNN fwd": (989, {2048: 484, 4096: 591, 8192: 644, 16384: 673, 32768: 688}),
    "h200 cuDNN bwd": (989, {2048: 370, 4096: 474, 8192: 541, 16384: 579, 32768: 581}),
    "b200 cuDNN fwd": (2250, {1024: 822, 2048: 1103, 4096: 1295, 8192: 1430, 16384: 1509, 32768: 1540}),
    "b200 cuDNN bwd": (2250, {1024: 651, 2048: 894, 4096: 1090, 8192: 1218, 16384: 1293, 32768: 1337}),
    "gb200 cuDNN fwd": (2450, {2048: 1097, 4096: 1408, 8192: 1574, 16384: 1708, 32768: 1622}),
    "gb200 cuDNN bwd": (2450, {2048: 885, 4096: 1148, 8192: 1332, 16384: 1328, 32768: 1226}),
    "gb300 cuDNN fwd": (2450, {2048: 1373, 4096: 1703, 8192: 1856, 16384: 1915, 32768: 1953}),
    "gb300 cuDNN bwd": (2450, {2048: 967, 4096: 1248, 8192: 1435, 16384: 1507, 32768: 1490}),
    "h100 FA2 fwd": (989, {512: 191, 1024: 260, 2048: 298, 4096: 319, 8192: 333, 16384: 335}),
    "h100 FA2 bwd": (989, {512: 214, 1024: 260, 2048: 291, 4096: 310, 8192: 318, 16384: 322}),
    "a100 FA2 fwd+bwd": (312, {512: 99, 1024: 133, 2048: 155, 4096: 173, 8192: 182, 16384: 189}),
}
FP8_ATTENTION_MS = {
    # table: {pass: {sequence length: (bfloat16, fp8, mxfp8) milliseconds}} (module docstring, 3b; None: not run)
    "gb200 d128": {"fwd": {2048: (0.125, 0.097, 0.103), 4096: (0.391, 0.305, 0.326), 8192: (1.397, 1.074, 1.156),
                           16384: (5.150, 4.084, 4.400), 32768: (21.692, 16.012, 17.201)},
                   "bwd": {2048: (0.389, 0.414, 0.461), 4096: (1.198, 1.167, 1.305), 8192: (4.127, 3.781, 4.272),
                           16384: (16.554, 13.476, 15.315), 32768: (71.756, 52.155, 61.716)}},
    "gb200 d192": {"fwd": {2048: (0.321, 0.207, 0.224), 4096: (0.977, 0.656, 0.714), 8192: (3.470, 2.294, 2.478),
                           16384: (13.103, 8.845, 9.337), 32768: (50.456, 35.942, 37.773)},
                   "bwd": {2048: (1.056, 0.681, 0.854), 4096: (3.383, 2.112, 2.620), 8192: (11.984, 7.296, 9.567),
                           16384: (50.424, 29.050, 36.835), 32768: (212.546, 123.181, 149.238)}},
    "gb300 d128": {"fwd": {2048: (0.100, 0.070, 0.079), 4096: (0.323, 0.217, 0.242), 8192: (1.185, 0.759, 0.856),
                           16384: (4.593, 2.880, 3.225), 32768: (18.014, 11.319, 12.632)},
                   "bwd": {2048: (0.356, 0.364, 0.424), 4096: (1.101, 0.985, 1.203), 8192: (3.832, 3.087, 3.917),
                           16384: (14.593, 10.805, 14.072), 32768: (59.024, 41.328, 55.340)}},
    "gb300 d192": {"fwd": {2048: (0.268, 0.150, 0.166), 4096: (0.864, 0.493, 0.546), 8192: (3.013, 1.758, 1.944),
                           16384: (11.178, 6.653, 7.336), 32768: (44.189, 26.146, 29.731)},
                   "bwd": {2048: (0.977, 0.591, 0.772), 4096: (3.127, 1.803, 2.348), 8192: (11.074, 6.188, 8.030),
                           16384: (43.911, 23.257, 31.002), 32768: (177.494, 95.057, 122.768)}},
    "gb200 d64 w128": {"fwd": {2048: (0.109, 0.101, 0.109), 4096: (0.210, 0.195, 0.210), 8192: (0.414, 0.385, 0.417),
                               16384: (0.822, 0.766, 0.826), 32768: (2.634, 1.529, 1.637)},
                       "bwd": {2048: (0.237, 0.536, 0.642), 4096: (0.465, 1.731, 2.080), 8192: (0.911, 6.176, 7.427),
                               16384: (1.818, 23.231, 27.940), 32768: (3.692, 90.348, 108.370)}},
    "gb300 d64 w128": {"fwd": {2048: (0.104, 0.086, 0.092), 4096: (0.202, 0.167, 0.175), 8192: (0.397, 0.327, 0.342),
                               16384: (0.790, 0.650, 0.676), 32768: (2.530, 1.296, 1.345)},
                       "bwd": {2048: (0.227, 0.467, 0.581), 4096: (0.442, 1.480, 1.871), 8192: (0.862, 5.189, 6.648),
                               16384: (1.712, 19.354, 24.996), 32768: (3.450, 74.763, 96.913)}},
    "h200 d128": {"fwd": {2048: (0.142, 0.098, None), 4096: (0.465, 0.322, None), 8192: (1.708, 1.141, None),
                          16384: (6.531, 4.357, None), 32768: (25.566, 16.884, None)},
                  "bwd": {2048: (0.464, 0.437, None), 4096: (1.450, 1.459, None), 8192: (5.083, 6.392, None),
                          16384: (19.002, 29.422, None), 32768: (75.688, 118.729, None)}},
}
A100_FORWARD_OVER_BACKWARD = 0.73 / 0.63
"""FlashAttention-2's stated best forward and backward fractions on A100 (arXiv:2307.08691 §4 and §1)."""


def fit_curve(points: dict[int, int]) -> tuple[float, float]:
    """(T∞, s₀) of TF(s) = T∞/(1 + s₀/s), least squares on relative error over a grid of s₀."""
    s = np.array(list(points), dtype=float)
    tf = np.array(list(points.values()), dtype=float)
    best = (np.inf, 0.0, 0.0)
    for s0 in np.arange(0.0, 4000.0, 1.0):
        shape = 1.0 / (1.0 + s0 / s)
        t_inf = float(np.sum(shape / tf) / np.sum(shape**2 / tf**2))  # minimises Σ (T∞·shape/tf − 1)²
        error = float(np.sum((t_inf * shape / tf - 1.0) ** 2))
        best = min(best, (error, t_inf, float(s0)))
    return best[1], best[2]


def attention_curves() -> None:
    for name, (peak, points) in ATTENTION_CAUSAL_D128.items():
        t_inf, s0 = fit_curve(points)
        if name.startswith("a100"):  # split the forward+backward rate: 3.5/T = 1/f + 2.5/b with f = r·b
            b = (1 / A100_FORWARD_OVER_BACKWARD + 2.5) * t_inf / 3.5
            print(f"{name:<18} T_inf {t_inf:.0f} s0 {s0:.0f}: forward {b * A100_FORWARD_OVER_BACKWARD / peak:.3f}, "
                  f"backward {b / peak:.3f} of the peak, s0 {s0:.0f} for both")
        else:
            print(f"{name:<18} T_inf {t_inf:.0f} ({t_inf / peak:.3f} of {peak}) s0 {s0:.0f}")


WINDOW_OUTLIER = 32768
"""The gpt_oss tables' BF16 forward at 32768 tokens takes 3.2x its 16384 time where every other doubling takes 2.0x
(2.634 after 0.822 ms on GB200, 2.530 after 0.790 on GB300) while FP8's doubles cleanly: the point is left out."""


def fp8_attention_ratios() -> None:
    for table, passes in FP8_ATTENTION_MS.items():
        windowed = " w" in table
        lengths = [s for s in passes["fwd"] if not (windowed and s == WINDOW_OUTLIER)]
        for column, scaling in ((1, "per-tensor"), (2, "mxfp8")):
            if passes["fwd"][lengths[0]][column] is None:
                continue
            # causal: each pass over its own 16-bit time; windowed: over the 16-bit forward + backward
            ratios = {name: [round(points[s][column] / (passes["fwd"][s][0] + passes["bwd"][s][0] if windowed
                                                        else points[s][0]), 3) for s in lengths]
                      for name, points in passes.items()}
            print(f"{table} {scaling:<10} seq {lengths}: forward {ratios['fwd']}, backward {ratios['bwd']}")


def wave_overhead_us() -> tuple[float, float]:
    """(t_w in µs, main-loop fraction of the FP8 peak) from the DeepGEMM rows (module docstring, step 1)."""
    sms, peak = 132, load_gpu("h800").peak_flops_per_s(Precision.FP8)
    k, per_wave = [], []
    for m, n, kk, tflops in DEEPGEMM_H800_FP8:
        waves = np.ceil(np.ceil(m / 256) * np.ceil(n / 128) / sms)
        k.append(kk)
        per_wave.append(2.0 * m * n * kk / (tflops * TERA) / waves)
    slope, intercept = np.polyfit(np.array(k, dtype=float), np.array(per_wave), 1)
    main_loop = 2.0 * 256 * 128 / slope / (peak / sms)
    return float(intercept / US), float(main_loop)


def main_loop_fraction(gpu_name: str, precision: Precision, tflops: float, shape: tuple[int, int, int],
                       overhead_us: float) -> float:
    """η at which the kernel model's time at `shape` equals the measured time (module docstring, step 2)."""
    gpu = load_gpu(gpu_name)
    m, n, k = shape
    target = 2.0 * m * n * k / (tflops * TERA)
    lo, hi = 0.05, 1.5
    for _ in range(60):
        mid = (lo + hi) / 2
        eff = gpu.efficiency.model_copy(update={"gemm_bf16": min(mid, 1.0), "gemm_fp8": min(mid, 1.0),
                                                "gemm_fp4": min(mid, 1.0), "gemm_wave_overhead_us": overhead_us})
        rates = KernelRates.of(gpu.model_copy(update={"efficiency": eff}), precision)
        rates = KernelRates(**{**rates.__dict__, "gemm_fraction": mid, "hbm_bytes_per_s": np.inf})
        lo, hi = (lo, mid) if float(gemm_s(rates, m, n, k)) < target else (mid, hi)
    return (lo + hi) / 2


TE_B300_PREQUANTIZED_MS = {"tensorwise": 6.812, "mxfp8": 7.161}
"""Per-layer GEMM time of TE's tutorial on B300, pre-quantized (module docstring, step 4)."""
BLACKWELL = ("b200", "gb200", "b300", "gb300")
FAST_ACCUM_SPEEDUP = 1.15
"""FP8 GEMM speed-up of fast accumulation over the split accumulator on Hopper (module docstring, step 5)."""
HOPPER = ("h100-sxm", "h800", "h200")


CUDNN_BACKWARD_GB200_GB300 = {
    # series (cudnn-frontend@3929da2, docstring step 6): ((GB200, GB300) TFLOP/s, ...) over lengths and masks
    "dsv3 d192": ((1076, 1289), (1086, 1246), (1134, 1302), (1088, 1254), (1193, 1291), (1125, 1301), (1057, 1143),
                  (1175, 1267), (846, 914), (1048, 1117)),
    "kimiK26 d192": ((1084, 1287), (1073, 1253), (1147, 1345), (1122, 1325), (1190, 1308), (1220, 1342),
                     (1053, 1154), (1187, 1272), (834, 909), (1016, 1090)),
    "llama3.1 d128": ((1226, 1490), (1262, 1427), (1328, 1507), (1374, 1536), (1332, 1435), (1404, 1531),
                      (1148, 1248), (1350, 1429), (885, 967), (1124, 1213)),
    "ltx2 d128": ((1290, 1420), (1403, 1528), (1410, 1531), (1314, 1497), (1343, 1523)),
    "wan22 d128": ((1393, 1456), (1417, 1525), (1319, 1464), (1278, 1358), (1254, 1364)),
}


def gb300_over_gb200() -> float:
    """Median GB300/GB200 ratio of cuDNN's BF16 attention backward (module docstring, step 6)."""
    return float(np.median([b / a for pairs in CUDNN_BACKWARD_GB200_GB300.values() for a, b in pairs]))


def gb300_fractions() -> None:
    ratio = gb300_over_gb200()
    gb200 = load_gpu("gb200").efficiency
    for field in ("gemm_bf16", "gemm_fp8", "gemm_mxfp8"):
        value = getattr(gb200, field)
        print(f"gb300     {field} = gb200 {value:.3f} x {ratio:.3f} (cuDNN 9.22 backward, GB300/GB200)"
              f" -> {value * ratio:.3f}")


def mxfp8_fractions() -> None:
    ratio = TE_B300_PREQUANTIZED_MS["tensorwise"] / TE_B300_PREQUANTIZED_MS["mxfp8"]
    for name in BLACKWELL:
        fp8 = load_gpu(name).efficiency.gemm_fp8
        print(f"{name:<10}mxfp8 = fp8 eta {fp8:.3f} x {ratio:.4f} (TE tutorial, B300 pre-quantized)"
              f" -> {fp8 * ratio:.3f}")


def fast_accum_fractions() -> None:
    for name in HOPPER:
        fp8 = load_gpu(name).efficiency.gemm_fp8
        print(f"{name:<10}fp8 fast accumulation = fp8 eta {fp8:.3f} x {FAST_ACCUM_SPEEDUP} (pytorch/ao#2377)"
              f" -> {fp8 * FAST_ACCUM_SPEEDUP:.3f}")


def main() -> None:
    overhead, main_loop = wave_overhead_us()
    print(f"DeepGEMM fit: t_w = {overhead:.2f} us per wave, main loop at {main_loop:.3f} of the H800 FP8 peak "
          f"(not overlapped); the catalog uses t_w = {CATALOG_WAVE_OVERHEAD_US} us")
    for gpu, precision, tflops, shape, source in MEASURED:
        eta = main_loop_fraction(gpu, precision, tflops, shape, CATALOG_WAVE_OVERHEAD_US)
        peak = load_gpu(gpu).peak_flops_per_s(precision) / TERA
        print(f"{gpu:<10}{precision.value:<6} measured {tflops:>7.1f} of {peak:>6.0f} ({tflops / peak:.3f})"
              f" at {'x'.join(map(str, shape)):<17} -> eta {eta:.3f}   [{source}]")
    attention_curves()
    fp8_attention_ratios()
    mxfp8_fractions()
    fast_accum_fractions()
    gb300_fractions()


if __name__ == "__main__":
    main()
