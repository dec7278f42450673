"""The shared-memory tier: each rank's whole training state (model, optimizer, scheduler, RNG, data position) in
host memory under `/dev/shm/llmscale-<run_id>/rank{R}/`, every `memory_every_steps` steps. A file in /dev/shm (a
tmpfs) belongs to no process: it outlives the trainer that wrote it, so a restarted rank on the same host reads its
state back at memory speed instead of from storage — the idea of Gemini's in-memory checkpoints (Wang et al.,
SOSP'23) and DLRover's flash checkpoint (intelligent-machine-learning/dlrover, dlrover/trainer/torch/
flash_checkpoint/), here without a peer copy: a lost host falls back to the storage tier. The supervisor removes
the directory at the end of the job.

Commit protocol per snapshot: the state is serialized (torch.save) into memory, hashed, written to a temporary name
and renamed to `step_N.pt`; then its manifest `step_N.json` {step, config_sha256, sha256, bytes, time_unix} is
written the same way. A snapshot counts only with its manifest and a matching hash; the two newest are kept.

Which step to resume from is collective (`agree`): every rank lists its complete snapshots, the ranks take the
newest step all of them hold; the session uses it only when it is newer than the newest storage checkpoint.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from llmscale.runtime.files import write_atomic

KEEP = 2


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
    keep: int = KEEP

    def _data(self, step: int) -> Path:
        return self.root / f"step_{step:08d}.pt"

    def _manifest(self, step: int) -> Path:
        return self.root / f"step_{step:08d}.json"

    def save(self, step: int, payload: dict[str, Any]) -> SnapshotInfo:
        """Snapshot `payload` (blocking: serialize, hash, write, rename); returns what it cost."""
        start = time.perf_counter()
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        data = buffer.getbuffer()
        digest = hashlib.sha256(data).hexdigest()
        self.root.mkdir(parents=True, exist_ok=True)
        write_atomic(self._data(step), bytes(data), durable=False)
        manifest = {"step": step, "config_sha256": self.config_sha256, "sha256": digest, "bytes": len(data),
                    "time_unix": time.time()}
        write_atomic(self._manifest(step), json.dumps(manifest).encode("utf-8"), durable=False)
        self._prune()
        return SnapshotInfo(step, time.perf_counter() - start, len(data))

    def steps(self) -> list[int]:
        """Steps with a readable manifest and a data file of the recorded size, newest first (hashes are checked
        when one is loaded)."""
        found = []
        for path in self.root.glob("step_*.json"):
            try:
                manifest = json.loads(path.read_text(encoding="utf-8"))
                step = int(manifest["step"])
                if self._data(step).stat().st_size == int(manifest["bytes"]):
                    found.append(step)
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return sorted(found, reverse=True)

    def load(self, step: int) -> dict[str, Any] | None:
        """The payload of a snapshot whose hash matches its manifest; None otherwise."""
        try:
            manifest = json.loads(self._manifest(step).read_text(encoding="utf-8"))
            data = self._data(step).read_bytes()
        except (OSError, ValueError):
            return None
        if hashlib.sha256(data).hexdigest() != manifest.get("sha256"):
            return None
        payload: dict[str, Any] = torch.load(io.BytesIO(data), weights_only=True)
        return payload

    def _prune(self) -> None:
        for step in self.steps()[self.keep:]:
            self._manifest(step).unlink(missing_ok=True)
            self._data(step).unlink(missing_ok=True)
        for path in self.root.glob(".*.tmp*"):
            if path.stat().st_mtime < time.time() - 60:  # a tmp file left by a killed writer
                path.unlink(missing_ok=True)


def agree(tier: MemoryTier, group: Any = None) -> int:
    """The newest step every rank holds a complete snapshot of, or -1 (collective over `group`)."""
    mine = tier.steps()
    world = dist.get_world_size(group) if dist.is_initialized() else 1
    everyone: list[Any] = [None] * world
    if world > 1:
        dist.all_gather_object(everyone, mine, group=group)
    else:
        everyone = [mine]
    common = set(everyone[0]).intersection(*everyone[1:])
    return max(common) if common else -1


def remove(root: Path) -> None:
    """Delete a run's memory tier (all ranks' snapshots): the supervisor's clean-up at the end of the job."""
    if root.is_dir():
        for path in sorted(root.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink(missing_ok=True)
        os.rmdir(root)
