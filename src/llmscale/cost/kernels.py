"""Kernel times from physics, vectorized over layouts: GEMMs on a roofline with tile and wave quantization, fused
attention from published throughput curves, memory-bound kernels at the HBM roofline; seconds per call.
GEMM t = max(min over tiles of ⌈C·s/S⌉·(2·T_m·T_n·K/(s·η·peak/S) + t_w), bytes/(η_hbm·B)), C tiles of s SMs each;
attention TF(s) = T∞/(1 + s₀/s). Derivation: docs/cost-model.md#kernels (NVIDIA, "Matrix Multiplication Background
User's Guide" §3.1–3.2)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.specs.cluster import AttentionCurve, GPUSpec
from llmscale.specs.train import AttentionKernel, Fp8Recipe, Precision
from llmscale.units import BYTES_16BIT, US

TILES = ((256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64), (64, 128), (64, 64))
"""Output tiles per SM (T_m, T_n) a GEMM library chooses from: cuBLAS's typical tiles (NVIDIA, "Matrix Multiplication
Background User's Guide" §2.3, from 256×128 and 128×256, the most efficient, down to 64×64); Hopper's WGMMA tiles and
Blackwell's two-SM 256×N tiles (NVIDIA/cutlass@7107b055 media/docs/cpp/blackwell_functionality.md) cover the same
areas per SM."""
TILE_M = np.array([tile_m for tile_m, _ in TILES], dtype=float)
TILE_N = np.array([tile_n for _, tile_n in TILES], dtype=float)
"""The tiles' T_m and T_n as arrays (gemm_s evaluates all tiles at once)."""


@dataclass(frozen=True)
class TileMenu:
    """The output tiles a GEMM kernel may run (T_m, T_n, SMs per tile), as read-only arrays over the choices."""

    tile_m: np.ndarray
    tile_n: np.ndarray
    sms: np.ndarray
    """SMs one tile spans: 1, or 2 for Blackwell's two-CTA MMA (a pair of SMs computes one T_m×T_n tile)."""

    def __post_init__(self) -> None:
        assert self.tile_m.shape == self.tile_n.shape == self.sms.shape, "one T_m, T_n and SM count per tile"
        for column in (self.tile_m, self.tile_n, self.sms):
            column.setflags(write=False)


LIBRARY_TILES = TileMenu(TILE_M.copy(), TILE_N.copy(), np.ones(len(TILES)))
"""What a GEMM library picks from (TILES), tile by tile per SM."""
FUSED_GROUPED_MLP_TILES = TileMenu(np.array([256.0]), np.array([256.0]), np.array([2.0]))
"""The fused grouped MLP's one tile: Transformer Engine's te.ops GroupedMLP (NVIDIA/TransformerEngine@v2.18
transformer_engine/pytorch/ops/fused/grouped_mlp.py) calls cuDNN's CuTe-DSL grouped GEMM kernels (glu, quant, dglu,
wgrad) without a tiler, so each runs its default mma_tiler_mn = (256, 256) with two-CTA instructions (256 rows over an
SM pair); the glu, quant and dglu kernels refuse any N tile but 256 (NVIDIA/cudnn-frontend@3929da2
python/cudnn/grouped_gemm/grouped_gemm_glu/api.py 'MMA tiler N must be 256', grouped_gemm_quant and grouped_gemm_dglu
the same; checked at frontend 1.23.0, TE v2.18 asks for 1.25 or later). Each expert's rows and columns round up to
256. The cuDNN kernels run under MXFP8/NVFP4 on sm100 (TE's fallback elsewhere is not priced apart)."""
OPERAND_BYTES = {Precision.FP8: 1.0, Precision.FP4: 0.5}
"""GEMM input bytes per element (16-bit formats: 2); block scales ignored."""


@dataclass(frozen=True)
class KernelRates:
    """What the kernel model reads of one GPU at one GEMM precision."""

    peak_flops_per_s: float
    """Dense peak of the GEMM precision."""
    gemm_fraction: float
    """η: the main-loop fraction of that peak a large GEMM reaches."""
    forward_gemm_fraction: float
    """η of the forward GEMMs: above gemm_fraction where they run with FP8 fast accumulation (Hopper, per-tensor
    scaling), else the same."""
    sm_count: int | None
    wave_overhead_s: float
    operand_bytes: float
    hbm_bytes_per_s: float
    """Achievable HBM bandwidth: datasheet × η_hbm."""
    attention: tuple[AttentionCurve, ...]
    """The measured curves of the kernels the run may use; each chunk runs at the fastest of them."""

    @classmethod
    def of(cls, gpu: GPUSpec, precision: Precision, sustained: float = 1.0,
           recipe: Fp8Recipe = Fp8Recipe.TENSORWISE, attention: AttentionKernel = AttentionKernel.FASTEST,
           ) -> KernelRates:
        """`gpu`'s rates at `precision`: tensor-core peaks × `sustained` (StepConstants.sustained_compute_fraction),
        FP8 GEMMs of a block-scaled `recipe` at the GPU's MXFP8 fraction where it has one (else per-tensor, as
        DeepGEMM reaches on Hopper), attention on the `attention` kernel's curve (FASTEST: the faster measured curve
        at each chunk length). Why, and the measurements: docs/cost-model.md#kernels-rates."""
        eff = gpu.efficiency
        named = eff.attention_curve(attention)
        assert named is not None, f"no {attention.value} attention curve for {gpu.name} (io.resolve checks it)"
        curves = (named,) if attention is not AttentionKernel.FASTEST or eff.attention_flash2 is None else (
            named, eff.attention_flash2)
        fp8 = eff.gemm_fp8
        if recipe in (Fp8Recipe.MXFP8, Fp8Recipe.BLOCKWISE) and eff.gemm_mxfp8 is not None:
            fp8 = eff.gemm_mxfp8
        fraction = {Precision.FP8: fp8, Precision.FP4: eff.gemm_fp4}.get(precision, eff.gemm_bf16)
        # Transformer Engine runs the forward GEMM of a per-tensor scaled FP8 linear without the split accumulator
        # (cuBLASLt FAST_ACCUM), its two backward GEMMs with it (NVIDIA/TransformerEngine@d0067d0
        # transformer_engine/pytorch/module/base.py _2X_ACC_FPROP False, _2X_ACC_DGRAD/_WGRAD True;
        # common/recipe/__init__.py Float8CurrentScaling fp8_gemm_fprop); block-scaled recipes split always.
        fast = eff.gemm_fp8_fast_accum if (
            precision is Precision.FP8 and recipe in (Fp8Recipe.DELAYED, Fp8Recipe.TENSORWISE)) else None
        return cls(
            peak_flops_per_s=gpu.peak_flops_per_s(precision) * sustained, gemm_fraction=fraction,
            forward_gemm_fraction=fast if fast is not None else fraction,
            sm_count=gpu.sm_count,
            wave_overhead_s=eff.gemm_wave_overhead_us * US,
            operand_bytes=OPERAND_BYTES.get(precision, float(BYTES_16BIT)),
            hbm_bytes_per_s=gpu.memory_bandwidth_bytes_per_s * eff.hbm,
            attention=curves,
        )


