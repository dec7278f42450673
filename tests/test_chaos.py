"""Chaos smoke (CI, about a minute and a half): the example GPT (2 ranks, gloo) under `llmscale launch`, killed with
SIGKILL in every phase of a storage save, its checkpoint writer killed, a rank stopped (SIGSTOP → heartbeat timeout
→ restart) and a rank killed mid-compute. Required each time: no committed checkpoint lost, no resume from a partial
one, and every step's loss on every rank bitwise equal to the uninterrupted run with the same seed
(runtime/verify.py). Every process started is killed by pid in a finally (tests/launch_helpers.py)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

from llmscale.runtime import journal as jr
from llmscale.runtime.verify import Losses, losses, verify_run
from tests.launch_helpers import EXAMPLE, reap_all, start_launch, wait_beat

TOTAL = 40
CONFIG = f"""name: chaos
model: {{n_layer: 2, n_head: 2, d_model: 32, seq_len: 32}}
layout: {{dp: 2}}
nproc_per_node: 2
schedule: {{warmup_steps: 5, total_steps: {TOTAL}}}
batch: {{micro_batch_size: 4, global_batch_size: 8}}
seed: 7
checkpoint: {{memory_every_steps: {{memory}}, storage_every_steps: 5, keep: 2, save_timeout_s: 30}}
restart: {{max_attempts: 10, max_attempts_without_progress: 3, heartbeat_timeout_s: 10}}
"""


def config(tmp: Path, memory: int) -> Path:
    path = tmp / f"chaos_m{memory}.yaml"
    path.write_text(CONFIG.replace("{memory}", str(memory)))
    return path


def run(cfg: Path, run_dir: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    log = run_dir.with_suffix(".log")
    proc = start_launch(cfg, run_dir, EXAMPLE, env=env, log=log)
    try:
        proc.wait(timeout=300)
    finally:
        reap_all(proc)
    return proc.returncode, log.read_text()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Losses]:
    tmp = tmp_path_factory.mktemp("reference")
    code, log = run(config(tmp, 1000), tmp / "run")
    assert code == 0, log[-3000:]
    yield losses(tmp / "run", 2)


def test_kill_in_every_save_phase_and_the_writer(tmp_path: Path, reference: Losses) -> None:
    # one kill per attempt: each resumed attempt replays, then meets the next point (memory tier off: storage only)
    chaos = ",".join(["after_files:10:0:0", "save_writing:15:1:1", "after_manifest:20:0:2", "kill_writer:25:0:3",
                      "save_start:30:1:3"])
    code, log = run(config(tmp_path, 1000), tmp_path / "run", env={"LLMSCALE_CHAOS": chaos})
    assert code == 0, log[-3000:]
    v = verify_run(tmp_path / "run", reference, 2, TOTAL)
    assert v.ok, (v.lost, v.partial_resumes, v.curve_mismatches[:5])
    faults = jr.read(tmp_path / "run").of_kind(jr.EventKind.FAULT)
    assert [(f.attempt, f.cause, f.rank) for f in faults] == [
        (0, jr.Cause.PROCESS_KILLED, 0), (1, jr.Cause.PROCESS_KILLED, 1), (2, jr.Cause.PROCESS_KILLED, 0),
        (3, jr.Cause.PROCESS_KILLED, 1)]
    restored = {a: s for a, tier, s in v.restores}
    assert restored[1] == 5            # step 10's files written, no manifest: not committed, step 5 is
    assert restored[2] == 10           # killed while the writer wrote step 15
    assert restored[3] in (15, 20)     # step 20's manifest written, `latest` not moved: complete either way
    # step 25's writer killed (that save may have finished first), then killed in save 30 before async_save
    assert restored[4] in (20, 25)
    kills = [json.loads(line)["phase"] for line in (tmp_path / "run" / "chaos_kills.jsonl").read_text().splitlines()]
    assert kills == ["after_files", "save_writing", "after_manifest", "kill_writer", "save_start"]


def test_hang_and_compute_kill_with_the_memory_tier(tmp_path: Path, reference: Losses) -> None:
    run_dir = tmp_path / "run"
    proc = start_launch(config(tmp_path, 2), run_dir, EXAMPLE, log=tmp_path / "run.log")
    stopped: list[int] = []
    try:
        beat = wait_beat(run_dir, 1, 0, 12, proc)
        os.kill(beat.pid, signal.SIGSTOP)           # a hang: the supervisor must notice the stale heartbeat
        stopped.append(beat.pid)
        beat = wait_beat(run_dir, 0, 1, 22, proc)
        os.kill(beat.pid, signal.SIGKILL)           # mid-compute (steps are almost all compute)
        proc.wait(timeout=300)
    finally:
        for pid in stopped:                         # cleanup of the stopped rank, if the supervisor had not
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
        reap_all(proc)
    assert proc.returncode == 0, (tmp_path / "run.log").read_text()[-3000:]
    v = verify_run(run_dir, reference, 2, TOTAL)
    assert v.ok, (v.lost, v.partial_resumes, v.curve_mismatches[:5])
    faults = jr.read(run_dir).of_kind(jr.EventKind.FAULT)
    assert [(f.cause, f.rank) for f in faults] == [(jr.Cause.HANG, 1), (jr.Cause.PROCESS_KILLED, 0)]
    assert all(tier == "memory" for _, tier, _ in v.restores), v.restores
