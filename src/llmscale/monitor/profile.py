"""`llmscale profile RUN_DIR`: where each step of a real run went, per rank, beside llmscale's prediction: each part
averaged over ranks, median over steps (first step of each attempt left out), error = (predicted − measured) /
measured; every `every` steps the slowest rank by mean lag.
The parts, the slowest rank and its lag: docs/monitoring.md#monitor-profile.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from llmscale.monitor.predict import Prediction, predict

__all__ = ["PartError", "RunProfile", "StepProfile", "Window", "predict", "profile", "profile_text"]
from llmscale.monitor.rundir import PHASES, RunSnapshot


@dataclass(frozen=True)
class StepProfile:
    """One step: its parts averaged over the ranks, and the slowest rank."""

    step: int
    attempt: int
    step_s: float
    phases_s: dict[str, float]
    rank_step_s: dict[int, float]
    slowest_rank: int
    slowest_host: str
    lag_s: float


@dataclass(frozen=True)
class Window:
    """Steps [first, last]: the slowest rank by mean lag."""

    first: int
    last: int
    mean_step_s: float
    slowest_rank: int
    slowest_host: str
    mean_lag_s: float


@dataclass(frozen=True)
class PartError:
    phase: str
    measured_s: float
    predicted_s: float | None

    @property
    def error_pct(self) -> float | None:
        if self.predicted_s is None or self.measured_s <= 0:
            return None
        return 100.0 * (self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True)
class RunProfile:
    """The whole profile (`--json`: `as_dict`)."""

    run_dir: str
    ranks: list[int]
    steps: list[StepProfile]
    windows: list[Window]
    parts: list[PartError]
    measured_step_s: float
    prediction: Prediction | None
    skipped_lines: int
    replayed_records: int

    @property
    def step_error_pct(self) -> float | None:
        if self.prediction is None or self.measured_step_s <= 0:
            return None
        return 100.0 * (self.prediction.step_s - self.measured_step_s) / self.measured_step_s

    def as_dict(self) -> dict[str, Any]:
        return {"command": "profile", "run_dir": self.run_dir, "ranks": self.ranks,
                "measured_step_s": self.measured_step_s,
                "predicted_step_s": self.prediction.step_s if self.prediction else None,
                "step_error_pct": self.step_error_pct,
                "parts": [{"phase": p.phase, "measured_s": p.measured_s, "predicted_s": p.predicted_s,
                           "error_pct": p.error_pct} for p in self.parts],
                "windows": [vars(w) for w in self.windows],
                "steps": [{**vars(s), "rank_step_s": {str(k): v for k, v in s.rank_step_s.items()}}
                          for s in self.steps],
                "prediction": self.prediction.as_dict() if self.prediction else None,
                "skipped_lines": self.skipped_lines, "replayed_records": self.replayed_records}


def _busy(phases: dict[str, float]) -> float:
    return sum(v for k, v in phases.items() if k != "idle")


def step_profile(snap: RunSnapshot, step: int) -> StepProfile:
    records = {rank: snap.record(rank, step) for rank in snap.ranks}
    phases = {p: statistics.fmean(float(r.phases_s.get(p, 0.0)) for r in records.values()) for p in PHASES}
    busy = {rank: _busy(r.phases_s) for rank, r in records.items()}
    slowest = max(busy, key=lambda rank: busy[rank])
    return StepProfile(step, max(r.attempt for r in records.values()),
                       statistics.fmean(r.step_s for r in records.values()), phases,
                       {rank: r.step_s for rank, r in records.items()}, slowest, records[slowest].host,
                       busy[slowest] - statistics.median(busy.values()))


def _windows(steps: list[StepProfile], every: int) -> list[Window]:
    out = []
    for i in range(0, len(steps), every):
        chunk = steps[i:i + every]
        lag: dict[int, list[float]] = {}
        hosts: dict[int, str] = {}
        for s in chunk:
            for rank in s.rank_step_s:
                lag.setdefault(rank, [])
            lag[s.slowest_rank].append(s.lag_s)
            hosts[s.slowest_rank] = s.slowest_host
        mean = {rank: sum(v) / len(chunk) for rank, v in lag.items()}
        worst = max(mean, key=lambda rank: mean[rank])
        out.append(Window(chunk[0].step, chunk[-1].step, statistics.fmean(s.step_s for s in chunk), worst,
                          hosts.get(worst, "?"), mean[worst]))
    return out


def profile(snap: RunSnapshot, prediction: Prediction | None, every: int = 10) -> RunProfile:
    """The profile of every complete step (module docstring)."""
    steps = [step_profile(snap, n) for n in snap.step_numbers]
    firsts = {min((s.step for s in steps if s.attempt == a), default=-1) for a in {s.attempt for s in steps}}
    steady = [s for s in steps if s.step not in firsts] or steps
    measured = {p: statistics.median(s.phases_s[p] for s in steady) if steady else 0.0 for p in PHASES}
    parts = [PartError(p, measured[p], prediction.phases_s.get(p) if prediction else None) for p in PHASES]
    step_s = statistics.median(s.step_s for s in steady) if steady else 0.0
    return RunProfile(str(snap.root), snap.ranks, steps, _windows(steps, every) if steps else [], parts, step_s,
                      prediction, snap.skipped_lines, snap.replayed)


def profile_text(result: RunProfile) -> str:
    """The terminal view: the parts table, then the windows naming the slowest rank."""
    def ms(x: float | None) -> str:
        return "—" if x is None else f"{x * 1e3:9.3f}"

    def pct(x: float | None) -> str:
        return "—" if x is None else f"{x:+7.1f}%"

    pred = result.prediction
    lines = [f"# llmscale profile {result.run_dir}: ranks {len(result.ranks)}, complete steps {len(result.steps)}"
             f" (median over steps, first step of each attempt left out; each part averaged over ranks)",
             "# predicted: " + ("llmscale step model for the run's model/layout on this host (prediction.json)"
                                if pred else "none (give --predict, needs torch)"),
             f"{'part':<11}{'measured ms':>12}{'predicted ms':>14}{'error':>10}"]
    for p in result.parts:
        lines.append(f"{p.phase:<11}{ms(p.measured_s):>12}{ms(p.predicted_s):>14}{pct(p.error_pct):>10}")
    lines.append(f"{'step':<11}{ms(result.measured_step_s):>12}{ms(pred.step_s if pred else None):>14}"
                 f"{pct(result.step_error_pct):>10}")
    lines += ["", f"{'steps':<14}{'mean step ms':>13}  slowest rank (host): mean lag ms"]
    for w in result.windows:
        lines.append(f"{w.first:>6}-{w.last:<7}{w.mean_step_s * 1e3:>13.3f}  rank {w.slowest_rank} "
                     f"({w.slowest_host}): {w.mean_lag_s * 1e3:.3f}")
    if result.skipped_lines or result.replayed_records:
        lines.append(f"# {result.skipped_lines} unparseable lines skipped; {result.replayed_records} step records "
                     "replaced by a later attempt's")
    return "\n".join(lines)
