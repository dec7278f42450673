"""The storage tier: PyTorch Distributed Checkpoint (DCP) saves, each into a fresh `checkpoints/step_N/`, committed by
a manifest and the `latest` pointer (the run-directory contract).

Save. `torch.distributed.checkpoint.async_save(..., async_checkpointer_type=AsyncCheckpointerType.PROCESS)`
(pytorch/pytorch v2.13.0 torch/distributed/checkpoint/state_dict_saver.py, _async_process_executor.py): the state
is staged (copied to CPU) in the trainer — the blocking part — and written by a spawned background process with its
own gloo group. The broadcast that sets that process up runs on a DEDICATED gloo group, not the training group
(issue 15 measured thread-based async_save on the training group aborting gloo with a collective mismatch). The
commit protocol, on rank 0 once its future has completed without error (DCP's coordinator writes `.metadata` only
after every rank's write came back, so rank 0's success means every rank's files are complete):
  1. hash every file of the directory (SHA256), 2. write `manifest.json` atomically (tmp + fsync + os.replace),
  3. move `latest` (same), 4. delete committed checkpoints beyond `keep` (>= 2) and older partial directories.
A directory without a manifest is never loaded. A save that fails (ENOSPC, a dead or hung background process) has
its directory removed and is reported; the committed ones are untouched, since no save writes into them.

The writer process is started at session start (`start_writer`), not by the first save. Its death is seen at the
next step (`poll`): its future raises, or the process is no longer alive, or the save is older than
`save_timeout_s` (a peer's writer died and this one waits on it); the failed save is journaled (checkpoint_failed,
checkpoint_io) and its directory removed. Before the next save all ranks agree (an all-reduce on the dedicated
group) whether any writer is gone; if so every rank stops its own and starts a fresh one.

Load. The newest manifest-complete directory whose hashes verify and whose world size matches is chosen by rank 0
and broadcast; every rank loads it with `dcp.load`; if any rank fails (DCP's `CheckpointException` derives from
`BaseException`, so it is caught by name), the next older one is tried.
"""

from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import _async_process_executor as process_executor
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

from llmscale.runtime import chaos
from llmscale.runtime.files import sha256_file, step_dir_name, write_atomic

MANIFEST = "manifest.json"
LATEST = "latest"


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


@dataclass
class _Pending:
    step: int
    future: Future[Any]
    started: float
    blocking_s: float


def committed(root: Path) -> list[tuple[int, Path, dict[str, Any]]]:
    """Every directory with a readable manifest, newest first: (step, path, manifest)."""
    found = []
    for path in root.glob("step_*"):
        try:
            manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
            found.append((int(manifest["step"]), path, manifest))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(found, key=lambda row: row[0], reverse=True)


