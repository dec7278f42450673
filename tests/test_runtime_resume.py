"""The runtime's tiers end to end, with the example trainer in child processes this test starts (and kills by pid):
a killed run resumes from the memory tier (its /dev/shm files outlive it) — from the older snapshot when the newest
is corrupt — or, without them, from storage (two ranks: both); a corrupt shard falls back to the older checkpoint
and the re-save of its step never overwrites (the new commit loads, the corrupt one is quarantined, then cleaned); a
partial step directory is never loaded; an unreadable manifest is journaled and moved away; a full disk fails a save
without losing the committed ones; two ranks resume bitwise, and on one rank through DCP's resharding with the data
position kept. Every resumed loss curve equals the uninterrupted one bit for bit (CPU, deterministic ops).

The uninterrupted and killed runs are made once per module (one rank) and copied per test — with their memory tier
when a test resumes from it (the tier's directory is named by the run directory's path)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from llmscale.runtime.agent import free_port
from llmscale.runtime.files import RunPaths
from llmscale.runtime.manifests import MANIFEST, QUARANTINE, committed, verify

ROOT = Path(__file__).resolve().parent.parent
TINY = {"name": "tiny", "model": {"n_layer": 1, "n_head": 2, "d_model": 32, "seq_len": 32},
        "schedule": {"warmup_steps": 2, "total_steps": 12}, "batch": {"micro_batch_size": 4, "global_batch_size": 8},
        "checkpoint": {"memory_every_steps": 1, "storage_every_steps": 4}}
KILL_AT = 10
"""Killed after step 10's saves: memory snapshots 9 and 10 (every step, two kept), storage 4 and 8 committed."""


def _config(tmp: Path, ranks: int = 1, **changes: Any) -> Path:
    cfg = json.loads(json.dumps(TINY))
    cfg.update(changes)
    cfg.update(layout={"dp": ranks}, nproc_per_node=ranks)
    path = tmp / f"run{ranks}.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


def _train(run_dir: Path, config: Path, ranks: int = 1, kill_at: int | None = None) -> list[int]:
    """Run the example on `ranks` processes (torchrun's variables on loopback); their exit codes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    for name in ("LLMSCALE_RUN_DIR", "LLMSCALE_CONFIG", "LLMSCALE_ATTEMPT", "LLMSCALE_PARENT_PID"):
        env.pop(name, None)
    cmd = [sys.executable, "-m", "llmscale.runtime.example.train", "--run-dir", str(run_dir), "--config", str(config)]
    cmd += ["--kill-at-step", str(kill_at)] if kill_at is not None else []
    procs, logs = [], []
    try:
        for rank in range(ranks):
            rank_env = {**env, "RANK": str(rank), "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(rank)}
            log = open(run_dir.parent / f"{run_dir.name}.rank{rank}.log", "ab")  # noqa: SIM115 - closed below
            logs.append(log)
            procs.append(subprocess.Popen(cmd, env=rank_env if ranks > 1 else env, stdout=log, stderr=log))
        codes = []
        for proc in procs:
            try:
                proc.wait(timeout=120 if kill_at is None else 60)
            except subprocess.TimeoutExpired:  # a peer of a killed rank waits in a collective: end it
                proc.kill()
                proc.wait()
            codes.append(proc.returncode)
        return codes
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()


def _losses(run_dir: Path, rank: int = 0) -> dict[int, float]:
    """The loss of every step, the last attempt's where a step ran twice."""
    out = {}
    for line in RunPaths(run_dir).steps(rank).read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        out[row["step"]] = row["loss"]
    return out