def gemm_s(r: KernelRates, m: np.ndarray | float, n: np.ndarray | float, k: np.ndarray | float,
           groups: np.ndarray | float = 1.0, forward: bool = False, menu: TileMenu = LIBRARY_TILES) -> np.ndarray:
    """Seconds of one (grouped) GEMM of `groups` M×K by K×N products (docs/cost-model.md#kernels-gemm) on the
    tiles of `menu`; a `forward` GEMM runs at r.forward_gemm_fraction."""
    m, n, k, groups = (np.asarray(x, dtype=float) for x in (m, n, k, groups))
    flops = 2.0 * groups * m * n * k
    fraction = r.forward_gemm_fraction if forward else r.gemm_fraction
    if r.sm_count is None:
        compute: np.ndarray = flops / (fraction * r.peak_flops_per_s)
    else:
        per_sm = fraction * r.peak_flops_per_s / r.sm_count
        # Every tile at once along a leading axis (one numpy call per term instead of one per tile and term; the
        # minimum over a leading axis is an element-wise one, fast).
        tiles = (menu.tile_m.size,) + (1,) * len(np.broadcast(m, n, k, groups).shape)
        tile_m, tile_n, sms = (x.reshape(tiles) for x in (menu.tile_m, menu.tile_n, menu.sms))
        waves = np.ceil(groups * np.ceil(m / tile_m) * np.ceil(n / tile_n) * sms / r.sm_count)
        compute = (waves * (2.0 * tile_m * tile_n * k / (sms * per_sm) + r.wave_overhead_s)).min(axis=0)
    moved = groups * ((m * k + k * n) * r.operand_bytes + m * n * BYTES_16BIT)
    result: np.ndarray = np.maximum(compute, moved / r.hbm_bytes_per_s)
    return np.where(flops > 0, result, 0.0)


@dataclass(frozen=True)
class LinearTimes:
    """The three GEMMs of one linear layer in training (seconds, shape (N,))."""

    forward_s: np.ndarray
    input_grad_s: np.ndarray
    weight_grad_s: np.ndarray

    def __add__(self, other: LinearTimes) -> LinearTimes:
        return LinearTimes(self.forward_s + other.forward_s, self.input_grad_s + other.input_grad_s,
                           self.weight_grad_s + other.weight_grad_s)

    def scaled(self, factor: np.ndarray | float) -> LinearTimes:
        return LinearTimes(self.forward_s * factor, self.input_grad_s * factor, self.weight_grad_s * factor)


def linear_s(r: KernelRates, tokens: np.ndarray | float, n_in: np.ndarray | float, n_out: np.ndarray | float,
             groups: np.ndarray | float = 1.0, menu: TileMenu = LIBRARY_TILES) -> LinearTimes:
    """Forward, input-gradient and weight-gradient GEMMs of a linear layer of n_in → n_out per GPU over `tokens`
    rows (per group, for `groups` experts of one grouped GEMM), on `menu`'s tiles."""
    return LinearTimes(gemm_s(r, tokens, n_out, n_in, groups, forward=True, menu=menu),
                       gemm_s(r, tokens, n_in, n_out, groups, menu=menu), gemm_s(r, n_in, n_out, tokens, groups,
                                                                               menu=menu))


def attention_core_s(r: KernelRates, flops: np.ndarray, seq: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of fused causal attention of `flops` forward FLOPs (causal count) over chunks of
    `seq` tokens, at `r`'s peak (give it 16-bit rates: the curves are 16-bit measurements); backward does 2.5× the
    forward FLOPs (FlashAttention-2 §3.1.2: five matmuls against two)."""
    s = np.asarray(seq, dtype=float)
    forward_rate = r.peak_flops_per_s * np.max([c.forward / (1.0 + c.forward_half_seq / s) for c in r.attention],
                                                axis=0)
    backward_rate = r.peak_flops_per_s * np.max([c.backward / (1.0 + c.backward_half_seq / s) for c in r.attention],
                                                 axis=0)
    return flops / forward_rate, 2.5 * flops / backward_rate


def memory_s(r: KernelRates, moved_bytes: np.ndarray | float) -> np.ndarray:
    """Seconds to move `moved_bytes` through HBM at the achievable bandwidth."""
    result: np.ndarray = np.asarray(moved_bytes, dtype=float) / r.hbm_bytes_per_s
    return result
