"""`llmscale probe`: train a real transformer for a few steps under torch.distributed (CPU, gloo only), measure where
each step goes (compute, communication, idle), and put llmscale's prediction for the same model, layout and hardware
beside it, with the error. DP over every rank, EP for MoE; no TP, PP or CP.
Pipeline diagram and scope: docs/design-notes.md#measure-probe.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llmscale import __version__
from llmscale.cost.params import count_params
from llmscale.errors import SpecError
from llmscale.io.calibration import load_profile
from llmscale.io.catalog import load_constants
from llmscale.io.files import parse_spec
from llmscale.io.resolve import resolve_model
from llmscale.layout.rules import validate_one
from llmscale.measure.probe_predict import (
    ProbeSetup,
    calibrated_inputs,
    host_cluster,
    measured_split,
    predict,
    rank_steps,
    spec_changes,
)
from llmscale.specs.fingerprint import sha256_of
from llmscale.specs.model import ModelSpec

PRESETS: dict[str, dict[str, Any]] = {
    "probe-dense": {"layers": 4, "hidden": 256, "ffn_hidden": 704, "heads": 4, "vocab": 4096,
                    "source": "llmscale probe preset: a tiny Llama-style dense model (SwiGLU, RoPE, RMSNorm)"},
    "probe-moe": {"layers": 4, "hidden": 256, "ffn_hidden": 704, "heads": 4, "vocab": 4096, "experts": 8,
                  "top_k": 2, "expert_ffn_hidden": 256,
                  "source": "llmscale probe preset: a tiny Mixtral-style MoE (8 experts, top-2, every layer MoE)"},
}
STATE_BYTES_PER_PARAM = 16
"""fp32 weight, gradient and two Adam moments: what one rank keeps per parameter it holds."""


def probe_model(ref: str) -> ModelSpec:
    """A preset name, a catalog model or a model file; refused when the probe cannot build it."""
    if ref in PRESETS:
        model = parse_spec(ModelSpec, {"name": ref, **PRESETS[ref]}, where=f"probe preset {ref}")
    else:
        model = resolve_model(ref)
    from llmscale.measure.probe_model import unsupported_fields

    for field, value, allowed in unsupported_fields(model):
        raise SpecError(field, value, f"the probe supports {allowed}", where=f"model {model.name}")
    return model


@dataclass(frozen=True)
class ProbeConfig:
    """One probe run."""

    setup: ProbeSetup
    steps: int
    warmup: int
    seed: int = 0
    calibration: Path | None = None
    """A calibration profile (`llmscale calibrate`) to predict with, applied over the in-run measurements."""


def check(config: ProbeConfig) -> None:
    """One clear SpecError for a value the probe cannot run (before any process starts)."""
    setup = config.setup
    for name, value, low in (("steps", config.steps, 1), ("warmup", config.warmup, 0), ("seq_len", setup.seq_len, 1),
                             ("mbs", setup.mbs, 1), ("micro_batches", setup.micro_batches, 1),
                             ("nproc", setup.nproc, 2), ("ep", setup.ep, 1)):
        if value < low:
            raise SpecError(name, value, f"must be ≥ {low}")
    if setup.nproc % setup.ep:
        raise SpecError("ep", setup.ep, f"must divide nproc ({setup.nproc}): EP groups are folded inside DP")
    validate_one(setup.model, setup.train, setup.nproc, setup.layouts)
    counts = count_params(setup.model)
    held = counts.total - counts.routed_experts + counts.routed_experts / setup.ep
    needed = STATE_BYTES_PER_PARAM * held * setup.nproc
    available = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if needed > 0.5 * available:
        raise SpecError("model", setup.model.name,
                        f"{held:,.0f} parameters per rank × {STATE_BYTES_PER_PARAM} B × {setup.nproc} ranks = "
                        f"{needed / 2**30:.1f} GiB exceeds half of this host's {available / 2**30:.1f} GiB")


def _world(setup: ProbeSetup) -> ProbeSetup:
    """Under torchrun the world size is its WORLD_SIZE, whatever --nproc said."""
    from llmscale.measure.launch import under_torchrun

    return replace(setup, nproc=int(os.environ["WORLD_SIZE"])) if under_torchrun() else setup


def run_probe(config: ProbeConfig) -> dict[str, Any] | None:
    """Train, measure, predict, compare. The JSON document on rank 0; None on torchrun's other ranks."""
    from llmscale.measure.launch import launch
    from llmscale.measure.probe_worker import WorkerConfig, probe_rank
    from llmscale.measure.table import versions

    setup = _world(config.setup)
    check(replace(config, setup=setup))
    profile = load_profile(config.calibration) if config.calibration is not None else None
    worker = WorkerConfig(model=setup.model, seq_len=setup.seq_len, mbs=setup.mbs,
                          micro_batches=setup.micro_batches, steps=config.steps, warmup=config.warmup, ep=setup.ep,
                          seed=config.seed)
    load_before = os.getloadavg()[0]
    raw = launch(probe_rank, worker, setup.nproc, "gloo")
    if raw is None:
        return None
    ranks = raw["ranks"]
    constants = load_constants()
    cluster, collectives = host_cluster(setup, ranks, constants.comm)
    calibration: dict[str, Any] | None = None
    if profile is not None:
        in_run, _ = predict(setup, cluster, constants)
        calibrated = calibrated_inputs(cluster, constants, profile)
        calibration = {"file": str(config.calibration), "sha256": profile.sha256 or profile.body_sha256(),
                       "device": profile.device.name, "date": profile.date,
                       "changed": spec_changes(cluster, calibrated.cluster),
                       "device_mismatch": None if profile.device.name == ranks[0]["device"] else (
                           f"the profile measured '{profile.device.name}' as one device; a probe rank is "
                           f"'{ranks[0]['device']}' sharing this host with {setup.nproc - 1} other ranks"),
                       "predicted_step_s_in_run_measurements": in_run.step_s}
        cluster, constants = calibrated.cluster, calibrated.constants
    predicted, matched = predict(setup, cluster, constants)
    per_rank = rank_steps(ranks)
    measured, steps = measured_split(per_rank)
    counts = count_params(setup.model)
    probe_params = ranks[0]["non_expert_params"] + ranks[0]["expert_params"] * setup.ep
    return {
        "llmscale_version": __version__,
        "input_sha256": sha256_of(model=setup.model, train=setup.train, layout=setup.layouts.row(0)),
        "versions": versions(),
        "backend": "gloo", "device": ranks[0]["device"], "nproc": setup.nproc, "threads_per_rank": ranks[0]["threads"],
        "host_load": {"load_avg_1min_before": load_before, "cpus": os.cpu_count(),
                      "preemptions_per_step": [r["preemptions_per_step"] for r in ranks]},
        "steps": config.steps, "warmup": config.warmup,
        "model": setup.model.model_dump(mode="json"),
        "train": setup.train.model_dump(mode="json"),
        "layout": setup.layouts.row(0).model_dump(mode="json"),
        "params": {"probe_total": probe_params, "llmscale_total_params": counts.total},
        "measured_step_s": measured.step_s,
        "predicted_step_s": predicted.step_s,
        "error_pct": 100.0 * (predicted.step_s - measured.step_s) / measured.step_s,
        "measured": measured.as_dict(),
        "predicted": predicted.as_dict(),
        "prediction_matched_to_probe": matched,
        "per_step": steps,
        "per_rank_steps": per_rank,
        "calibration": calibration,
        "host": {"cluster": cluster.model_dump(mode="json"), "collectives": collectives,
                 "bench_rank0": ranks[0]["bench"]},
    }

