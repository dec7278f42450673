"""Fuzz cases over the input files of issue 14: model YAML/JSON, HF config.json, cluster files, published-runs
files (`validate --runs`), calibration profiles (`--calibration`), saved plans (`--from-plan`), exported launch
files (`read-megatron`, `read-torchtitan`) and the file system itself (missing, a directory, a 300-character name,
empty, not UTF-8).

Each generator takes the seeded `random.Random` and the `Bases` read once from the catalog, and returns a `Case`.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fuzz_values as fv
import yaml

ROOT = Path(__file__).resolve().parents[1]
HF_DIR = ROOT / "tests" / "fixtures" / "hf"
SMALL_CLUSTER = ("-c", "h100-sxm:64", "--tp", "8")
"""A job every catalog model can be explained on in milliseconds (and a 10T model is simply not runnable)."""


@dataclass(frozen=True)
class Case:
    """One CLI run: its argv (`{d}` stands for the case's own directory), the files to write there first, the
    names an error must mention (any one), and whether exit 0 would be a silent acceptance."""

    surface: str
    argv: tuple[str, ...]
    what: str
    names: tuple[str, ...] = ()
    files: tuple[tuple[str, str | bytes | None], ...] = ()
    must_refuse: bool = False
    call: tuple[str, tuple[tuple[str, Any], ...]] | None = None
    """A Python API case (fuzz_api.py): the function of `llmscale` and its keyword arguments, called instead of argv."""


@dataclass
class Bases:
    """Valid documents to mutate, read once from the catalog and the test fixtures."""

    models: list[dict[str, Any]] = field(default_factory=list)
    clusters: list[dict[str, Any]] = field(default_factory=list)
    hf: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    profile: dict[str, Any] = field(default_factory=dict)
    constants: dict[str, dict[str, Any]] = field(default_factory=dict)
    saved: dict[str, str] = field(default_factory=dict)


def load_bases(saved: dict[str, str]) -> Bases:
    from llmscale.io.catalog import load_cluster, load_constants, load_model

    bases = Bases(saved=saved)
    for name in ("llama3-8b", "mixtral-8x7b", "deepseek-v3", "gpt3-175b"):
        bases.models.append(load_model(name).model_dump(mode="json"))
    for name in ("dgx-b200", "selene", "gb200-nvl72", "seed-500k"):
        doc = load_cluster(name).model_dump(mode="json")
        bases.clusters.append({**doc, "num_gpus": 64})
    bases.hf = [json.loads((d / "config.json").read_text()) for d in sorted(HF_DIR.iterdir())]
    rows = yaml.safe_load((ROOT / "src" / "llmscale" / "data" / "published_runs.yaml").read_text())
    bases.runs = [rows[i] for i in (0, 1, 22, 24, 31, 46, 50) if i < len(rows)]
    bases.profile = {
        "format": 1, "device": {"kind": "cuda", "name": "fuzz H100", "ranks": 8}, "gpu": "h100-sxm",
        "date": "2026-01-01T00:00:00+00:00", "versions": {"llmscale": "0.1.0", "torch": "2.13.0", "python": "3.11"},
        "gemm": [{"dtype": "bfloat16", "precision": "bf16", "peak_flops_per_s": 7e14, "half_dim": 256.0}],
        "memory": {"copy_bytes_per_s": 2.6e12, "size_bytes": 1 << 30},
        "scopes": [{"scope": "intra-node", "tier": 0, "ranks": 8, "backend": "nccl", "collectives": [
            {"op": "all_reduce", "busbw_bytes_per_s": 3.6e11, "large_bytes": 1 << 28, "small_time_s": 2e-5,
             "small_bytes": 4096}]}],
    }
    bases.constants = {k: v for k, v in load_constants().model_dump(mode="json").items() if isinstance(v, dict)}
    return bases


def _spec_text(doc: Any, rng: random.Random, json_ok: bool = True) -> tuple[str, str, fv.Edit]:
    """A mutated document as (file name, text, edit): a value edit (YAML or JSON) or a whole-file edit (YAML)."""
    as_json = json_ok and rng.random() < 0.25
    if rng.random() < 0.8 or as_json:
        mutated, edit = fv.mutate(doc, rng)
        return ("spec.json" if as_json else "spec.yaml"), fv.to_text(mutated, as_json), edit
    text, edit = fv.file_level_edit(fv.to_text(doc, False), doc, rng)
    return "spec.yaml", text, edit


def model_case(rng: random.Random, bases: Bases) -> Case:
    name, text, edit = _spec_text(rng.choice(bases.models), rng)
    path = "{d}/" + name
    argv = rng.choice((("show", "model", path, "--json"), ("hash", path),
                       ("explain", "-m", path, *SMALL_CLUSTER, "--json"),
                       ("memory", "-m", path, *SMALL_CLUSTER, "--json"),
                       ("export", "--format", rng.choice(("megatron", "torchtitan")), "-m", path, *SMALL_CLUSTER)))
    return Case("model-file", argv, edit.what, (*edit.path, name), ((name, text),), edit.must_refuse)


def hf_case(rng: random.Random, bases: Bases) -> Case:
    doc = rng.choice(bases.hf)
    if rng.random() < 0.3:  # the fields the issue names: layer counts, MoE and DeepSeek group fields
        doc = json.loads(json.dumps(doc))
        key = rng.choice(("num_hidden_layers", "n_group", "topk_group", "first_k_dense_replace", "moe_layer_freq",
                          "num_local_experts", "n_routed_experts", "num_experts", "decoder_sparse_step",
                          "hidden_size", "num_key_value_heads", "intermediate_size", "vocab_size"))
        doc[key] = fv.hostile_value(rng)
        text, edit = fv.to_text(doc, True), fv.Edit(f"{key} = {doc[key]!r}", (key,), False)
    else:
        mutated, edit = fv.mutate(doc, rng, strict_keys=False)
        text = fv.to_text(mutated, True)
    path = "{d}/config.json"
    argv = rng.choice((("show", "model", path, "--json"), ("hash", path),
                       ("explain", "-m", path, "-c", "h100-sxm:64", "--tp", "4", "--json")))
    return Case("hf-config", argv, edit.what, (*edit.path, "config.json"), (("config.json", text),),
                edit.must_refuse)


def cluster_case(rng: random.Random, bases: Bases) -> Case:
    name, text, edit = _spec_text(rng.choice(bases.clusters), rng)
    path = "{d}/" + name
    argv = rng.choice((("show", "cluster", path, "--json"),
                       ("explain", "-m", "llama3-8b", "-c", path, "--tp", "8", "--gpus", "64", "--json"),
                       ("memory", "-m", "mixtral-8x7b", "-c", path, "--tp", "8", "--ep", "8", "--gpus", "64", "--json"),
                       ("goodput", "-m", "llama3-8b", "-c", path, "--gpus", "64", "--trials", "20", "--json")))
    return Case("cluster-file", argv, edit.what, (*edit.path, name), ((name, text),), edit.must_refuse)


def runs_case(rng: random.Random, bases: Bases) -> Case:
    rows = rng.sample(bases.runs, rng.choice((1, 1, 2)))
    roll = rng.random()
    if roll < 0.8:
        index = rng.randrange(len(rows))
        row, edit = fv.mutate(rows[index], rng, skip=("source", "notes", "name", "mfu_kind"))
        rows = [*rows[:index], row, *rows[index + 1:]]
        text = fv.to_text(rows, False)
    elif roll < 0.9:  # nothing to evaluate: no rows, or only rows without a target
        rows = [] if rng.random() < 0.5 else [{**r, "tokens_per_s_per_gpu": None} for r in rows]
        text, edit = fv.to_text(rows, False), fv.Edit("no row with a target", ("runs",), True)
    else:
        text, edit = fv.file_level_edit(fv.to_text(rows[0], False), rows[0], rng)
        text = "- " + text.replace("\n", "\n  ") if edit.what.startswith("duplicate") else text
    argv = ("validate", "--runs", "{d}/runs.yaml", *(("--json",) if rng.random() < 0.8 else ()))
    return Case("runs-file", argv, edit.what, (*edit.path, "runs.yaml"), (("runs.yaml", text),), edit.must_refuse)


def _sealed(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The document with the seal `llmscale calibrate` would write, or None when it is not a valid profile."""
    from llmscale.specs.calibration import CalibrationProfile

    try:
        return {**doc, "sha256": CalibrationProfile.model_validate(doc).body_sha256()}
    except Exception:
        return None


def _profile_doc(rng: random.Random, bases: Bases) -> tuple[dict[str, Any], fv.Edit]:
    doc = json.loads(json.dumps(bases.profile))
    if rng.random() < 0.4:
        component = rng.choice(sorted(bases.constants))
        key = rng.choice(sorted(bases.constants[component]))
        doc["constants"] = {component: {key: fv.hostile_value(rng)}}
        return doc, fv.Edit(f"constants.{component}.{key} = {doc['constants'][component][key]!r}",
                            ("constants", component, key), False)
    return fv.mutate(doc, rng, skip=("date", "versions", "name"))


def calibration_case(rng: random.Random, bases: Bases) -> Case:
    doc, edit = _profile_doc(rng, bases)
    roll, must_refuse = rng.random(), edit.must_refuse
    sealed = _sealed(doc)
    if roll < 0.5 and sealed is not None:  # absurd numbers, re-sealed
        doc, what = sealed, f"{edit.what} (re-sealed)"
    elif roll < 0.8:  # no seal at all: the issue asks for --allow-unsealed
        doc, what, must_refuse = doc, f"{edit.what} (unsealed)", True
    else:  # sealed, then edited (an edit the canonical body does not see, e.g. a dropped key at its default, is none)
        base = _sealed(json.loads(json.dumps(bases.profile))) or {}
        changed = (_sealed(doc) or {}).get("sha256") != base.get("sha256")
        doc, what = {**doc, "sha256": base.get("sha256")}, f"{edit.what} (edited after sealing)"
        must_refuse = changed
    text = fv.to_text(doc, False)
    argv = rng.choice((("explain", "-m", "llama3-8b", *SMALL_CLUSTER, "--calibration", "{d}/cal.yaml", "--json"),
                       ("plan", "-m", "llama3-8b", "-c", "h100-sxm:8", "--gpus", "8", "--top", "1",
                        "--calibration", "{d}/cal.yaml", "--json")))
    return Case("calibration", argv, what, (*edit.path, "cal.yaml", "sha256"), (("cal.yaml", text),), must_refuse)


FROM_PLAN_CONFLICTS = (("--tp", "4"), ("--pp", "2"), ("--mbs", "2"), ("--model", "llama3-70b"),
                       ("--cluster", "selene"), ("--gpus", "128"), ("--zero", "3"), ("--recompute", "full"))


def from_plan_case(rng: random.Random, bases: Bases) -> Case:
    doc = json.loads(bases.saved["explain"])
    command = rng.choice(("explain", "memory", "export"))
    extra = ("--format", "megatron") if command == "export" else ("--json",)
    if rng.random() < 0.5:  # a layout flag that contradicts the saved job (llama3-8b, h100-sxm:64, tp 8)
        flag = rng.choice(FROM_PLAN_CONFLICTS)
        return Case("from-plan", (command, "--from-plan", "{d}/plan.json", *flag, *extra),
                    f"--from-plan with {' '.join(flag)}", (flag[0].lstrip("-"), "from-plan", "plan.json"),
                    (("plan.json", json.dumps(doc)),), True)
    mutated, edit = fv.mutate(doc, rng, strict_keys=False)
    return Case("from-plan", (command, "--from-plan", "{d}/plan.json", *extra), edit.what,
                (*edit.path, "plan.json"), (("plan.json", fv.to_text(mutated, True)),), edit.must_refuse)


_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.])")


