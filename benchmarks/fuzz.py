"""Fuzz every input surface of the llmscale CLI (issue 14) and the Python API (issue 28); count what comes back.

A seeded generator builds each case — a mutated model file, HF config.json, cluster file, published-runs file,
calibration profile, saved plan or exported launch file, a hostile path, random layout and run flags, a random
valid spec, a run directory read back by `profile`/`journal`, or a Python API call with a wrong argument — runs it
in-process through `llmscale.cli.main.main(argv)` (or the API function) under a per-case alarm, and classifies it
(fuzz_run.py: ok, error, usage, traceback, exit-code, unclear, non-finite, hang, silent). Prints the counts by
surface × outcome, each distinct failure site (exception type and innermost llmscale frame, or the class and
command) with one reproducer, and a summary line; `--findings FILE` also writes them as Markdown.

Run:  PYTHONPATH=src python benchmarks/fuzz.py [--cases 10000] [--seed 0] [--surface NAME] [--json]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import resource
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzz_api as fa
import fuzz_files as ff
import fuzz_flags as fl
from fuzz_run import FAILURES, Outcome, Result, run_case

Generator = Callable[[random.Random, ff.Bases], ff.Case]
SURFACES: dict[str, tuple[float, Generator]] = {
    "model-file": (0.14, ff.model_case),
    "hf-config": (0.10, ff.hf_case),
    "cluster-file": (0.12, ff.cluster_case),
    "runs-file": (0.08, ff.runs_case),
    "calibration": (0.08, ff.calibration_case),
    "from-plan": (0.06, ff.from_plan_case),
    "launch-file": (0.06, ff.launch_case),
    "filesystem": (0.06, ff.filesystem_case),
    "layout-flags": (0.14, lambda rng, _: fl.layout_case(rng)),
    "run-flags": (0.10, lambda rng, _: fl.run_flags_case(rng)),
    "valid-spec": (0.06, lambda rng, _: fl.valid_case(rng)),
    "run-dir": (0.05, fa.run_dir_case),
    "api": (0.06, fa.api_case),
}
"""Each input surface: its share of the cases and its generator."""

MEMORY_LIMIT_BYTES = 8 << 30
"""Address-space cap: an allocation of 10^30 layers fails as MemoryError (a traceback) instead of the machine."""


@dataclass
class Report:
    cases: int
    seed: int
    seconds: float
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    sites: dict[str, list[Result]] = field(default_factory=dict)
    seconds_by: Counter[str] = field(default_factory=Counter)

    def total(self, outcome: Outcome) -> int:
        return sum(c[outcome.value] for c in self.counts.values())


def _cli(*argv: str) -> str:
    from llmscale.cli.main import main

    out = io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(io.StringIO()):
            main(list(argv))
    except SystemExit:
        pass
    return out.getvalue()


def saved_outputs() -> dict[str, str]:
    """The documents the from-plan and launch-file surfaces mutate, written by the CLI itself."""
    job = ("-m", "llama3-8b", *ff.SMALL_CLUSTER)
    return {"explain": _cli("explain", *job, "--json"), "megatron": _cli("export", "--format", "megatron", *job),
            "torchtitan": _cli("export", "--format", "torchtitan", *job)}


SILENT_KINDS = (("duplicate key", "duplicate key"), ("add ", "unknown key"), ("(unsealed)", "unsealed profile"),
                ("(edited after", "profile edited after sealing"), ("--from-plan with", "--from-plan contradicted"),
                ("no row", "nothing evaluated"), ("!", "non-standard YAML tag"), ("nesting", "deep nesting"),
                ("empty file", "empty file"), ("not a mapping", "not a mapping"), ("control", "control characters"),
                ("alias bomb", "YAML alias bomb"), ("e-300", "vanishing value"), ("e-324", "vanishing value"),
                ("llmscale.", "API argument of the wrong type"))


def silent_kind(what: str) -> str:
    return next((kind for needle, kind in SILENT_KINDS if needle in what), what.split(" = ")[0][:60])


def site_key(result: Result) -> str:
    if result.site:
        return result.site
    command = result.case.argv[0]
    if result.outcome is Outcome.NON_FINITE:
        return f"non-finite from {command}: {result.detail.split('=')[0][:80]}"
    if result.outcome is Outcome.SILENT:
        return f"silent on {result.case.surface} ({command}): {silent_kind(result.case.what)}"
    return f"{result.outcome.value} from {command} ({result.case.surface})"


def run_fuzz(cases: int, seed: int, surface: str | None = None, limit_s: int = 10,
             progress: Callable[[int, Result], None] | None = None) -> Report:
    """Generate and run `cases` cases from `seed` (case i depends only on seed and i)."""
    bases = ff.load_bases(saved_outputs())
    names = [surface] if surface else list(SURFACES)
    weights = [SURFACES[n][0] for n in names]
    report = Report(cases, seed, 0.0, {n: Counter() for n in names})
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="llmscale-fuzz-") as tmp:
        for index in range(cases):
            rng = random.Random(f"{seed}:{index}")
            name = rng.choices(names, weights)[0]
            case = SURFACES[name][1](rng, bases)
            began = time.perf_counter()
            result = run_case(case, Path(tmp) / f"c{index}", limit_s)
            result = Result(case, result.outcome, result.detail, result.site, time.perf_counter() - began)
            report.counts[name][result.outcome.value] += 1
            report.seconds_by[name] += result.seconds
            if result.outcome in (*FAILURES, Outcome.SILENT):
                report.sites.setdefault(site_key(result), []).append(result)
            if progress:
                progress(index, result)
    report.seconds = time.perf_counter() - start
    return report


def reproducer(result: Result) -> str:
    case = result.case
    argv = " ".join(repr(a) if (not a or " " in a) else a for a in case.argv)
    lines = [f"llmscale {argv}   # {case.what[:160]}"]
    for name, content in case.files:
        shown = "(a directory)" if content is None else repr(content[:300])
        lines.append(f"  {{d}}/{name}: {shown}")
    lines.append(f"  -> {result.outcome.value}: {result.detail[:300]}")
    return "\n".join(lines)


def table(report: Report) -> str:
    columns = [o.value for o in Outcome]
    rows = [f"{'surface':<14}" + "".join(f"{c:>11}" for c in columns) + f"{'cases':>8}{'s/case':>8}"]
    for name, counter in report.counts.items():
        n = sum(counter.values())
        rows.append(f"{name:<14}" + "".join(f"{counter[c]:>11}" for c in columns)
                    + f"{n:>8}{report.seconds_by[name] / max(n, 1):>8.3f}")
    rows.append(f"{'total':<14}" + "".join(f"{report.total(o):>11}" for o in Outcome)
                + f"{report.cases:>8}{report.seconds / max(report.cases, 1):>8.3f}")
    return "\n".join(rows)


def summary(report: Report) -> str:
    parts = ", ".join(f"{report.total(o)} {o.value}" for o in (*FAILURES, Outcome.SILENT))
    return (f"{report.cases} cases (seed {report.seed}) in {report.seconds:.0f} s: {parts}; "
            f"{sum(1 for k, v in report.sites.items() if v[0].outcome in FAILURES)} distinct failure sites")


def findings_markdown(report: Report) -> str:
    out = ["# llmscale fuzz findings", "", f"`{summary(report)}`", "", "```", table(report), "```", ""]
    for outcome in (*FAILURES, Outcome.SILENT):
        sites = {k: v for k, v in report.sites.items() if v[0].outcome is outcome}
        if not sites:
            continue
        out += [f"## {outcome.value} ({sum(len(v) for v in sites.values())} cases, {len(sites)} sites)", ""]
        for key, results in sorted(sites.items(), key=lambda kv: -len(kv[1])):
            out += [f"### {key} — {len(results)} cases", "```", reproducer(results[0]), "```", ""]
    return "\n".join(out)


def to_json(report: Report) -> dict[str, object]:
    return {"cases": report.cases, "seed": report.seed, "seconds": round(report.seconds, 1),
            "counts": {k: dict(v) for k, v in report.counts.items()},
            "totals": {o.value: report.total(o) for o in Outcome},
            "sites": {k: {"outcome": v[0].outcome.value, "cases": len(v), "reproducer": reproducer(v[0])}
                      for k, v in report.sites.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--surface", choices=sorted(SURFACES))
    parser.add_argument("--limit-s", type=int, default=10, help="per-case time limit (a hang beyond it)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--findings", type=Path, help="also write the findings as Markdown here")
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, resource.RLIM_INFINITY))
    report = run_fuzz(args.cases, args.seed, args.surface, args.limit_s)
    if args.findings:
        args.findings.write_text(findings_markdown(report), encoding="utf-8")
    if args.json:
        print(json.dumps(to_json(report), indent=2))
    else:
        print(findings_markdown(report))
    return 1 if any(report.total(o) for o in FAILURES) else 0


if __name__ == "__main__":
    sys.exit(main())
