"""`llmscale bench gemm|memory|collectives|links`: measure this machine with torch (`calibrate`: calibrate_cmd.py).

torch is imported inside each command (llmscale.measure.require_torch: a missing torch is one line and exit 2).
Tables are nccl-tests style (llmscale/measure/table.py); `--json` carries the same rows with SI units. Under
torchrun only rank 0 prints.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any

import typer

from llmscale.cli import options as o
from llmscale.errors import SpecError
from llmscale.report.strict_json import strict_dumps
from llmscale.units import GB, KIB, TERA

bench_app = typer.Typer(name="bench", help="Micro-benchmarks of this machine (torch): GEMM, memory copy, collectives, "
                        "link health.", no_args_is_help=True)

MAX_BLOCK_MS = 10_000.0
"""A timed block longer than 10 s measures nothing a shorter one would not, and makes a run take hours."""
MAX_RANKS = 1024
"""Processes a measuring command starts on this one machine."""
NprocOpt = Annotated[int, typer.Option("--nproc", help="ranks to start on this machine (ignored under torchrun)")]
BackendOpt = Annotated[str | None, typer.Option("--backend", help="gloo or nccl (default: nccl with GPUs, else gloo)")]
DeviceOpt = Annotated[str | None, typer.Option("--device", help="cpu or cuda[:N] (default: the GPU if any, else cpu)")]
BlockOpt = Annotated[float, typer.Option("--block-ms", min=0.1, help="milliseconds per timed block")]
SizesOpt = Annotated[str | None, typer.Option("--sizes", help="comma-separated bytes, K/M/G = 2^10/2^20/2^30")]

CPU_GEMM_WARN_FLOPS = 2e11
CPU_GEMM_MODEL, CPU_GEMM_SEQ_LEN = "llama3-8b", 128
"""`bench gemm` on a CPU without --model: the smallest catalog model at a short sequence, so the default run ends in
well under a minute (the flagship's GEMMs take 13+ minutes and ~10 GB on a CPU, issue 13)."""
BenchModelOpt = Annotated[str | None, typer.Option("--model", "-m", metavar="NAME|FILE", help="catalog model name or "
                                                   f"file [default: {o.DEFAULT_MODEL} on a GPU, {CPU_GEMM_MODEL} on a "
                                                   "CPU]")]
BenchSeqOpt = Annotated[int | None, typer.Option("--seq-len", help="sequence length (tokens) [default: 4096; "
                                                 f"{CPU_GEMM_SEQ_LEN} on a CPU without --model]")]
_UNITS = {"": 1, "K": KIB, "M": KIB**2, "G": KIB**3}


def parse_sizes(text: str, option: str = "--sizes") -> list[int]:
    """'4K,1M,64M' -> [4096, 1048576, 67108864] (binary suffixes, as nccl-tests reads -b/-e)."""
    sizes = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", item, flags=re.IGNORECASE)
        if match is None or int(match.group(1)) <= 0:
            raise SpecError(option.lstrip("-"), text, "a comma-separated list of positive sizes like 4K,1M,64M")
        sizes.append(int(match.group(1)) * _UNITS[match.group(2).upper()])
    return sizes


def _emit(as_json: bool, document: dict[str, Any], text: str) -> None:
    typer.echo(strict_dumps(document) if as_json else text)


@bench_app.command("gemm")
@o.with_layout_flags("tp", "cp", "ep", "etp", "mbs")
def gemm(
    layout: dict[str, Any],
    model: BenchModelOpt = None,
    seq_len: BenchSeqOpt = None,
    dtype: Annotated[str | None, typer.Option("--dtype", help="float32|bfloat16 (CPU), bfloat16|float16|float32|"
                                              "float8 (GPU)")] = None,
    device: DeviceOpt = None,
    block_ms: BlockOpt = 100.0,
    as_json: o.JsonOpt = False,
) -> None:
    """Matmul throughput on the GEMM shapes of one micro-batch of MODEL under the layout, on one device."""
    o.within("--block-ms", block_ms, 0.1, MAX_BLOCK_MS)
    o.within("--seq-len", seq_len, 1, 1e8)
    from llmscale.measure import require_torch

    require_torch()
    from llmscale.io.resolve import resolve_model
    from llmscale.measure import gemm as g
    from llmscale.measure import table
    from llmscale.measure.launch import resolve_device

    dev = resolve_device(device)
    on_cpu = dev == "cpu"
    spec = resolve_model(model or (CPU_GEMM_MODEL if on_cpu else o.DEFAULT_MODEL))
    tp, cp, ep, etp, mbs = (layout[k] for k in ("tp", "cp", "ep", "etp", "mbs"))
    seq = _check_layout(spec, tp=tp, cp=cp, ep=ep, etp=etp, mbs=mbs,
                        seq_len=seq_len or (CPU_GEMM_SEQ_LEN if on_cpu and model is None else None))
    kind = dtype or g.default_dtype(dev)
    allowed = g.GPU_DTYPES if dev.startswith("cuda") else g.CPU_DTYPES
    if kind not in allowed:
        raise SpecError("dtype", kind, f"on {dev}: one of {', '.join(allowed)}")
    shapes = g.gemm_shapes(spec, tp=tp, cp=cp, ep=ep, etp=etp, mbs=mbs, seq_len=seq)
    biggest = max(s.flops for s in shapes)
    if dev == "cpu" and biggest > CPU_GEMM_WARN_FLOPS:
        typer.echo(f"warning: the largest GEMM is {biggest / TERA:.1f} TFLOP, seconds to minutes per call on a CPU "
                   "(~0.1-1 TFLOP/s); lower --seq-len or --mbs, or raise --tp", err=True)
    def progress(i: int, shape: Any) -> None:
        typer.echo(f"[{i + 1}/{len(shapes)}] {shape.name} {shape.m}x{shape.n}x{shape.k} "
                   f"({shape.flops / 1e9:,.1f} GFLOP per call)", err=True)

    rows = g.bench_gemm(shapes, kind, dev, target_s=block_ms / 1e3, on_shape=progress)
    info = table.versions()
    total_flops = sum(s.flops for s in shapes)
    overall = total_flops / sum(r["time_s"] for r in rows)
    shown = {"tp": tp, "cp": cp, "ep": ep, "etp": etp or tp, "mbs": mbs, "seq_len": seq}
    document = {"command": "bench gemm", **info, "device": dev, "device_name": table.device_name(dev),
                "model": spec.name, "layout": shown, "rows": rows, "flops_per_s": overall}
    columns = [table.Column("name", "name", "", 12, "s"), table.Column("m", "m", "", 8, "d"),
               table.Column("n", "n", "", 8, "d"), table.Column("k", "k", "", 8, "d"),
               table.Column("type", "type", "", 9, "s"), table.Column("time_s", "time", "(us)", 11, ".1f", 1e-6),
               table.Column("flops_per_s", "TFLOP/s", "", 9, ".3f", TERA)]
    preamble = [f"llmscale bench gemm   {table.version_line(info)}",
                f"device {dev}: {document['device_name']}",
                f"model {spec.name}  " + "  ".join(f"{k} {v}" for k, v in shown.items()),
                "forward GEMMs of one micro-batch on one GPU, (m x k)·(k x n); TFLOP/s = 2·m·n·k / time; median of 3 "
                f"blocks of ~{block_ms:g} ms", ""]
    footer = [f"All shapes (FLOP-weighted) : {overall / TERA:.3f} TFLOP/s"]
    _emit(as_json, document, table.render(preamble, columns, rows, footer))


def _check_layout(model: Any, *, tp: int, cp: int, ep: int, etp: int | None, mbs: int, seq_len: int | None) -> int:
    """The layout rules of `explain` for the flags the shapes use; returns the sequence length."""
    from llmscale.io.files import parse_spec
    from llmscale.layout.arrays import Layouts
    from llmscale.layout.rules import validate_one
    from llmscale.specs.layout import Layout
    from llmscale.specs.train import TrainSpec

    dp = ep * (etp or tp)
    layout = parse_spec(Layout, {k: v for k, v in {"tp": tp, "cp": cp, "ep": ep, "etp": etp, "mbs": mbs,
                                                   "dp": dp}.items() if v is not None}, where="layout")
    train = parse_spec(TrainSpec, {"global_batch": dp * mbs, **({"seq_len": seq_len} if seq_len else {})},
                       where="train")
    num_gpus = tp * cp * dp
    validate_one(model, train, num_gpus, Layouts.from_layout(layout, num_gpus))
    return train.seq_len


@bench_app.command("memory")
def memory(
    sizes: SizesOpt = None,
    device: DeviceOpt = None,
    block_ms: BlockOpt = 100.0,
    as_json: o.JsonOpt = False,
) -> None:
    """Device copy bandwidth, (read + write) bytes per second of dst.copy_(src)."""
    o.within("--block-ms", block_ms, 0.1, MAX_BLOCK_MS)
    from llmscale.measure import require_torch

    require_torch()
    from llmscale.measure import membw, table
    from llmscale.measure.launch import resolve_device

    dev = resolve_device(device)
    chosen = parse_sizes(sizes) if sizes else list(membw.DEFAULT_GPU_SIZES if dev != "cpu" else membw.DEFAULT_CPU_SIZES)
    rows = membw.bench_copy(chosen, dev, target_s=block_ms / 1e3)
    info = table.versions()
    document = {"command": "bench memory", **info, "device": dev, "device_name": table.device_name(dev),
                "rows": rows}
    columns = [table.Column("size_bytes", "size", "(B)", 12, "d"),
               table.Column("count", "count", "(elements)", 12, "d"), table.Column("type", "type", "", 8, "s"),
               table.Column("time_s", "time", "(us)", 11, ".1f", 1e-6),
               table.Column("copy_bytes_per_s", "copybw", "(GB/s)", 9, ".2f", GB)]
    preamble = [f"llmscale bench memory   {table.version_line(info)}", f"device {dev}: {document['device_name']}",
                "dst.copy_(src): copybw = 2·size / time (read + write); median of 3 blocks", ""]
    _emit(as_json, document, table.render(preamble, columns, rows))


def _world_size(nproc: int) -> int:
    from llmscale.measure.launch import under_torchrun

    return int(os.environ["WORLD_SIZE"]) if under_torchrun() else nproc


def resolve_backend(backend: str | None, nproc: int) -> str:
    from llmscale.measure.launch import check_backend, default_backend

    chosen = backend or default_backend()
    check_backend(chosen, nproc)
    return chosen


# registers `bench collectives` and `bench links` on bench_app
from llmscale.cli import bench_collectives_cmd, bench_links_cmd  # noqa: E402,F401
