"""`llmscale bench storage PATH`: the file system a run checkpoints to and reads its data from (no torch needed):
shard write (+ fsync) and cold read, small-file reads, fsync latency; the write rate feeds the checkpoint model
through a calibration profile's `storage` section (checkpoint stalls: Llama 3, arXiv:2407.21783 §3.3.1).
Each measurement and what is left out: docs/monitoring.md#measure-storage.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llmscale.errors import InputFileError, SpecError
from llmscale.units import KIB, MIB

CHUNK_BYTES = 4 * MIB
DEFAULT_SHARD_SIZES = (4 * MIB, 64 * MIB)
"""Quick by default (CI): a 70B model's DCP shard per rank at 1,024 ranks is ~1 GiB; pass --sizes for those."""
MAX_SIZE_BYTES = 64 * 2**30
MAX_SMALL_FILES = 100_000


@dataclass(frozen=True)
class ShardRow:
    """One shard size: write (with fsync) and cold read."""

    size_bytes: int
    write_s: float
    fsync_s: float
    read_s: float

    @property
    def write_bytes_per_s(self) -> float:
        return self.size_bytes / self.write_s

    @property
    def read_bytes_per_s(self) -> float:
        return self.size_bytes / self.read_s

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "write_bytes_per_s": self.write_bytes_per_s, "read_bytes_per_s": self.read_bytes_per_s}


@dataclass(frozen=True)
class SmallFiles:
    """Many small files read one by one."""

    files: int
    file_bytes: int
    read_s: float

    @property
    def files_per_s(self) -> float:
        return self.files / self.read_s

    @property
    def bytes_per_s(self) -> float:
        return self.files * self.file_bytes / self.read_s


@dataclass(frozen=True)
class StorageBench:
    """What `bench storage` measured under `path`."""

    path: str
    host: str
    shards: tuple[ShardRow, ...]
    small: SmallFiles
    fsync_median_s: float
    fsync_reps: int

    @property
    def largest(self) -> ShardRow:
        return max(self.shards, key=lambda r: r.size_bytes)

    @property
    def cache_dropped(self) -> bool:
        """False when the cold read ran > 20x the write: the page cache served it (module docstring)."""
        return self.largest.read_bytes_per_s < 20 * self.largest.write_bytes_per_s

    def as_dict(self) -> dict[str, Any]:
        small = self.small
        return {"path": self.path, "host": self.host, "shards": [r.as_dict() for r in self.shards],
                "small_files": {**asdict(small), "files_per_s": small.files_per_s, "bytes_per_s": small.bytes_per_s},
                "fsync_median_s": self.fsync_median_s, "fsync_reps": self.fsync_reps,
                "checkpoint_write_bytes_per_s": self.largest.write_bytes_per_s,
                "checkpoint_read_bytes_per_s": self.largest.read_bytes_per_s, "cache_dropped": self.cache_dropped}


def _drop_cache(fd: int) -> None:
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _write(path: Path, size: int, block: bytes) -> tuple[float, float]:
    """(seconds to write and fsync, of which fsync)."""
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        left = size
        while left > 0:
            left -= os.write(fd, block[: min(left, len(block))])
        synced = time.perf_counter()
        os.fsync(fd)
        end = time.perf_counter()
        _drop_cache(fd)
    finally:
        os.close(fd)
    return end - start, end - synced


def _read(path: Path) -> float:
    start = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, CHUNK_BYTES):
            pass
    finally:
        os.close(fd)
    return time.perf_counter() - start


def _shard(work: Path, size: int, repeats: int, block: bytes) -> ShardRow:
    best: tuple[float, float] | None = None
    read_s = float("inf")
    for i in range(repeats):
        target = work / f"shard_{size}_{i}"
        wrote = _write(target, size, block)
        best = wrote if best is None or wrote[0] < best[0] else best
        read_s = min(read_s, _read(target))
        target.unlink()
    assert best is not None
    return ShardRow(size, best[0], best[1], read_s)


def _small_files(work: Path, files: int, file_bytes: int) -> SmallFiles:
    folder = work / "small"
    folder.mkdir()
    payload = os.urandom(file_bytes)
    for i in range(files):
        fd = os.open(folder / f"{i:06d}.bin", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.write(fd, payload)
            os.fsync(fd)
            _drop_cache(fd)
        finally:
            os.close(fd)
    start = time.perf_counter()
    for i in range(files):
        with open(folder / f"{i:06d}.bin", "rb") as handle:
            handle.read()
    return SmallFiles(files, file_bytes, time.perf_counter() - start)


def _fsync_median(work: Path, reps: int) -> float:
    times = []
    fd = os.open(work / "fsync.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(reps):
            os.write(fd, b"x" * (4 * KIB))
            start = time.perf_counter()
            os.fsync(fd)
            times.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return statistics.median(times)


def check(sizes: list[int], repeats: int, small_files: int, small_file_bytes: int, fsync_reps: int) -> None:
    """One SpecError for a value the bench cannot run, before anything is written."""
    for size in sizes:
        if not 1 <= size <= MAX_SIZE_BYTES:
            raise SpecError("sizes", size, f"bytes in 1..{MAX_SIZE_BYTES} (64 GiB)")
    for name, value, low, high in (("repeats", repeats, 1, 100), ("small_files", small_files, 1, MAX_SMALL_FILES),
                                   ("small_file_bytes", small_file_bytes, 1, 64 * MIB),
                                   ("fsync_reps", fsync_reps, 1, 10_000)):
        if not low <= value <= high:
            raise SpecError(name, value, f"an integer in {low}..{high}")


def bench_storage(path: Path, sizes: list[int] | None = None, repeats: int = 3, small_files: int = 256,
                  small_file_bytes: int = 16 * KIB, fsync_reps: int = 20) -> StorageBench:
    """Measure the file system under `path` (module docstring); the work directory is removed, even on failure."""
    chosen = list(sizes or DEFAULT_SHARD_SIZES)
    check(chosen, repeats, small_files, small_file_bytes, fsync_reps)
    if not path.is_dir():
        raise InputFileError(f"{path}: not a directory (bench storage measures the file system it is on)")
    try:
        work = Path(tempfile.mkdtemp(prefix=".llmscale-storage-", dir=path))
    except OSError as exc:
        raise InputFileError(f"{path}: cannot create a work directory ({exc.__class__.__name__}: {exc})") from None
    block = os.urandom(CHUNK_BYTES)  # incompressible: a compressing file system must not flatter the rate
    try:
        shards = tuple(_shard(work, size, repeats, block) for size in sorted(chosen))
        small = _small_files(work, small_files, small_file_bytes)
        fsync_s = _fsync_median(work, fsync_reps)
    except OSError as exc:
        raise InputFileError(f"{path}: storage bench failed ({exc.__class__.__name__}: {exc})") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return StorageBench(str(path.resolve()), socket.gethostname(), shards, small, fsync_s, fsync_reps)
