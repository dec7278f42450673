"""Measured vs predicted goodput of the example GPT under `llmscale launch`, with kills injected as a Poisson
process (SIGKILL of a random rank) at two rates.

    PYTHONPATH=src python benchmarks/goodput_measured.py --mtbf-s 20 40 --steps 800 --out /tmp/goodput

Measured goodput = productive time / wall time, as reliability/goodput.py defines it (Meta's ETTR, Kokolis et al.
arXiv:2410.21680): productive time = Σ over the steps of the surviving lineage (each step 1..T once, the record of
the last attempt that ran it, rank 0) of step_s − its checkpoint phase (the save stall is not productive); wall time
= from the first step's start to the last step's end (the one-time start-up of the first attempt is left out of
both: the model has no term for it).

Predicted = llmscale's two-tier efficiency (reliability.intervals.segment_efficiency: Daly's complete model with a
memory and a storage tier) fed with this run's own measured numbers: λ = 1 / injected MTBF; τ = memory interval ×
median productive step time; C = median memory-snapshot stall + median storage stall / k (k = storage / memory
interval); q = 0 (a killed process leaves the host's shared-memory tier intact, so every restart can read it);
R_m = median kill → training again over the run's restores from memory (detect + restart + load, measured), R_s the
same from storage (R_m when none).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from llmscale.reliability.intervals import segment_efficiency  # noqa: E402
from llmscale.reliability.montecarlo import SimulationInputs, simulate  # noqa: E402
from llmscale.runtime import journal as jr  # noqa: E402
from llmscale.runtime.files import RunPaths, read_heartbeat, read_lines  # noqa: E402
from llmscale.runtime.procs import descendants  # noqa: E402
from tests.launch_helpers import EXAMPLE, example_config, reap_all, start_launch  # noqa: E402

MEMORY_EVERY, STORAGE_EVERY = 10, 50


def _workers(supervisor_pid: int, script: str) -> list[int]:
    """The trainer processes below the supervisor (their command line names the script; not the writers)."""
    out = []
    for pid in descendants(supervisor_pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if script in cmd and "multiprocessing" not in cmd:
            out.append(pid)
    return out


def inject(run_dir: Path, proc: subprocess.Popen[str], mtbf_s: float, rng: random.Random) -> list[tuple[float, int]]:
    """Poisson kills (SIGKILL of a random trainer process) until the job ends: (time, attempt) of each. A kill that
    falls in a restart hits a starting trainer of the new attempt (the model's restarts can fail too); one that
    finds no trainer process at all (the agent between attempts) is skipped and counted."""
    paths, kills, skipped = RunPaths(run_dir), [], 0
    next_at = time.time() + rng.expovariate(1.0 / mtbf_s)
    while proc.poll() is None:
        time.sleep(0.01)
        if time.time() < next_at:
            continue
        next_at = time.time() + rng.expovariate(1.0 / mtbf_s)
        attempt = max((e.attempt for e in jr.read(run_dir).of_kind(jr.EventKind.ATTEMPT_START)), default=0)
        beats = [b for b in (read_heartbeat(paths, r) for r in (0, 1)) if b is not None and b.attempt == attempt]
        live = [b.pid for b in beats if Path(f"/proc/{b.pid}").exists()] or _workers(proc.pid, EXAMPLE.name)
        if not live:
            skipped += 1
            continue
        os.kill(rng.choice(live), signal.SIGKILL)
        kills.append((time.time(), attempt))
    print(f"#   kills delivered {len(kills)}, skipped (no trainer process) {skipped}", flush=True)
    return kills


def measure(run_dir: Path, kills: list[tuple[float, int]]) -> dict[str, float]:
    rows = read_lines(RunPaths(run_dir).steps(0)).rows
    final: dict[int, dict] = {}
    for row in rows:
        if row["step"] not in final or row["attempt"] >= final[row["step"]]["attempt"]:
            final[row["step"]] = row
    productive = [r["step_s"] - r["phases_s"].get("checkpoint", 0.0) for r in final.values()]
    start = min(r["time_unix"] - r["step_s"] for r in rows)
    wall = max(r["time_unix"] for r in rows) - start
    events = jr.read(run_dir).events
    first_step: dict[int, float] = {}
    for r in rows:
        first_step[r["attempt"]] = min(first_step.get(r["attempt"], 1e30), r["time_unix"] - r["step_s"])
    recover: dict[str, list[float]] = {"memory": [], "storage": []}
    for when, attempt in kills:
        tier = next((e.tier for e in events if e.event is jr.EventKind.RESTORE and e.attempt == attempt + 1), None)
        if attempt + 1 in first_step and tier in recover:
            recover[tier].append(first_step[attempt + 1] - when)
    stall = {k: [e.save_blocking_s for e in events if e.event is kind and e.save_blocking_s is not None]
             for k, kind in (("memory", jr.EventKind.MEMORY_SNAPSHOT), ("storage", jr.EventKind.CHECKPOINT_SAVED))}
    return {"productive_s": sum(productive), "wall_s": wall, "step_s": statistics.median(productive),
            "stall_m_s": statistics.median(stall["memory"] or [0.0]),
            "stall_s_s": statistics.median(stall["storage"] or [0.0]),
            "r_m_s": statistics.median(recover["memory"] or recover["storage"] or [0.0]),
            "r_s_s": statistics.median(recover["storage"] or recover["memory"] or [0.0]),
            "restores_m": len(recover["memory"]), "restores_s": len(recover["storage"]), "kills": len(kills)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mtbf-s", type=float, nargs="+", default=[20.0, 40.0])
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/llmscale-goodput"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, mtbf in enumerate(args.mtbf_s):
        cfg = args.out / f"mtbf{mtbf:g}.yaml"
        example_config(cfg, "goodput-bench", args.steps, d_model=64, seq_len=64, micro_batch=8, seed=11,
                       memory_every=MEMORY_EVERY, storage_every=STORAGE_EVERY, warmup_steps=10, max_attempts=1000,
                       without_progress=5, heartbeat_timeout_s=10, save_timeout_s=60)
        run_dir = args.out / f"mtbf{mtbf:g}"
        print(f"# injected MTBF {mtbf:g} s", flush=True)
        proc = start_launch(cfg, run_dir, EXAMPLE, log=args.out / f"mtbf{mtbf:g}.log")
        try:
            kills = inject(run_dir, proc, mtbf, random.Random(args.seed + i))
        finally:
            reap_all(proc)
        m = measure(run_dir, kills)
        k = STORAGE_EVERY / MEMORY_EVERY
        blocking_s = m["stall_m_s"] + m["stall_s_s"] / k
        tau_s = MEMORY_EVERY * m["step_s"]
        pred = float(segment_efficiency(1.0 / mtbf, 0.0, tau_s, blocking_s, k, m["r_m_s"], m["r_s_s"]))
        mc = simulate(SimulationInputs(1.0 / mtbf, 0.0, tau_s, blocking_s, int(k), m["r_m_s"], m["r_s_s"],
                                       m["wall_s"]), trials=4000, seed=args.seed)
        band = mc.percentiles(mc.goodput)
        rows.append((mtbf, m, m["productive_s"] / m["wall_s"], pred, band))
    print("# goodput = productive step time / wall time; predicted = reliability.intervals.segment_efficiency "
          "(analytic) and reliability.montecarlo.simulate over the same wall time (mean, p5-p95 of 4000 trials)")
    print(f"{'mtbf_s':>7} {'kills':>5} {'wall_s':>7} {'prod_s':>7} {'step_s':>7} {'C_mem_s':>8} {'C_sto_s':>8} "
          f"{'R_m_s':>6} {'R_s_s':>6} {'n_m/n_s':>7} {'measured':>8} {'analytic':>8} {'diff_%':>7} {'MC mean':>7} "
          f"{'MC p5-p95':>11}")
    for mtbf, m, got, pred, band in rows:
        print(f"{mtbf:>7g} {m['kills']:>5} {m['wall_s']:>7.1f} {m['productive_s']:>7.1f} {m['step_s']:>7.4f} "
              f"{m['stall_m_s']:>8.4f} {m['stall_s_s']:>8.4f} {m['r_m_s']:>6.2f} {m['r_s_s']:>6.2f} "
              f"{m['restores_m']:>3}/{m['restores_s']:<3} {got:>8.3f} {pred:>8.3f} {100 * (pred - got) / got:>7.1f} "
              f"{band['mean']:>7.3f} {band['p5']:>5.3f}-{band['p95']:<5.3f}")


if __name__ == "__main__":
    main()
