"""Fit the seven residual constants of the step model on one half of the published runs; report the error on both
halves, leave-one-framework-out, leave-one-release-out, and how well the data pins each constant.

Everything else the step model reads is measured or derived (catalog/gpus.yaml via scripts/derive_gemm_ceilings.py,
catalog/comm.yaml, memory.yaml). What is left to the runs are seven global numbers, each a physical quantity with
bounds (catalog/step.yaml; specs.constants.StepConstants): the launch gap per layer and pass, the host time of one
kernel-launching call (cost.host), the fixed time per step, the
sustained fraction of the tensor-core throughput, the exposed shares of overlapped TP and EP communication, and how
many micro-batches of backward the data-parallel collectives hide behind. Nothing is fitted per GPU, per framework or
per run.

Each row is built as `validate --facts profile` builds it (the published table and its framework release's profile,
never facts filed under its name) unless --facts recipe. The split is fixed and independent of the results: a run is
in the fitting half when the SHA256 of its name is even.
The loss is the mean of min(|ln(predicted / published)|, 0.5) over the fitting half, so a handful of runs the model
cannot explain (the 2021 DeepSpeed ZeRO-3 baselines) do not drag the constants. The fit is coordinate descent with
shrinking multiplicative steps inside the bounds.

Reported:
  the fitted values, each with its bounds;
  |error| median / p90 / max on the fitting half, the held-out half and all rows, dense and MoE separately;
  leave-one-framework-out: for each framework F (the runs' `framework`), the constants fitted without F's rows, the
    error on F's rows (dense and MoE separately) — how the model does on software it was not fitted on;
  leave-one-release-out: the same per framework release (megatron-bridge@25.09, nemo@24.07, …);
  identifiability: d(loss)/d(ln constant) at the fit (how much the data constrains each), and the correlation of the
    constants' effects across rows (|r| near 1: two constants the data cannot tell apart).

Run:  python scripts/fit_efficiency.py [--facts profile|recipe] [--rounds 4] [--lofo-rounds 2] [--no-lofo]
      [--residuals] [--write] [--only CONSTANT ...] [--workers N]
--write puts the fitted values into catalog/step.yaml.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from llmscale.cost.step import estimate_step
from llmscale.io.catalog import load_constants
from llmscale.io.resolve import Job
from llmscale.specs.constants import Constants
from llmscale.validation.jobs import Facts, job_from_run, release_for
from llmscale.validation.runs import PublishedRun, load_runs

BOUNDS = {
    # catalog/step.yaml states each constant's meaning and why these are its bounds.
    "launch_overhead_us": (0.0, 200.0),
    "host_call_us": (2.0, 100.0),
    "step_overhead_s": (0.0, 2.0),
    "sustained_compute_fraction": (0.6, 1.0),
    "tp_comm_exposed_fraction": (0.0, 1.0),
    "ep_comm_exposed_fraction": (0.0, 1.0),
    "dp_overlap_efficiency": (0.0, 2.0),
}
Rows = list[tuple[PublishedRun, Job]]


def in_fit_half(name: str) -> bool:
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % 2 == 0


def constants_with(params: dict[str, float]) -> Constants:
    return load_constants().with_overrides({"step": params})


def predict(rows: Rows, params: dict[str, float]) -> np.ndarray:
    """Tokens/s per GPU of every row with the trial constants handed to the cost model (no patching)."""
    constants = constants_with(params)
    return np.array([float(estimate_step(j.model, j.cluster, j.train, j.layouts, constants).tokens_per_s_per_gpu[0])
                     for _, j in rows])


def log_errors(rows: Rows, params: dict[str, float]) -> np.ndarray:
    published = np.array([run.tokens_per_s_per_gpu or 1.0 for run, _ in rows])
    result: np.ndarray = np.log(predict(rows, params) / published)
    return result


def loss(rows: Rows, params: dict[str, float]) -> float:
    return float(np.mean(np.minimum(np.abs(log_errors(rows, params)), 0.5)))


def fit(rows: Rows, params: dict[str, float], rounds: int) -> dict[str, float]:
    """Coordinate descent with shrinking multiplicative steps, each value kept inside its bounds (the constants not in
    `params` keep their catalog values)."""
    best = loss(rows, params)
    step = 0.3
    for _ in range(rounds):
        for key in sorted(params):
            lo, hi = BOUNDS[key]
            for factor in (1 + step, 1 / (1 + step), 1 + step / 3, 1 / (1 + step / 3)):
                base = params[key] if params[key] > 0 else 0.05 * (hi - lo)
                trial = {**params, key: min(hi, max(lo, base * factor))}
                value = loss(rows, trial)
                if value < best - 1e-6:
                    best, params = value, trial
        step /= 2
    return params


def summary(rows: Rows, params: dict[str, float]) -> str:
    """|error| median / p90 / max (percent) and row count, dense and MoE."""
    errors = np.abs(np.expm1(log_errors(rows, params))) * 100 if rows else np.array([])
    kinds = np.array(["moe" if j.model.is_moe else "dense" for _, j in rows])
    parts = []
    for kind in ("dense", "moe"):
        e = errors[kinds == kind] if rows else errors
        parts.append(f"{kind} {e.size:>3} rows " + (f"{np.median(e):5.1f} {np.percentile(e, 90):5.1f} {e.max():6.1f}"
                                                     if e.size else "    -     -      -"))
    return "   ".join(parts)


def identifiability(rows: Rows, params: dict[str, float]) -> None:
    """d(loss)/d(ln constant) and the correlation of the constants' effects on the rows' log errors."""
    base = log_errors(rows, params)
    base_loss = float(np.mean(np.minimum(np.abs(base), 0.5)))
    columns, names = [], sorted(params)
    print(f"{'constant':<28}{'value':>9}{'bounds':>16}{'dloss/dln':>11}")
    for key in names:
        lo, hi = BOUNDS[key]
        value = params[key] if params[key] > 0 else 1e-3
        trial = {**params, key: value * 1.05}
        shifted = log_errors(rows, trial)
        columns.append((shifted - base) / np.log(1.05))
        sensitivity = (float(np.mean(np.minimum(np.abs(shifted), 0.5))) - base_loss) / np.log(1.05)
        print(f"{key:<28}{params[key]:>9.3f}{f'[{lo:g}, {hi:g}]':>16}{sensitivity:>11.4f}")
    jac = np.array(columns)
    scale = np.linalg.norm(jac, axis=1)
    print("effect on rows (L2 norm over rows of d ln prediction / d ln constant):",
          ", ".join(f"{k} {s:.2f}" for k, s in zip(names, scale, strict=True)))
    corr = np.corrcoef(jac[scale > 1e-9])
    kept = [k for k, s in zip(names, scale, strict=True) if s > 1e-9]
    print("correlation of effects:")
    for i, key in enumerate(kept):
        print(f"  {key:<28}" + " ".join(f"{corr[i, j]:+.2f}" for j in range(len(kept))))


def release_label(run: PublishedRun) -> str:
    release = release_for(run)
    return release.label if release is not None else f"{run.framework} (no profile)"


GROUP_KEYS = {"framework": lambda run: run.framework or "unknown", "release": release_label}
_ROWS: Rows = []
"""The rows, set before the worker processes fork (they inherit it instead of unpickling jobs)."""


def _refit_without(task: tuple[str, str, dict[str, float], int]) -> tuple[str, str, dict[str, float]]:
    """Fit on every row outside group `name` of `group` (run in a worker process)."""
    group, name, start, rounds = task
    key = GROUP_KEYS[group]
    return group, name, fit([r for r in _ROWS if key(r[0]) != name], dict(start), rounds)


def leave_one_out(rows: Rows, start: dict[str, float], rounds: int, workers: int) -> None:
    """For each group G of each grouping (the rows' framework, then release), fit without G's rows and score on them;
    the refits run in `workers` forked processes where the platform forks (each refit is independent, so the figures
    do not depend on it), else one after another."""
    global _ROWS
    _ROWS = rows
    tasks = [(group, name, start, rounds) for group, key in GROUP_KEYS.items()
             for name in sorted({key(run) for run, _ in rows})]
    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
            results = list(pool.map(_refit_without, tasks))
    else:
        results = [_refit_without(task) for task in tasks]
    for group, key in GROUP_KEYS.items():
        print(f"\nleave-one-{group}-out (fit on every other {group}, score on G; |error| % median p90 max)")
        for g, name, fitted in results:
            if g == group:
                print(f"{name:<34} {summary([r for r in rows if key(r[0]) == name], fitted)}")


CATALOG = Path(__file__).resolve().parent.parent / "src" / "llmscale" / "catalog"


def write_catalog(fitted: dict[str, float]) -> None:
    """Put the fitted values into catalog/step.yaml in place (its entries name this script as their source)."""
    step = CATALOG / "step.yaml"
    text = step.read_text(encoding="utf-8")
    for key, value in fitted.items():
        text = re.sub(rf"({key}:\n  value: )[\d.]+", rf"\g<1>{value:g}", text)
    step.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--lofo-rounds", type=int, default=2)
    parser.add_argument("--no-lofo", action="store_true", help="skip leave-one-framework-out and leave-one-release-out "
                        "(they refit per group)")
    parser.add_argument("--facts", choices=[f.value for f in Facts], default=Facts.PROFILE.value,
                        help="what each row's job reads (validation.jobs.Facts): profile, the table and its release "
                        "profile (default: the fit cannot learn from row names), or recipe, also the per-row facts")
    parser.add_argument("--residuals", action="store_true", help="print every row's error after the fit")
    parser.add_argument("--write", action="store_true", help="write the fitted values into catalog/step.yaml")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                        else os.cpu_count() or 1,
                        help="processes for the leave-one-out refits (default: every CPU this process may use)")
    parser.add_argument("--only", nargs="+", choices=sorted(BOUNDS), metavar="CONSTANT",
                        help="fit these constants only, the others held at their catalog values")
    args = parser.parse_args()
    constants = load_constants()
    rows: Rows = []
    for run in load_runs():
        try:
            rows.append((run, job_from_run(run, constants, facts=Facts(args.facts))))
        except Exception:  # the rows validate skips, for the reasons it prints
            continue
    fit_rows = [r for r in rows if in_fit_half(r[0].name)]
    held_out = [r for r in rows if not in_fit_half(r[0].name)]
    start = {key: min(BOUNDS[key][1], max(BOUNDS[key][0], getattr(constants.step, key))) for key in BOUNDS}
    free = {key: start[key] for key in (args.only or BOUNDS)}
    fitted = start | {key: round(value, 3) for key, value in fit(fit_rows, free, args.rounds).items()}
    if args.write:
        write_catalog(fitted)
    for key in sorted(fitted):
        print(f"{key:<28}{start[key]:>8.3f} -> {fitted[key]:.3f}   bounds {BOUNDS[key]}")
    print(f"\n{'half':<10}|error| %: median p90 max")
    for label, subset in (("fit", fit_rows), ("held-out", held_out), ("all", rows)):
        print(f"{label:<10}{summary(subset, fitted)}")
    print(f"loss fit {loss(fit_rows, fitted):.4f} held-out {loss(held_out, fitted):.4f}\n")
    identifiability(fit_rows, fitted)
    if not args.no_lofo:
        refit = {key: fitted[key] for key in free}
        leave_one_out(rows, refit, args.lofo_rounds, max(1, args.workers))
    if args.residuals:
        predicted = predict(rows, fitted)
        for (run, job), value in sorted(zip(rows, predicted, strict=True),
                                        key=lambda x: x[1] / (x[0][0].tokens_per_s_per_gpu or 1)):
            lay = job.resolved_layout
            error = (value / (run.tokens_per_s_per_gpu or 1) - 1) * 100
            print(f"{error:+7.1f}% {'F' if in_fit_half(run.name) else 'H'} {run.name[:70]:<70} tp{lay.tp} pp{lay.pp} "
                  f"v{lay.vpp} dp{lay.dp} cp{lay.cp} ep{lay.ep} mbs{lay.mbs} {lay.recompute.value}")


if __name__ == "__main__":
    main()
