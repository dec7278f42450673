"""The storage tier: PyTorch Distributed Checkpoint (DCP) saves, each into a fresh directory, committed by a manifest
(manifests.py): process-based `async_save` (pytorch/pytorch v2.13.0 state_dict_saver.py) on a dedicated gloo group,
commit on rank 0 (hash files, manifest atomically, rename, prune), dead writers replaced, load newest verified first.
Save, commit, dead writers and load in full: docs/runtime.md#runtime-storage.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

from llmscale.runtime import chaos
from llmscale.runtime import manifests as mf
from llmscale.runtime.files import write_atomic
from llmscale.runtime.writer import start_writer, stop_writer, writer_alive, writer_pid


@dataclass(frozen=True)
class SaveOutcome:
    """A storage save that finished, one way or the other."""

    step: int
    ok: bool
    blocking_s: float
    total_s: float
    reason: str = ""


@dataclass(frozen=True)
class LoadOutcome:
    step: int
    directory: Path
    load_s: float
    failures: tuple[tuple[str, str], ...] = ()
    """(directory name, reason) of every newer checkpoint skipped or failed first."""
    attempted: bool = False
    state: dict[str, Any] = field(default_factory=dict)
    """What was loaded (the state built for `saved_world`)."""
    saved_world: int = 0
    """The world size the loaded checkpoint was saved at."""


@dataclass
class _Pending:
    step: int
    directory: Path
    future: Future[Any]
    started: float
    blocking_s: float


@dataclass
class StorageTier:
    """The storage tier of one rank (module docstring). `group` is the dedicated gloo group; `tag` names this
    attempt's save directories."""

    root: Path
    rank: int
    world_size: int
    config_sha256: str
    keep: int
    save_timeout_s: float
    group: Any
    tag: str = "a0"
    pending: _Pending | None = None
    writer_lost: bool = False
    outcomes: list[SaveOutcome] = field(default_factory=list)
    unreported: list[SaveOutcome] = field(default_factory=list)
    """Finished saves not yet handed to the journal (`drain`)."""

    def drain(self) -> list[SaveOutcome]:
        """The saves that finished since the last call (also those `save` waited for)."""
        out, self.unreported = self.unreported, []
        return out

    def tidy(self) -> list[tuple[str, str]]:
        """Rank 0, before a resume: remove every partial directory (a save cut short in an earlier attempt) and move
        every directory whose manifest does not parse to quarantine; (name, what was done) of each."""
        done: list[tuple[str, str]] = []
        if self.rank != 0 or not self.root.is_dir():
            return done
        for path in mf.partials(self.root):
            shutil.rmtree(path, ignore_errors=True)
            done.append((path.name, "partial save (no manifest) removed"))
        for bad in mf.scan(self.root)[1]:
            moved = mf.quarantine(self.root, bad.path)
            done.append((bad.path.name, f"{bad.reason}; " + (f"moved to {mf.QUARANTINE}/" if moved else
                                                             "could not be moved")))
        return done

    def save(self, step: int, state: dict[str, Any]) -> float:
        """Start an async save of `state` into a fresh directory (after finishing the previous save); returns the
        seconds this call blocked the trainer."""
        start = time.perf_counter()
        while self.pending is not None:
            self.poll(block=True)
        lost = torch.tensor([1 if self.writer_lost or writer_alive() is False else 0])
        dist.all_reduce(lost, op=dist.ReduceOp.MAX, group=self.group)
        if int(lost.item()):  # every rank agreed: all restart their writers together (the writers' group is shared)
            stop_writer()
            self.writer_lost = False
            start_writer(self.group)
        directory = self.root / mf.staging_name(step, self.tag)
        if self.rank == 0:
            directory.mkdir(parents=True, exist_ok=True)
        chaos.point(chaos.Phase.SAVE_START, step, self.rank)
        future = dcp.async_save(state, checkpoint_id=str(directory), process_group=self.group,
                                async_checkpointer_type=AsyncCheckpointerType.PROCESS)
        chaos.point(chaos.Phase.KILL_WRITER, step, self.rank, writer_pid())
        chaos.point(chaos.Phase.STOP_WRITER, step, self.rank, writer_pid())
        chaos.point(chaos.Phase.SAVE_WRITING, step, self.rank)
        assert isinstance(future, Future)
        blocking = time.perf_counter() - start
        self.pending = _Pending(step, directory, future, start, blocking)
        return blocking

    def poll(self, block: bool = False) -> SaveOutcome | None:
        """Finish the pending save if it is done (or fail it: error, dead writer, deadline); with `block`, wait for
        it up to the deadline. Returns the outcome of a save that finished now."""
        pending = self.pending
        if pending is None:
            if writer_alive() is False and not self.writer_lost:
                self.writer_lost = True
                lost = SaveOutcome(-1, False, 0.0, 0.0, "checkpoint background process died between saves")
                self.unreported.append(lost)
                return lost
            return None
        waited = time.perf_counter() - pending.started
        if block and not pending.future.done():
            wait([pending.future], timeout=max(self.save_timeout_s - waited, 0.0))
        if not pending.future.done():
            if time.perf_counter() - pending.started < self.save_timeout_s and writer_alive() is not False:
                return None
            stop_writer()
            self.writer_lost = True
            return self._fail(pending, f"save not finished after {self.save_timeout_s:g} s (writer dead, stopped "
                                       "or hung)")
        error = pending.future.exception()
        if error is not None:
            # the writer may be dead though not reaped yet (a SIGKILLed child reads as alive for a moment, while the
            # pipe already reset): after any failed save every rank starts a fresh writer before the next one
            self.writer_lost = True
            lines = str(error).strip().splitlines()
            return self._fail(pending, f"{type(error).__name__}: {lines[-1] if lines else ''}")
        return self._commit(pending)

    def _fail(self, pending: _Pending, reason: str) -> SaveOutcome:
        self.pending = None
        if self.rank == 0:
            shutil.rmtree(pending.directory, ignore_errors=True)
        outcome = SaveOutcome(pending.step, False, pending.blocking_s, time.perf_counter() - pending.started, reason)
        self.outcomes.append(outcome)
        self.unreported.append(outcome)
        return outcome

    def _commit(self, pending: _Pending) -> SaveOutcome:
        total = time.perf_counter() - pending.started
        self.pending = None
        if self.rank == 0:
            directory, written = pending.directory, False
            try:
                manifest = {"step": pending.step, "world_size": self.world_size, "config_sha256": self.config_sha256,
                            "files": mf.checkpoint_files(directory), "time_unix": time.time(),
                            "save_blocking_s": pending.blocking_s, "save_total_s": total}
                chaos.point(chaos.Phase.AFTER_FILES, pending.step, self.rank)
                write_atomic(directory / mf.MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8"))
                written = True
                chaos.point(chaos.Phase.AFTER_MANIFEST, pending.step, self.rank)
                mf.place(self.root, directory, pending.step, self.tag)
            except OSError as exc:
                if not written:
                    return self._fail(pending, f"commit failed: {exc.strerror or exc}")
                # committed under its staging name (manifests.py): it loads, and the next commit of the step replaces it
            mf.prune(self.root, self.keep, pending.step)
        outcome = SaveOutcome(pending.step, True, pending.blocking_s, total)
        self.outcomes.append(outcome)
        self.unreported.append(outcome)
        return outcome

    def close(self) -> SaveOutcome | None:
        """Wait for the pending save (end of training) and stop the background writer."""
        outcome = self.poll(block=True) if self.pending is not None else None
        stop_writer()
        return outcome

    def load(self, state_for: Callable[[int], dict[str, Any]], train_group: Any = None) -> LoadOutcome:
        """Load the newest good checkpoint (collective over `train_group`): `state_for(saved_world)` builds the
        state dict to load into. The outcome's step is -1 when none loaded; `failures` lists every newer checkpoint
        skipped or failed first, `attempted` says whether a dcp.load ran (then the model may hold part of a failed
        load)."""
        failures: list[tuple[str, str]] = []
        candidates = mf.committed(self.root) if self.rank == 0 else []
        index, attempted = 0, False
        while True:
            choice: list[Any] = [None]
            if self.rank == 0:
                choice[0], index = self._next_verified(candidates, index, failures)
            dist.broadcast_object_list(choice, src=0, group=train_group)
            if choice[0] is None:
                return LoadOutcome(-1, self.root, 0.0, self._shared(failures, train_group), attempted)
            name, step, saved_world = choice[0]
            state = state_for(saved_world)
            start = time.perf_counter()
            reason = _load_one(state, self.root / name, train_group)
            attempted = True
            flag = torch.tensor([0 if reason else 1])
            dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=train_group)
            if int(flag.item()):
                return LoadOutcome(step, self.root / name, time.perf_counter() - start,
                                   self._shared(failures, train_group), attempted, state, saved_world)
            failures.append((name, reason or "another rank failed to load it"))

    def _shared(self, failures: list[tuple[str, str]], group: Any) -> tuple[tuple[str, str], ...]:
        """Rank 0's list of failures, on every rank."""
        listed: list[Any] = [failures]
        dist.broadcast_object_list(listed, src=0, group=group)
        return tuple((str(a), str(b)) for a, b in listed[0])

    def _next_verified(self, candidates: list[mf.Commit], index: int,
                       failures: list[tuple[str, str]]) -> tuple[tuple[str, int, int] | None, int]:
        """Rank 0: the next candidate whose files verify, as (name, step, saved world size); one that does not is
        moved to quarantine (never loaded, never counted toward `keep`)."""
        while index < len(candidates):
            c = candidates[index]
            index += 1
            world = c.manifest.get("world_size")
            problem = mf.verify(c.path, c.manifest)
            if not problem and not (isinstance(world, int) and world >= 1):
                problem = f"manifest world_size {world!r} is not a whole number >= 1"
            if problem:
                moved = mf.quarantine(self.root, c.path)
                failures.append((c.path.name, problem + (f"; moved to {mf.QUARANTINE}/" if moved else "")))
                continue
            return (c.path.name, c.step, int(world)), index  # type: ignore[arg-type]
        return None, index


def _load_one(state: dict[str, Any], directory: Path, group: Any) -> str:
    """'' on success, else why dcp.load failed on this rank."""
    try:
        dcp.load(state, checkpoint_id=str(directory), process_group=group)
    except CheckpointException as exc:  # a BaseException subclass: `except Exception` would miss it
        return f"CheckpointException: {str(exc).strip()[:300]}"
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        return f"{type(exc).__name__}: {str(exc).strip()[:300]}"
    return ""
