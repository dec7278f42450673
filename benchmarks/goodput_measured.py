"""Measured vs predicted goodput of the example GPT under `llmscale launch`, with failures injected as a Poisson
process over wall time — restarts included — at two rates.

    PYTHONPATH=src python benchmarks/goodput_measured.py --mtbf-s 20 40 --steps 21000 48000 --out /tmp/goodput

Injector: arrivals at rate 1 / MTBF over the whole run; each SIGKILLs a trainer process of the attempt running at
that moment — training, or still starting, rendezvousing or restoring (a failure that strikes a restart, which the
model lets happen: it repeats the restart). Between two attempts, while the supervisor itself has no trainer up (a
fraction of a second: restart.backoff_s is 0 here), the arrival waits for the next trainer and kills it.

Measured goodput = productive time / wall time, as reliability/goodput.py defines it (Meta's ETTR, Kokolis et al.
arXiv:2410.21680): productive = Σ over the surviving lineage (each step 1..T once, the last attempt's record, rank 0)
of the step's iteration time − its checkpoint phase; wall = the first step's start to the last step's end (the first
start-up is in neither: the model has no term for it). A step's iteration time is the time from the previous step's
end to its own (its step_s for an attempt's first step): the loop's bookkeeping between two timed steps (the step
record, the heartbeat: ~2 ms a step, 8 % of this small model's step) recurs in a run without failures too, so it is
part of the step the model is fed, not time lost to failures.

Predicted = the two-tier efficiency `llmscale goodput` evaluates for the tiered policy
(reliability.intervals.segment_efficiency) fed with the run's own figures: λ = failures delivered in the window /
wall (the journal's measured MTBF); τ = memory interval × mean productive step; C = the lineage's checkpoint time per
memory interval (the storage saves' blocking spread over the segments: with q = 0 the storage multiple k drops out);
q = 0 (a killed process leaves the host's memory tier, so every restart reads it); R_m = R_s = mean time from a kill
in training to the next attempt's first step (detect + restart + load), over kills whose restart was not struck.
Beside it: the prediction with the injected λ, and montecarlo.simulate over the same wall time (mean, p5-p95).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from llmscale.reliability.intervals import segment_efficiency  # noqa: E402
from llmscale.reliability.montecarlo import SimulationInputs, simulate  # noqa: E402
from llmscale.runtime.files import RunPaths, append_line, read_lines  # noqa: E402
from llmscale.runtime.procs import descendants  # noqa: E402
from tests.launch_helpers import EXAMPLE, example_config, reap_all, reap_run, start_launch  # noqa: E402

MEMORY_EVERY, STORAGE_EVERY = 10, 100
KILLS = "goodput_kills.jsonl"
"""Each delivered kill (time_unix, attempt, pid), in the run directory: `--measure-only` reads them back."""


@dataclass(frozen=True)
class Kill:
    time_unix: float
    attempt: int
    pid: int


def _trainers(supervisor: int) -> list[tuple[int, int]]:
    """(pid, attempt) of the trainer processes below the supervisor (their command line names the example script;
    not the checkpoint writers)."""
    out = []
    for pid in descendants(supervisor):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        attempt = next((int(e.split(b"=", 1)[1]) for e in env if e.startswith(b"LLMSCALE_ATTEMPT=")), -1)
        if EXAMPLE.name in cmd and "multiprocessing" not in cmd:
            out.append((pid, attempt))
    return out


def inject(run_dir: Path, proc: subprocess.Popen[str], mtbf_s: float, rng: random.Random) -> list[Kill]:
    """Poisson arrivals from the first step on, until the job ends (module docstring)."""
    steps = RunPaths(run_dir).steps(0)
    while proc.poll() is None and not read_lines(steps).rows:
        time.sleep(0.05)
    kills: list[Kill] = []
    next_at = time.time() + rng.expovariate(1.0 / mtbf_s)
    while proc.poll() is None:
        time.sleep(0.01)
        if time.time() < next_at:
            continue
        live = _trainers(proc.pid)
        while not live and proc.poll() is None:  # between attempts: the next trainer takes it
            time.sleep(0.005)
            live = _trainers(proc.pid)
        if live:
            pid, attempt = rng.choice(live)
            try:
                os.kill(pid, signal.SIGKILL)
                kills.append(Kill(time.time(), attempt, pid))
                append_line(run_dir / KILLS, json.dumps(asdict(kills[-1])))
            except ProcessLookupError:
                pass
        next_at = time.time() + rng.expovariate(1.0 / mtbf_s)
    return kills


def measure(run_dir: Path, kills: list[Kill]) -> dict[str, float]:
    """The run's goodput and its own costs (module docstring)."""
    rows = read_lines(RunPaths(run_dir).steps(0)).rows
    final: dict[int, tuple[dict, float]] = {}
    previous: dict | None = None
    for row in rows:  # the file is in time order: the last record of a step is its surviving run
        follows = previous is not None and previous["attempt"] == row["attempt"] and previous["step"] == row["step"] - 1
        final[row["step"]] = (row, row["time_unix"] - previous["time_unix"] if follows else row["step_s"])
        previous = row
    productive = [wall_s - r["phases_s"].get("checkpoint", 0.0) for r, wall_s in final.values()]
    checkpoint = sum(r["phases_s"].get("checkpoint", 0.0) for r, _ in final.values())
    start = min(r["time_unix"] - r["step_s"] for r in rows)
    end = max(r["time_unix"] for r in rows)
    first_step: dict[int, float] = {}
    for r in rows:
        first_step[r["attempt"]] = min(first_step.get(r["attempt"], 1e30), r["time_unix"] - r["step_s"])
    in_window = [k for k in kills if start <= k.time_unix <= end]
    training = [k for k in in_window if k.attempt in first_step and first_step[k.attempt] < k.time_unix]
    struck = {k.attempt for k in in_window if k not in training}  # killed before its first step: a struck restart
    restarts = [first_step[k.attempt + 1] - k.time_unix for k in training
                if k.attempt + 1 in first_step and k.attempt + 1 not in struck]
    wall = end - start
    return {"productive_s": sum(productive), "wall_s": wall, "step_s": statistics.fmean(productive),
            "c_s": checkpoint / (len(final) / MEMORY_EVERY), "r_s": statistics.fmean(restarts or [0.0]),
            "failures": len(in_window), "in_training": len(training), "in_restart": len(in_window) - len(training),
            "restarts_timed": len(restarts), "lambda": len(in_window) / wall}


