"""The dashboard's JSON (`GET /api/run`): what the page draws, read from the run directory on every request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmscale.monitor.predict import load_cached
from llmscale.monitor.profile import profile
from llmscale.monitor.rundir import PHASES, read_run

MAX_POINTS = 2000
"""Curves keep at most this many steps (evenly thinned): a page stays light over a long run."""
TIMELINE_EVENTS = ("launch", "attempt_start", "fault", "restore", "checkpoint_saved", "checkpoint_failed",
                   "config_changed", "stop", "excluded_hosts")


def run_document(run_dir: Path) -> dict[str, Any]:
    snap = read_run(run_dir)
    prediction = load_cached(run_dir)
    result = profile(snap, prediction)
    steps = result.steps[:: max(len(result.steps) // MAX_POINTS + 1, 1)]
    curves = []
    for s in steps:
        tokens = sum(snap.record(rank, s.step).tokens for rank in snap.ranks)
        curves.append({"step": s.step, "loss": snap.record(snap.ranks[0], s.step).loss, "step_s": s.step_s,
                       "tokens_per_s": tokens / s.step_s if s.step_s > 0 else 0.0})
    heat = [{"step": s.step, "ranks": [s.rank_step_s[r] for r in snap.ranks]} for s in steps[-120:]]
    events = [{"event": e.event.value, "time_unix": e.time_unix, "attempt": e.attempt, "step": e.step,
               "rank": e.rank, "host": e.host, "cause": e.cause.value if e.cause else None,
               "save_blocking_s": e.save_blocking_s, "restored_step": e.restored_step, "reason": e.reason}
              for e in snap.events if e.event.value in TIMELINE_EVENTS]
    latest = result.steps[-1].step if result.steps else None
    return {"run_dir": str(run_dir), "ranks": snap.ranks, "latest_step": latest,
            "curves": curves, "heat": heat, "phases": list(PHASES),
            "measured": {p.phase: p.measured_s for p in result.parts},
            "predicted": prediction.phases_s if prediction else None,
            "windows": [vars(w) for w in result.windows[-5:]], "events": events,
            "skipped_lines": snap.skipped_lines}
