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

from pydantic import Field

from llmscale.specs.base import Spec
from llmscale.specs.collective import Collective
from llmscale.specs.fingerprint import canonical_json
from llmscale.specs.train import Precision

MAX_DIM = 2**20
"""Largest GEMM dimension a profile may hold: a 2^20-wide matrix of bf16 is 2 TiB, beyond any device's memory."""
FLOPS_PER_S_RANGE = (1e6, 1e17)
"""A measured GEMM rate, FLOP/s: from a slow CPU core (~1e9) to 5× the densest datasheet peak (GB300 FP4, ~1.5e16);
below 1e6 or above 1e17 is a unit slip or a broken timer, not a device."""
BYTES_PER_S_RANGE = (1e6, 1e15)
"""A measured bandwidth, B/s (copy or collective bus bandwidth): 1 MB/s (a broken link) to 1 PB/s, 50× the fastest
HBM (~2e13 B/s) and NVLink domains (~1e12 B/s per GPU)."""
MAX_MESSAGE_BYTES = 2**40
"""Largest buffer a measurement may name (1 TiB: beyond any device's memory)."""
SMALL_TIME_RANGE_S = (1e-7, 10.0)
"""Seconds of a small-message collective: 0.1 µs (below any launch latency) to 10 s (a hang, not a latency)."""
MAX_RANKS = 2**20
"""Ranks of a measurement (a million processes: beyond the largest clusters llmscale plans)."""


def _finite(low: float, high: float, description: str) -> Any:
    """A float field within [low, high], NaN and ±inf refused (`Field(allow_inf_nan=False)`)."""
    return Field(ge=low, le=high, allow_inf_nan=False, description=f"{description} (in {low:g}..{high:g})")


class GemmPoint(Spec):
    m: int = Field(ge=1, le=MAX_DIM)
    n: int = Field(ge=1, le=MAX_DIM)
    k: int = Field(ge=1, le=MAX_DIM)
    flops_per_s: float = _finite(*FLOPS_PER_S_RANGE, "measured throughput of this shape")


class GemmCalibration(Spec):
    """Measured GEMM throughput of one type, fitted as peak·d/(d + half_dim), d = min(m, n, k)."""

    dtype: str = Field(description="torch type measured (float32 on CPU, bfloat16 / float8 on GPU)")
    precision: Precision = Field(description="the GEMM precision whose fraction this replaces")
    peak_flops_per_s: float = _finite(*FLOPS_PER_S_RANGE, "fitted large-GEMM throughput P")
    half_dim: float = _finite(0.0, float(MAX_DIM), "narrow dimension at which throughput halves")
    points: tuple[GemmPoint, ...] = ()


class MemoryCalibration(Spec):
    copy_bytes_per_s: float = _finite(*BYTES_PER_S_RANGE, "(read + write) bytes per second of a large device copy")
    size_bytes: int = Field(ge=1, le=MAX_MESSAGE_BYTES)


class CollectiveCalibration(Spec):
    op: Collective
    busbw_bytes_per_s: float = _finite(*BYTES_PER_S_RANGE, "nccl-tests bus bandwidth at the large size")
    large_bytes: int = Field(ge=1, le=MAX_MESSAGE_BYTES)
    small_time_s: float = _finite(*SMALL_TIME_RANGE_S, "seconds per call at the small size")
    small_bytes: int = Field(ge=1, le=MAX_MESSAGE_BYTES)


class ScopeCalibration(Spec):
    """Collectives measured in groups that span one network tier."""

    scope: str = Field(description="intra-node or inter-node")
    tier: int = Field(ge=0, le=15, description="the cluster tier this replaces (0 = scale-up; no cluster has 16)")
    ranks: int = Field(ge=2, le=MAX_RANKS, description="group size measured")
    backend: Literal["gloo", "nccl"]
    collectives: tuple[CollectiveCalibration, ...] = Field(min_length=1)


class StorageCalibration(Spec):
    """`llmscale bench storage PATH` on one node (measure/storage.py): the checkpoint model's per-node storage rate."""

    path: str = Field(description="the directory measured (the file system checkpoints go to)")
    host: str
    write_bytes_per_s: float = _finite(*BYTES_PER_S_RANGE, "sequential write + fsync of the largest shard size")
    read_bytes_per_s: float = _finite(*BYTES_PER_S_RANGE, "sequential read of it, page cache dropped")
    shard_bytes: int = Field(ge=1, le=MAX_MESSAGE_BYTES, description="the shard size those two were measured at")
    fsync_s: float = _finite(1e-7, 10.0, "median fsync of a 4 KiB append")
    small_files_per_s: float = _finite(1e-3, 1e9, "small files opened and read per second, one by one")
    small_file_bytes: int = Field(ge=1, le=MAX_MESSAGE_BYTES)
    cache_dropped: bool = Field(description="False: the read was served by the page cache (its rate is not the disk's)")


class DeviceInfo(Spec):
    kind: Literal["cpu", "cuda"]
    name: str
    ranks: int = Field(ge=1, le=MAX_RANKS, description="ranks (processes) the collectives ran on")


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
    gpu: str | None = Field(None, min_length=1,
                            description="catalog GPU the measurement stands for (validate applies it to those)")
    date: str
    versions: Versions
    gemm: tuple[GemmCalibration, ...] = ()
    memory: MemoryCalibration | None = None
    scopes: tuple[ScopeCalibration, ...] = ()
    notes: tuple[str, ...] = ()
    storage: StorageCalibration | None = Field(None, description="`llmscale bench storage` figures (one node)")
    constants: dict[str, dict[str, Any]] | None = Field(
        None, description="overrides of model constants (specs.constants.Constants), by component: "
        "{step: {step_overhead_s: 0.2}}; validated against the catalog's constants when the profile is loaded"
    )
    sha256: str | None = Field(None, description="SHA256 of the canonical body (every other field)")

    @property
    def sealed(self) -> bool:
        """The profile carries the SHA256 of its own body: written by `llmscale calibrate` and not edited since."""
        return self.sha256 is not None and self.sha256 == self.body_sha256()

    def body_sha256(self) -> str:
        """SHA256 of the canonical body: every field but `sha256` (and `constants` or `storage` when absent, so
        profiles written before they existed keep their seal)."""
        exclude = {"sha256"} | ({"constants"} if self.constants is None else set())
        exclude |= {"storage"} if self.storage is None else set()
        body = self.model_dump(mode="json", exclude=exclude)
        return hashlib.sha256(canonical_json(body).encode("ascii")).hexdigest()