def _config(out: Path, mtbf: float, steps: int) -> Path:
    cfg = out / f"mtbf{mtbf:g}.yaml"
    example_config(cfg, "goodput-bench", steps, d_model=64, seq_len=64, micro_batch=8, seed=11,
                   memory_every=MEMORY_EVERY, storage_every=STORAGE_EVERY, warmup_steps=10, max_attempts=100_000,
                   without_progress=100_000, heartbeat_timeout_s=10, save_timeout_s=60)
    doc = yaml.safe_load(cfg.read_text())
    doc["restart"]["backoff_s"] = 0.0  # the model has no backoff: attempts without progress restart at once
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    return cfg


def run_rate(out: Path, mtbf: float, steps: int, seed: int,
             measure_only: bool = False) -> tuple[dict[str, float], float, float, dict]:
    run_dir = out / f"mtbf{mtbf:g}"
    if not measure_only:
        print(f"# injected MTBF {mtbf:g} s, {steps} steps", flush=True)
        proc = start_launch(_config(out, mtbf, steps), run_dir, EXAMPLE, log=out / f"mtbf{mtbf:g}.log")
        try:
            inject(run_dir, proc, mtbf, random.Random(seed))
        finally:
            reap_all(proc)
            reap_run(run_dir)
    kills = [Kill(**row) for row in read_lines(run_dir / KILLS).rows]
    m = measure(run_dir, kills)
    tau_s = MEMORY_EVERY * m["step_s"]
    predict = float(segment_efficiency(m["lambda"], 0.0, tau_s, m["c_s"], 1, m["r_s"], m["r_s"]))
    injected = float(segment_efficiency(1.0 / mtbf, 0.0, tau_s, m["c_s"], 1, m["r_s"], m["r_s"]))
    mc = simulate(SimulationInputs(m["lambda"], 0.0, tau_s, m["c_s"], 1, m["r_s"], m["r_s"], m["wall_s"]),
                  trials=4000, seed=seed)
    return m, predict, injected, mc.percentiles(mc.goodput)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mtbf-s", type=float, nargs="+", default=[20.0, 40.0])
    ap.add_argument("--steps", type=int, nargs="+", default=[21000, 48000], help="total steps, one per MTBF")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/llmscale-goodput"))
    ap.add_argument("--measure-only", action="store_true", help="read the runs already in --out, run nothing")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [(mtbf, *run_rate(args.out, mtbf, steps, args.seed + i, args.measure_only))
            for i, (mtbf, steps) in enumerate(zip(args.mtbf_s, args.steps, strict=True))]
    print("# goodput = productive step time / wall time; predicted = reliability.intervals.segment_efficiency with the "
          "run's own λ (failures / wall), τ, C and R; [inj]: with the injected λ; MC: montecarlo.simulate, 4000 trials")
    print(f"{'mtbf_s':>7} {'fails':>5} {'train/rst':>9} {'wall_s':>7} {'prod_s':>7} {'step_s':>7} {'C_s':>7} "
          f"{'R_s':>6} {'meas_mtbf':>9} {'measured':>8} {'predicted':>9} {'diff_%':>7} {'pred[inj]':>9} "
          f"{'MC mean':>7} {'MC p5-p95':>11}")
    for mtbf, m, pred, inj, band in rows:
        got = m["productive_s"] / m["wall_s"]
        print(f"{mtbf:>7g} {m['failures']:>5.0f} {m['in_training']:>4.0f}/{m['in_restart']:<4.0f} "
              f"{m['wall_s']:>7.1f} {m['productive_s']:>7.1f} {m['step_s']:>7.4f} {m['c_s']:>7.4f} {m['r_s']:>6.2f} "
              f"{1 / m['lambda']:>9.1f} {got:>8.3f} {pred:>9.3f} {100 * (pred - got) / got:>7.1f} {inj:>9.3f} "
              f"{band['mean']:>7.3f} {band['p5']:>5.3f}-{band['p95']:<5.3f}")


if __name__ == "__main__":
    main()
