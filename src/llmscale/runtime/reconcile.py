"""The supervisor's reconciliation of the journal with the checkpoints on disk, after each failed attempt: commits a
killed trainer did not journal (it journals right after the commit) are journaled before the next attempt starts;
`fresh_memory_tier` keeps a fresh run from another job's /dev/shm snapshots. torch-free.
Why (measured) and what counts: docs/runtime.md#runtime-reconcile.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from llmscale.runtime import journal as jr
from llmscale.runtime.files import RunPaths
from llmscale.runtime.manifests import committed

NOTE = "committed on disk, not journaled by its trainer (killed after the commit): found by the supervisor"


def _manifest(path: Path) -> dict[str, Any] | None:
    try:
        row = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return row if isinstance(row, dict) and isinstance(row.get("step"), int) else None


def storage_commits(checkpoints: Path, sha: str) -> dict[int, float]:
    """step → manifest time of every committed storage checkpoint of this config under `checkpoints` (whatever its
    directory's name: manifests.py)."""
    out: dict[int, float] = {}
    for commit in committed(checkpoints):
        if commit.manifest.get("config_sha256") == sha:
            out.setdefault(commit.step, commit.time_unix)
    return out


def memory_commits(root: Path, world: int, sha: str) -> dict[int, float]:
    """step → newest manifest time of every memory snapshot that all `world` ranks hold complete."""
    per_rank: list[dict[int, float]] = []
    for rank in range(world):
        mine = {}
        for path in (root / f"rank{rank}").glob("step_*.json"):
            row = _manifest(path)
            name = row.get("data") if row is not None else None
            data = path.with_name(name) if isinstance(name, str) and "/" not in name else path.with_suffix(".pt")
            try:
                ok = row is not None and row.get("config_sha256") == sha and data.stat().st_size == row.get("bytes")
            except OSError:
                ok = False
            if ok and row is not None:
                mine[int(row["step"])] = float(row.get("time_unix", 0.0))
        per_rank.append(mine)
    common = set.intersection(*(set(m) for m in per_rank)) if per_rank else set()
    return {step: max(m[step] for m in per_rank) for step in common}


def reconcile(paths: RunPaths, checkpoints: Path, world: int, sha: str, attempt: int) -> list[jr.Event]:
    """Journal (and return) the commits on disk that the journal lacks (module docstring)."""
    events = jr.read(paths.root).events
    saved = {e.step for e in events if e.event is jr.EventKind.CHECKPOINT_SAVED and (e.tier or "storage") == "storage"}
    snapped = {e.step for e in events if e.event is jr.EventKind.MEMORY_SNAPSHOT}
    found = []
    for tier, kind, commits, known in (
            ("storage", jr.EventKind.CHECKPOINT_SAVED, storage_commits(checkpoints, sha), saved),
            ("memory", jr.EventKind.MEMORY_SNAPSHOT, memory_commits(paths.memory_tier(), world, sha), snapped)):
        for step in sorted(set(commits) - known):
            event = jr.Event(kind, attempt, sha, step=step, tier=tier, message=NOTE,
                             extra={"manifest_time_unix": commits[step]})
            jr.append(paths.root, event)
            found.append(event)
    return found


def fresh_memory_tier(paths: RunPaths) -> bool:
    """Remove a leftover memory tier of this run directory's path when the run starts fresh; True if one was."""
    root = paths.memory_tier()
    if not root.exists():
        return False
    shutil.rmtree(root, ignore_errors=True)
    return True
