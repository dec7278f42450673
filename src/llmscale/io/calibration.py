"""Calibration profiles (`llmscale calibrate` writes one; `explain`, `plan` and `validate --calibration FILE` read
it) and `apply_calibration`, which puts the measured numbers in place of the datasheet ones. Torch-free: the
measuring lives in llmscale/measure/.

A profile holds, for one device: GEMM throughput fitted as P·d/(d + d_half) over the narrow dimension d (compute.py's
roll-off), device copy bandwidth, and per network tier the large-message bus bandwidth and small-message time of
each collective; device, versions, date, and the SHA256 of its canonical body (every field but `sha256`), which
`load_profile` checks so an edited profile is refused.

apply_calibration(cluster, profile), what it replaces (datasheet peaks stay the MFU denominators):
  gemm_<precision> = P / datasheet peak of that precision; gemm_half_dim = d_half. A GEMM measured in float32 (CPU)
      stands in for the 16-bit GEMM. attention, and the FP8/FP4 fractions not measured, are scaled by the same
      factor as the 16-bit fraction (their catalog ratio to it is kept: not measured).
  hbm = copy bandwidth / datasheet HBM bandwidth.
  A fraction above 1 (the device beats the catalog's datasheet) raises that peak or bandwidth to the measurement and
      sets the fraction to 1.
  tier t bandwidth_gb_per_s = busbw(all_reduce at tier t) · o_t / η_t, with η_t the catalog's ring fraction
      (scale_up_ring for tier 0, network beyond) and o_t the tier's oversubscription, so that comm.py's achieved
      B·η/o equals the measured busbw; latency_us = the per-hop α that comm.py's ring formula
      t = t_0 + 2(n−1)·α + S·f/busbw gives for the measured small-message time (t_0 from catalog/comm.yaml, α ≥ 0).
      All-to-all and send/recv keep the catalog's ratio to the ring bandwidth (recorded in the profile, not applied).
The profile's SHA256 goes into the GPU's `source`, so every input hash records which profile produced a prediction.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from llmscale.cost.collectives import Collective, bus_factor, comm_efficiency
from llmscale.errors import InputFileError
from llmscale.io.files import parse_spec, read_document
from llmscale.io.fingerprint import canonical_json
from llmscale.specs.base import Spec
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.train import Precision
from llmscale.units import GB, TERA, US


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
    sha256: str | None = Field(None, description="SHA256 of the canonical body (every other field)")

    def body_sha256(self) -> str:
        body = self.model_dump(mode="json", exclude={"sha256"})
        return hashlib.sha256(canonical_json(body).encode("ascii")).hexdigest()


def seal(profile: CalibrationProfile) -> CalibrationProfile:
    """The profile with its body's SHA256 filled in."""
    return profile.model_copy(update={"sha256": profile.body_sha256()})


