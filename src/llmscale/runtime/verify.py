"""The chaos suite's verdict on a run directory after injected faults (tests/test_chaos*.py, benchmarks/chaos.py):
no committed checkpoint lost, no resume from a partial checkpoint, and every step's loss bitwise equal to the
uninterrupted reference run. torch-free.
What each check counts: docs/runtime.md#runtime-verify.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmscale.runtime import journal as jr
from llmscale.runtime import manifests as mf
from llmscale.runtime.chaos import KILLS_FILE
from llmscale.runtime.files import RunPaths, read_lines

Losses = dict[tuple[int, int], float]
"""(rank, step) → loss."""


def losses(run_dir: Path, world: int) -> Losses:
    """The loss curve: per rank and step the LAST record (files.last_per_step: a resumed attempt re-runs steps)."""
    out: Losses = {}
    for rank in range(world):
        for row in read_lines(RunPaths(run_dir).steps(rank)).rows:
            out[(rank, int(row["step"]))] = float(row["loss"])
    return out


def replayed_losses(run_dir: Path, world: int) -> list[tuple[int, int, int, float]]:
    """(rank, step, attempt, loss) of every record that a later one of the same step superseded."""
    out = []
    for rank in range(world):
        seen: dict[int, tuple[int, float]] = {}
        for row in read_lines(RunPaths(run_dir).steps(rank)).rows:
            step = int(row["step"])
            if step in seen:
                out.append((rank, step, *seen[step]))
            seen[step] = (int(row.get("attempt", -1)), float(row["loss"]))
    return out


@dataclass
class Verdict:
    committed: list[int] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    partial_resumes: list[str] = field(default_factory=list)
    curve_mismatches: list[str] = field(default_factory=list)
    restores: list[tuple[int, str, int]] = field(default_factory=list)
    """(attempt, tier, restored step)."""
    faults: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.partial_resumes or self.curve_mismatches)


def storage_dir(paths: RunPaths) -> Path:
    """The run's storage tier: its config's checkpoint.dir, else RUN_DIR/checkpoints (as the session saves)."""
    from llmscale.runtime.config import load_config

    return paths.storage_tier(load_config(paths.config).checkpoint.dir if paths.config.is_file() else None)


def _check_kept(paths: RunPaths, committed: list[int], keep: int, spared: set[int], v: Verdict) -> None:
    """Each of the newest `keep` committed steps has a directory on disk (any name: manifests.py) whose files match
    its manifest."""
    on_disk: dict[int, list[mf.Commit]] = {}
    for c in mf.committed(storage_dir(paths)):
        on_disk.setdefault(c.step, []).append(c)
    for step in sorted(committed)[-keep:]:
        if step in spared:
            continue
        copies = on_disk.get(step, [])
        if not copies:
            v.lost.append(f"step {step}: committed, no directory with its manifest")
        elif all(mf.verify(c.path, c.manifest) for c in copies):
            v.lost.append(f"step {step}: unloadable: {mf.verify(copies[0].path, copies[0].manifest)}")


def _check_restores(events: tuple[jr.Event, ...], kills: list[dict[str, Any]], v: Verdict, spared: set[int]) -> None:
    committed_at: dict[int, float] = {}
    snapshots_at: dict[int, float] = {}
    for e in events:
        if e.event is jr.EventKind.CHECKPOINT_SAVED and e.step is not None and (e.tier or "storage") == "storage":
            committed_at.setdefault(e.step, e.time_unix)
        if e.event is jr.EventKind.MEMORY_SNAPSHOT and e.step is not None:
            snapshots_at.setdefault(e.step, e.time_unix)
    for kill in kills:  # killed after the manifest's atomic rename: complete on disk, not yet journaled
        if kill.get("phase") == "after_manifest":
            committed_at.setdefault(int(kill["step"]), float(kill["time_unix"]))
    for e in events:
        if e.event is not jr.EventKind.RESTORE or e.restored_step is None or e.rank not in (0, None):
            continue
        tier, step = e.tier or "storage", e.restored_step
        v.restores.append((e.attempt, tier, step))
        known = committed_at if tier == "storage" else snapshots_at
        if step > 0 and not (step in known and known[step] <= e.time_unix):
            v.partial_resumes.append(f"attempt {e.attempt}: restored {tier} step {step}, never committed before")
        newest = max((s for s, t in committed_at.items() if t <= e.time_unix and s not in spared), default=0)
        explained = any(f.event is jr.EventKind.CHECKPOINT_FAILED and f.attempt == e.attempt for f in events)
        if step < newest and not explained:
            v.lost.append(f"attempt {e.attempt}: restored step {step} though step {newest} was committed")


def verify_run(run_dir: Path, reference: Losses, world: int, total_steps: int, keep: int = 2,
               spared: set[int] | None = None) -> Verdict:
    """The verdict on one chaos run (module docstring); `spared`: committed steps the test damaged on purpose."""
    spared = spared or set()
    paths = RunPaths(run_dir)
    events = jr.read(run_dir).events
    v = Verdict()
    v.committed = sorted({e.step for e in events if e.event is jr.EventKind.CHECKPOINT_SAVED and e.step is not None
                          and (e.tier or "storage") == "storage"})
    v.faults = len({e.attempt for e in events if e.event is jr.EventKind.FAULT})
    _check_kept(paths, v.committed, keep, spared, v)
    _check_restores(events, read_lines(run_dir / KILLS_FILE).rows, v, spared)
    got = losses(run_dir, world)
    for key, loss in sorted(got.items()):
        want = reference.get(key)
        if want is None or loss != want:
            v.curve_mismatches.append(f"rank {key[0]} step {key[1]}: {loss!r} vs reference {want!r}")
    for rank, step, attempt, loss in replayed_losses(run_dir, world):  # the superseded runs of a step must agree too
        if loss != reference.get((rank, step)):
            v.curve_mismatches.append(f"rank {rank} step {step} (attempt {attempt}, re-run later): {loss!r} vs "
                                      f"reference {reference.get((rank, step))!r}")
    for rank in range(world):
        if (rank, total_steps) not in got:
            v.curve_mismatches.append(f"rank {rank}: never reached step {total_steps}")
    return v
