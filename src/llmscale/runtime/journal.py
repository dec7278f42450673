"""The fault journal of a run: `RUN_DIR/journal.jsonl`, one JSON object per line, each written with one `os.write` on an
`O_APPEND` descriptor (POSIX.1-2017 write(2)); causes after Llama 3's interruption table (arXiv:2407.21783 Table 5)
and nvidia-resiliency-ext's attribution. torch-free: the CLI reads journals on machines without torch.
Schema: docs/runtime.md ("The journal"); why append is safe and the causes: docs/runtime.md#runtime-journal.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

JOURNAL_FILE = "journal.jsonl"


class EventKind(str, Enum):
    """What a journal line records."""

    LAUNCH = "launch"
    """`llmscale launch` started (or resumed) the job."""
    ATTEMPT_START = "attempt_start"
    """The supervisor started one attempt: a fresh rendezvous and a fresh set of workers."""
    FAULT = "fault"
    """An attempt failed: a rank exited, was killed or hung; `cause` says which."""
    RESTORE = "restore"
    """A rank restored its state from a tier (`tier`, `restored_step`, `load_s`)."""
    CHECKPOINT_SAVED = "checkpoint_saved"
    """A storage-tier checkpoint was committed (manifest written, `latest` moved)."""
    MEMORY_SNAPSHOT = "memory_snapshot"
    """A memory-tier snapshot was written."""
    CHECKPOINT_FAILED = "checkpoint_failed"
    """A save or a load failed (disk full, a dead background writer, a corrupt shard); training may go on."""
    CONFIG_CHANGED = "config_changed"
    """A resume under another config hash, allowed by --allow-config-change; `message` lists the changed keys."""
    STOP = "stop"
    """The supervisor stopped the job; `reason` says why (completed, or a restart limit)."""
    EXCLUDED_HOSTS = "excluded_hosts"
    """Hosts dropped before launch because an exclusion list names them."""


class Cause(str, Enum):
    """Why an attempt failed (module docstring: Llama 3 Table 5, NVRx attribution)."""

    PROCESS_KILLED = "process_killed"
    """A rank died of a signal (SIGKILL, SIGSEGV, ...), not known to be the OOM killer."""
    PROCESS_EXIT = "process_exit"
    """A rank exited with a non-zero code."""
    HANG = "hang"
    """A rank's heartbeat grew older than `restart.heartbeat_timeout_s`; the supervisor killed the attempt."""
    CHECKPOINT_IO = "checkpoint_io"
    """A save or load failed: disk full, a killed background writer, a corrupt or partial shard."""
    OOM = "oom"
    """The kernel's OOM killer ended a rank (its cgroup's oom_kill count rose)."""
    NETWORK = "network"
    """A collective timed out or a connection was reset, with no rank found dead first."""
    LAUNCHER = "launcher"
    """`llmscale launch` itself stopped (SIGINT, SIGTERM, SIGHUP: `signal`) or died (SIGKILL, found by the next
    launch: runtime/relaunch.py) while an attempt ran."""
    UNKNOWN = "unknown"


OPTIONAL_INT = ("step", "rank", "pid", "exit_code", "restored_step", "steps_lost")
OPTIONAL_FLOAT = ("detect_s", "restart_s", "load_s", "save_blocking_s", "save_total_s")
OPTIONAL_STR = ("host", "signal", "tier", "reason", "message")


@dataclass(frozen=True)
class Event:
    """One journal line. `extra` holds further keys (written as top-level keys; a reader keeps the ones it does not
    know there)."""

    event: EventKind
    attempt: int
    config_sha256: str
    time_unix: float = field(default_factory=time.time)
    step: int | None = None
    rank: int | None = None
    host: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    cause: Cause | None = None
    tier: str | None = None
    restored_step: int | None = None
    steps_lost: int | None = None
    detect_s: float | None = None
    restart_s: float | None = None
    load_s: float | None = None
    save_blocking_s: float | None = None
    save_total_s: float | None = None
    reason: str | None = None
    message: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The line's object: the set keys only, enums as their values, `extra` merged in."""
        out: dict[str, Any] = dict(self.extra)
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = value.value if isinstance(value, Enum) else value
        return out

    @classmethod
    def from_json(cls, obj: Any) -> Event | None:
        """The event of one parsed line, or None when it is not a valid event (unknown kind, wrong types)."""
        if not isinstance(obj, dict):
            return None
        try:
            kind = EventKind(obj["event"])
            attempt, sha = obj["attempt"], obj["config_sha256"]
            when = float(obj["time_unix"])
        except (KeyError, ValueError, TypeError):
            return None
        if not isinstance(attempt, int) or isinstance(attempt, bool) or not isinstance(sha, str):
            return None
        values: dict[str, Any] = {}
        for name in (*OPTIONAL_INT, *OPTIONAL_FLOAT, *OPTIONAL_STR, "cause"):
            if name in obj and obj[name] is not None:
                values[name] = obj[name]
        if not _typed(values):
            return None
        if "cause" in values:
            try:
                values["cause"] = Cause(values["cause"])
            except ValueError:
                values["cause"] = Cause.UNKNOWN
        known = {f.name for f in fields(cls)}
        extra = {k: v for k, v in obj.items() if k not in known}
        return cls(event=kind, attempt=attempt, config_sha256=sha, time_unix=when, extra=extra, **values)


def _typed(values: dict[str, Any]) -> bool:
    for name, value in values.items():
        if name in OPTIONAL_INT and (not isinstance(value, int) or isinstance(value, bool)):
            return False
        if name in OPTIONAL_FLOAT and (not isinstance(value, int | float) or isinstance(value, bool)):
            return False
        if name in (*OPTIONAL_STR, "cause") and not isinstance(value, str):
            return False
    return True


def journal_path(run_dir: Path) -> Path:
    return Path(run_dir) / JOURNAL_FILE


def append(run_dir: Path, event: Event) -> None:
    """Append one event as one line with one `os.write` on an O_APPEND descriptor (module docstring)."""
    line = (json.dumps(event.to_json(), allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")
    fd = os.open(journal_path(run_dir), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, line)
    finally:
        os.close(fd)
    if written != len(line):
        raise OSError(f"journal {journal_path(run_dir)}: short write ({written} of {len(line)} bytes)")


@dataclass(frozen=True)
class JournalRead:
    """The events of a journal in file order and how many lines were skipped as unparseable."""

    events: tuple[Event, ...]
    skipped_lines: int

    def of_kind(self, kind: EventKind) -> list[Event]:
        return [e for e in self.events if e.event is kind]


def read(run_dir: Path) -> JournalRead:
    """Every valid event of RUN_DIR/journal.jsonl (an absent journal is empty); bad lines are skipped and counted."""
    path = journal_path(run_dir)
    if not path.exists():
        return JournalRead((), 0)
    events: list[Event] = []
    skipped = 0
    for raw in path.read_bytes().split(b"\n"):
        if not raw.strip():
            continue
        try:
            event = Event.from_json(json.loads(raw.decode("utf-8")))
        except (UnicodeDecodeError, ValueError):
            event = None
        if event is None:
            skipped += 1
        else:
            events.append(event)
    return JournalRead(tuple(events), skipped)
