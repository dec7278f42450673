"""A launch that holds the run directory's lock (runlock.py) ends what an earlier launcher left running (every process
of this user here whose environment says `LLMSCALE_RUN_DIR=<this run dir>`, SIGKILLed by pid) and journals that
launcher's death (a `launcher` fault for its running attempt), before it touches anything else. torch-free.
Why, and the edge cases: docs/runtime.md#runtime-relaunch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from llmscale.runtime import journal as jr
from llmscale.runtime.files import RunPaths, read_heartbeat, steps_by_attempt
from llmscale.runtime.procs import kill_and_wait, processes_with_env
from llmscale.runtime.runlock import Holder

ENV_RUN_DIR = "LLMSCALE_RUN_DIR"


@dataclass(frozen=True)
class Orphans:
    ended: tuple[int, ...]
    left: tuple[int, ...]
    """Still alive after the wait (uninterruptible sleep)."""

    def describe(self) -> str:
        text = f"ended {len(self.ended)} process(es) of this run directory left running (pids {list(self.ended)})"
        return text + (f"; {len(self.left)} would not die: {list(self.left)}" if self.left else "")


def end_orphans(run_dir: Path) -> Orphans:
    """SIGKILL and wait for every process of this run directory (module docstring)."""
    pids = processes_with_env(ENV_RUN_DIR, str(run_dir))
    left = kill_and_wait(pids)
    return Orphans(tuple(pids), tuple(left))


def _unfinished(events: tuple[jr.Event, ...]) -> tuple[int | None, bool]:
    """(the attempt a dead launcher was running or was about to start, whether it stopped cleanly)."""
    if not events or events[-1].event is jr.EventKind.STOP:
        return None, bool(events)
    starts = [e.attempt for e in events if e.event is jr.EventKind.ATTEMPT_START]
    if not starts:
        return max((e.attempt for e in events), default=0), False
    last = max(starts)
    closed = any(e.attempt == last and e.event in (jr.EventKind.FAULT, jr.EventKind.STOP) for e in events)
    return (last + 1 if closed else last), False


def journal_death(paths: RunPaths, world: int, sha: str, holder: Holder, orphans: Orphans) -> jr.Event | None:
    """Journal a dead launcher's fault (module docstring); None when it had stopped its job before it died."""
    events = jr.read(paths.root).events
    attempt, stopped = _unfinished(events)
    if stopped or attempt is None:
        return None
    beats = [b.time_unix for b in (read_heartbeat(paths, r) for r in range(world))
             if b is not None and b.attempt == attempt]
    now = time.time()
    event = jr.Event(jr.EventKind.FAULT, attempt, sha, time_unix=now, step=steps_by_attempt(paths, world).get(attempt),
                     pid=holder.pid, host=holder.host, cause=jr.Cause.LAUNCHER,
                     detect_s=now - max(beats) if beats else None,
                     message=f"llmscale launch ({holder.describe()}) died without stopping its job; found by the "
                             f"next launch: {orphans.describe()}",
                     extra={"orphans": list(orphans.ended), "orphans_left": list(orphans.left)})
    jr.append(paths.root, event)
    return event
