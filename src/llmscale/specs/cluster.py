"""ClusterSpec: accelerators, nodes, the network as a list of tiers, storage, power and price.

Edge units (as vendors quote them) are in the field names; SI properties convert once:
GB/s = 1e9 B/s, Gbit/s = 1e9 bit/s, GiB = 2^30 B. Bandwidths are one direction, per GPU.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from llmscale.specs.base import FieldProblem, Spec
from llmscale.specs.bounds import (
    MAX_GB_PER_S,
    MAX_GBIT_PER_S,
    MAX_GPUS,
    MAX_HIDDEN,
    MAX_LATENCY_US,
    MAX_MEMORY_GIB,
    MAX_NODE_GPUS,
    MAX_PLANES,
    MAX_POSITIONS,
    MAX_POWER_W,
    MAX_PUE,
    MAX_RATIO,
    MAX_SMS,
    MAX_TFLOPS,
    MAX_TIER_RANKS,
    MAX_USD_PER_GPU_HOUR,
    MIN_GB_PER_S,
    MIN_GBIT_PER_S,
    MIN_PUE,
)
from llmscale.specs.failures import FailureSpec
from llmscale.specs.train import AttentionKernel, Fp8Recipe, Precision, TrainSpec
from llmscale.units import GB, GIB, TERA, gbit_per_s_to_bytes_per_s


class AttentionCurve(Spec):
    """One fused-attention kernel's measured curve: TF(s) = T∞/(1 + s₀/s), T∞ as a fraction of the 16-bit peak.

    Forward and backward separately, causal, as cost/kernels.py applies them."""

    forward: float = Field(gt=0, le=1, description="forward T∞: fraction of the 16-bit peak at long sequences")
    forward_half_seq: float = Field(ge=0, le=MAX_POSITIONS, description="tokens at which forward reaches half T∞")
    backward: float = Field(gt=0, le=1, description="backward T∞: fraction of the 16-bit peak at long sequences")
    backward_half_seq: float = Field(ge=0, le=MAX_POSITIONS, description="tokens at which backward reaches half T∞")


class Fp8AttentionScaling(str, Enum):
    """How Transformer Engine scales FP8 attention's tensors: as the run's linears are scaled, per tensor under the
    delayed and current-scaling recipes and MXFP8 under MXFP8 (NVIDIA/TransformerEngine@v2.18
    attention/dot_product_attention/dot_product_attention.py, the recipe table above _dpa_fp8_recipe)."""

    PER_TENSOR = "per-tensor"
    MXFP8 = "mxfp8"

    @classmethod
    def of(cls, recipe: Fp8Recipe) -> Fp8AttentionScaling | None:
        """The scaling FP8 attention runs with under `recipe` (None: block scaling has none)."""
        if recipe in (Fp8Recipe.DELAYED, Fp8Recipe.TENSORWISE):
            return cls.PER_TENSOR
        return cls.MXFP8 if recipe is Fp8Recipe.MXFP8 else None


class Fp8AttentionRatio(Spec):
    """cuDNN's FP8 attention time over its 16-bit time on one GPU, pass by pass, at one head dim and mask.

    Measured side by side at a few chunk lengths; between them interpolated in log length, beyond held (a windowed
    table's backward grows with the length)."""

    scaling: Fp8AttentionScaling = Field(description="per-tensor (delayed and current-scaling recipes) or mxfp8")
    head_dim: PositiveInt = Field(le=MAX_HIDDEN, description="query/key head dim of the measured shapes")
    window: PositiveInt | None = Field(None, le=MAX_POSITIONS, description="the sliding window of the measured shapes "
                                       "(None: causal); a windowed table prices the layers of that window, each "
                                       "pass over the 16-bit forward + backward time")
    seq: tuple[Annotated[int, Field(gt=0, le=MAX_POSITIONS)], ...] = Field(
        min_length=2, description="chunk lengths measured, ascending")
    forward: tuple[Annotated[float, Field(gt=0, le=MAX_RATIO)], ...] = Field(
        description="FP8 forward time over the 16-bit forward (windowed: forward + backward), per length")
    backward: tuple[Annotated[float, Field(gt=0, le=MAX_RATIO)], ...] = Field(
        description="FP8 backward time over the 16-bit backward (windowed: forward + backward), per length")

    @model_validator(mode="after")
    def _aligned(self) -> Fp8AttentionRatio:
        if list(self.seq) != sorted(set(self.seq)):
            raise FieldProblem("seq", list(self.seq), "ascending distinct lengths")
        if not len(self.forward) == len(self.backward) == len(self.seq):
            raise FieldProblem("forward", list(self.forward), f"one ratio per length ({len(self.seq)}), as backward")
        return self

    def at(self, seq: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """(forward, backward) ratios at chunk lengths `seq`. Beyond the longest length a windowed table's backward
        grows with the length: FP8's windowed backward visits every causal block (time ∝ s²) where 16-bit's
        visits the window's (∝ s)."""
        s = np.asarray(seq, dtype=float)
        points = np.log(np.asarray(self.seq, dtype=float))
        forward = np.interp(np.log(s), points, self.forward)
        backward = np.interp(np.log(s), points, self.backward)
        if self.window is not None:
            backward = backward * np.maximum(s / self.seq[-1], 1.0)
        return forward, backward


class EfficiencySpec(Spec):
    """Achieved fractions of a GPU's datasheet peaks and the kernel model's shape constants (cost/kernels.py), each a
    published measurement or derived from one (catalog/gpus.yaml names it; catalog/efficiency.yaml holds the values
    for GPUs without their own). A calibration profile replaces them with this machine's measurements."""

    gemm_bf16: float = Field(gt=0, le=1, description="main-loop fraction of the 16-bit dense peak a large GEMM reaches")
    gemm_fp8: float = Field(gt=0, le=1, description="main-loop fraction of the FP8 dense peak")
    gemm_fp4: float = Field(gt=0, le=1, description="main-loop fraction of the FP4 dense peak")
    gemm_wave_overhead_us: float = Field(ge=0, le=100, description="fixed time per wave: prologue, epilogue, store")
    attention: float = Field(gt=0, le=1, description="fused causal attention forward: fraction of the 16-bit peak "
                             "at long sequences (T∞)")
    attention_half_seq: float = Field(
        ge=0, le=MAX_POSITIONS, description="tokens per chunk at which forward attention reaches half T∞"
    )
    attention_backward: float = Field(gt=0, le=1, description="fused causal attention backward at long sequences")
    attention_backward_half_seq: float = Field(
        ge=0, le=MAX_POSITIONS, description="tokens at which backward reaches half its T∞"
    )
    hbm: float = Field(gt=0, le=1, description="fraction of HBM bandwidth memory-bound kernels reach")
    gemm_mxfp8: float | None = Field(
        None, gt=0, le=1, description="main-loop fraction of the FP8 dense peak for MXFP8 block-scaled GEMMs; "
        "None: no MXFP8 tensor cores (before Blackwell)")
    gemm_fp8_fast_accum: float | None = Field(
        None, gt=0, le=1, description="main-loop fraction of the FP8 dense peak for per-tensor scaled FP8 GEMMs "
        "with fast accumulation (Hopper: Transformer Engine runs its forward GEMMs so); None: the GPU has no "
        "such mode (Blackwell) or no measurement of it, and forward GEMMs run at gemm_fp8")
    attention_flash2: AttentionCurve | None = Field(
        None, description="FlashAttention-2's curve on this GPU (TrainSpec.attention_kernel flash2); None: no "
        "published measurement of it here")
    fp8_attention: tuple[Fp8AttentionRatio, ...] = Field(
        (), description="cuDNN's FP8 attention over its 16-bit time (TrainSpec.fp8_attention), by scaling and head "
        "dim; empty: no published measurement here (catalog/efficiency.yaml fp8_attention names the tables)")

    def fp8_attention_ratio(self, recipe: Fp8Recipe, head_dim: int,
                            window: int | None = None) -> Fp8AttentionRatio | None:
        """The measured table FP8 attention under `recipe` runs at for a model of `head_dim` (query/key), causal or
        over a sliding `window`: the scaling's table of that mask (a window's exactly) and the nearest head dim
        measured, the larger on a tie (None: none measured)."""
        scaling = Fp8AttentionScaling.of(recipe)
        tables = [t for t in self.fp8_attention if t.scaling is scaling and t.window == window]
        return min(tables, key=lambda t: (abs(t.head_dim - head_dim), -t.head_dim)) if tables else None

    def attention_curve(self, kernel: AttentionKernel) -> AttentionCurve | None:
        """The measured curve of `kernel` on this GPU (None: the catalog has no measurement of it)."""
        if kernel is AttentionKernel.FLASH2:
            return self.attention_flash2
        return AttentionCurve.model_construct(  # this spec validated the four values already
            forward=self.attention, forward_half_seq=self.attention_half_seq, backward=self.attention_backward,
            backward_half_seq=self.attention_backward_half_seq)


class Generation(str, Enum):
    """An accelerator architecture: chips of one generation share kernels, tile shapes and achieved fractions of
    their peaks, so the catalog's ceilings and the published-MFU record are kept per generation."""

    AMPERE = "ampere"
    HOPPER = "hopper"
    BLACKWELL = "blackwell"
    BLACKWELL_ULTRA = "blackwell-ultra"
    CDNA3 = "cdna3"
    TPU_V4 = "tpu-v4"
    TPU_V5 = "tpu-v5"


class GPUSpec(Spec):
    """One accelerator. Peaks are dense (no 2:4 sparsity)."""

    name: str = Field(min_length=1)
    generation: Generation | None = Field(None, description="architecture; None for a GPU the catalog has no record of")
    sm_count: PositiveInt | None = Field(
        None, le=MAX_SMS, description="streaming multiprocessors (wave quantization); None: none"
    )
    peak_bf16_tflops: PositiveFloat = Field(le=MAX_TFLOPS, description="dense 16-bit tensor peak")
    peak_fp8_tflops: PositiveFloat | None = Field(None, le=MAX_TFLOPS, description="dense FP8 peak; None: no FP8")
    peak_fp4_tflops: PositiveFloat | None = Field(None, le=MAX_TFLOPS, description="dense FP4 peak; None: no FP4")
    fp8_tn_only: bool = Field(
        False, description="FP8 GEMMs take only the TN layout, so the column-wise FP8 copy of a tensor is a physical "
        "transpose written beside the row-wise one (Hopper); Blackwell reads one layout both ways")
    memory_gib: PositiveFloat = Field(le=MAX_MEMORY_GIB, description="HBM capacity; an '80 GB' H100 holds 80 GiB")
    memory_bandwidth_gb_per_s: float = Field(ge=MIN_GB_PER_S, le=MAX_GB_PER_S, description="HBM bandwidth")
    scaleup_bandwidth_gb_per_s: float | None = Field(
        None, ge=MIN_GB_PER_S, le=MAX_GB_PER_S, description="NVLink-class bandwidth per GPU, one direction (H100: 450)"
    )
    tdp_w: PositiveFloat | None = Field(None, le=MAX_POWER_W, description="board power")
    efficiency: EfficiencySpec = Field(description="achieved fractions of the peaks (catalog default if absent)")
    source: str = ""

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * GIB

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gb_per_s * GB

    @property
    def fp8_writes_transpose(self) -> bool:
        """FP8 casts write a transposed copy: `fp8_tn_only`, or a Hopper GPU whose file leaves it out."""
        return self.fp8_tn_only or self.generation is Generation.HOPPER

    def fp8_recipe(self, train: TrainSpec) -> Fp8Recipe:
        """The FP8 recipe `train` runs on this GPU: its own, else the native one (TrainSpec.fp8_recipe_on)."""
        return train.fp8_recipe_on(self.efficiency.gemm_mxfp8 is not None)

    def supports(self, precision: Precision) -> bool:
        """Whether the catalog has a dense peak for `precision` (16-bit formats share the bf16 one)."""
        return {Precision.FP8: self.peak_fp8_tflops, Precision.FP4: self.peak_fp4_tflops}.get(
            precision, self.peak_bf16_tflops
        ) is not None

    def peak_flops_per_s(self, precision: Precision) -> float:
        """Dense tensor-core peak for the GEMM precision; 16-bit formats share the bf16 peak."""
        table = {
            Precision.BF16: self.peak_bf16_tflops,
            Precision.FP16: self.peak_bf16_tflops,
            Precision.FP8: self.peak_fp8_tflops,
            Precision.FP4: self.peak_fp4_tflops,
        }
        peak = table[precision]
        if peak is None:
            raise ValueError(f"{self.name} has no {precision.value} peak in the catalog")
        return peak * TERA


class NodeSpec(Spec):
    """A server: GPUs, NICs, PCIe and host memory."""

    gpus_per_node: PositiveInt = Field(le=MAX_NODE_GPUS, description="GPUs in one server (or rack counted as one)")
    nics_per_node: PositiveInt = Field(le=MAX_NODE_GPUS, description="scale-out NICs in one server")
    nic_gbit_per_s: float = Field(ge=MIN_GBIT_PER_S, le=MAX_GBIT_PER_S, description="line rate of one NIC")
    pcie_gb_per_s: float = Field(
        ge=MIN_GB_PER_S, le=MAX_GB_PER_S, description="host-device bandwidth per GPU, one direction"
    )
    host_memory_gib: PositiveFloat = Field(le=MAX_MEMORY_GIB, description="host memory of one node")

    @property
    def nic_bytes_per_s_per_gpu(self) -> float:
        return gbit_per_s_to_bytes_per_s(self.nic_gbit_per_s) * self.nics_per_node / self.gpus_per_node

    @property
    def pcie_bytes_per_s(self) -> float:
        return self.pcie_gb_per_s * GB

    @property
    def host_memory_bytes(self) -> float:
        return self.host_memory_gib * GIB


class NetworkTier(Spec):
    """One level of the network. A group of ranks that fits in one domain of this tier talks at its
    bandwidth; tiers are listed innermost (scale-up domain) first."""

    name: str = Field(min_length=1)
    ranks: PositiveInt = Field(le=MAX_TIER_RANKS, description="GPUs in one domain of this tier")
    bandwidth_gb_per_s: float = Field(
        ge=MIN_GB_PER_S, le=MAX_GB_PER_S, description="per GPU, one direction, before oversubscription"
    )
    latency_us: float = Field(ge=0, le=MAX_LATENCY_US, description="one hop's latency across this tier")
    oversubscription: float = Field(
        1.0, ge=1.0, le=MAX_RATIO, description="downlink:uplink ratio above this tier's domains"
    )
    in_network_reduction: bool = Field(False, description="NVLS / SHARP reductions available in this tier")

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_gb_per_s * GB


class StorageSpec(Spec):
    """The shared file system that checkpoints go to."""

    read_gb_per_s: float = Field(ge=MIN_GB_PER_S, le=MAX_GB_PER_S, description="aggregate read bandwidth")
    write_gb_per_s: float = Field(ge=MIN_GB_PER_S, le=MAX_GB_PER_S, description="aggregate write bandwidth")


class PowerSpec(Spec):
    """Facility power figures."""

    pue: float = Field(1.2, ge=MIN_PUE, le=MAX_PUE, description="power usage effectiveness")
    node_overhead_w: float = Field(0.0, ge=0.0, le=MAX_POWER_W, description="CPUs, NICs, fans per node beyond the GPUs")


class ClusterSpec(Spec):
    """A GPU cluster: the accelerator, the node, the network tiers and the facility."""

    name: str = Field(min_length=1)
    gpu: GPUSpec
    num_gpus: PositiveInt = Field(le=MAX_GPUS, description="GPUs of the cluster")
    node: NodeSpec
    tiers: tuple[NetworkTier, ...] = Field(min_length=1)
    rail_optimized: bool = Field(True, description="NIC i of every node on rail switch i")
    planes: PositiveInt = Field(1, le=MAX_PLANES, description="independent network planes (multi-plane fabric)")
    storage: StorageSpec | None = None
    power: PowerSpec = PowerSpec()
    usd_per_gpu_hour: PositiveFloat | None = Field(None, le=MAX_USD_PER_GPU_HOUR, description="price")
    failures: FailureSpec | None = Field(
        None, description="interruption causes and rates (catalog/failures.yaml default when loaded from the catalog)"
    )
    source: str = ""

    @model_validator(mode="after")
    def _check_topology(self) -> ClusterSpec:
        if self.num_gpus % self.node.gpus_per_node:
            raise FieldProblem(
                "num_gpus", self.num_gpus, f"must be a multiple of node.gpus_per_node ({self.node.gpus_per_node})"
            )
        previous = 1
        for i, tier in enumerate(self.tiers):
            if tier.ranks <= previous or tier.ranks % previous:
                raise FieldProblem(
                    f"tiers.{i}.ranks", tier.ranks,
                    f"tier {tier.name!r} must span a whole multiple (> 1) of the tier inside it ({previous} ranks)",
                )
            previous = tier.ranks
        if previous < self.num_gpus:
            raise FieldProblem(
                f"tiers.{len(self.tiers) - 1}.ranks", previous,
                f"the outermost tier must span at least num_gpus ({self.num_gpus})",
            )
        return self

    @property
    def num_nodes(self) -> int:
        return self.num_gpus // self.node.gpus_per_node
