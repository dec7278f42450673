"""Randomized kills of the example GPT under `llmscale launch`: the chaos table and the recovery times.

    PYTHONPATH=src python benchmarks/chaos.py --runs 10 --kills 10 --seed 0 --out /tmp/chaos

Each run gets `--kills` faults, one per attempt at a random rank: SIGKILL inside a storage save (save_start,
save_writing, after_files, after_manifest: runtime/chaos.py's hook points), SIGKILL from outside at a random
moment of a step (compute), SIGSTOP from outside (hang: the heartbeat watch must kill the attempt), or the
checkpoint writer killed (kill_writer: the save in flight fails, training goes on, the next save starts fresh
writers). Then a corrupt shard and a full disk (a 1600 KiB tmpfs) under `launch`. Odd runs use the memory tier
every 2 steps, even runs storage only. Every run is checked against one
uninterrupted run with the same seed (runtime/verify.py): no committed checkpoint lost, no resume from a partial
one, every step's loss bitwise equal. Prints the table, the blocking time per save (storage, memory), the restore
time per tier, and the time from kill to training again (detect + restart + load + first step), from the journal,
the step logs and the kill times the hooks record (chaos_kills.jsonl; the driver's own for compute kills).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from llmscale.runtime import journal as jr  # noqa: E402
from llmscale.runtime.files import RunPaths, read_lines  # noqa: E402
from llmscale.runtime.verify import losses, verify_run  # noqa: E402
from tests.launch_helpers import EXAMPLE, example_config, reap_all, start_launch, wait_beat  # noqa: E402

SAVE_PHASES = ("save_start", "save_writing", "after_files", "after_manifest")
PHASES = (*SAVE_PHASES, "compute", "kill_writer", "hang")
EXTERNAL = ("compute", "hang")
"""Delivered by this driver from outside: SIGKILL of the rank's pid, or SIGSTOP (a hang the heartbeat must catch)."""
EVERY = 5


def plan(rng: random.Random, kills: int) -> list[tuple[str, int, int]]:
    """(phase, step, rank) per fault, at increasing save steps (each attempt makes progress past the last); the
    commit phases on rank 0, the rank that commits."""
    out = []
    for i in range(kills):
        phase = rng.choice(PHASES)
        rank = 0 if phase in ("after_files", "after_manifest") else rng.randrange(2)  # rank 0 commits
        out.append((phase, EVERY * (i + 2), rank))
    return out


def write_config(path: Path, total: int, memory: int, attempts: int, ckdir: str = "") -> Path:
    return example_config(path, "chaos-bench", total, d_model=32, seq_len=32, micro_batch=4, seed=7,
                          memory_every=memory, storage_every=EVERY, warmup_steps=5, max_attempts=attempts,
                          without_progress=3, heartbeat_timeout_s=5, save_timeout_s=30, checkpoint_dir=ckdir or None)


def run_one(out: Path, index: int, faults: list[tuple[str, int, int]], total: int, memory: int) -> Path:
    run_dir = out / f"run{index:03d}"
    cfg = write_config(out / f"run{index:03d}.yaml", total, memory, len(faults) + 5)
    attempt, hooks, external = 0, [], []
    for phase, step, rank in faults:
        if phase in EXTERNAL:
            external.append((attempt, step - 2, rank, phase))
        else:
            hooks.append(f"{phase}:{step}:{rank}:{attempt}")
        if phase != "kill_writer":
            attempt += 1
    proc = start_launch(cfg, run_dir, EXAMPLE, env={"LLMSCALE_CHAOS": ",".join(hooks)},
                        log=out / f"run{index:03d}.log")
    stopped: list[int] = []
    try:
        for a, step, rank, phase in external:
            try:
                beat = wait_beat(run_dir, rank, a, step + random.Random(step).random() * 1.5, proc)
            except AssertionError as exc:
                print(f"# run {index}: {phase} not delivered: {exc}", flush=True)
                break
            os.kill(beat.pid, signal.SIGKILL if phase == "compute" else signal.SIGSTOP)
            stopped += [beat.pid] if phase == "hang" else []
            with open(run_dir / "chaos_kills.jsonl", "a") as f:
                f.write(json.dumps({"phase": phase, "step": beat.step, "rank": rank, "attempt": a,
                                    "time_unix": time.time()}) + "\n")
        proc.wait(timeout=900)
    finally:
        for pid in stopped:  # a stopped rank the supervisor did not kill: continue it, then kill it (by pid)
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
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
    q = statistics.quantiles(values, n=10, method="inclusive") if len(values) >= 2 else [values[0]] * 9
    return f"median {statistics.median(values):.3f} s  p90 {q[8]:.3f} s  max {max(values):.3f} s  (n={len(values)})"


