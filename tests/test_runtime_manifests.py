"""The storage tier's directories (runtime/manifests.py) on files written by hand, and the memory tier's snapshots:
a re-save of a committed step never writes into it and replaces it only after its own commit; a crash between the
renames leaves the step loadable; an unreadable manifest is reported, not skipped; the prune keeps `keep` distinct
steps and cleans quarantined checkpoints the run has passed; a memory snapshot re-saved under a torn commit keeps
the committed one; the steps a restore lost count from where the last attempt stopped. No processes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from llmscale.runtime import manifests as mf
from llmscale.runtime.files import step_dir_name

SAVES = iter(range(1, 1000))
"""Manifest times: each save later than the one before."""


def _save(root: Path, step: int, tag: str, payload: bytes, commit: bool = True) -> Path:
    """A save as storage.py makes it: files in a fresh staging directory, then (commit) the manifest of them."""
    staging = root / mf.staging_name(step, tag)
    staging.mkdir(parents=True)
    (staging / "__0_0.distcp").write_bytes(payload)
    (staging / ".metadata").write_bytes(b"meta" + payload)
    if commit:
        manifest = {"step": step, "world_size": 1, "files": mf.checkpoint_files(staging),
                    "time_unix": float(next(SAVES))}
        (staging / mf.MANIFEST).write_text(json.dumps(manifest))
    return staging


def test_a_resave_goes_to_a_fresh_directory_and_replaces_the_commit_after_its_own(tmp_path: Path) -> None:
    first = mf.place(tmp_path, _save(tmp_path, 8, "a0", b"old"), 8, "a0")
    assert first.name == "step_00000008"
    before = (first / "__0_0.distcp").read_bytes()
    staging = _save(tmp_path, 8, "a1", b"new")        # the re-save: the committed directory is untouched meanwhile
    assert (first / "__0_0.distcp").read_bytes() == before
    assert [c.path.name for c in mf.committed(tmp_path)] == ["step_00000008", staging.name]
    final = mf.place(tmp_path, staging, 8, "a1")
    (commit,) = mf.committed(tmp_path)
    assert commit.path == final and (final / "__0_0.distcp").read_bytes() == b"new"
    assert mf.MANIFEST not in commit.manifest["files"] and mf.verify(final, commit.manifest) == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000008"]


def test_a_commit_cut_between_the_renames_still_loads(tmp_path: Path) -> None:
    old = mf.place(tmp_path, _save(tmp_path, 8, "a0", b"old"), 8, "a0")
    staging = _save(tmp_path, 8, "a1", b"new")
    old.rename(tmp_path / "step_00000008.replaced-a1")  # place()'s first rename, then the process died
    found = mf.committed(tmp_path)
    assert {c.step for c in found} == {8} and all(mf.verify(c.path, c.manifest) == "" for c in found)
    assert found[0].path == staging                      # the newer manifest first
    mf.place(tmp_path, _save(tmp_path, 8, "a2", b"newest"), 8, "a2")  # the next commit of step 8 replaces both
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000008"]


def test_unreadable_manifests_and_partials_are_reported_not_skipped(tmp_path: Path) -> None:
    _save(tmp_path, 4, "a0", b"x")
    torn = _save(tmp_path, 6, "a0", b"y")
    (torn / mf.MANIFEST).write_text('{"step": 6, "fi')
    partial = _save(tmp_path, 7, "a0", b"z", commit=False)
    commits, bad = mf.scan(tmp_path)
    assert [c.step for c in commits] == [4]
    assert [b.path for b in bad] == [torn] and "unreadable" in bad[0].reason
    assert mf.partials(tmp_path) == [partial]
    moved = mf.quarantine(tmp_path, torn)
    assert moved == tmp_path / mf.QUARANTINE / torn.name and not torn.exists()
    assert mf.step_of(moved.name) == 6


def test_prune_counts_distinct_steps_and_cleans_what_the_run_passed(tmp_path: Path) -> None:
    for step in (4, 8, 12):
        mf.place(tmp_path, _save(tmp_path, step, "a0", bytes([step])), step, "a0")
    extra = _save(tmp_path, 12, "a1", b"copy")                          # a second commit of step 12
    old_partial = _save(tmp_path, 2, "a0", b"p", commit=False)
    new_partial = _save(tmp_path, 14, "a1", b"p", commit=False)
    (tmp_path / mf.QUARANTINE).mkdir()
    for name in ("step_00000010", "step_00000016"):
        (tmp_path / mf.QUARANTINE / name).mkdir()
    mf.prune(tmp_path, keep=2, just_committed=12)
    assert {c.step for c in mf.committed(tmp_path)} == {8, 12} and extra.exists()   # two steps, not two directories
    assert not old_partial.exists() and new_partial.exists()
    assert [p.name for p in (tmp_path / mf.QUARANTINE).iterdir()] == ["step_00000016"]
    assert not (tmp_path / step_dir_name(4)).exists()


def test_a_memory_snapshot_resave_keeps_the_committed_one_until_its_own_commit(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from llmscale.runtime import memtier

    tier = memtier.MemoryTier(tmp_path, "sha", world_size=2)
    tier.save(5, {"w": torch.ones(3)})
    real = memtier.write_atomic

    def torn(path: Path, data: bytes, durable: bool = True) -> None:
        if path.suffix == ".json":
            raise OSError(28, "No space left on device")               # the manifest never lands
        real(path, data, durable)

    monkeypatch.setattr(memtier, "write_atomic", torn)
    with pytest.raises(OSError):
        tier.save(5, {"w": torch.zeros(3)})
    monkeypatch.setattr(memtier, "write_atomic", real)
    payload, problem = tier.load(5)
    assert problem == "" and payload is not None and payload["w"].tolist() == [1.0, 1.0, 1.0]
    assert memtier.MemoryTier(tmp_path, "sha", world_size=1).steps() == []  # another world size: not this tier's


def _records(path: Path, rows: list[tuple[int, int]]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "rank0.jsonl").write_text("".join(json.dumps(
        {"step": s, "rank": 0, "attempt": a, "host": "h", "time_unix": 0.0, "step_s": 0.1, "phases_s": {},
         "loss": 1.0, "tokens": 1}) + "\n" for a, s in rows))


def test_steps_lost_count_from_where_the_last_attempt_stopped(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from llmscale.runtime.files import RunPaths
    from llmscale.runtime.restore import Restorer

    # attempt 3 reached step 120; attempt 4 fell back to 100, reached 105, died; attempt 5 restores 104: 1 step lost
    _records(tmp_path / "steps", [(3, s) for s in range(100, 121)] + [(4, s) for s in range(101, 106)])
    events: list[dict[str, Any]] = []

    class FakeSession:
        paths = RunPaths(tmp_path)
        ctx = type("Ctx", (), {"rank": 0})()

        def event(self, kind: Any, **values: Any) -> None:
            events.append(values)

    Restorer(None, None, None, None, None, None)._restored(FakeSession(), "memory", 104, 0.1)  # type: ignore[arg-type]
    assert events[0]["steps_lost"] == 1   # was max over all records: 120 - 104 = 16
    shutil.rmtree(tmp_path / "steps")
