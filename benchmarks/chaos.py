"""Randomized faults of every kind the runtime must survive, on the example GPT under `llmscale launch`: the chaos
table, the recovery times, and the verdict on each run.

    PYTHONPATH=src python benchmarks/chaos.py --runs 10 --faults 11 --seed 0 --out /tmp/chaos

Each run gets `--faults` faults of the kinds in benchmarks/chaos_faults.py — SIGKILL of a rank inside each phase of a
storage save, of a rank mid-step, SIGSTOP of a rank (a hang), SIGKILL and SIGSTOP of a checkpoint writer, SIGKILL and
SIGTERM of the launcher (then a relaunch), a second launch on the same run directory, a re-save after a resume fell
back past a corrupt checkpoint, a corrupt memory snapshot — at increasing save steps, one per attempt for those that
end one. Odd runs use the memory tier every 2 steps, even runs storage only. Then a corrupt shard and a full disk (a
1600 KiB tmpfs) under `launch`. Every run is checked against one uninterrupted run with the same seed
(runtime/verify.py): no committed checkpoint lost or unloadable, no resume from a partial one, every step's loss
bitwise equal; every delivered fault journaled with its cause (chaos_faults.journaled); no process of the run
directory left after a launcher died or after the run (orphans). Prints the table, the blocking time per save, the
restore time per tier, and the time from a kill to training again (detect + restart + load + first step).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT), str(ROOT / "benchmarks")]

import chaos_faults as cf  # noqa: E402
from chaos_extra import corrupt_shard, full_disk, recovery  # noqa: E402

from llmscale.runtime import journal as jr  # noqa: E402
from llmscale.runtime.files import RunPaths, append_line, read_lines  # noqa: E402
from llmscale.runtime.verify import Losses, losses, verify_run  # noqa: E402
from tests import launch_helpers as lh  # noqa: E402

EVERY = 5


def write_config(path: Path, total: int, memory: int, attempts: int, ckdir: str = "") -> Path:
    return lh.example_config(path, "chaos-bench", total, d_model=32, seq_len=32, micro_batch=4, seed=7,
                          memory_every=memory, storage_every=EVERY, warmup_steps=5, max_attempts=attempts,
                          without_progress=3, heartbeat_timeout_s=5, save_timeout_s=8, checkpoint_dir=ckdir or None)


@dataclass
class Run:
    """One chaos run being driven."""

    index: int
    run_dir: Path
    cfg: Path
    log: Path
    chaos: str
    proc: subprocess.Popen[str] | None = None
    launches: int = 0
    orphans: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def launch(self) -> subprocess.Popen[str]:
        self.launches += 1
        self.proc = lh.start_launch(self.cfg, self.run_dir, lh.EXAMPLE, env={"LLMSCALE_CHAOS": self.chaos},
                                 log=self.log.with_suffix(f".{self.launches}.log"))
        return self.proc

    def record(self, row: dict[str, object]) -> None:
        append_line(self.run_dir / "chaos_kills.jsonl", json.dumps({**row, "time_unix": time.time()}))


def _orphans_after_death(run: Run) -> None:
    """Processes of the run directory still alive 5 s after its launcher died (each rank and writer must die with
    it); any found are counted, then killed (they were started by the launcher this driver started)."""
    deadline = time.monotonic() + 5
    left = lh.run_processes(run.run_dir)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = lh.run_processes(run.run_dir)
    run.orphans += left
    lh.reap_run(run.run_dir)


def _launcher_fault(run: Run, f: cf.Fault) -> None:
    """SIGKILL or SIGTERM the launcher mid-attempt, damage the tiers for resave / mem_corrupt, relaunch. A double
    launch still starting must meet the live launcher first: its check is waited for."""
    for thread in run.threads:
        thread.join(timeout=150)
    proc = run.proc
    assert proc is not None
    lh.wait_beat(run.run_dir, f.rank, f.attempt, f.step + 2 + random.Random(f.step).random(), proc)
    row = {"phase": f.kind, "step": f.step, "rank": f.rank, "attempt": f.attempt, "pid": proc.pid}
    os.kill(proc.pid, signal.SIGTERM if f.kind == "launcher_term" else signal.SIGKILL)
    row["exit_code"] = proc.wait(timeout=120)
    _orphans_after_death(run)
    paths = RunPaths(run.run_dir)
    if f.kind == "resave":
        shutil.rmtree(paths.memory_tier(), ignore_errors=True)  # a lost host: storage it is
        row["corrupted_step"] = cf.corrupt_newest_storage(paths.checkpoints)
    elif f.kind == "mem_corrupt":
        row["corrupted_step"] = cf.corrupt_newest_snapshot(paths, f.rank)
    run.record(row)
    run.launch()


def _double_launch(run: Run, f: cf.Fault) -> None:
    """A second launch on the run directory while the first trains: it must be refused, naming the first. Checked
    in a thread, so that the driver's next fault is not delivered late (and past the steps the plan counts on)."""
    assert run.proc is not None
    lh.wait_beat(run.run_dir, f.rank, f.attempt, f.step, run.proc)
    log, holder = run.log.with_suffix(".second.log"), run.proc.pid
    second = lh.start_launch(run.cfg, run.run_dir, lh.EXAMPLE, log=log)

    def settle() -> None:
        try:
            code = second.wait(timeout=120)
        finally:
            lh.reap_all(second)
        run.record({"phase": f.kind, "step": f.step, "rank": f.rank, "attempt": f.attempt, "exit_code": code,
                    "refused": code == 2 and f"pid {holder}" in log.read_text()})

    thread = threading.Thread(target=settle, daemon=True)
    thread.start()
    run.threads.append(thread)


