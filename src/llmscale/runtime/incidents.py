"""The summary behind `llmscale journal`: incidents by cause and host, repeat offenders, measured MTBF (journal wall
time / incidents, as Kokolis et al. arXiv:2410.21680 §3), and the time each incident cost:
lost_s = detect_s + restart_s + load_s + steps_lost × step_s. torch-free.
Each term defined: docs/runtime.md#runtime-incidents.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llmscale.runtime.files import read_lines
from llmscale.runtime.journal import Event, EventKind, JournalRead

REPEAT_THRESHOLD = 2
"""A host or rank with at least this many incidents is a repeat offender."""


@dataclass(frozen=True)
class Incident:
    """One failed attempt and what it cost (module docstring)."""

    attempt: int
    time_unix: float
    cause: str
    host: str | None
    rank: int | None
    step: int | None
    restored_step: int | None
    restored_tier: str | None
    steps_lost: int | None
    detect_s: float | None
    restart_s: float | None
    load_s: float | None
    lost_s: float | None


@dataclass(frozen=True)
class JournalSummary:
    attempts: int
    incidents: tuple[Incident, ...]
    by_cause: dict[str, int]
    by_host: dict[str, int]
    repeat_hosts: dict[str, int]
    repeat_ranks: dict[int, int]
    wall_s: float
    mtbf_s: float | None
    step_s: float | None
    mean_lost_s: float | None
    total_lost_s: float | None
    checkpoints_saved: int
    checkpoint_failures: int
    stop_reason: str | None
    skipped_lines: int
    excluded_hosts: dict[str, str] = field(default_factory=dict)
    """Host → reason, from the `excluded_hosts` events (launch --exclude-from)."""
    hosts: tuple[str, ...] = ()
    """The hosts the last attempt ran on (its attempt_start's `hosts`; empty: one node, in-process)."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["repeat_ranks"] = {str(k): v for k, v in self.repeat_ranks.items()}
        return out


def median_step_s(run_dir: Path) -> float | None:
    """Median `step_s` over every rank's step log, the last record per step (a step re-run after a resume counts
    once, as files.last_per_step), lines that do not parse or lack the keys skipped; None without one."""
    values: list[float] = []
    for path in sorted((Path(run_dir) / "steps").glob("rank*.jsonl")):
        last: dict[int, float] = {}
        for row in read_lines(path).rows:
            step, value = row.get("step"), row.get("step_s")
            if isinstance(step, int) and isinstance(value, int | float) and not isinstance(value, bool):
                last[step] = float(value)
        values += last.values()
    return statistics.median(values) if values else None


def _restore_after(events: tuple[Event, ...], attempt: int) -> tuple[Event | None, bool]:
    """The slowest restore of the first later attempt that restored (None: none did, a fresh start), and whether
    that attempt is the next one (else the restarts in between failed before restoring: their own incidents)."""
    later = sorted({e.attempt for e in events if e.event is EventKind.RESTORE and e.attempt > attempt})
    if not later:
        return None, True
    nxt = [e for e in events if e.event is EventKind.RESTORE and e.attempt == later[0]]
    return max(nxt, key=lambda e: e.load_s or 0.0), later[0] == attempt + 1


def _incident(fault: Event, events: tuple[Event, ...], step_s: float | None) -> Incident:
    restore, next_one = _restore_after(events, fault.attempt)
    load_s = restore.load_s if restore and next_one else None
    restored = restore.restored_step if restore else None
    restart_s = None
    if restore is not None and next_one:
        restart_s = max(0.0, restore.time_unix - (load_s or 0.0) - fault.time_unix)
    lost_steps = fault.steps_lost
    if lost_steps is None and fault.step is not None:
        lost_steps = max(0, fault.step - (restored if restored is not None else 0))
    parts = [fault.detect_s, restart_s, load_s]
    lost_s = None
    if all(p is not None for p in parts) and lost_steps is not None and step_s is not None:
        lost_s = sum(p for p in parts if p is not None) + lost_steps * step_s
    return Incident(fault.attempt, fault.time_unix, fault.cause.value if fault.cause else "unknown", fault.host,
                    fault.rank, fault.step, restored, restore.tier if restore else None, lost_steps, fault.detect_s,
                    restart_s, load_s, lost_s)


def summarize(read: JournalRead, step_s: float | None = None) -> JournalSummary:
    """The summary of a journal (module docstring); `step_s` prices the lost steps (median_step_s of the run)."""
    events = read.events
    first_faults: dict[int, Event] = {}
    for e in events:
        if e.event is EventKind.FAULT and e.attempt not in first_faults:
            first_faults[e.attempt] = e
    incidents = tuple(_incident(f, events, step_s) for _, f in sorted(first_faults.items()))
    by_cause = Counter(i.cause for i in incidents)
    by_host = Counter(i.host or "?" for i in incidents)
    by_rank = Counter(i.rank for i in incidents if i.rank is not None)
    wall_s = (max(e.time_unix for e in events) - min(e.time_unix for e in events)) if events else 0.0
    priced = [i.lost_s for i in incidents if i.lost_s is not None]
    stops = [e for e in events if e.event is EventKind.STOP]
    return JournalSummary(
        attempts=len({e.attempt for e in events if e.event is EventKind.ATTEMPT_START}),
        incidents=incidents,
        by_cause=dict(by_cause.most_common()),
        by_host=dict(by_host.most_common()),
        repeat_hosts={h: n for h, n in by_host.items() if n >= REPEAT_THRESHOLD},
        repeat_ranks={r: n for r, n in sorted(by_rank.items()) if n >= REPEAT_THRESHOLD},
        wall_s=wall_s,
        mtbf_s=wall_s / len(incidents) if incidents else None,
        step_s=step_s,
        mean_lost_s=statistics.fmean(priced) if priced else None,
        total_lost_s=sum(priced) if priced else None,
        checkpoints_saved=len({e.step for e in events if e.event is EventKind.CHECKPOINT_SAVED}),
        checkpoint_failures=sum(1 for e in events if e.event is EventKind.CHECKPOINT_FAILED),
        stop_reason=stops[-1].reason if stops else None,
        skipped_lines=read.skipped_lines,
        excluded_hosts=_excluded(events),
        hosts=next((tuple(map(str, e.extra["hosts"])) for e in reversed(events) if e.event is
                    EventKind.ATTEMPT_START and isinstance(e.extra.get("hosts"), list)), ()),
    )


def _excluded(events: tuple[Event, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for e in events:
        hosts, reasons = e.extra.get("hosts"), e.extra.get("reasons")
        if e.event is EventKind.EXCLUDED_HOSTS and isinstance(hosts, list):
            why = reasons if isinstance(reasons, list) and len(reasons) == len(hosts) else [""] * len(hosts)
            out.update({str(h): str(r) for h, r in zip(hosts, why, strict=True)})
    return out
