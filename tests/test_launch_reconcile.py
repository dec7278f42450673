"""The supervisor's journal reconciliation (runtime/reconcile.py) and a dead launcher's fault (relaunch.py), on files
written by hand: a committed storage checkpoint and a memory snapshot every rank holds, which the trainer died before
journaling, are journaled once; a snapshot only one rank holds, a manifest of another config and a directory without
a manifest are not; a fresh run's leftover memory tier is removed; a dead launcher's fault goes to the attempt it
was running, the next one when it died between attempts, none when it had stopped its job."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from llmscale.runtime import journal as jr
from llmscale.runtime.files import RunPaths
from llmscale.runtime.reconcile import fresh_memory_tier, reconcile

SHA = "ab" * 32


def _snapshot(paths: RunPaths, rank: int, step: int, sha: str = SHA) -> None:
    root = paths.memory_tier(rank)
    root.mkdir(parents=True, exist_ok=True)
    (root / f"step_{step:08d}.pt").write_bytes(b"x" * 10)
    (root / f"step_{step:08d}.json").write_text(json.dumps({"step": step, "config_sha256": sha, "bytes": 10,
                                                            "time_unix": 5.0}))


def test_unjournaled_commits_are_journaled_once(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path)
    try:
        jr.append(tmp_path, jr.Event(jr.EventKind.CHECKPOINT_SAVED, 0, SHA, step=5, tier="storage"))
        for step, sha in ((5, SHA), (10, SHA), (15, "cd" * 32)):
            d = paths.checkpoints / f"step_{step:08d}"
            d.mkdir(parents=True)
            (d / "manifest.json").write_text(json.dumps({"step": step, "config_sha256": sha, "time_unix": 7.0}))
        (paths.checkpoints / "step_00000020").mkdir()                   # partial: no manifest
        for rank in (0, 1):
            _snapshot(paths, rank, 8)
        _snapshot(paths, 0, 12)                                          # rank 1 never finished step 12
        found = reconcile(paths, paths.checkpoints, 2, SHA, attempt=3)
        assert [(e.event, e.step, e.tier, e.attempt) for e in found] == [
            (jr.EventKind.CHECKPOINT_SAVED, 10, "storage", 3), (jr.EventKind.MEMORY_SNAPSHOT, 8, "memory", 3)]
        assert found[0].extra == {"manifest_time_unix": 7.0}
        assert reconcile(paths, paths.checkpoints, 2, SHA, attempt=4) == []   # already journaled
        saved = jr.read(tmp_path).of_kind(jr.EventKind.CHECKPOINT_SAVED)
        assert sorted(e.step for e in saved if e.step is not None) == [5, 10]
    finally:
        shutil.rmtree(paths.memory_tier(), ignore_errors=True)


def test_a_fresh_run_removes_a_leftover_memory_tier(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path)
    try:
        _snapshot(paths, 0, 30)
        assert fresh_memory_tier(paths) and not paths.memory_tier().exists()
        assert not fresh_memory_tier(paths)
    finally:
        shutil.rmtree(paths.memory_tier(), ignore_errors=True)


def test_a_dead_launchers_fault_goes_to_the_attempt_it_was_running(tmp_path: Path) -> None:
    from llmscale.runtime.relaunch import Orphans, journal_death
    from llmscale.runtime.runlock import Holder

    paths, dead, none = RunPaths(tmp_path), Holder(4242, "h1", 1.0), Orphans((), ())
    ev = jr.EventKind
    jr.append(tmp_path, jr.Event(ev.ATTEMPT_START, 3, SHA, time_unix=10.0))
    found = journal_death(paths, 2, SHA, dead, none)                     # died while attempt 3 ran
    assert found is not None and (found.attempt, found.cause, found.pid, found.host) == (3, jr.Cause.LAUNCHER, 4242,
                                                                                         "h1")
    assert journal_death(paths, 2, SHA, dead, none).attempt == 4  # type: ignore[union-attr]  # after its fault: next
    jr.append(tmp_path, jr.Event(ev.STOP, 4, SHA, reason="completed"))
    assert journal_death(paths, 2, SHA, dead, none) is None              # it had stopped its job: no fault