def _rank_fault(run: Run, f: cf.Fault) -> None:
    assert run.proc is not None
    beat = lh.wait_beat(run.run_dir, f.rank, f.attempt, f.step - 2 + random.Random(f.step).random() * 1.5, run.proc)
    os.kill(beat.pid, signal.SIGKILL if f.kind == "compute" else signal.SIGSTOP)
    run.stopped += [beat.pid] if f.kind == "hang" else []
    run.record({"phase": f.kind, "step": beat.step, "rank": f.rank, "attempt": f.attempt, "pid": beat.pid})


def drive(out: Path, index: int, faults: list[cf.Fault], total: int, memory: int) -> Run:
    """Start the run, deliver every fault the driver delivers (the hooks fire by themselves), wait for the end."""
    run_dir = out / f"run{index:03d}"
    cfg = write_config(out / f"run{index:03d}.yaml", total, memory, len(faults) + 5)
    run = Run(index, run_dir, cfg, out / f"run{index:03d}.log", cf.hooks(faults))
    run.launch()
    try:
        for f in faults:
            try:
                if f.kind in cf.LAUNCHER:
                    _launcher_fault(run, f)
                elif f.kind == "double_launch":
                    _double_launch(run, f)
                elif f.kind in cf.RANK_EXTERNAL:
                    _rank_fault(run, f)
            except AssertionError as exc:
                print(f"# run {index}: {f.kind} not delivered: {exc}", flush=True)
                break
        assert run.proc is not None
        run.proc.wait(timeout=1800)
        for thread in run.threads:
            thread.join(timeout=150)
    finally:
        for pid in run.stopped:  # a stopped rank the supervisor did not kill: continue it, then kill it (by pid)
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        if run.proc is not None:
            lh.reap_all(run.proc)
        run.orphans += lh.run_processes(run_dir)
        lh.reap_run(run_dir)
    if run.proc is not None and run.proc.returncode != 0:
        print(f"# run {index}: last launch exited {run.proc.returncode}; see {run.log}.*", flush=True)
    return run


@dataclass
class Tally:
    delivered: Counter[str] = field(default_factory=Counter)
    unjournaled: list[str] = field(default_factory=list)
    committed: int = 0
    lost: int = 0
    partial: int = 0
    equal: int = 0
    orphans: int = 0
    recov: list[dict[str, float]] = field(default_factory=list)
    blocking: dict[str, list[float]] = field(default_factory=lambda: {"storage": [], "memory": []})


