"""The run directory as one snapshot (contract formats): every rank's step records, the journal, the config.

A restart resumes from an older step, so one (step, rank) may have records from several attempts: the latest attempt
wins (what the run kept), and the earlier ones are counted as `replayed`. Unparseable lines are skipped and counted
(runtime.files.read_lines, runtime.journal.read). Torch-free.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from llmscale.errors import InputFileError
from llmscale.runtime.files import RunPaths, StepRecord, read_steps
from llmscale.runtime.journal import Event, read
from llmscale.specs.bounds import MAX_SECONDS

PHASES = ("data", "compute", "comm", "checkpoint", "idle")
"""The step's parts, in the order the contract's `phases_s` lists them; they add up to step_s."""


@dataclass(frozen=True)
class RunSnapshot:
    """What the run directory held when it was read."""

    root: Path
    steps: dict[int, dict[int, StepRecord]]
    """rank → step → the record of the latest attempt."""
    events: tuple[Event, ...]
    skipped_lines: int
    replayed: int
    """Records superseded by a later attempt's record of the same step and rank."""
    config_sha256: str | None

    @property
    def ranks(self) -> list[int]:
        return sorted(self.steps)

    @property
    def step_numbers(self) -> list[int]:
        """Steps every rank has recorded (a step still running on one rank is not complete)."""
        if not self.steps:
            return []
        common = set.intersection(*(set(by_step) for by_step in self.steps.values()))
        return sorted(common)

    def record(self, rank: int, step: int) -> StepRecord:
        return self.steps[rank][step]


def _ranks(paths: RunPaths) -> list[int]:
    if not paths.steps_dir.is_dir():
        return []
    found = (re.fullmatch(r"rank(\d+)\.jsonl", p.name) for p in paths.steps_dir.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _seconds(value: object) -> bool:
    """A time of the record: finite, ≥ 0 and at most MAX_SECONDS (a phase of 1e308 s summed to inf)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= MAX_SECONDS


def _finite(value: object) -> bool:
    """A number that converts to a finite float (an int of a thousand digits overflows instead)."""
    return (isinstance(value, int | float) and not isinstance(value, bool) and abs(value) <= 1e300
            and math.isfinite(value))


def well_formed(rec: StepRecord) -> bool:
    """Whether a parsed record holds what the contract says (counts, finite non-negative seconds, a phase mapping):
    a line that parses as JSON but holds a text where a number goes is skipped and counted like one that does not
    parse (the profile would otherwise fail on it, issue 28)."""
    return (all(_count(v) for v in (rec.step, rec.rank, rec.attempt, rec.tokens)) and isinstance(rec.host, str)
            and _finite(rec.time_unix) and _seconds(rec.step_s) and _finite(rec.loss)
            and isinstance(rec.phases_s, dict) and all(isinstance(k, str) and _seconds(v)
                                                       for k, v in rec.phases_s.items()))


def read_run(root: Path) -> RunSnapshot:
    """Read `root` (a run directory: it must exist; its files may not yet)."""
    if not root.is_dir():
        raise InputFileError(f"{root}: not a run directory (no such directory)")
    paths = RunPaths(root)
    steps: dict[int, dict[int, StepRecord]] = {}
    skipped = replayed = 0
    for rank in _ranks(paths):
        records, bad = read_steps(paths, rank)
        kept = [rec for rec in records if well_formed(rec)]
        skipped += bad + len(records) - len(kept)
        mine: dict[int, StepRecord] = {}
        for rec in kept:
            if rec.step in mine:
                replayed += 1
                if rec.attempt < mine[rec.step].attempt:
                    continue
            mine[rec.step] = rec
        steps[rank] = mine
    journal = read(root)
    sha = paths.config_sha256.read_text(encoding="utf-8").strip() if paths.config_sha256.is_file() else None
    return RunSnapshot(root, steps, journal.events, skipped + journal.skipped_lines, replayed, sha)
