"""Put a calibration profile's measured numbers in place of the datasheet ones (`apply_calibration`).

GEMM and HBM fractions = measured / datasheet, tier bandwidth = busbw·o_t/η_t and latency the ring formula's
per-hop α, storage = nodes × one node's rates; datasheet peaks stay the MFU denominators, and the profile's SHA256
goes into the GPU's `source`. Each rule and its caveats: docs/cost-model.md#calibrate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from llmscale.specs.bounds import MAX_GB_PER_S, MIN_GB_PER_S
from llmscale.specs.calibration import CalibrationProfile, ScopeCalibration
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.collective import Collective, bus_factor
from llmscale.specs.constants import CommConstants, Constants
from llmscale.specs.train import Precision
from llmscale.units import GB, TERA, US

_GEMM_FIELD = {Precision.BF16: "gemm_bf16", Precision.FP16: "gemm_bf16", Precision.FP8: "gemm_fp8",
               Precision.FP4: "gemm_fp4"}
_PEAK_FIELD = {Precision.BF16: "peak_bf16_tflops", Precision.FP16: "peak_bf16_tflops",
               Precision.FP8: "peak_fp8_tflops", Precision.FP4: "peak_fp4_tflops"}


def _fraction(measured: float, datasheet: float) -> tuple[float, float]:
    """(fraction ≤ 1, the peak to divide by): above the datasheet the peak rises to the measurement."""
    return (measured / datasheet, datasheet) if measured <= datasheet else (1.0, measured)


def _gpu_updates(cluster: ClusterSpec, profile: CalibrationProfile) -> tuple[dict[str, Any], dict[str, Any]]:
    gpu = cluster.gpu
    eff = cluster.gpu.efficiency
    gpu_fields: dict[str, Any] = {}
    eff_fields: dict[str, Any] = {}
    for g in profile.gemm:
        datasheet = getattr(gpu, _PEAK_FIELD[g.precision])
        if datasheet is None:
            continue  # the catalog GPU has no such tensor cores: nothing to replace
        fraction, peak = _fraction(g.peak_flops_per_s, datasheet * TERA)
        gpu_fields[_PEAK_FIELD[g.precision]] = peak / TERA
        eff_fields[_GEMM_FIELD[g.precision]] = fraction
    if "gemm_bf16" in eff_fields:
        scale = eff_fields["gemm_bf16"] / eff.gemm_bf16
        eff_fields["attention"] = min(eff.attention * scale, 1.0)
        eff_fields["attention_backward"] = min(eff.attention_backward * scale, 1.0)
        if eff.attention_flash2 is not None:  # the other kernel's curve moves with the same clocks
            flash2 = eff.attention_flash2
            eff_fields["attention_flash2"] = {**flash2.model_dump(), "forward": min(flash2.forward * scale, 1.0),
                                              "backward": min(flash2.backward * scale, 1.0)}
        for name in ("gemm_fp8", "gemm_fp4"):
            eff_fields.setdefault(name, min(getattr(eff, name) * scale, 1.0))
    if "gemm_fp8" in eff_fields and eff.gemm_mxfp8 is not None:  # MXFP8 keeps its catalog ratio to per-tensor FP8
        eff_fields["gemm_mxfp8"] = min(eff.gemm_mxfp8 * eff_fields["gemm_fp8"] / eff.gemm_fp8, 1.0)
    if "gemm_fp8" in eff_fields and eff.gemm_fp8_fast_accum is not None:  # so does fast accumulation (measured
        # without it: llmscale.measure.gemm calls torch._scaled_mm with its default use_fast_accum=False)
        eff_fields["gemm_fp8_fast_accum"] = min(
            eff.gemm_fp8_fast_accum * eff_fields["gemm_fp8"] / eff.gemm_fp8, 1.0)
    if profile.memory is not None:
        fraction, bandwidth = _fraction(profile.memory.copy_bytes_per_s, gpu.memory_bandwidth_bytes_per_s)
        gpu_fields["memory_bandwidth_gb_per_s"] = bandwidth / GB
        eff_fields["hbm"] = fraction
    return gpu_fields, eff_fields


def _tier_updates(cluster: ClusterSpec, scope: ScopeCalibration, comm: CommConstants) -> dict[str, Any]:
    ring = next((c for c in scope.collectives if c.op is Collective.ALL_REDUCE), None)
    if ring is None or scope.tier >= len(cluster.tiers):
        return {}
    tier = cluster.tiers[scope.tier]
    eta = comm.scale_up_ring if scope.tier == 0 else comm.network
    n = scope.ranks
    wire_s = ring.small_bytes * float(bus_factor(Collective.ALL_REDUCE, np.array(n))) / ring.busbw_bytes_per_s
    alpha_s = max(ring.small_time_s - comm.base_latency_s(Collective.ALL_REDUCE) - wire_s, 0.0) / (2 * (n - 1))
    return {"bandwidth_gb_per_s": ring.busbw_bytes_per_s * tier.oversubscription / eta / GB,
            "latency_us": alpha_s / US}


@dataclass(frozen=True)
class Calibrated:
    """A cluster and constants with a profile's measurements in place of the datasheet and catalog numbers."""

    cluster: ClusterSpec
    constants: Constants