def check(run: Run, reference: Losses, total: int, t: Tally) -> bool:
    rows = read_lines(run.run_dir / "chaos_kills.jsonl").rows
    events = jr.read(run.run_dir).events
    t.delivered.update(str(r["phase"]) for r in rows)
    missing = [f"{r['phase']}@{r['step']} attempt {r['attempt']}" for r in rows if not cf.journaled(r, events)]
    t.unjournaled += [f"run {run.index}: {m}" for m in missing]
    v = verify_run(run.run_dir, reference, 2, total)
    t.committed += len(v.committed)
    t.lost += len(v.lost)
    t.partial += len(v.partial_resumes)
    t.equal += not v.curve_mismatches
    t.orphans += len(run.orphans)
    for problem in v.lost + v.partial_resumes + v.curve_mismatches[:3] + missing:
        print(f"# run {run.index}: {problem}", flush=True)
    t.recov += recovery(run.run_dir)
    for e in events:
        if e.event in (jr.EventKind.CHECKPOINT_SAVED, jr.EventKind.MEMORY_SNAPSHOT) and e.save_blocking_s:
            t.blocking["memory" if e.event is jr.EventKind.MEMORY_SNAPSHOT else "storage"].append(e.save_blocking_s)
    return v.ok and not missing and not run.orphans


def _stats(values: list[float]) -> str:
    if not values:
        return "n/a"
    q = statistics.quantiles(values, n=10, method="inclusive") if len(values) >= 2 else [values[0]] * 9
    return f"median {statistics.median(values):.3f} s  p90 {q[8]:.3f} s  max {max(values):.3f} s  (n={len(values)})"


def report(args: argparse.Namespace, t: Tally, total: int, started: float) -> None:
    trials = sum(t.delivered.values())
    print(f"# chaos: {args.runs} runs x {args.faults} faults, seed {args.seed}, {total} steps each, 2 ranks gloo CPU, "
          f"{time.time() - started:.0f} s")
    print(" ".join(f"{k:>14}" for k in ("delivered", *cf.KINDS)))
    print(" ".join(f"{v:>14}" for v in (trials, *(t.delivered[k] for k in cf.KINDS))))
    print(f"{'committed':>10} {'lost':>5} {'partial':>7} {'unjournaled':>11} {'orphans':>7} {'curves_equal':>12}")
    print(f"{t.committed:>10} {t.lost:>5} {t.partial:>7} {len(t.unjournaled):>11} {t.orphans:>7} "
          f"{f'{t.equal}/{args.runs}':>12}")
    ok = t.lost == 0 and t.partial == 0 and t.equal == args.runs and not t.unjournaled and t.orphans == 0
    print("result:", "OK" if ok else "FAILED")
    print(f"save blocking, storage tier: {_stats(t.blocking['storage'])}")
    print(f"save blocking, memory tier:  {_stats(t.blocking['memory'])}")
    for tier, flag in (("memory", 1.0), ("storage", 0.0)):
        rows = [r for r in t.recov if r["tier"] == flag]
        print(f"restore ({tier} tier) load: {_stats([r['load_s'] for r in rows])}")
        print(f"kill -> training again ({tier}): {_stats([r['total_s'] for r in rows])}")
    for part in ("detect_s", "restart_s", "load_s"):
        print(f"  {part[:-2]}: {_stats([r[part] for r in t.recov])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--faults", type=int, default=11, help="faults per run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/llmscale-chaos"))
    ap.add_argument("--no-extra", action="store_true", help="skip the corrupt-shard and full-disk cases")
    ap.add_argument("--kinds", nargs="+", choices=cf.KINDS, default=list(cf.KINDS), help="the fault kinds drawn")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    plans = [cf.plan(rng, args.faults, EVERY, i % 2 == 1, tuple(args.kinds)) for i in range(args.runs)]
    total = max(steps for _, steps in plans)  # one reference curve for every run
    reference = losses(drive(args.out, 999, [], total, 1000).run_dir, 2)
    t, started = Tally(), time.time()
    for i, (faults, _) in enumerate(plans):
        memory = 2 if i % 2 else 1000
        run = drive(args.out, i, faults, total, memory)
        verdict = check(run, reference, total, t)
        print(f"# run {i}: {len(faults)} faults, {run.launches} launches, verdict {'OK' if verdict else 'FAILED'}",
              flush=True)
    report(args, t, total, started)
    if not args.no_extra:
        print(corrupt_shard(args.out, reference, total, write_config), flush=True)
        print(full_disk(args.out, reference, total, write_config), flush=True)


if __name__ == "__main__":
    main()
