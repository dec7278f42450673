"""When each tier saves, and the journal events of what happened (used by session.py).

Fixed intervals save at multiples of `memory_every_steps` / `storage_every_steps`, and storage also at the last step.
With 'auto', step `checkpoint.auto_first_storage_step` is a measuring step on every rank: a memory snapshot, then a
storage save waited for to its end; rank 0 then picks the intervals from the two-tier model (auto.py) with the
measured blocking times and broadcasts them, so every rank saves at the same steps (a DCP save is collective).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from llmscale.runtime import journal
from llmscale.runtime.auto import choose
from llmscale.runtime.config import AUTO, RunConfig
from llmscale.runtime.memtier import MemoryTier
from llmscale.runtime.storage import SaveOutcome, StorageTier

EventKind, Cause = journal.EventKind, journal.Cause
Events = list[tuple[journal.EventKind, dict[str, Any]]]


class TierState:
    """The save schedule of one rank and the costs measured so far."""

    def __init__(self, config: RunConfig, storage: StorageTier, memory: MemoryTier, run_dir: Path) -> None:
        self.config, self.storage, self.memory, self.run_dir = config, storage, memory, run_dir
        ck = config.checkpoint
        self.memory_every: int | None = None if ck.memory_every_steps == AUTO else int(ck.memory_every_steps)
        self.storage_every: int | None = None if ck.storage_every_steps == AUTO else int(ck.storage_every_steps)
        self.auto_pending = AUTO in (ck.memory_every_steps, ck.storage_every_steps)
        self.memory_blocking_s: list[float] = []
        self.step_s: list[float] = []

    def storage_due(self, step: int) -> bool:
        """Whether `after_step(step)` will run a storage save (fixed interval, last step, or the 'auto' measuring
        step)."""
        if self.auto_pending:
            return step >= self.config.checkpoint.auto_first_storage_step
        every = self.storage_every
        return bool(every and step % every == 0) or step == self.config.schedule.total_steps

    def after_step(self, step: int, payload: Callable[[], dict[str, Any]],
                   storage_state: Callable[[], dict[str, Any]]) -> Events:
        """Save what is due at the end of `step`; the events to journal."""
        if self.auto_pending and step >= self.config.checkpoint.auto_first_storage_step:
            return self._measure(step, payload, storage_state)
        events: Events = []
        if self.memory_every and step % self.memory_every == 0:
            events += self._snapshot(step, payload)
        last = step == self.config.schedule.total_steps
        if (self.storage_every and step % self.storage_every == 0) or last:
            self.storage.save(step, storage_state())
        return events

    def _snapshot(self, step: int, payload: Callable[[], dict[str, Any]]) -> Events:
        try:
            info = self.memory.save(step, payload())
        except OSError as exc:  # /dev/shm full: the snapshot is lost, training goes on
            return [(EventKind.CHECKPOINT_FAILED, {"step": step, "tier": "memory", "cause": Cause.CHECKPOINT_IO,
                                                   "reason": f"memory snapshot: {exc.strerror or exc}"})]
        self.memory_blocking_s.append(info.blocking_s)
        if self.storage.rank != 0:
            return []
        return [(EventKind.MEMORY_SNAPSHOT, {"step": step, "tier": "memory", "save_blocking_s": info.blocking_s,
                                             "extra": {"size_bytes": info.size_bytes}})]

    def _measure(self, step: int, payload: Callable[[], dict[str, Any]],
                 storage_state: Callable[[], dict[str, Any]]) -> Events:
        """The measuring step of 'auto' (module docstring)."""
        self.auto_pending = False
        events = self._snapshot(step, payload)
        blocking = self.storage.save(step, storage_state())
        outcome = self.storage.poll(block=True)
        choice = torch.tensor([0, 0], dtype=torch.int64)
        extra: dict[str, Any] = {}
        if self.storage.rank == 0:
            auto = self._choose(blocking, outcome)
            extra = {f"auto_{k}": v for k, v in asdict(auto).items()}
            choice = torch.tensor([auto.memory_every_steps, auto.storage_every_steps], dtype=torch.int64)
        dist.broadcast(choice, src=0, group=self.storage.group)
        ck = self.config.checkpoint
        self.memory_every = int(choice[0]) if ck.memory_every_steps == AUTO else self.memory_every
        self.storage_every = int(choice[1]) if ck.storage_every_steps == AUTO else self.storage_every
        if extra:
            events.append((EventKind.CHECKPOINT_SAVED, {"step": step, "tier": "storage", "extra": extra,
                           "message": f"auto intervals: memory every {self.memory_every} steps, storage every "
                                      f"{self.storage_every} steps (two-tier optimum, reliability/intervals.py)"}))
        return events

    def _choose(self, blocking_s: float, outcome: SaveOutcome | None) -> Any:
        restart = self.config.restart
        faults = journal.read(self.run_dir).of_kind(EventKind.FAULT)
        measured = [e.restart_s for e in faults if e.restart_s is not None]
        restart_s = statistics.fmean(measured) if measured else restart.assumed_restart_s
        memory_s = statistics.fmean(self.memory_blocking_s) if self.memory_blocking_s else 0.0
        storage_total = outcome.total_s if outcome is not None and outcome.ok else blocking_s
        step_s = statistics.fmean(self.step_s) if self.step_s else 1.0
        return choose(step_s, memory_s, blocking_s, restart_s + memory_s, restart_s + storage_total,
                      restart.assumed_mtbf_s, 1.0 - restart.memory_share_recoverable,
                      self.config.schedule.total_steps)

    def outcome_events(self, outcome: SaveOutcome | None) -> Events:
        if outcome is None:
            return []
        if not outcome.ok:
            return [(EventKind.CHECKPOINT_FAILED, {"step": outcome.step if outcome.step >= 0 else None,
                                                   "tier": "storage", "cause": Cause.CHECKPOINT_IO,
                                                   "reason": outcome.reason, "save_blocking_s": outcome.blocking_s,
                                                   "save_total_s": outcome.total_s})]
        if self.storage.rank != 0:
            return []
        return [(EventKind.CHECKPOINT_SAVED, {"step": outcome.step, "tier": "storage",
                                              "save_blocking_s": outcome.blocking_s,
                                              "save_total_s": outcome.total_s})]
