"""Randomized kills of the example GPT under `llmscale launch`: the chaos table and the recovery times.

    PYTHONPATH=src python benchmarks/chaos.py --runs 10 --kills 10 --seed 0 --out /tmp/chaos

Each run gets `--kills` faults, one per attempt at a random rank: SIGKILL inside a storage save (save_start,
save_writing, after_files, after_manifest: runtime/chaos.py's hook points), SIGKILL from outside at a random
moment of a step (compute), or the checkpoint writer killed (kill_writer: training goes on, the next save starts a
fresh writer). Odd runs use the memory tier every 2 steps, even runs storage only. Every run is checked against one
uninterrupted run with the same seed (runtime/verify.py): no committed checkpoint lost, no resume from a partial
one, every step's loss bitwise equal. Prints the table, the blocking time per save (storage, memory), the restore
time per tier, and the time from kill to training again (detect + restart + load + first step), from the journal,
the step logs and the kill times the hooks record (chaos_kills.jsonl; the driver's own for compute kills).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from llmscale.runtime import journal as jr  # noqa: E402
from llmscale.runtime.files import RunPaths, read_lines  # noqa: E402
from llmscale.runtime.verify import losses, verify_run  # noqa: E402
from tests.launch_helpers import EXAMPLE, reap_all, start_launch, wait_beat  # noqa: E402

SAVE_PHASES = ("save_start", "save_writing", "after_files", "after_manifest")
PHASES = (*SAVE_PHASES, "compute", "kill_writer")
EVERY = 5
CONFIG = """name: chaos-bench
model: {{n_layer: 2, n_head: 2, d_model: 32, seq_len: 32}}
layout: {{dp: 2}}
nproc_per_node: 2
schedule: {{warmup_steps: 5, total_steps: {total}}}
batch: {{micro_batch_size: 4, global_batch_size: 8}}
seed: 7
checkpoint: {{memory_every_steps: {memory}, storage_every_steps: {every}, keep: 2, save_timeout_s: 30}}
restart: {{max_attempts: {attempts}, max_attempts_without_progress: 3, heartbeat_timeout_s: 10}}
"""


def plan(rng: random.Random, kills: int) -> list[tuple[str, int, int]]:
    """(phase, step, rank) per fault, at increasing save steps (each attempt makes progress past the last); the
    commit phases on rank 0, the rank that commits."""
    out = []
    for i in range(kills):
        phase = rng.choice(PHASES)
        rank = 0 if phase in ("after_files", "after_manifest") else rng.randrange(2)  # rank 0 commits
        out.append((phase, EVERY * (i + 2), rank))
    return out


def run_one(out: Path, index: int, faults: list[tuple[str, int, int]], total: int, memory: int) -> Path:
    run_dir = out / f"run{index:03d}"
    cfg = out / f"run{index:03d}.yaml"
    cfg.write_text(CONFIG.format(total=total, memory=memory, every=EVERY, attempts=len(faults) + 5))
    attempt, hooks, external = 0, [], []
    for phase, step, rank in faults:
        if phase == "compute":
            external.append((attempt, step - 2, rank))
        else:
            hooks.append(f"{phase}:{step}:{rank}:{attempt}")
        if phase != "kill_writer":
            attempt += 1
    proc = start_launch(cfg, run_dir, EXAMPLE, env={"LLMSCALE_CHAOS": ",".join(hooks)},
                        log=out / f"run{index:03d}.log")
    try:
        for a, step, rank in external:
            try:
                beat = wait_beat(run_dir, rank, a, step + random.Random(step).random() * 1.5, proc)
            except AssertionError as exc:
                print(f"# run {index}: compute kill not delivered: {exc}", flush=True)
                break
            os.kill(beat.pid, signal.SIGKILL)
            with open(run_dir / "chaos_kills.jsonl", "a") as f:
                f.write(json.dumps({"phase": "compute", "step": beat.step, "rank": rank, "attempt": a,
                                    "time_unix": time.time()}) + "\n")
        proc.wait(timeout=900)
    finally:
        reap_all(proc)
    if proc.returncode != 0:
        print(f"# run {index}: launch exited {proc.returncode}; see {out}/run{index:03d}.log", flush=True)
    return run_dir


def recovery(run_dir: Path) -> list[dict[str, float]]:
    """Per kill that ended an attempt: detect, restart, load, first step, and the total kill → training again."""
    events = jr.read(run_dir).events
    kills = read_lines(run_dir / "chaos_kills.jsonl").rows
    first_step: dict[int, float] = {}
    for rank in (0, 1):
        for row in read_lines(RunPaths(run_dir).steps(rank)).rows:
            start = row["time_unix"] - row["step_s"]
            a = row["attempt"]
            first_step[a] = min(first_step.get(a, start), start)
    out = []
    for kill in kills:
        if kill["phase"] == "kill_writer":
            continue
        a = kill["attempt"]
        fault = next((e for e in events if e.event is jr.EventKind.FAULT and e.attempt == a), None)
        restores = [e for e in events if e.event is jr.EventKind.RESTORE and e.attempt == a + 1]
        if fault is None or a + 1 not in first_step:
            continue
        load = max((e.load_s or 0.0) for e in restores) if restores else 0.0
        began = (max(e.time_unix for e in restores) - load) if restores else first_step[a + 1]
        out.append({"detect_s": fault.time_unix - kill["time_unix"], "restart_s": began - fault.time_unix,
                    "load_s": load, "total_s": first_step[a + 1] - kill["time_unix"],
                    "tier": 1.0 if restores and restores[0].tier == "memory" else 0.0})
    return out


def _stats(values: list[float]) -> str:
    if not values:
        return "n/a"
    q = statistics.quantiles(values, n=20) if len(values) >= 2 else [values[0]] * 19
    return f"median {statistics.median(values):.3f} s  p95 {q[18]:.3f} s  max {max(values):.3f} s  (n={len(values)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--kills", type=int, default=10, help="faults per run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/llmscale-chaos"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    total = EVERY * (args.kills + 3)
    ref = run_one(args.out, 999, [], total, 1000)
    reference = losses(ref, 2)
    phases: Counter[str] = Counter()
    committed = lost = partial = equal = 0
    recov: list[dict[str, float]] = []
    blocking: dict[str, list[float]] = {"storage": [], "memory": []}
    started = time.time()
    for i in range(args.runs):
        faults = plan(rng, args.kills)
        phases.update(p for p, _, _ in faults)
        run_dir = run_one(args.out, i, faults, total, 2 if i % 2 else 1000)
        v = verify_run(run_dir, reference, 2, total)
        committed, lost, partial = committed + len(v.committed), lost + len(v.lost), partial + len(v.partial_resumes)
        equal += not v.curve_mismatches
        for problem in v.lost + v.partial_resumes + v.curve_mismatches[:3]:
            print(f"# run {i}: {problem}", flush=True)
        recov += recovery(run_dir)
        for e in jr.read(run_dir).events:
            if e.event in (jr.EventKind.CHECKPOINT_SAVED, jr.EventKind.MEMORY_SNAPSHOT) and e.save_blocking_s:
                blocking["memory" if e.event is jr.EventKind.MEMORY_SNAPSHOT else "storage"].append(e.save_blocking_s)
        print(f"# run {i}: {len(faults)} faults, verdict {'OK' if v.ok else 'FAILED'}", flush=True)
    trials = sum(phases.values())
    print(f"# chaos: {args.runs} runs x {args.kills} faults, seed {args.seed}, {total} steps each, 2 ranks gloo CPU, "
          f"{time.time() - started:.0f} s")
    print(f"{'trials':>7} " + " ".join(f"{p:>14}" for p in PHASES) + f" {'committed':>9} {'lost':>5} "
          f"{'partial':>7} {'curves_equal':>12}")
    print(f"{trials:>7} " + " ".join(f"{phases[p]:>14}" for p in PHASES) + f" {committed:>9} {lost:>5} "
          f"{partial:>7} {f'{equal}/{args.runs}':>12}")
    print("result:", "OK" if lost == 0 and partial == 0 and equal == args.runs else "FAILED")
    print(f"save blocking, storage tier: {_stats(blocking['storage'])}")
    print(f"save blocking, memory tier:  {_stats(blocking['memory'])}")
    for tier, flag in (("memory", 1.0), ("storage", 0.0)):
        rows = [r for r in recov if r["tier"] == flag]
        print(f"restore ({tier} tier) load: {_stats([r['load_s'] for r in rows])}")
        print(f"kill -> training again ({tier}): {_stats([r['total_s'] for r in rows])}")
    for part in ("detect_s", "restart_s"):
        print(f"  {part[:-2]}: {_stats([r[part] for r in recov])}")


if __name__ == "__main__":
    main()