def apply_calibration(cluster: ClusterSpec, constants: Constants, profile: CalibrationProfile) -> Calibrated:
    """The profile's constant overrides laid over `constants`, then `cluster` with the profile's measured peaks,
    efficiencies and tier bandwidths/latencies derived with those constants (docs/cost-model.md#calibrate)."""
    calibrated = calibrated_constants(constants, profile)
    return Calibrated(calibrated_cluster(cluster, profile, calibrated.comm), calibrated)


def calibrated_constants(constants: Constants, profile: CalibrationProfile) -> Constants:
    """`constants` with the profile's overrides (`CalibrationProfile.constants`) laid over them."""
    return constants.with_overrides(profile.constants) if profile.constants else constants


def calibrated_cluster(cluster: ClusterSpec, profile: CalibrationProfile, comm: CommConstants) -> ClusterSpec:
    """`cluster` with the profile's measured peaks, efficiencies and tier bandwidths/latencies in place of the
    datasheet ones (docs/cost-model.md#calibrate), re-validated; the profile's SHA256 is recorded in the GPU's
    source."""
    gpu_fields, eff_fields = _gpu_updates(cluster, profile)
    digest = profile.sha256 if profile.sealed and profile.sha256 else profile.body_sha256()
    seal = "profile" if profile.sealed else "UNSEALED profile (body)"
    note = f"calibrated by {seal} sha256 {digest} ({profile.device.name}, {profile.date})"
    gpu = cluster.gpu.model_dump()
    gpu.update(gpu_fields)
    gpu["efficiency"] = {**gpu["efficiency"], **eff_fields}
    gpu["source"] = f"{cluster.gpu.source} | {note}" if cluster.gpu.source else note
    tiers = [t.model_dump() for t in cluster.tiers]
    for scope in profile.scopes:
        updates = _tier_updates(cluster, scope, comm)
        if updates:
            tiers[scope.tier].update(updates)
    data = {**cluster.model_dump(), "gpu": gpu, "tiers": tiers}
    if profile.storage is not None:
        data["storage"] = _storage_update(cluster, profile)
    return ClusterSpec.model_validate(data)  # every measured value is positive: valid by construction


def _storage_update(cluster: ClusterSpec, profile: CalibrationProfile) -> dict[str, float]:
    """The cluster's storage system from one node's measured rates (docs/cost-model.md#calibrate-rules), in GB/s
    within the bounds."""
    measured = profile.storage
    assert measured is not None
    nodes = max(cluster.num_gpus // cluster.node.gpus_per_node, 1)
    given = cluster.storage
    write = nodes * measured.write_bytes_per_s / GB
    read = nodes * measured.read_bytes_per_s / GB if measured.cache_dropped else (
        given.read_gb_per_s if given is not None else write)
    if given is not None:
        write = min(write, given.write_gb_per_s)
        read = min(read, given.read_gb_per_s)
    return {"write_gb_per_s": min(max(write, MIN_GB_PER_S), MAX_GB_PER_S),
            "read_gb_per_s": min(max(read, MIN_GB_PER_S), MAX_GB_PER_S)}


def calibrates(profile: CalibrationProfile, gpu_name: str | None) -> bool:
    """Whether `validate` applies the profile to a run on `gpu_name`: runs on the profile's catalog GPU, or every run
    when the profile names none."""
    return profile.gpu is None or profile.gpu == gpu_name
