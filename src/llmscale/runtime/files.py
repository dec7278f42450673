"""The run directory: where each file of a run lives, and the writers and readers of the per-step formats (the runtime
contract). Imports without torch. Lines are appended with one `os.write` on an `O_APPEND` descriptor, so concurrent
writers never interleave within a line; readers skip, and count, lines that do not parse.
The layout: docs/runtime.md ("The run directory"); notes: docs/runtime.md#runtime-files.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

PHASES = ("data", "compute", "comm", "idle", "checkpoint")
"""The parts of a step (contract): fetch the batch; forward+backward+optimizer; the exposed gradient all-reduce;
waiting at the barrier before it for the slowest rank; the blocking time of saves and snapshots."""

SHM_ROOT = Path("/dev/shm")


def run_id(run_dir: Path) -> str:
    """First 16 hex digits of the SHA256 of the absolute run directory (names the shared-memory tier)."""
    return hashlib.sha256(str(Path(run_dir).absolute()).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class RunPaths:
    """Every path of one run directory."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def config_sha256(self) -> Path:
        return self.root / "config.sha256"

    @property
    def journal(self) -> Path:
        return self.root / "journal.jsonl"

    @property
    def steps_dir(self) -> Path:
        return self.root / "steps"

    def steps(self, rank: int) -> Path:
        return self.steps_dir / f"rank{rank}.jsonl"

    @property
    def heartbeat_dir(self) -> Path:
        return self.root / "heartbeat"

    def heartbeat(self, rank: int) -> Path:
        return self.heartbeat_dir / f"rank{rank}"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def storage_tier(self, checkpoint_dir: str | None) -> Path:
        """Where the storage tier lives: the config's checkpoint.dir when it names one, else RUN_DIR/checkpoints."""
        return Path(checkpoint_dir) if checkpoint_dir else self.checkpoints

    def memory_tier(self, rank: int | None = None) -> Path:
        base = SHM_ROOT / f"llmscale-{run_id(self.root)}"
        return base if rank is None else base / f"rank{rank}"


def step_dir_name(step: int) -> str:
    return f"step_{step:08d}"


@dataclass(frozen=True)
class StepRecord:
    """One training step on one rank (contract: steps/rank{R}.jsonl)."""

    step: int
    rank: int
    attempt: int
    host: str
    time_unix: float
    """End of the step."""
    step_s: float
    phases_s: dict[str, float]
    loss: float
    tokens: int

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, allow_nan=False)


class BeatPhase(str, Enum):
    """What a rank is doing when it writes its heartbeat; the hang watch gives STARTUP, RESTORE and CHECKPOINT the
    longer `restart.phase_timeout_s` and TRAIN `restart.heartbeat_timeout_s` (NVIDIA/nvidia-resiliency-ext
    fault_tolerance: an initial and a subsequent rank heartbeat timeout)."""

    STARTUP = "startup"
    """Session set-up: the dedicated group, the checkpoint writer process started."""
    RESTORE = "restore"
    TRAIN = "train"
    CHECKPOINT = "checkpoint"
    """A storage save blocks this step (waiting for the previous one, staging, a writer restart)."""


@dataclass(frozen=True)
class Heartbeat:
    pid: int
    step: int
    time_unix: float
    attempt: int
    phase: BeatPhase = BeatPhase.TRAIN


@dataclass
class Lines:
    """Parsed lines of a JSONL file and the number that did not parse."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0


def append_line(path: Path, line: str) -> None:
    """Append one line with a single os.write on an O_APPEND descriptor (module docstring)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    fd = os.open(path, os.O_APPEND | os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, durable: bool = True) -> None:
    """Write to a temporary name beside `path`, flush (and fsync when `durable`), then os.replace: a reader sees
    the old or the new file, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        if durable:
            os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_lines(path: Path) -> Lines:
    """Every JSON-object line of a JSONL file; a line that is not one is skipped and counted; no file → none."""
    out = Lines()
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the decoder recurses
            out.skipped += 1
            continue
        if isinstance(row, dict):
            out.rows.append(row)
        else:
            out.skipped += 1
    return out


def append_step(paths: RunPaths, record: StepRecord) -> None:
    append_line(paths.steps(record.rank), record.to_json())


def read_steps(paths: RunPaths, rank: int) -> tuple[list[StepRecord], int]:
    """The step records of one rank (unknown keys ignored) and the number of lines skipped."""
    lines = read_lines(paths.steps(rank))
    names = set(StepRecord.__dataclass_fields__)
    records, skipped = [], lines.skipped
    for row in lines.rows:
        try:
            records.append(StepRecord(**{k: v for k, v in row.items() if k in names}))
        except TypeError:
            skipped += 1
    return records, skipped


def last_per_step(records: list[StepRecord]) -> dict[int, StepRecord]:
    """One record per step: the last one in the file. A resumed attempt re-runs the steps after the restored
    checkpoint and appends them again, so a step can appear once per attempt; the later line is the step that
    counts (the earlier one's work was lost)."""
    return {rec.step: rec for rec in records}


def write_heartbeat(paths: RunPaths, rank: int, beat: Heartbeat) -> None:
    row = {**asdict(beat), "phase": beat.phase.value}
    write_atomic(paths.heartbeat(rank), json.dumps(row).encode("utf-8"), durable=False)


def read_heartbeat(paths: RunPaths, rank: int) -> Heartbeat | None:
    """The last heartbeat of a rank; None when there is none or it does not parse."""
    try:
        row = json.loads(paths.heartbeat(rank).read_text(encoding="utf-8"))
        return Heartbeat(int(row["pid"]), int(row["step"]), float(row["time_unix"]), int(row["attempt"]),
                         BeatPhase(row.get("phase", "train")))
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def steps_by_attempt(paths: RunPaths, world: int) -> dict[int, int]:
    """The highest step completed in each attempt, over every rank's step log."""
    best: dict[int, int] = {}
    for rank in range(world):
        for row in read_lines(paths.steps(rank)).rows:
            a, s = row.get("attempt"), row.get("step")
            if isinstance(a, int) and isinstance(s, int):
                best[a] = max(best.get(a, -1), s)
    return best