def verify(path: Path, manifest: dict[str, Any]) -> str:
    """'' when every file the manifest lists is there with its SHA256, else the first problem."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return "manifest lists no files"
    for name, digest in sorted(files.items()):
        try:
            if sha256_file(path / name) != digest:
                return f"{name}: SHA256 differs from the manifest"
        except OSError as exc:
            return f"{name}: {exc.strerror or exc}"
    return ""


def _writer() -> Any:
    """DCP's checkpoint background process of this trainer: `_CHECKPOINT_PROCESS._save_process`, the
    `multiprocessing` spawn-context Process that `_AsyncCheckpointProcess.__init__` starts and that serves every
    `async_save` request over a pipe (pytorch/pytorch v2.13.0 torch/distributed/checkpoint/
    _async_process_executor.py). DCP creates it lazily, inside its executor THREAD, during the first save, and
    publishes the module global only after the child answered INIT_COMPLETE — so during a first save the global is
    still None (a writer kill there found no pid). `start_writer` creates it up front. None when there is none (or
    a torch release drops the private names)."""
    proc = getattr(process_executor, "_CHECKPOINT_PROCESS", None)
    return getattr(proc, "_save_process", None)


def _writer_alive() -> bool | None:
    """Whether the writer (`_writer`) is alive; None when none was started."""
    inner = _writer()
    return None if inner is None else bool(inner.is_alive())


def writer_pid() -> int | None:
    """The pid of this trainer's checkpoint writer process (the spawned child itself: spawn runs it as a direct
    child of the trainer), or None."""
    inner = _writer()
    return None if inner is None else inner.pid


def start_writer(group: Any) -> int | None:
    """Start DCP's writer process now, as DCP's own first `async_save` would (`_ProcessGroupInitInfo` broadcasts
    the writers' store address over `group`; the child joins its own gloo group and answers INIT_COMPLETE) — a
    collective: every rank calls it. Done at session start so that no save pays for the spawn (3-6 s, > 10 s on a
    loaded CPU, measured) and the writer's pid is known from the first save on. No-op when one is running."""
    if _writer_alive():
        return writer_pid()
    process_executor._CHECKPOINT_PROCESS = None
    info = process_executor._ProcessGroupInitInfo(group)
    process_executor._CHECKPOINT_PROCESS = process_executor._AsyncCheckpointProcess(info)
    return writer_pid()


def _stop_writer() -> None:
    """Stop this trainer's background writer (if any) so that a fresh one can be started."""
    inner = _writer()
    if inner is not None and inner.is_alive():
        inner.terminate()
        inner.join(timeout=10)
    process_executor._CHECKPOINT_PROCESS = None


@dataclass
class StorageTier:
    """The storage tier of one rank (module docstring). `group` is the dedicated gloo group."""

    root: Path
    rank: int
    world_size: int
    config_sha256: str
    keep: int
    save_timeout_s: float
    group: Any
    pending: _Pending | None = None
    writer_lost: bool = False
    outcomes: list[SaveOutcome] = field(default_factory=list)
    unreported: list[SaveOutcome] = field(default_factory=list)
    """Finished saves not yet handed to the journal (`drain`)."""

    def drain(self) -> list[SaveOutcome]:
        """The saves that finished since the last call (also those `save` waited for)."""
        out, self.unreported = self.unreported, []
        return out

    def clean_partials(self) -> list[str]:
        """Rank 0: remove every step directory without a manifest (a save cut short in an earlier attempt)."""
        removed = []
        if self.rank == 0 and self.root.is_dir():
            for path in sorted(self.root.glob("step_*")):
                if path.is_dir() and not (path / MANIFEST).is_file():
                    shutil.rmtree(path, ignore_errors=True)
                    removed.append(path.name)
        return removed

    def save(self, step: int, state: dict[str, Any]) -> float:
        """Start an async save of `state` into step_N/ (after finishing the previous one); returns the seconds this
        call blocked the trainer."""
        start = time.perf_counter()
        while self.pending is not None:
            self.poll(block=True)
        lost = torch.tensor([1 if self.writer_lost or _writer_alive() is False else 0])
        dist.all_reduce(lost, op=dist.ReduceOp.MAX, group=self.group)
        if int(lost.item()):  # every rank agreed: all restart their writers together (the writers' group is shared)
            _stop_writer()
            self.writer_lost = False
            start_writer(self.group)
        directory = self.root / step_dir_name(step)
        if self.rank == 0:
            directory.mkdir(parents=True, exist_ok=True)
        chaos.point(chaos.Phase.SAVE_START, step, self.rank)
        future = dcp.async_save(state, checkpoint_id=str(directory), process_group=self.group,
                                async_checkpointer_type=AsyncCheckpointerType.PROCESS)
        chaos.point(chaos.Phase.KILL_WRITER, step, self.rank, writer_pid())
        chaos.point(chaos.Phase.SAVE_WRITING, step, self.rank)
        assert isinstance(future, Future)
        blocking = time.perf_counter() - start
        self.pending = _Pending(step, future, start, blocking)
        return blocking

    def poll(self, block: bool = False) -> SaveOutcome | None:
        """Finish the pending save if it is done (or fail it: error, dead writer, deadline); with `block`, wait for
        it up to the deadline. Returns the outcome of a save that finished now."""
        pending = self.pending
        if pending is None:
            if _writer_alive() is False and not self.writer_lost:
                self.writer_lost = True
                lost = SaveOutcome(-1, False, 0.0, 0.0, "checkpoint background process died between saves")
                self.unreported.append(lost)
                return lost
            return None
        waited = time.perf_counter() - pending.started
        if block and not pending.future.done():
            wait([pending.future], timeout=max(self.save_timeout_s - waited, 0.0))
        if not pending.future.done():
            if time.perf_counter() - pending.started < self.save_timeout_s and _writer_alive() is not False:
                return None
            _stop_writer()
            return self._fail(pending, f"save not finished after {self.save_timeout_s:g} s (writer dead or hung)")
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
            shutil.rmtree(self.root / step_dir_name(pending.step), ignore_errors=True)
        outcome = SaveOutcome(pending.step, False, pending.blocking_s, time.perf_counter() - pending.started, reason)
        self.outcomes.append(outcome)
        self.unreported.append(outcome)
        return outcome

    def _commit(self, pending: _Pending) -> SaveOutcome:
        total = time.perf_counter() - pending.started
        self.pending = None
        if self.rank == 0:
            directory = self.root / step_dir_name(pending.step)
            try:
                files = {p.name: sha256_file(p) for p in sorted(directory.iterdir()) if p.is_file()}
                manifest = {"step": pending.step, "world_size": self.world_size, "config_sha256": self.config_sha256,
                            "files": files, "time_unix": time.time(), "save_blocking_s": pending.blocking_s,
                            "save_total_s": total}
                chaos.point(chaos.Phase.AFTER_FILES, pending.step, self.rank)
                write_atomic(directory / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8"))
                chaos.point(chaos.Phase.AFTER_MANIFEST, pending.step, self.rank)
                write_atomic(self.root / LATEST, (directory.name + "\n").encode("utf-8"))
            except OSError as exc:
                (directory / MANIFEST).unlink(missing_ok=True)
                return self._fail(_Pending(pending.step, pending.future, pending.started, pending.blocking_s),
                                  f"commit failed: {exc.strerror or exc}")
            self._prune()
        outcome = SaveOutcome(pending.step, True, pending.blocking_s, total)
        self.outcomes.append(outcome)
        self.unreported.append(outcome)
        return outcome

    def _prune(self) -> None:
        """Keep the newest `keep` committed checkpoints; drop older ones and partial directories older than them."""
        done = committed(self.root)
        for _, path, _ in done[self.keep:]:
            shutil.rmtree(path, ignore_errors=True)
        oldest_kept = min(step for step, _, _ in done[: self.keep])
        for path in self.root.glob("step_*"):
            if not (path / MANIFEST).is_file() and path.name < step_dir_name(oldest_kept):
                shutil.rmtree(path, ignore_errors=True)

    def close(self) -> SaveOutcome | None:
        """Wait for the pending save (end of training) and stop the background writer."""
        outcome = self.poll(block=True) if self.pending is not None else None
        _stop_writer()
        return outcome

    def load(self, state: dict[str, Any], train_group: Any = None) -> LoadOutcome:
        """Load the newest good checkpoint into `state` (in place; collective over `train_group`). The outcome's
        step is -1 when none loaded; `failures` lists every newer checkpoint skipped or failed first, `attempted`
        says whether a dcp.load ran (then `state` may hold part of a failed load)."""
        failures: list[tuple[str, str]] = []
        candidates = committed(self.root) if self.rank == 0 else []
        index, attempted = 0, False
        while True:
            choice: list[Any] = [None]
            if self.rank == 0:
                choice[0], index = self._next_verified(candidates, index, failures)
            dist.broadcast_object_list(choice, src=0, group=train_group)
            if choice[0] is None:
                return LoadOutcome(-1, self.root, 0.0, self._shared(failures, train_group), attempted)
            directory = self.root / choice[0]
            start = time.perf_counter()
            reason = _load_one(state, directory, train_group)
            attempted = True
            flag = torch.tensor([0 if reason else 1])
            dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=train_group)
            if int(flag.item()):
                return LoadOutcome(int(choice[0].split("_")[1]), directory, time.perf_counter() - start,
                                   self._shared(failures, train_group), attempted)
            failures.append((choice[0], reason or "another rank failed to load it"))

    def _shared(self, failures: list[tuple[str, str]], group: Any) -> tuple[tuple[str, str], ...]:
        """Rank 0's list of failures, on every rank."""
        listed: list[Any] = [failures]
        dist.broadcast_object_list(listed, src=0, group=group)
        return tuple((str(a), str(b)) for a, b in listed[0])

    def _next_verified(self, candidates: list[tuple[int, Path, dict[str, Any]]], index: int,
                       failures: list[tuple[str, str]]) -> tuple[str | None, int]:
        while index < len(candidates):
            _, path, manifest = candidates[index]
            index += 1
            if manifest.get("world_size") != self.world_size:
                failures.append((path.name, f"world size {manifest.get('world_size')} ≠ {self.world_size}"))
                continue
            problem = verify(path, manifest)
            if problem:
                failures.append((path.name, problem))
                continue
            return path.name, index
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