def launch_case(rng: random.Random, bases: Bases) -> Case:
    kind = rng.choice(("megatron", "torchtitan"))
    text = bases.saved[kind]
    body = [m for m in _NUMBER.finditer(text) if not text[:m.start()].endswith("@ ")]
    hit = rng.choice(body)
    value = rng.choice(("9223372036854775808", "1" + "0" * 30, "-1", "0", "inf", "nan", "1e400", "abc", "1.5", "''",
                        "True"))
    line = text[text.rfind("\n", 0, hit.start()) + 1:text.find("\n", hit.end())]
    flag = next(iter(re.findall(r"--[\w-]+|\w+(?= *[=:])", line)), "")
    mutated = text[:hit.start()] + value + text[hit.end():]
    name = "launch.sh" if kind == "megatron" else "recipe.py"
    argv = (f"read-{kind}", "{d}/" + name, "--json")
    return Case("launch-file", argv, f"{line.strip()[:60]!r}: {hit.group()} -> {value}",
                (flag.lstrip("-"), flag.lstrip("-").replace("-", "_"), name), ((name, mutated),),
                False)


FILE_FLAGS = (("explain", "-m", "{f}", *SMALL_CLUSTER), ("explain", "-m", "llama3-8b", "-c", "{f}", "--tp", "8"),
              ("validate", "--runs", "{f}"), ("explain", "-m", "llama3-8b", *SMALL_CLUSTER, "--calibration", "{f}"),
              ("explain", "--from-plan", "{f}"), ("show", "model", "{f}"), ("show", "cluster", "{f}"), ("hash", "{f}"),
              ("read-megatron", "{f}"), ("read-torchtitan", "{f}"), ("goodput", "-c", "{f}", "--trials", "5"))


def filesystem_case(rng: random.Random, bases: Bases) -> Case:
    """A path that cannot be read as the file a flag wants."""
    template = rng.choice(FILE_FLAGS)
    roll = rng.randrange(6)
    files: tuple[tuple[str, str | bytes | None], ...] = ()
    if roll == 0:
        path, what = "{d}/" + "x" * 300 + ".yaml", "300-character file name"
    elif roll == 1:
        path, what, files = "{d}/adir.yaml", "a directory", (("adir.yaml", None),)
    elif roll == 2:
        path, what = "{d}/missing.yaml", "missing file"
    elif roll == 3:
        path, what, files = "{d}/empty.yaml", "empty file", (("empty.yaml", ""),)
    elif roll == 4:
        path, what, files = "{d}/latin1.yaml", "not UTF-8", (("latin1.yaml", b"name: caf\xe9\nlayers: \xff\xfe\n"),)
    else:
        path, what = "{d}/" + "/".join(["deep"] * 40) + "/x.yaml", "missing directories"
    argv = tuple(path if token == "{f}" else token for token in template)
    return Case("filesystem", argv, what, (Path(path).name, path.replace("{d}/", ""), "file", "path"), files, True)