def write_profile(profile: CalibrationProfile, path: Path) -> CalibrationProfile:
    sealed = seal(profile)
    text = yaml.safe_dump(sealed.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
    path.write_text("# llmscale calibration profile (llmscale calibrate); edits break its sha256\n" + text,
                    encoding="utf-8")
    return sealed


def load_profile(path: Path | str) -> CalibrationProfile:
    """A validated profile; one that was edited after writing (sha256 mismatch) is refused."""
    where = str(path)
    profile = parse_spec(CalibrationProfile, read_document(Path(path)), where=where)
    if profile.sha256 is not None and profile.sha256 != profile.body_sha256():
        raise InputFileError(f"{where}: sha256 {profile.sha256} does not match the profile's body "
                             f"({profile.body_sha256()}): the file was edited after it was written "
                             "(re-run llmscale calibrate, or delete the sha256 line to accept the edit)")
    return profile


_GEMM_FIELD = {Precision.BF16: "gemm_bf16", Precision.FP16: "gemm_bf16", Precision.FP8: "gemm_fp8",
               Precision.FP4: "gemm_fp4"}
_PEAK_FIELD = {Precision.BF16: "peak_bf16_tflops", Precision.FP16: "peak_bf16_tflops",
               Precision.FP8: "peak_fp8_tflops", Precision.FP4: "peak_fp4_tflops"}


def _fraction(measured: float, datasheet: float) -> tuple[float, float]:
    """(fraction ≤ 1, the peak to divide by): above the datasheet the peak rises to the measurement."""
    return (measured / datasheet, datasheet) if measured <= datasheet else (1.0, measured)


def _gpu_updates(cluster: ClusterSpec, profile: CalibrationProfile) -> tuple[dict[str, Any], dict[str, Any]]:
    gpu, eff = cluster.gpu, cluster.gpu.efficiency
    gpu_fields: dict[str, Any] = {}
    eff_fields: dict[str, Any] = {}
    for g in profile.gemm:
        datasheet = getattr(gpu, _PEAK_FIELD[g.precision])
        if datasheet is None:
            continue  # the catalog GPU has no such tensor cores: nothing to replace
        fraction, peak = _fraction(g.peak_flops_per_s, datasheet * TERA)
        gpu_fields[_PEAK_FIELD[g.precision]] = peak / TERA
        eff_fields[_GEMM_FIELD[g.precision]] = fraction
        if g.precision in (Precision.BF16, Precision.FP16) or "gemm_half_dim" not in eff_fields:
            eff_fields["gemm_half_dim"] = max(g.half_dim, 1e-3)
    if "gemm_bf16" in eff_fields:
        scale = eff_fields["gemm_bf16"] / eff.gemm_bf16
        eff_fields["attention"] = min(eff.attention * scale, 1.0)
        for name in ("gemm_fp8", "gemm_fp4"):
            eff_fields.setdefault(name, min(getattr(eff, name) * scale, 1.0))
    if profile.memory is not None:
        fraction, bandwidth = _fraction(profile.memory.copy_bytes_per_s, gpu.memory_bandwidth_bytes_per_s)
        gpu_fields["memory_bandwidth_gb_per_s"] = bandwidth / GB
        eff_fields["hbm"] = fraction
    return gpu_fields, eff_fields


def _tier_updates(cluster: ClusterSpec, scope: ScopeCalibration) -> dict[str, Any]:
    ring = next((c for c in scope.collectives if c.op is Collective.ALL_REDUCE), None)
    if ring is None or scope.tier >= len(cluster.tiers):
        return {}
    comm = comm_efficiency()
    tier = cluster.tiers[scope.tier]
    eta = comm.scale_up_ring if scope.tier == 0 else comm.network
    n = scope.ranks
    wire_s = ring.small_bytes * float(bus_factor(Collective.ALL_REDUCE, np.array(n))) / ring.busbw_bytes_per_s
    alpha_s = max(ring.small_time_s - comm.base_latency_s[Collective.ALL_REDUCE] - wire_s, 0.0) / (2 * (n - 1))
    return {"bandwidth_gb_per_s": ring.busbw_bytes_per_s * tier.oversubscription / eta / GB,
            "latency_us": alpha_s / US}


def apply_calibration(cluster: ClusterSpec, profile: CalibrationProfile) -> ClusterSpec:
    """`cluster` with the profile's measured peaks, efficiencies and tier bandwidths/latencies in place of the
    datasheet ones (module docstring), re-validated; the profile's SHA256 is recorded in the GPU's source."""
    gpu_fields, eff_fields = _gpu_updates(cluster, profile)
    digest = profile.sha256 or profile.body_sha256()
    note = f"calibrated by profile sha256 {digest} ({profile.device.name}, {profile.date})"
    gpu = cluster.gpu.model_dump()
    gpu.update(gpu_fields)
    gpu["efficiency"] = {**gpu["efficiency"], **eff_fields}
    gpu["source"] = f"{cluster.gpu.source} | {note}" if cluster.gpu.source else note
    tiers = [t.model_dump() for t in cluster.tiers]
    for scope in profile.scopes:
        updates = _tier_updates(cluster, scope)
        if updates:
            tiers[scope.tier].update(updates)
    data = {**cluster.model_dump(), "gpu": gpu, "tiers": tiers}
    return parse_spec(ClusterSpec, data, where=f"cluster {cluster.name!r} calibrated")


def calibrates(profile: CalibrationProfile, gpu_name: str | None) -> bool:
    """Whether `validate` applies the profile to a run on `gpu_name`: runs on the profile's catalog GPU, or every run
    when the profile names none."""
    return profile.gpu is None or profile.gpu == gpu_name
