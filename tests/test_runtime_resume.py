"""The runtime's tiers end to end, with the example trainer in child processes this test starts (and kills by pid):
a killed run resumes from the memory tier (its /dev/shm files outlive it) or, without them, from storage; a
corrupt shard falls back to the older checkpoint; a partial step directory is never loaded; a full disk fails a save
without losing the committed ones; and every resumed loss curve equals the uninterrupted one bit for bit (CPU,
deterministic ops). One rank, and two ranks on gloo with torchrun's variables."""

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

from llmscale.runtime.files import RunPaths
from llmscale.runtime.storage import committed

ROOT = Path(__file__).resolve().parent.parent
TINY = {"name": "tiny", "model": {"n_layer": 1, "n_head": 2, "d_model": 32, "seq_len": 32},
        "schedule": {"warmup_steps": 2, "total_steps": 12}, "batch": {"micro_batch_size": 4, "global_batch_size": 8},
        "checkpoint": {"memory_every_steps": 3, "storage_every_steps": 4}}
KILL_AT = 10


def _config(tmp: Path, ranks: int = 1, **changes: Any) -> Path:
    cfg = json.loads(json.dumps(TINY))
    cfg.update(changes)
    if ranks > 1:
        cfg.update(layout={"dp": ranks}, nproc_per_node=ranks)
    path = tmp / f"run{ranks}.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


def _train(run_dir: Path, config: Path, ranks: int = 1, kill_at: int | None = None) -> list[int]:
    """Run the example on `ranks` processes (torchrun's variables on loopback); their exit codes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "MASTER_ADDR": "127.0.0.1"}
    env["MASTER_PORT"] = str(20000 + (os.getpid() * 7 + len(str(run_dir))) % 20000)
    for name in ("LLMSCALE_RUN_DIR", "LLMSCALE_CONFIG", "LLMSCALE_ATTEMPT"):
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


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An uninterrupted run and a run SIGKILLed after step KILL_AT, one rank."""
    tmp = tmp_path_factory.mktemp("rt")
    config = _config(tmp)
    base, killed = tmp / "base", tmp / "killed"
    assert _train(base, config) == [0]
    _drop_memory(base)
    assert _train(killed, config, kill_at=KILL_AT) == [-9]
    yield {"base": base, "killed": killed, "config": config, "tmp": tmp}
    for run in (killed, tmp / "storage", tmp / "corrupt"):  # the resumed runs' memory tiers
        _drop_memory(run)


def _copy(runs: dict[str, Path], name: str) -> Path:
    """A copy of the killed run's directory: another path, so no memory tier (its run id differs)."""
    target = runs["tmp"] / name
    shutil.copytree(runs["killed"], target)
    return target


def test_memory_tier_outlives_the_killed_trainer_and_resumes_bitwise(runs: dict[str, Path]) -> None:
    killed = runs["killed"]
    snapshots = sorted(RunPaths(killed).memory_tier(0).glob("step_*.pt"))
    assert [p.name for p in snapshots] == ["step_00000006.pt", "step_00000009.pt"]  # every 3 steps, two kept
    assert _train(killed, runs["config"]) == [0]
    restore = _events(killed, "restore")[-1]
    assert (restore["tier"], restore["restored_step"], restore["steps_lost"]) == ("memory", 9, KILL_AT - 9)
    assert _losses(killed) == _losses(runs["base"])


def test_storage_tier_resumes_bitwise_when_no_memory_tier(runs: dict[str, Path]) -> None:
    run = _copy(runs, "storage")
    newest = committed(RunPaths(run).checkpoints)
    assert newest, "the killed run committed no storage checkpoint"
    assert _train(run, runs["config"]) == [0]
    restore = _events(run, "restore")[-1]
    assert (restore["tier"], restore["restored_step"]) == ("storage", newest[0][0])
    assert _losses(run) == _losses(runs["base"])


def test_a_corrupt_shard_falls_back_to_the_older_checkpoint(runs: dict[str, Path]) -> None:
    run = _copy(runs, "corrupt")
    done = committed(RunPaths(run).checkpoints)
    shard = next(p for p in sorted(done[0][1].iterdir()) if p.suffix == ".distcp")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    partial = RunPaths(run).checkpoints / "step_00000011"  # newer, complete files, but no manifest: never loaded
    shutil.copytree(done[0][1], partial)
    (partial / "manifest.json").unlink()
    assert _train(run, runs["config"]) == [0]
    restore = _events(run, "restore")
    older = done[1][0] if len(done) > 1 else None
    assert (restore[-1]["restored_step"] if restore else None) == older
    reasons = " ".join(e.get("reason", "") for e in _events(run, "checkpoint_failed"))
    assert "SHA256 differs" in reasons and "step_00000011: partial save" in reasons
    assert _losses(run) == _losses(runs["base"])


def test_a_full_disk_fails_the_save_but_keeps_the_committed_checkpoint(tmp_path: Path) -> None:
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("mounting a size-limited tmpfs is not permitted here")
    try:
        # ~110 k parameters: a checkpoint (weights + two Adam moments, fp32) of ~1.3 MB; the second does not fit.
        config = _config(tmp_path, model={"n_layer": 2, "n_head": 2, "d_model": 64, "seq_len": 32},
                         checkpoint={"dir": str(mount), "memory_every_steps": 100, "storage_every_steps": 4})
        run = tmp_path / "run"
        assert _train(run, config) == [0]  # training went on
        failed = _events(run, "checkpoint_failed")
        assert failed and all(e["cause"] == "checkpoint_io" for e in failed)
        # torch's writer reports the short write of a full disk as its own RuntimeError, inside DCP's exception
        assert all("CheckpointException" in e["reason"] for e in failed)
        assert [e["step"] for e in failed] == [8, 12]
        kept = committed(mount)
        assert kept and kept[0][0] == 4
        from llmscale.runtime.storage import verify

        assert verify(kept[0][1], kept[0][2]) == ""
    finally:
        subprocess.run(["umount", str(mount)], check=False)
        _drop_memory(tmp_path / "run")


def test_two_ranks_resume_bitwise_from_memory_and_storage(tmp_path: Path) -> None:
    config = _config(tmp_path, ranks=2)
    base, killed = tmp_path / "base", tmp_path / "killed"
    try:
        assert _train(base, config, ranks=2) == [0, 0]
        assert -9 in _train(killed, config, ranks=2, kill_at=KILL_AT)
        storage = tmp_path / "storage"
        shutil.copytree(killed, storage)
        assert _train(killed, config, ranks=2) == [0, 0]
        assert _train(storage, config, ranks=2) == [0, 0]
        assert {e["tier"] for e in _events(killed, "restore")} == {"memory"}
        assert {e["tier"] for e in _events(storage, "restore")} == {"storage"}
        for rank in (0, 1):
            assert _losses(killed, rank) == _losses(base, rank) == _losses(storage, rank)
        assert _losses(base, 0) != _losses(base, 1)  # the ranks saw different data
    finally:
        for run in (base, killed, tmp_path / "storage"):
            _drop_memory(run)
