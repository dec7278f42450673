"""Fuzz cases over the surfaces issue 28 added: run directories read back by `profile` and `journal` (step records
mutated, nested deep, non-finite, of the wrong type), and the Python API (`llmscale.plan`, `explain`, … called with
arguments of the wrong type or absurd values, each of which must be refused with one SpecError naming it).

An API case carries `call` = (function, keyword arguments) instead of a command line; fuzz_run.run_case calls it.
"""

from __future__ import annotations

import json
import random
from typing import Any

import fuzz_values as fv
from fuzz_files import SMALL_CLUSTER, Bases, Case

STEP = {"step": 0, "rank": 0, "attempt": 1, "host": "host0", "time_unix": 1e9, "step_s": 0.121,
        "phases_s": {"data": 0.001, "compute": 0.1, "comm": 0.02, "checkpoint": 0.0, "idle": 0.0}, "loss": 3.0,
        "tokens": 512}
"""A step record as the runtime writes it (runtime/files.py StepRecord), the base the run-dir cases mutate."""
PREDICTION = {"format": 1, "llmscale_version": "0.1.0", "config_sha256": "ab" * 32, "world_size": 2,
              "phases_s": {"data": 0.0, "compute": 0.1, "comm": 0.02, "checkpoint": 0.0, "idle": 0.0},
              "step_s": 0.12, "peak_flops_per_s_per_rank": 1e10, "model_flops_per_token": 1e6, "detail": {}}


def _steps(rank: int, count: int) -> list[dict[str, Any]]:
    return [{**STEP, "step": s, "rank": rank, "host": f"host{rank}", "time_unix": 1e9 + s} for s in range(count)]


def run_dir_case(rng: random.Random, bases: Bases) -> Case:
    """A two-rank run directory with one step line (or the cached prediction) mutated or replaced."""
    lines = {rank: [json.dumps(row) for row in _steps(rank, 6)] for rank in (0, 1)}
    prediction, what, names = json.dumps(PREDICTION), "", ("rank0.jsonl", "prediction.json", "run")
    roll = rng.random()
    if roll < 0.5:
        mutated, edit = fv.mutate(rng.choice(_steps(0, 6)), rng, skip=("host",), strict_keys=False)
        lines[0][rng.randrange(6)] = fv.to_text(mutated, True).replace("\n", "")
        what = f"step record {edit.what}"
    elif roll < 0.7:  # issue 28: a line nested 100,000 deep raised RecursionError in runtime/files.py
        depth = rng.choice((100, 10_000, 100_000))
        lines[0].append('{"step": ' + "[" * depth + "]" * depth + "}")
        what = f"step record nested {depth} deep"
    elif roll < 0.85:
        lines[0].append(rng.choice(("{not json", "[1, 2]", "null", '{"step": NaN}', "\x00\x01", "{}")))
        what = f"junk line {lines[0][-1]!r}"
    else:
        doc, edit = fv.mutate(PREDICTION, rng, strict_keys=False)
        prediction, what = fv.to_text(doc, True), f"prediction.json {edit.what}"
    files: list[tuple[str, str | bytes | None]] = [
        ("run", None), ("run/steps", None), ("run/config.sha256", "ab" * 32 + "\n"),
        ("run/prediction.json", prediction),
        *((f"run/steps/rank{rank}.jsonl", "\n".join(rows) + "\n") for rank, rows in lines.items())]
    argv = rng.choice((("profile", "{d}/run", "--json"), ("profile", "{d}/run", "--no-predict"),
                       ("profile", "{d}/run", "--json", "--every", "2"), ("journal", "{d}/run", "--json")))
    return Case("run-dir", argv, what, names, tuple(files))


LAYOUT = {"tp": 8}
BASE: dict[str, dict[str, Any]] = {
    "explain": {"model": "llama3-8b", "cluster": SMALL_CLUSTER[1], "layout": LAYOUT},
    "memory": {"model": "llama3-8b", "cluster": SMALL_CLUSTER[1], "layout": LAYOUT},
    "export": {"model": "llama3-8b", "cluster": SMALL_CLUSTER[1], "layout": LAYOUT},
    "plan": {"model": "llama3-8b", "cluster": "h100-sxm:8", "gpus": 8, "top": 1},
    "goodput": {"cluster": "h100-sxm:64", "trials": 5},
    "validate": {"runs": None},
    "allocate": {"cluster": "h100-sxm:8", "family": "dense", "days": 1},
}
"""A valid call of each API function (the argument under test replaces one of its values)."""
PATHS = (5, 5.5, True, [], {}, ("a",), b"x")
"""Not a path: an int is a file descriptor to open(), which waited on descriptor 5."""
WRONG: dict[str, dict[str, tuple[Any, ...]]] = {
    "explain": {"model": (5, 5.5, True, [], {}), "cluster": (5, True, ["x"]), "layout": (5, "tp=8", [("tp", 8)],
                (("tp", 8),), True), "train": (5, "x", [1], True), "gpus": (5.5, "8", True, -1, 0),
                "from_plan": PATHS, "calibration": PATHS, "expect_sha256": (5, True), "allow_unsealed": ("x", 5)},
    "export": {"fmt": (5, "xml", True), "from_plan": PATHS, "layout": (5, [("tp", 8)])},
    "plan": {"rules": (5, [("tp", 8)], "tp=8"), "top": (0, -1, 1.5, "1", True), "objective": (5, "speed"),
             "framework": (5, "jax"), "deadline_days": (0, -1, "x", True, 1e-300, float("inf")),
             "max_memory_fraction": (0, -1, 2, "x", float("inf"))},
    "goodput": {"intervals_min": (5, "5", [True], ["a"], {"a": 1}, [1e-300]), "mitigations": (5, "x", ["bogus"]),
                "days": ("x", True, -1, 0, 1e-300), "trials": (1.5, "5", True, -1), "seed": (-1, 1.5, "x"),
                "step_s": ("x", True, 1e-300, -1), "hot_spares": ("no", 5), "force": ("x",)},
    "validate": {"runs": PATHS, "calibration": PATHS, "allow_unsealed": ("x", 5)},
    "allocate": {"cluster": (5, True, []), "gpus": (1.5, "8", True), "days": ("x", True, -1, 1e-300),
                 "models": (5, "llama3-8b", [5]), "seq_len": (1.5, "x", True), "explain_3x": ("x", 5),
                 "family": (5, "both2"), "law": (5, "kaplan"), "unique_tokens": ("x", True, -1)},
}
WRONG["memory"] = WRONG["explain"]


def api_case(rng: random.Random, bases: Bases) -> Case:
    """One API function with one argument replaced by a value of the wrong type or an absurd one: it must be
    refused (must_refuse) with one SpecError naming the argument."""
    function = rng.choice(sorted(WRONG))
    name = rng.choice(sorted(WRONG[function]))
    value = rng.choice(WRONG[function][name])
    kwargs = {**BASE[function], name: value}
    call = (function, tuple(sorted(kwargs.items(), key=lambda kv: kv[0])))
    return Case("api", ("api", function), f"llmscale.{function}({name}={value!r})", (name,), (), True, call)