def _events(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    lines = RunPaths(run_dir).journal.read_text(encoding="utf-8").splitlines()
    return [row for row in map(json.loads, lines) if row["event"] == kind]


def _drop_memory(run_dir: Path) -> None:
    shutil.rmtree(RunPaths(run_dir).memory_tier(), ignore_errors=True)


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An uninterrupted run and a run SIGKILLed after step KILL_AT, one rank; the copies' memory tiers removed after."""
    tmp = tmp_path_factory.mktemp("rt")
    config = _config(tmp)
    base, killed = tmp / "base", tmp / "killed"
    copies: list[Path] = []
    try:
        assert _train(base, config) == [0]
        assert _train(killed, config, kill_at=KILL_AT) == [-9]
        yield {"base": base, "killed": killed, "config": config, "tmp": tmp, "copies": copies}
    finally:
        for run in (base, killed, *copies):
            _drop_memory(run)


def _copy(runs: dict[str, Any], name: str, memory: bool) -> Path:
    """A copy of the killed run's directory, with a copy of its memory tier or none."""
    target = runs["tmp"] / name
    shutil.copytree(runs["killed"], target)
    runs["copies"].append(target)
    if memory:
        shutil.copytree(RunPaths(runs["killed"]).memory_tier(), RunPaths(target).memory_tier())
    return target


def test_the_memory_tier_outlives_the_trainer_and_a_corrupt_newest_snapshot_falls_back_to_the_older(
        runs: dict[str, Any]) -> None:
    # snapshot 10 fails its hash; 9 is still newer than storage's 8: the resume takes it (it went to storage before)
    run = _copy(runs, "memory_corrupt", memory=True)
    manifests = sorted(p.name for p in RunPaths(run).memory_tier(0).glob("step_*.json"))
    assert manifests == ["step_00000009.json", "step_00000010.json"]  # every step, two kept, after the SIGKILL
    newest = json.loads((RunPaths(run).memory_tier(0) / "step_00000010.json").read_text())
    _flip(RunPaths(run).memory_tier(0) / newest["data"])
    assert _train(run, runs["config"]) == [0]
    restore = _events(run, "restore")[-1]
    assert (restore["tier"], restore["restored_step"], restore["steps_lost"]) == ("memory", 9, 1)
    (failed,) = _events(run, "checkpoint_failed")
    assert (failed["tier"], failed["step"]) == ("memory", 10) and "SHA256 differs" in failed["reason"]
    assert _losses(run) == _losses(runs["base"])


def test_a_corrupt_shard_falls_back_and_the_resave_never_overwrites(runs: dict[str, Any]) -> None:
    run = _copy(runs, "corrupt", memory=False)
    root = RunPaths(run).checkpoints
    newest, older = committed(root)
    _flip(next(p for p in sorted(newest.path.iterdir()) if p.suffix == ".distcp"))
    partial = root / "step_00000011"  # newer, complete files, but no manifest: never loaded
    shutil.copytree(newest.path, partial)
    (partial / MANIFEST).unlink()
    torn = root / "step_00000009"  # a manifest that does not parse: journaled, moved away, never loaded
    shutil.copytree(older.path, torn)
    (torn / MANIFEST).write_text('{"step": 9, "files": {', encoding="utf-8")
    assert _train(run, runs["config"]) == [0]
    assert [e["restored_step"] for e in _events(run, "restore")] == [older.step]
    reasons = " ".join(e.get("reason", "") for e in _events(run, "checkpoint_failed"))
    assert "step_00000008: __0_0.distcp: SHA256 differs from the manifest; moved to quarantine/" in reasons, reasons
    assert "step_00000011: partial save (no manifest) removed" in reasons
    assert "step_00000009: manifest.json unreadable" in reasons
    # step 8 re-saved after the fallback: a fresh commit that loads (its manifest lists its own files only, never
    # itself), the corrupt copy quarantined and deleted once the new one committed; nothing else left behind
    kept = committed(root)
    assert [c.step for c in kept] == [12, 8] and all(verify(c.path, c.manifest) == "" for c in kept)
    assert MANIFEST not in kept[1].manifest["files"]
    assert sorted(p.name for p in root.iterdir() if p.name != QUARANTINE) == ["step_00000008", "step_00000012"]
    assert not any((root / QUARANTINE).glob("*"))
    assert _losses(run) == _losses(runs["base"])


def test_a_full_disk_fails_the_save_but_keeps_the_committed_checkpoint(tmp_path: Path) -> None:
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("mounting a size-limited tmpfs is not permitted here")
    try:
        # ~110 k parameters: a checkpoint (weights + two Adam moments, fp32) of ~1.3 MB; the second does not fit.
        config = _config(tmp_path, model={"n_layer": 2, "n_head": 2, "d_model": 64, "seq_len": 32},
                         schedule={"warmup_steps": 2, "total_steps": 8},
                         checkpoint={"dir": str(mount), "memory_every_steps": 100, "storage_every_steps": 4})
        run = tmp_path / "run"
        assert _train(run, config) == [0]  # training went on
        failed = _events(run, "checkpoint_failed")
        assert failed and all(e["cause"] == "checkpoint_io" for e in failed)
        # torch's writer reports the short write of a full disk as its own RuntimeError, inside DCP's exception
        assert all("CheckpointException" in e["reason"] for e in failed)
        assert [e["step"] for e in failed] == [8]
        kept = committed(mount)
        assert [c.step for c in kept] == [4] and verify(kept[0].path, kept[0].manifest) == ""
        assert sorted(p.name for p in mount.iterdir()) == ["step_00000004"]  # the failed save's directory removed
    finally:
        subprocess.run(["umount", str(mount)], check=False)
        _drop_memory(tmp_path / "run")


def test_two_ranks_resume_bitwise_and_on_one_rank_by_resharding(tmp_path: Path) -> None:
    config = _config(tmp_path, ranks=2)
    base, killed, storage, one = (tmp_path / n for n in ("base", "killed", "storage", "one"))
    try:
        assert _train(base, config, ranks=2) == [0, 0]
        assert -9 in _train(killed, config, ranks=2, kill_at=KILL_AT)
        shutil.copytree(killed, storage)
        shutil.copytree(killed, one)
        assert [c.step for c in committed(RunPaths(storage).checkpoints)] == [8, 4]
        assert _train(killed, config, ranks=2) == [0, 0]     # its memory tier: snapshots 9 and 10 on both ranks
        assert _train(storage, config, ranks=2) == [0, 0]    # a copy (another path): no memory tier, storage
        for run, tier, step, lost in ((killed, "memory", KILL_AT, 0), (storage, "storage", 8, 2)):
            got = {(e["rank"], e["tier"], e["restored_step"], e["steps_lost"]) for e in _events(run, "restore")}
            assert got == {(0, tier, step, lost), (1, tier, step, lost)}, got
        for rank in (0, 1):
            assert _losses(killed, rank) == _losses(base, rank) == _losses(storage, rank)
        assert _losses(base, 0) != _losses(base, 1)  # the ranks saw different data
        # dp 2 -> 1: the model and optimizer through DCP's resharding; the one rank draws both ranks' micro-batches
        # (two accumulated), so its loss is the mean of the two ranks' losses up to float rounding
        assert _train(one, _config(tmp_path, ranks=1)) == [0]
        (restore,) = _events(one, "restore")
        assert (restore["tier"], restore["restored_step"], restore["resharded_from"]) == ("storage", 8, 2)
        got, b0, b1 = _losses(one), _losses(base, 0), _losses(base, 1)
        for step in range(9, 13):
            assert got[step] == pytest.approx((b0[step] + b1[step]) / 2, rel=1e-5), step
    finally:
        for run in (base, killed, storage, one):
            _drop_memory(run)
