"""The faults of benchmarks/chaos.py: what each kind does, when the driver delivers it, and the journal line that
must say so (its cause). Imported by benchmarks/chaos.py.

Kinds (one per attempt for those that end one; `attempt_ends`):
  save_start, save_writing, after_files, after_manifest   SIGKILL of a rank inside a storage save (runtime/chaos.py)
  kill_writer, stop_writer                                SIGKILL / SIGSTOP of a rank's DCP writer after async_save
  compute                                                 SIGKILL of a rank from outside, mid-step
  hang                                                    SIGSTOP of a rank from outside (the heartbeat must catch it)
  launcher_kill, launcher_term                            SIGKILL / SIGTERM of `llmscale launch`, then a relaunch
  double_launch                                           a second `llmscale launch` on the same run directory
  resave                                                  launcher SIGKILL, the newest storage checkpoint corrupted
                                                          and the memory tier dropped (a lost host), relaunch: the
                                                          resume falls back past it and saves that step again
  mem_corrupt                                             launcher SIGKILL, the newest memory snapshot of a rank
                                                          corrupted, relaunch
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmscale.runtime import journal as jr
from llmscale.runtime.files import RunPaths
from llmscale.runtime.manifests import committed

HOOKS = ("save_start", "save_writing", "after_files", "after_manifest", "kill_writer", "stop_writer")
"""Delivered by the trainer itself (LLMSCALE_CHAOS)."""
RANK_EXTERNAL = ("compute", "hang")
LAUNCHER = ("launcher_kill", "launcher_term", "resave", "mem_corrupt")
"""Each ends the launcher; the driver relaunches."""
KINDS = (*HOOKS, *RANK_EXTERNAL, *LAUNCHER, "double_launch")
MEMORY_ONLY = ("mem_corrupt",)
"""Kinds that need the memory tier on."""


@dataclass(frozen=True)
class Fault:
    kind: str
    step: int
    rank: int
    attempt: int

    @property
    def attempt_ends(self) -> bool:
        return self.kind not in ("kill_writer", "stop_writer", "double_launch")


def plan(rng: random.Random, count: int, every: int, memory: bool,
         kinds: tuple[str, ...] = KINDS) -> tuple[list[Fault], int]:
    """`count` faults of `kinds` at increasing save steps (each attempt makes progress past the last) and the run's
    total steps. The commit phases hit rank 0, the rank that commits. Faults are two save intervals apart: a commit
    phase fires when the save is committed, a few steps after it, and the memory tier may resume the next attempt
    right there, past a fault planned one interval later. After a writer fault the next waits two intervals more:
    the stopped writer's save fails only at save_timeout_s, when the next save waits for it.
    The first faults of a run take the kinds in turn (every kind in every run that has room for it), the rest are
    drawn at random."""
    usable = [k for k in kinds if memory or k not in MEMORY_ONLY]
    order = rng.sample(usable, len(usable))
    out, attempt, step = [], 0, every
    for i in range(count):
        kind = order[i] if i < len(order) else rng.choice(usable)
        rank = 0 if kind in ("after_files", "after_manifest") else rng.randrange(2)
        step += 2 * every
        fault = Fault(kind, step, rank, attempt)
        out.append(fault)
        attempt += fault.attempt_ends
        step += 2 * every if kind in ("kill_writer", "stop_writer") else 0
    return out, step + 3 * every


def hooks(faults: list[Fault]) -> str:
    return ",".join(f"{f.kind}:{f.step}:{f.rank}:{f.attempt}" for f in faults if f.kind in HOOKS)


def flip(path: Path) -> None:
    """Corrupt a file: 16 bytes flipped in its middle."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    for i in range(middle, min(middle + 16, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def corrupt_newest_storage(checkpoints: Path) -> int | None:
    """Flip bytes of the newest committed checkpoint's first shard; its step."""
    done = committed(checkpoints)
    if not done:
        return None
    shard = next(p for p in sorted(done[0].path.iterdir()) if p.suffix == ".distcp")
    flip(shard)
    return done[0].step


def corrupt_newest_snapshot(paths: RunPaths, rank: int) -> int | None:
    """Flip bytes of a rank's newest memory snapshot (the data file its manifest names); its step."""
    manifests = sorted(paths.memory_tier(rank).glob("step_*.json"))
    if not manifests:
        return None
    row = json.loads(manifests[-1].read_text())
    flip(paths.memory_tier(rank) / row["data"])
    return int(row["step"])


def journaled(fault: dict[str, Any], events: tuple[jr.Event, ...]) -> bool:
    """Whether the journal names this delivered fault with its cause (module docstring; `fault` is a row of
    chaos_kills.jsonl)."""
    kind, attempt = fault["phase"], int(fault["attempt"])
    faults = [e for e in events if e.event is jr.EventKind.FAULT and e.attempt == attempt]
    failed = [e for e in events if e.event is jr.EventKind.CHECKPOINT_FAILED]
    if kind in ("save_start", "save_writing", "after_files", "after_manifest", "compute"):
        return any(e.cause is jr.Cause.PROCESS_KILLED and e.rank == fault["rank"] for e in faults[:1])
    if kind == "hang":
        return any(e.cause is jr.Cause.HANG and e.rank == fault["rank"] for e in faults[:1])
    if kind in ("kill_writer", "stop_writer"):
        return any(e.attempt == attempt and e.step == fault["step"] and e.cause is jr.Cause.CHECKPOINT_IO
                   for e in failed)
    if kind == "launcher_term":
        return any(e.cause is jr.Cause.LAUNCHER and e.signal == "SIGTERM" for e in faults[:1])
    killed = any(e.cause is jr.Cause.LAUNCHER and e.pid == fault.get("pid") for e in faults[:1])
    later = [e for e in failed if e.attempt == attempt + 1]
    if kind == "launcher_kill":
        return killed
    if kind == "resave":
        return killed and any("SHA256 differs" in (e.reason or "") and "quarantine" in (e.reason or "") for e in later)
    if kind == "mem_corrupt":
        return killed and any(e.tier == "memory" and e.rank == fault["rank"] for e in later)
    if kind == "double_launch":
        return bool(fault.get("refused"))
    return False
