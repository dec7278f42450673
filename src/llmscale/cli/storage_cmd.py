"""`llmscale bench storage PATH`: shard write/read, small-file reads, fsync (measure/storage.py); `--profile-out FILE`
puts the figures in a sealed calibration profile that `goodput`, `plan` and `explain --calibration` apply to the
checkpoint model (cost/calibrate.py: the storage section)."""

from __future__ import annotations

import datetime
import importlib.metadata
import platform
from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale import __version__
from llmscale.cli import options as o
from llmscale.cli.bench_cmd import bench_app, parse_sizes
from llmscale.report.strict_json import strict_dumps
from llmscale.units import GB, KIB, MIB

ProfileOutOpt = Annotated[Path | None, typer.Option(
    "--profile-out", help="write the figures into this calibration profile (sealed); an existing sealed profile "
    "keeps its other sections and gets this storage section, re-sealed")]


@bench_app.command("storage")
def storage(
    path: Annotated[Path, typer.Argument(help="a directory on the file system to measure (checkpoint dir)")],
    sizes: Annotated[str | None, typer.Option("--sizes", help="shard sizes, comma-separated, K/M/G = 2^10/2^20/2^30 "
                                              "[default: 4M,64M]")] = None,
    repeats: Annotated[int, typer.Option("--repeats", help="writes/reads per shard size (best kept)")] = 3,
    small_files: Annotated[int, typer.Option("--small-files", help="small files written then read")] = 256,
    small_file_kib: Annotated[int, typer.Option("--small-file-kib", help="size of each small file (KiB)")] = 16,
    fsync_reps: Annotated[int, typer.Option("--fsync-reps", help="4 KiB append + fsync repetitions")] = 20,
    profile_out: ProfileOutOpt = None,
    as_json: o.JsonOpt = False,
) -> None:
    """Sequential write/read at checkpoint-shard sizes, small-file reads like data loading, fsync latency."""
    from llmscale.measure.storage import bench_storage

    result = bench_storage(path, parse_sizes(sizes) if sizes else None, repeats, small_files,
                           small_file_kib * KIB, fsync_reps)
    document = {"command": "bench storage", "llmscale_version": __version__, **result.as_dict()}
    if profile_out is not None:
        sealed = write_storage_profile(result, profile_out)
        document["profile"] = {"path": str(profile_out), "sha256": sealed.sha256}
    if as_json:
        typer.echo(strict_dumps(document))
        return
    typer.echo(storage_text(document))
    if profile_out is not None:
        o.wrote(profile_out)


def write_storage_profile(result: Any, path: Path) -> Any:
    """A sealed profile with `result` as its storage section: the existing profile at `path` (its seal checked) with
    that section replaced, or a new storage-only one."""
    from llmscale.io.calibration import load_profile, write_profile
    from llmscale.specs.calibration import CalibrationProfile, DeviceInfo, StorageCalibration, Versions

    largest = result.largest
    section = StorageCalibration(
        path=result.path, host=result.host, write_bytes_per_s=largest.write_bytes_per_s,
        read_bytes_per_s=largest.read_bytes_per_s, shard_bytes=largest.size_bytes, fsync_s=result.fsync_median_s,
        small_files_per_s=result.small.files_per_s, small_file_bytes=result.small.file_bytes,
        cache_dropped=result.cache_dropped)
    if path.exists():
        profile = load_profile(path).model_copy(update={"storage": section, "sha256": None})
    else:
        try:
            torch_version = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            torch_version = "not installed"
        profile = CalibrationProfile(
            device=DeviceInfo(kind="cpu", name=f"storage bench on {result.host}", ranks=1),
            date=datetime.date.today().isoformat(),
            versions=Versions(llmscale=__version__, torch=torch_version, python=platform.python_version()),
            storage=section, notes=("storage only (llmscale bench storage): applies to any cluster's checkpoint "
                                    "model",))
    return write_profile(profile, path)


def storage_text(document: dict[str, Any]) -> str:
    from llmscale.measure import table

    columns = [table.Column("size_bytes", "size", "(B)", 12, "d"),
               table.Column("write_s", "write", "(ms)", 10, ".2f", 1e-3),
               table.Column("fsync_s", "of which fsync", "(ms)", 14, ".2f", 1e-3),
               table.Column("write_bytes_per_s", "write bw", "(GB/s)", 9, ".3f", GB),
               table.Column("read_s", "read", "(ms)", 10, ".2f", 1e-3),
               table.Column("read_bytes_per_s", "read bw", "(GB/s)", 9, ".3f", GB)]
    small = document["small_files"]
    preamble = [f"llmscale bench storage   llmscale {document['llmscale_version']}  host {document['host']}",
                f"path {document['path']}: write = os.write 4 MiB chunks + fsync; read after posix_fadvise DONTNEED "
                "(best of the repeats)", ""]
    footer = [f"small files: {small['files']} x {small['file_bytes'] / KIB:g} KiB read one by one: "
              f"{small['files_per_s']:,.0f} files/s, {small['bytes_per_s'] / MIB:.1f} MiB/s",
              f"fsync (4 KiB append), median of {document['fsync_reps']}: {document['fsync_median_s'] * 1e3:.3f} ms",
              "checkpoint figures (largest shard): write "
              f"{document['checkpoint_write_bytes_per_s'] / GB:.3f} GB/s, read "
              f"{document['checkpoint_read_bytes_per_s'] / GB:.3f} GB/s"
              + ("" if document["cache_dropped"] else "  (read served by the page cache: not the disk's rate)")]
    return table.render(preamble, columns, document["shards"], footer)
