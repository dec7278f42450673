"""The short suite behind `llmscale calibrate`: a GEMM sweep over the narrow dimension, one large device copy, and
the five collectives at a small and a large size per network scope, turned into a CalibrationProfile
(cost/calibrate.py says what each number replaces).

GEMM fit: throughput(d) = P·d/(d + d_half) (compute.py's roll-off) is linear in 1/d after inverting,
1/throughput = 1/P + (d_half/P)·(1/d); least squares over the sweep gives P and d_half (d_half clipped at 0 when
the sweep shows no roll-off). The sweep runs M = d tokens against N = K = `wide` (1024 on CPU, 8192 on GPU).
On CPU the GEMM is float32 and stands in for the 16-bit GEMM; the profile says so in `notes`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmscale.specs.calibration import (
    CalibrationProfile,
    CollectiveCalibration,
    DeviceInfo,
    GemmCalibration,
    GemmPoint,
    MemoryCalibration,
    ScopeCalibration,
    Versions,
)
from llmscale.specs.train import Precision

NARROW_DIMS = (16, 32, 64, 128, 256, 512)
PRECISION_OF = {"float32": Precision.BF16, "bfloat16": Precision.BF16, "float16": Precision.FP16,
                "float8": Precision.FP8}


def fit_gemm(narrow: np.ndarray, flops_per_s: np.ndarray) -> tuple[float, float]:
    """(P, d_half) of throughput = P·d/(d + d_half), least squares in 1/throughput vs 1/d (module docstring)."""
    x, y = 1.0 / np.asarray(narrow, dtype=float), 1.0 / np.asarray(flops_per_s, dtype=float)
    slope, intercept = np.polyfit(x, y, 1) if x.size > 1 else (0.0, float(y[0]))
    if intercept <= 0 or slope < 0:  # no roll-off (or noise bigger than it): a flat fit
        return float(1.0 / y.mean()), 0.0
    return float(1.0 / intercept), float(slope / intercept)


def gemm_sweep(dtype: str, device: str, wide: int, target_s: float) -> GemmCalibration:
    from llmscale.measure.gemm import GemmShape, bench_gemm

    shapes = [GemmShape(f"d{d}", d, wide, wide) for d in (*NARROW_DIMS, wide) if d <= wide]
    rows = bench_gemm(shapes, dtype, device, target_s=target_s)
    narrow = np.array([min(r["m"], r["n"], r["k"]) for r in rows])
    peak, half = fit_gemm(narrow, np.array([r["flops_per_s"] for r in rows]))
    points = tuple(GemmPoint(m=r["m"], n=r["n"], k=r["k"], flops_per_s=r["flops_per_s"]) for r in rows)
    return GemmCalibration(dtype=dtype, precision=PRECISION_OF[dtype], peak_flops_per_s=peak, half_dim=half,
                           points=points)


def scope_calibrations(rows: list[dict[str, Any]], small: int, large: int, backend: str) -> list[ScopeCalibration]:
    """Per tier-bound scope: each op's busbw at the large size and seconds per call at the small size."""
    result = []
    for scope in dict.fromkeys(r["scope"] for r in rows if r["tier"] is not None):
        mine = [r for r in rows if r["scope"] == scope]
        collectives = []
        for op in dict.fromkeys(r["op"] for r in mine):
            by_size = {r["size_bytes"]: r for r in mine if r["op"] == op}
            lo, hi = by_size[min(by_size)], by_size[max(by_size)]
            collectives.append(CollectiveCalibration(op=op, busbw_bytes_per_s=hi["busbw_bytes_per_s"],
                                                     large_bytes=hi["size_bytes"], small_time_s=lo["time_s"],
                                                     small_bytes=lo["size_bytes"]))
        result.append(ScopeCalibration(scope=scope, tier=mine[0]["tier"], ranks=mine[0]["ranks"], backend=backend,
                                       collectives=tuple(collectives)))
    return result


def build_profile(*, device: str, device_name: str, ranks: int, versions: dict[str, Any], gemm: GemmCalibration,
                  copy_rows: list[dict[str, Any]], scopes: list[ScopeCalibration], gpu: str | None,
                  notes: list[str]) -> CalibrationProfile:
    largest = max(copy_rows, key=lambda r: r["size_bytes"])
    return CalibrationProfile(
        device=DeviceInfo(kind="cuda" if device.startswith("cuda") else "cpu", name=device_name, ranks=ranks),
        gpu=gpu, date=versions["date"],
        versions=Versions(**{k: versions[k] for k in ("llmscale", "torch", "python", "cuda", "nccl")}),
        gemm=(gemm,),
        memory=MemoryCalibration(copy_bytes_per_s=largest["copy_bytes_per_s"], size_bytes=largest["size_bytes"]),
        scopes=tuple(scopes), notes=tuple(notes),
    )
