"""CalibrationProfile: what `llmscale calibrate` measured on one device, as a validated spec.

A profile holds, for one device: GEMM throughput fitted as P·d/(d + d_half) over the narrow dimension d (the cost
model's roll-off), device copy bandwidth, and per network tier the large-message bus bandwidth and small-message
time of each collective; device, versions, date, optional overrides of model constants, and the SHA256 of its
canonical body, which `llmscale.io.calibration.load_profile` checks so an edited profile is refused.
`llmscale.cost.calibrate.apply_calibration` puts its numbers in place of the datasheet ones.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from llmscale.specs.base import Spec
from llmscale.specs.collective import Collective
from llmscale.specs.fingerprint import canonical_json
from llmscale.specs.train import Precision


class GemmPoint(Spec):
    m: PositiveInt
    n: PositiveInt
    k: PositiveInt
    flops_per_s: PositiveFloat


class GemmCalibration(Spec):
    """Measured GEMM throughput of one type, fitted as peak·d/(d + half_dim), d = min(m, n, k)."""

    dtype: str = Field(description="torch type measured (float32 on CPU, bfloat16 / float8 on GPU)")
    precision: Precision = Field(description="the GEMM precision whose fraction this replaces")
    peak_flops_per_s: PositiveFloat = Field(description="fitted large-GEMM throughput P")
    half_dim: NonNegativeFloat = Field(description="narrow dimension at which throughput halves")
    points: tuple[GemmPoint, ...] = ()


class MemoryCalibration(Spec):
    copy_bytes_per_s: PositiveFloat = Field(description="(read + write) bytes per second of a large device copy")
    size_bytes: PositiveInt


class CollectiveCalibration(Spec):
    op: Collective
    busbw_bytes_per_s: PositiveFloat = Field(description="nccl-tests bus bandwidth at the large size")
    large_bytes: PositiveInt
    small_time_s: PositiveFloat = Field(description="seconds per call at the small size")
    small_bytes: PositiveInt


class ScopeCalibration(Spec):
    """Collectives measured in groups that span one network tier."""

    scope: str = Field(description="intra-node or inter-node")
    tier: int = Field(ge=0, description="the cluster tier this replaces (0 = scale-up)")
    ranks: int = Field(ge=2, description="group size measured")
    backend: Literal["gloo", "nccl"]
    collectives: tuple[CollectiveCalibration, ...] = Field(min_length=1)


class DeviceInfo(Spec):
    kind: Literal["cpu", "cuda"]
    name: str
    ranks: PositiveInt = Field(description="ranks (processes) the collectives ran on")


class Versions(Spec):
    llmscale: str
    torch: str
    python: str
    cuda: str | None = None
    nccl: str | None = None


class CalibrationProfile(Spec):
    """What `llmscale calibrate` measured (module docstring)."""

    format: Literal[1] = 1
    device: DeviceInfo
    gpu: str | None = Field(None, description="catalog GPU the measurement stands for (validate applies it to those)")
    date: str
    versions: Versions
    gemm: tuple[GemmCalibration, ...] = ()
    memory: MemoryCalibration | None = None
    scopes: tuple[ScopeCalibration, ...] = ()
    notes: tuple[str, ...] = ()
    constants: dict[str, dict[str, Any]] | None = Field(
        None, description="overrides of model constants (specs.constants.Constants), by component: "
        "{step: {step_overhead_s: 0.2}}; validated against the catalog's constants when the profile is loaded"
    )
    sha256: str | None = Field(None, description="SHA256 of the canonical body (every other field)")

    def body_sha256(self) -> str:
        """SHA256 of the canonical body: every field but `sha256` (and `constants` when absent, so profiles written
        before it existed keep their seal)."""
        exclude = {"sha256"} | ({"constants"} if self.constants is None else set())
        body = self.model_dump(mode="json", exclude=exclude)
        return hashlib.sha256(canonical_json(body).encode("ascii")).hexdigest()
