"""Fit the few global efficiency constants of the step model on one half of the published runs and report
the error on both halves.

The split is fixed and independent of the results: a run is in the fitting half when the SHA256 of its
name is even. Fitted are, per GPU generation (Ampere, Hopper, Blackwell, Blackwell Ultra; catalog/gpus.yaml
`efficiency`),
the large-GEMM fractions of the 16-bit, FP8 and FP4 peaks and the FlashAttention efficiency, and globally
the exposed shares of TP and EP communication (catalog/step.yaml). Nothing is fitted per run or per source.
The loss is the mean of min(|ln(predicted / published)|, 0.5) over the fitting half, so a handful of runs
the model cannot explain (e.g. 2021 DeepSpeed ZeRO-3 baselines) do not drag the constants.

Run:  python scripts/fit_efficiency.py [--rounds 4] [--residuals] [--write]
It prints the fitted values, rounded to 3 decimals, and the median / p90 / max |error| on the fitting half,
the held-out half, and all rows with those rounded values; --write puts them into catalog/gpus.yaml,
catalog/efficiency.yaml and catalog/step.yaml (whose comments name this script as their source).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import re
from pathlib import Path

import numpy as np

from llmscale.cost.step import estimate_step
from llmscale.io.catalog import load_constants
from llmscale.io.resolve import Job
from llmscale.specs.cluster import ClusterSpec
from llmscale.validation.jobs import job_from_run
from llmscale.validation.runs import PublishedRun, load_runs

GENERATIONS = {
    "ampere": ("a100-40gb", "a100-80gb"),
    "hopper": ("h100-sxm", "h800", "h200"),
    "blackwell": ("b200", "gb200"),
    "blackwell_ultra": ("b300", "gb300"),
}
PER_GENERATION = ("gemm_bf16", "gemm_fp8", "gemm_fp4", "attention")
STEP_KEYS = ("tp_comm_exposed_fraction", "ep_comm_exposed_fraction", "step_overhead_s", "dp_overlap_efficiency")
GLOBAL_EFFICIENCY = ("gemm_half_dim", "hbm", "layer_overhead_us", "expert_half_tokens")
BOUNDS = {
    # Physical ceilings: no GEMM library sustains more than ~85% of a dense tensor-core peak in training, nor
    # FlashAttention more than ~75% (FlashAttention-3 reports up to 75% of H100's BF16 peak).
    "gemm": (0.2, 0.85), "attention": (0.2, 0.75), "tp_comm_exposed_fraction": (0.0, 1.0),
    "ep_comm_exposed_fraction": (0.0, 1.0), "gemm_half_dim": (1.0, 4096.0), "hbm": (0.2, 1.0),
    "layer_overhead_us": (0.0, 2000.0), "step_overhead_s": (0.0, 5.0), "dp_overlap_efficiency": (0.0, 50.0),
    "expert_half_tokens": (0.0, 8192.0),
}


def in_fit_half(name: str) -> bool:
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % 2 == 0


def generation_of(cluster: ClusterSpec) -> str | None:
    name = cluster.gpu.name.lower()
    for generation, ids in GENERATIONS.items():
        if any(name.startswith(i.split("-")[0]) for i in ids):
            return generation
    return None


def initial_params(jobs: list[tuple[PublishedRun, Job]]) -> dict[str, float]:
    params: dict[str, float] = {}
    for _, job in jobs:
        gen = generation_of(job.cluster)
        eff = job.cluster.gpu.efficiency
        if gen is not None:
            for key in PER_GENERATION:
                params.setdefault(f"{gen}.{key}", getattr(eff, key))
        for key in GLOBAL_EFFICIENCY:
            params.setdefault(key, getattr(eff, key))
    step = load_constants().step
    for key in STEP_KEYS:
        params[key] = getattr(step, key)
    return params


def predict(jobs: list[tuple[PublishedRun, Job]], params: dict[str, float]) -> np.ndarray:
    # The trial's step constants are handed to the cost model, as every caller hands its constants: no patching.
    constants = load_constants().with_overrides({"step": {k: params[k] for k in STEP_KEYS}})
    out = []
    for _, job in jobs:
        gen = generation_of(job.cluster)
        updates = {key: params[key] for key in GLOBAL_EFFICIENCY}
        if gen is not None:
            updates |= {key: params[f"{gen}.{key}"] for key in PER_GENERATION}
        gpu = job.cluster.gpu.model_copy(update={"efficiency": job.cluster.gpu.efficiency.model_copy(update=updates)})
        cluster = job.cluster.model_copy(update={"gpu": gpu})
        out.append(float(estimate_step(job.model, cluster, job.train, job.layouts, constants).tokens_per_s_per_gpu[0]))
    return np.array(out)


def loss(jobs: list[tuple[PublishedRun, Job]], params: dict[str, float]) -> float:
    published = np.array([run.tokens_per_s_per_gpu or 1.0 for run, _ in jobs])
    return float(np.mean(np.minimum(np.abs(np.log(predict(jobs, params) / published)), 0.5)))


def bounds(key: str) -> tuple[float, float]:
    name = key.split(".")[-1]
    return BOUNDS["gemm"] if name in ("gemm_bf16", "gemm_fp8", "gemm_fp4") else BOUNDS[name]


def fit(jobs: list[tuple[PublishedRun, Job]], params: dict[str, float], rounds: int) -> dict[str, float]:
    """Coordinate descent with shrinking multiplicative steps, each value kept inside its bounds."""
    best = loss(jobs, params)
    step = 0.2
    for _ in range(rounds):
        for key in sorted(params):
            lo, hi = bounds(key)
            for factor in (1 + step, 1 / (1 + step), 1 + step / 3, 1 / (1 + step / 3)):
                trial = dict(params)
                restart = {"layer_overhead_us": 20.0, "step_overhead_s": 0.1, "expert_half_tokens": 64.0}.get(key, 0.05)
                base = params[key] if params[key] > 0 else restart
                trial[key] = min(hi, max(lo, base * factor))
                value = loss(jobs, trial)
                if value < best - 1e-6:
                    best, params = value, trial
        step /= 2
    return params


def report(label: str, jobs: list[tuple[PublishedRun, Job]], params: dict[str, float]) -> None:
    published = np.array([run.tokens_per_s_per_gpu or 1.0 for run, _ in jobs])
    errors = np.abs(predict(jobs, params) / published - 1) * 100
    print(f"{label:<10}{len(jobs):>6}{np.median(errors):>10.1f}{np.percentile(errors, 90):>10.1f}{errors.max():>10.1f}")


CATALOG = Path(__file__).resolve().parent.parent / "src" / "llmscale" / "catalog"


def write_catalog(fitted: dict[str, float]) -> None:
    """Put the fitted values into the catalog files in place: the per-generation `efficiency: {...}  # fitted
    per generation (gen)` lines of gpus.yaml, the global efficiency defaults and the step constants."""
    gpus = CATALOG / "gpus.yaml"

    def generation_line(match: re.Match[str]) -> str:
        keys = re.findall(r"(\w+): [\d.]+", match.group(1))
        body = ", ".join(f"{key}: {fitted[f'{match.group(2)}.{key}']:g}" for key in keys)
        return f"efficiency: {{{body}}}  # fitted per generation ({match.group(2)})"

    text = re.sub(r"efficiency: \{([^}]*)\}  # fitted per generation \((\w+)\)", generation_line,
                  gpus.read_text(encoding="utf-8"))
    gpus.write_text(text, encoding="utf-8")
    efficiency = CATALOG / "efficiency.yaml"
    text = efficiency.read_text(encoding="utf-8")
    for key in GLOBAL_EFFICIENCY:
        text = re.sub(rf"(\n  {key}: )[\d.]+", rf"\g<1>{fitted[key]:g}", text, count=1)
    efficiency.write_text(text, encoding="utf-8")
    step = CATALOG / "step.yaml"
    text = step.read_text(encoding="utf-8")
    for key in STEP_KEYS:
        text = re.sub(rf"({key}:\n  value: )[\d.]+", rf"\g<1>{fitted[key]:g}", text)
    step.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--residuals", action="store_true", help="print every row's error after the fit")
    parser.add_argument("--write", action="store_true", help="write the fitted values into the catalog files")
    args = parser.parse_args()
    jobs = []
    constants = load_constants()
    for run in load_runs():
        try:
            jobs.append((run, job_from_run(run, constants)))
        except Exception:
            continue
    fit_jobs = [j for j in jobs if in_fit_half(j[0].name)]
    held_out = [j for j in jobs if not in_fit_half(j[0].name)]
    start = {key: min(bounds(key)[1], max(bounds(key)[0], value)) for key, value in initial_params(jobs).items()}
    fitted = {key: round(value, 3) for key, value in fit(fit_jobs, start, args.rounds).items()}
    if args.write:
        write_catalog(fitted)
    for key in sorted(fitted):
        print(f"{key:<32}{start[key]:>8.3f} -> {fitted[key]:.3f}")
    print(f"{'half':<10}{'rows':>6}{'median%':>10}{'p90%':>10}{'max%':>10}")
    for label, subset in (("fit", fit_jobs), ("held-out", held_out), ("all", jobs)):
        report(label, subset, fitted)
    if args.residuals:
        predicted = predict(jobs, fitted)
        ranked = sorted(zip(jobs, predicted, strict=True), key=lambda x: x[1] / (x[0][0].tokens_per_s_per_gpu or 1))
        for (run, job), value in ranked:
            lay = job.resolved_layout
            error = (value / (run.tokens_per_s_per_gpu or 1) - 1) * 100
            half = "F" if in_fit_half(run.name) else "H"
            print(f"{error:+7.1f}% {half} {run.name[:64]:<64} tp{lay.tp} pp{lay.pp} v{lay.vpp} dp{lay.dp} cp{lay.cp} "
                  f"ep{lay.ep} mbs{lay.mbs} {lay.recompute.value} s{job.train.seq_len}")
    print(f"loss fit {loss(fit_jobs, fitted):.4f} held-out {loss(held_out, fitted):.4f}; "
          f"e^loss-1 = {math.expm1(loss(held_out, fitted)) * 100:.1f}%")


if __name__ == "__main__":
    main()
