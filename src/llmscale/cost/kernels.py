"""Kernel times from physics, vectorized over layouts: GEMMs on a roofline with tile and wave quantization, fused
attention from published throughput curves, memory-bound kernels at the HBM roofline.

Shape legend: dimensions and results are arrays of shape (N,) (or scalars that broadcast); seconds per call.

GEMM, one kernel computing `groups` equal products of an M×K and a K×N matrix (a grouped GEMM when groups > 1):
with output tiles of T_m×T_n, its C = groups·⌈M/T_m⌉·⌈N/T_n⌉ tiles run over the GPU's S SMs in W = ⌈C/S⌉ waves
(tile and wave quantization: NVIDIA, "Matrix Multiplication Background User's Guide" §3.1–3.2; DeepGEMM's heuristic
counts the same waves, deepseek-ai/DeepGEMM@54e22612 csrc/jit_kernels/heuristics/sm90.hpp `get_layout_info`). Each
wave runs one tile per SM at η of the per-SM peak and pays a fixed t_w (prologue, epilogue and store); the library
picks the tile of `TILES` that finishes first:

    t_compute = min over tiles of W · (2·T_m·T_n·K / (η·peak/S) + t_w)
    t_memory  = (groups·(M·K + K·N)·b + groups·M·N·2) / (η_hbm·B)      b = operand bytes, outputs 16-bit
    t         = max(t_compute, t_memory)

η (the main-loop fraction) and t_w are catalog numbers derived from published measurements (catalog/gpus.yaml and
scripts/derive_gemm_ceilings.py). A GPU without an SM count (a CPU host) runs t = groups·2MNK/(η·peak). A training
linear layer runs three GEMMs (`linear_s`): forward Y = XW (M = tokens, K = in, N = out), input gradient
dX = dY·Wᵀ (M = tokens, K = out, N = in) and weight gradient dW = Xᵀ·dY (M = in, K = tokens, N = out).

Fused attention (FlashAttention-2/3/4, cuDNN): achieved FLOP/s at sequence length s follows TF(s) = T∞/(1 + s₀/s)
(every published series fits it within ±5 %), forward and backward separately, causal, 16-bit; T∞ and s₀ per GPU
in the catalog, from the FlashAttention papers' tables and NVIDIA's cudnn-frontend benchmark results. With context
parallelism each rank's kernel sees chunks of s/cp tokens. Memory-bound kernels move their bytes at η_hbm of the
HBM bandwidth.
"""

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
OPERAND_BYTES = {Precision.FP8: 1.0, Precision.FP4: 0.5}
"""GEMM input bytes per element (16-bit formats: 2); block scales ignored."""


@dataclass(frozen=True)
class KernelRates:
    """What the kernel model reads of one GPU at one GEMM precision."""

    peak_flops_per_s: float
    """Dense peak of the GEMM precision."""
    gemm_fraction: float
    """η: the main-loop fraction of that peak a large GEMM reaches."""
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
        """`gpu`'s rates at `precision`, its tensor-core peaks times `sustained` (the throughput a training run
        sustains against the burst the catalog's measurements saw: StepConstants.sustained_compute_fraction);
        FP8 GEMMs of a block-scaled `recipe` run at the GPU's MXFP8 fraction where it has one (Transformer Engine
        runs 1×128 blockwise scaling as MXFP8 on Blackwell). On Hopper blockwise keeps the per-tensor rate, which
        DeepGEMM's blockwise kernels reach (up to 1550 TFLOP/s on H800, README @327ec92); Transformer Engine's own
        blockwise GEMMs there are software-emulated and slower (docs fp8_blockwise_scaling.rst @3ceb248; its H200
        GEMM tutorial: 22.9 against 20.3 ms per layer, quantization included), which is left out: no kernel-only
        measurement of them is published. Attention runs on the `attention` kernel's curve (the resolver refuses a
        kernel the GPU has no measurement of); FASTEST takes, at each chunk length, the faster of the GPU's measured
        curves (the catalog's Hopper cuDNN curve is measured from 2,048 tokens up, FlashAttention-2's from 512)."""
        eff = gpu.efficiency
        named = eff.attention_curve(attention)
        assert named is not None, f"no {attention.value} attention curve for {gpu.name} (io.resolve checks it)"
        curves = (named,) if attention is not AttentionKernel.FASTEST or eff.attention_flash2 is None else (
            named, eff.attention_flash2)
        fp8 = eff.gemm_fp8
        if recipe in (Fp8Recipe.MXFP8, Fp8Recipe.BLOCKWISE) and eff.gemm_mxfp8 is not None:
            fp8 = eff.gemm_mxfp8
        fraction = {Precision.FP8: fp8, Precision.FP4: eff.gemm_fp4}.get(precision, eff.gemm_bf16)
        return cls(
            peak_flops_per_s=gpu.peak_flops_per_s(precision) * sustained, gemm_fraction=fraction,
            sm_count=gpu.sm_count,
            wave_overhead_s=eff.gemm_wave_overhead_us * US,
            operand_bytes=OPERAND_BYTES.get(precision, float(BYTES_16BIT)),
            hbm_bytes_per_s=gpu.memory_bandwidth_bytes_per_s * eff.hbm,
            attention=curves,
        )


def gemm_s(r: KernelRates, m: np.ndarray | float, n: np.ndarray | float, k: np.ndarray | float,
           groups: np.ndarray | float = 1.0) -> np.ndarray:
    """Seconds of one (grouped) GEMM of `groups` M×K by K×N products (module docstring)."""
    m, n, k, groups = (np.asarray(x, dtype=float) for x in (m, n, k, groups))
    flops = 2.0 * groups * m * n * k
    if r.sm_count is None:
        compute: np.ndarray = flops / (r.gemm_fraction * r.peak_flops_per_s)
    else:
        per_sm = r.gemm_fraction * r.peak_flops_per_s / r.sm_count
        # Every tile at once along a leading axis (one numpy call per term instead of one per tile and term; the
        # minimum over a leading axis is an element-wise one, fast).
        tiles = (len(TILES),) + (1,) * len(np.broadcast(m, n, k, groups).shape)
        tile_m, tile_n = TILE_M.reshape(tiles), TILE_N.reshape(tiles)
        waves = np.ceil(groups * np.ceil(m / tile_m) * np.ceil(n / tile_n) / r.sm_count)
        compute = (waves * (2.0 * tile_m * tile_n * k / per_sm + r.wave_overhead_s)).min(axis=0)
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
             groups: np.ndarray | float = 1.0) -> LinearTimes:
    """Forward, input-gradient and weight-gradient GEMMs of a linear layer of n_in → n_out per GPU over `tokens`
    rows (per group, for `groups` experts of one grouped GEMM)."""
    return LinearTimes(gemm_s(r, tokens, n_out, n_in, groups), gemm_s(r, tokens, n_in, n_out, groups),
                       gemm_s(r, n_in, n_out, tokens, groups))


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
