"""The shared-memory tier: each rank's whole training state under `/dev/shm/llmscale-<run_id>/rank{R}/`, every
`memory_every_steps` steps, outliving the trainer (after Gemini, Wang et al. SOSP'23, and DLRover's flash checkpoint,
intelligent-machine-learning/dlrover); committed by a manifest per snapshot, the two newest kept, no peer copy.
Commit protocol and resume choice: docs/runtime.md#runtime-memtier.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from llmscale.runtime.files import write_atomic

KEEP = 2
ORPHAN_AGE_S = 60.0
"""A data or tmp file no manifest names, older than this, was left by a writer killed mid-snapshot."""


@dataclass(frozen=True)
class SnapshotInfo:
    step: int
    blocking_s: float
    size_bytes: int


@dataclass
class MemoryTier:
    """The shared-memory snapshots of one rank (module docstring)."""

    root: Path
    config_sha256: str
    world_size: int = 1
    keep: int = KEEP

    def _manifest(self, step: int) -> Path:
        return self.root / f"step_{step:08d}.json"

    def _read(self, step: int) -> dict[str, Any] | None:
        return _manifest_at(self._manifest(step))

    def _data(self, manifest: dict[str, Any], step: int) -> Path:
        """The data file a manifest names (`step_N.pt` for a manifest written before the `data` key)."""
        name = manifest.get("data")
        return self.root / (name if isinstance(name, str) and "/" not in name else f"step_{step:08d}.pt")

    def save(self, step: int, payload: dict[str, Any]) -> SnapshotInfo:
        """Snapshot `payload` (blocking: serialize, hash, write, commit); returns what it cost."""
        start = time.perf_counter()
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        data = buffer.getbuffer()
        digest = hashlib.sha256(data).hexdigest()
        self.root.mkdir(parents=True, exist_ok=True)
        old = self._read(step)
        name = f"step_{step:08d}-{secrets.token_hex(4)}.pt"
        write_atomic(self.root / name, bytes(data), durable=False)
        manifest = {"step": step, "world_size": self.world_size, "config_sha256": self.config_sha256,
                    "sha256": digest, "bytes": len(data), "data": name, "time_unix": time.time()}
        write_atomic(self._manifest(step), json.dumps(manifest).encode("utf-8"), durable=False)
        if old is not None and self._data(old, step).name != name:
            self._data(old, step).unlink(missing_ok=True)
        self._prune()
        return SnapshotInfo(step, time.perf_counter() - start, len(data))

    def steps(self) -> list[int]:
        """Steps with a readable manifest of this world size and a data file of the recorded size, newest first
        (hashes are checked when one is loaded)."""
        found = []
        for path in self.root.glob("step_*.json"):
            try:
                manifest = json.loads(path.read_text(encoding="utf-8"))
                step = int(manifest["step"])
                if manifest.get("world_size", self.world_size) != self.world_size:
                    continue
                if self._data(manifest, step).stat().st_size == int(manifest["bytes"]):
                    found.append(step)
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return sorted(found, reverse=True)

    def load(self, step: int) -> tuple[dict[str, Any] | None, str]:
        """The payload of a snapshot whose hash matches its manifest, else None and why."""
        manifest = self._read(step)
        if manifest is None:
            return None, "manifest unreadable"
        try:
            data = self._data(manifest, step).read_bytes()
        except OSError as exc:
            return None, f"data file unreadable ({exc.strerror or exc})"
        if hashlib.sha256(data).hexdigest() != manifest.get("sha256"):
            return None, "SHA256 differs from the manifest"
        try:
            payload: dict[str, Any] = torch.load(io.BytesIO(data), weights_only=True)
        except Exception as exc:  # torch.load raises many kinds on a bad file
            return None, f"torch.load failed ({type(exc).__name__})"
        return payload, ""

    def _prune(self) -> None:
        """Keep the newest `keep` snapshots; delete the rest, and data or tmp files no manifest names."""
        kept = set(self.steps()[:self.keep])
        named = set()
        for path in self.root.glob("step_*.json"):
            row = _manifest_at(path)
            step = row.get("step") if row is not None else None
            if row is not None and isinstance(step, int):
                if step in kept:
                    named.add(self._data(row, step).name)
                    continue
                self._data(row, step).unlink(missing_ok=True)
            path.unlink(missing_ok=True)
        for path in [*self.root.glob("step_*.pt"), *self.root.glob(".*.tmp*")]:
            if path.name not in named and path.stat().st_mtime < time.time() - ORPHAN_AGE_S:
                path.unlink(missing_ok=True)


def _manifest_at(path: Path) -> dict[str, Any] | None:
    try:
        row = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return row if isinstance(row, dict) else None


def common_steps(tier: MemoryTier, group: Any = None) -> list[int]:
    """The steps every rank holds a complete snapshot of, newest first (collective over `group`)."""
    mine = tier.steps()
    world = dist.get_world_size(group) if dist.is_initialized() else 1
    everyone: list[Any] = [None] * world
    if world > 1:
        dist.all_gather_object(everyone, mine, group=group)
    else:
        everyone = [mine]
    return sorted(set(everyone[0]).intersection(*everyone[1:]), reverse=True)


def remove(root: Path) -> None:
    """Delete a run's memory tier (all ranks' snapshots): the supervisor's clean-up at the end of the job."""
    if root.is_dir():
        for path in sorted(root.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink(missing_ok=True)
        os.rmdir(root)