def _launch(cfg: Path, run_dir: Path, log: Path, chaos: str = "") -> int:
    proc = start_launch(cfg, run_dir, EXAMPLE, env={"LLMSCALE_CHAOS": chaos}, log=log)
    try:
        proc.wait(timeout=900)
    finally:
        reap_all(proc)
    return proc.returncode


def corrupt_shard(out: Path, reference: dict[tuple[int, int], float], total: int) -> str:
    """Killed at step 20's save with max_attempts 1 (the job stops: steps 10 and 15 committed), one byte of step
    15's rank-0 shard flipped, relaunched: the resume must skip step 15 (SHA256 differs), load step 10, finish with
    the reference curve."""
    run_dir, cfg = out / "corrupt", write_config(out / "corrupt.yaml", total, 1000, 1)
    first = _launch(cfg, run_dir, out / "corrupt.log", "save_start:20:0:0")
    shard = run_dir / "checkpoints" / "step_00000015" / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    second = _launch(cfg, run_dir, out / "corrupt2.log")
    v = verify_run(run_dir, reference, 2, total, spared={15})
    failed = [e for e in jr.read(run_dir).of_kind(jr.EventKind.CHECKPOINT_FAILED) if e.attempt == 1]
    ok = first == 1 and second == 0 and v.ok and v.restores[-1][2] == 10 and any(
        e.cause is jr.Cause.CHECKPOINT_IO and "SHA256" in (e.reason or "") for e in failed)
    return (f"corrupt shard under launch: exits {first} then {second}, restores {v.restores}, journaled "
            f"{[(e.cause.value if e.cause else None, (e.reason or '')[:60]) for e in failed[:1]]}, lost {v.lost}, "
            f"curve mismatches {len(v.curve_mismatches)}: {'OK' if ok else 'FAILED'}")


def full_disk(out: Path, reference: dict[tuple[int, int], float], total: int) -> str:
    """The storage tier on a 1600 KiB tmpfs (two checkpoints of this model fit, ~630 KB each): later saves fail with
    ENOSPC (checkpoint_failed), training goes on, the committed checkpoints stay intact, the curve is the
    reference's."""
    mount = out / "small"
    mount.mkdir(exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1600k", "tmpfs", str(mount)], capture_output=True)
    if mounted.returncode:
        return "full disk under launch: not run (mounting a tmpfs is not permitted here)"
    try:
        run_dir, cfg = out / "fulldisk", write_config(out / "fulldisk.yaml", total, 1000, 3, str(mount))
        code = _launch(cfg, run_dir, out / "fulldisk.log")
        failed = jr.read(run_dir).of_kind(jr.EventKind.CHECKPOINT_FAILED)
        v = verify_run(run_dir, reference, 2, total, keep=2)
        kept = sorted(int(p.name[5:]) for p in mount.glob("step_*") if (p / "manifest.json").is_file())
        enospc = sum("space" in (e.reason or "").lower() for e in failed)
        ok = code == 0 and enospc > 0 and v.ok and len(kept) >= 1
        return (f"full disk under launch: exit {code}, {len(failed)} checkpoint_failed ({enospc} no space), "
                f"committed kept {kept}, lost {v.lost}, curve mismatches {len(v.curve_mismatches)}: "
                f"{'OK' if ok else 'FAILED'}")
    finally:
        subprocess.run(["umount", str(mount)], check=False)


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
        run_dir = run_one(args.out, i, faults, total, 2 if i % 2 else 1000)
        phases.update(k["phase"] for k in read_lines(run_dir / "chaos_kills.jsonl").rows)  # delivered, not planned
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
    for part in ("detect_s", "restart_s", "load_s"):
        print(f"  {part[:-2]}: {_stats([r[part] for r in recov])}")
    print(corrupt_shard(args.out, reference, total), flush=True)
    print(full_disk(args.out, reference, total), flush=True)


if __name__ == "__main__":
    main()
