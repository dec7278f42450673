"""Fault injection at named points of a save, for the chaos suite (tests/test_chaos*.py, benchmarks/chaos.py):
`LLMSCALE_CHAOS="phase:step[:rank[:attempt]],…"` makes a rank SIGKILL itself at a save phase, or SIGKILL / SIGSTOP
its checkpoint writer. Unset, each call is one dictionary lookup. torch-free.
The phases: docs/runtime.md#runtime-chaos.
"""

from __future__ import annotations

import json
import os
import signal
import time
from enum import Enum
from pathlib import Path

from llmscale.runtime.files import append_line

ENV = "LLMSCALE_CHAOS"
KILLS_FILE = "chaos_kills.jsonl"
"""Each injected kill, appended just before it (RUN_DIR/chaos_kills.jsonl)."""


class Phase(str, Enum):
    SAVE_START = "save_start"
    SAVE_WRITING = "save_writing"
    AFTER_FILES = "after_files"
    AFTER_MANIFEST = "after_manifest"
    KILL_WRITER = "kill_writer"
    STOP_WRITER = "stop_writer"


WRITER_PHASES = (Phase.KILL_WRITER, Phase.STOP_WRITER)


def armed(phase: Phase, step: int, rank: int) -> bool:
    """Whether LLMSCALE_CHAOS names this phase, step and rank in this attempt (LLMSCALE_ATTEMPT, default 0)."""
    spec = os.environ.get(ENV)
    if not spec:
        return False
    attempt = os.environ.get("LLMSCALE_ATTEMPT", "0")
    for item in spec.split(","):
        parts = item.strip().split(":")
        if len(parts) < 2:
            continue
        rank_s = parts[2] if len(parts) > 2 else "0"
        attempt_s = parts[3] if len(parts) > 3 else "0"
        if (parts[0], parts[1], rank_s, attempt_s) == (phase.value, str(step), str(rank), attempt):
            return True
    return False


def point(phase: Phase, step: int, rank: int, writer_pid: int | None = None) -> None:
    """SIGKILL this process (or, for KILL_WRITER / STOP_WRITER, SIGKILL / SIGSTOP the writer `writer_pid`) when armed
    for this point."""
    if not armed(phase, step, rank):
        return
    run_dir = os.environ.get("LLMSCALE_RUN_DIR")
    if run_dir:  # when the kill happened, for the kill-to-training-again figure (benchmarks/chaos.py)
        line = json.dumps({"phase": phase.value, "step": step, "rank": rank, "time_unix": time.time(),
                           "attempt": int(os.environ.get("LLMSCALE_ATTEMPT", "0")),
                           "pid": writer_pid if phase in WRITER_PHASES else os.getpid()})
        append_line(Path(run_dir) / KILLS_FILE, line)
    if phase in WRITER_PHASES:
        if writer_pid is not None:
            os.kill(writer_pid, signal.SIGKILL if phase is Phase.KILL_WRITER else signal.SIGSTOP)
        return
    os.kill(os.getpid(), signal.SIGKILL)
