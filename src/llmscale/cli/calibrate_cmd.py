"""`llmscale calibrate`: a short bench suite (GEMM sweep, device copy, collectives per scope) written as a calibration
profile (specs/calibration.py, read by io/calibration.py) that the job commands and `validate` take with
`--calibration FILE`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.cli import options as o
from llmscale.cli.bench_cmd import BackendOpt, BlockOpt, DeviceOpt, NprocOpt, resolve_backend
from llmscale.report.strict_json import strict_dumps
from llmscale.units import GB, KIB, TERA


def calibrate(
    nproc: NprocOpt = 2,
    backend: BackendOpt = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="profile YAML to write")] = Path("calibration.yaml"),
    gpu: Annotated[str | None, typer.Option("--gpu", help="catalog GPU this machine's device is (validate applies "
                                            "the profile to its runs)")] = None,
    device: DeviceOpt = None,
    block_ms: BlockOpt = 50.0,
    as_json: o.JsonOpt = False,
) -> None:
    """A short bench suite (GEMM sweep, device copy, collectives per scope) written as a calibration profile."""
    from llmscale.measure import require_torch

    require_torch()
    from llmscale.io.calibration import write_profile
    from llmscale.measure import calibrate as cal
    from llmscale.measure import collectives as c
    from llmscale.measure import gemm as g
    from llmscale.measure import membw, table
    from llmscale.measure.launch import launch

    if gpu is not None:
        from llmscale.io.catalog import load_gpu

        load_gpu(gpu)  # an unknown name is one line and exit 2 before anything runs
    kind = resolve_backend(backend, nproc)
    from llmscale.measure.launch import resolve_device

    dev = resolve_device(device)
    dtype = g.default_dtype(dev)
    target = block_ms / 1e3
    gemm = cal.gemm_sweep(dtype, dev, 8192 if dev.startswith("cuda") else 1024, target)
    copies = membw.bench_copy([membw.DEFAULT_GPU_SIZES[-1] if dev.startswith("cuda") else membw.DEFAULT_CPU_SIZES[-1]],
                              dev, target_s=target)
    small, large = (8 * KIB, 256 * KIB**2) if kind == "nccl" else (4 * KIB, 16 * KIB**2)
    cfg = c.bench_config(list(c.OPS), [small, large], "float32" if kind == "gloo" else "bfloat16", kind,
                         repeats=5, target_s=target, plain=False)
    result = launch(c.collectives_worker, cfg, nproc, kind)
    if result is None:
        return
    info = table.versions()
    notes = ["gemm float32 stands in for the 16-bit GEMM (CPU)"] if dtype == "float32" else []
    if kind == "gloo":
        notes.append("collectives on gloo (reduce_scatter as all_to_all + local sum); NCCL figures need --backend nccl")
    profile = cal.build_profile(device=dev, device_name=table.device_name(dev), ranks=len(result["ranks"]),
                                versions=info, gemm=gemm, copy_rows=copies,
                                scopes=cal.scope_calibrations(result["rows"], small, large, kind), gpu=gpu,
                                notes=notes)
    sealed = write_profile(profile, output)
    if as_json:
        typer.echo(strict_dumps({"path": str(output), "profile": sealed.model_dump(mode="json")}))
        return
    typer.echo(calibration_summary(sealed, output))


def calibration_summary(profile: Any, path: Path) -> str:
    from llmscale.measure import table

    gemm = profile.gemm[0]
    versions = profile.versions
    lines = [f"llmscale calibrate   llmscale {versions.llmscale}  torch {versions.torch}  {profile.date}",
             f"device {profile.device.kind}: {profile.device.name}",
             f"gemm {gemm.dtype} (stands for {gemm.precision.value}): peak {gemm.peak_flops_per_s / TERA:.3f} TFLOP/s, "
             f"half at d = {gemm.half_dim:.1f}",
             f"memory copy: {profile.memory.copy_bytes_per_s / GB:.2f} GB/s (read + write)" if profile.memory else "",
             f"wrote {path}  sha256 {profile.sha256}", ""]
    columns = [table.Column("scope", "scope", "", 10, "s"), table.Column("tier", "tier", "", 4, "d"),
               table.Column("ranks", "ranks", "", 5, "d"), table.Column("op", "op", "", 14, "s"),
               table.Column("busbw_bytes_per_s", "busbw", "(GB/s)", 8, ".3f", GB),
               table.Column("large_bytes", "at", "(B)", 10, "d"),
               table.Column("small_time_s", "time", "(us)", 9, ".1f", 1e-6),
               table.Column("small_bytes", "at", "(B)", 7, "d")]
    rows = [{"scope": s.scope, "tier": s.tier, "ranks": s.ranks, **coll.model_dump(mode="json")}
            for s in profile.scopes for coll in s.collectives]
    return table.render([line for line in lines if line], columns, rows)
