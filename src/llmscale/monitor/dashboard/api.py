"""The dashboard's JSON (`GET /api/run`): what the page draws, read from the run directory on every request.

Timeline: one entry per (attempt, event kind, step) with the ranks and hosts that journaled it folded in — a
checkpoint_failed is journaled by every rank, and the storage save that measures the 'auto' intervals journals a
second checkpoint_saved for its step carrying the chosen intervals (runtime/tiers.py `_measure`) — newest first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmscale.monitor.dashboard.predictor import PredictionStatus, Predictor
from llmscale.monitor.profile import profile
from llmscale.monitor.rundir import PHASES, read_run
from llmscale.runtime.journal import Event

MAX_POINTS = 2000
"""Curves keep at most this many steps (evenly thinned): a page stays light over a long run."""
TIMELINE_EVENTS = ("launch", "attempt_start", "fault", "restore", "checkpoint_saved", "memory_snapshot",
                   "checkpoint_failed", "config_changed", "stop", "excluded_hosts")
HIGHLIGHT = ("fault", "restore", "checkpoint_failed", "excluded_hosts", "config_changed")
"""Kinds the page marks: what went wrong, what the run did about it."""


def _first(values: list[Any]) -> Any:
    return next((v for v in values if v is not None), None)


def _entry(group: list[Event]) -> dict[str, Any]:
    e = group[0]
    blocking = [g.save_blocking_s for g in group if g.save_blocking_s is not None]
    return {"event": e.event.value, "time_unix": min(g.time_unix for g in group), "attempt": e.attempt,
            "step": e.step, "ranks": sorted({g.rank for g in group if g.rank is not None}),
            "hosts": sorted({g.host for g in group if g.host}), "lines": len(group),
            "cause": _first([g.cause.value if g.cause else None for g in group]),
            "tier": _first([g.tier for g in group]), "save_blocking_s": max(blocking) if blocking else None,
            "restored_step": _first([g.restored_step for g in group]),
            "steps_lost": _first([g.steps_lost for g in group]), "reason": _first([g.reason for g in group]),
            "message": _first([g.message for g in group]), "highlight": e.event.value in HIGHLIGHT}


def timeline(events: tuple[Event, ...]) -> list[dict[str, Any]]:
    """The journal folded to one entry per (attempt, kind, step), newest first (module docstring)."""
    groups: dict[tuple[int, str, int | None], list[Event]] = {}
    for e in events:
        if e.event.value in TIMELINE_EVENTS:
            groups.setdefault((e.attempt, e.event.value, e.step), []).append(e)
    entries = [_entry(g) for g in groups.values()]
    return sorted(entries, key=lambda x: x["time_unix"], reverse=True)


def _prediction_doc(status: PredictionStatus) -> dict[str, Any]:
    p = status.prediction
    return {"state": status.state.value, "reason": status.reason, "phases_s": p.phases_s if p else None,
            "step_s": p.step_s if p else None}


def run_document(run_dir: Path, predictor: Predictor) -> dict[str, Any]:
    snap = read_run(run_dir)
    status = predictor.status()
    prediction = status.prediction
    result = profile(snap, prediction)
    steps = result.steps[:: max(len(result.steps) // MAX_POINTS + 1, 1)]
    curves = []
    for s in steps:
        tokens = sum(snap.record(rank, s.step).tokens for rank in snap.ranks)
        curves.append({"step": s.step, "loss": snap.record(snap.ranks[0], s.step).loss, "step_s": s.step_s,
                       "tokens_per_s": tokens / s.step_s if s.step_s > 0 else 0.0})
    heat = [{"step": s.step, "ranks": [s.rank_step_s[r] for r in snap.ranks]} for s in steps[-120:]]
    latest = result.steps[-1].step if result.steps else None
    return {"run_dir": str(run_dir), "ranks": snap.ranks, "latest_step": latest,
            "curves": curves, "heat": heat, "phases": list(PHASES),
            "measured": {p.phase: p.measured_s for p in result.parts},
            "predicted": prediction.phases_s if prediction else None,
            "prediction": _prediction_doc(status),
            "errors_pct": {p.phase: p.error_pct for p in result.parts},
            "windows": [vars(w) for w in result.windows[-5:]], "events": timeline(snap.events),
            "skipped_lines": snap.skipped_lines}
