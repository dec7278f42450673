"""The JSON documents of the job commands — one builder each, which `--json`, the terminal tables and the HTML pages
all read, so they never disagree. Every job document starts with its provenance (`job_header`): the llmscale
version, the SHA256 of the resolved inputs, and the resolved inputs themselves (`inputs`: model, cluster and train
specs), so `--from-plan` can run the same job again from the document alone.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

import numpy as np

from llmscale import __version__
from llmscale.cost.memory import MemoryBreakdown
from llmscale.cost.step import STEP_PARTS, StepBreakdown
from llmscale.io.catalog import load_frameworks
from llmscale.io.resolve import Job
from llmscale.report.mfu_conventions import mfu_conventions
from llmscale.report.moe_table import moe_layer_document
from llmscale.search.plan import Candidate, PlanResult
from llmscale.search.plausibility import MfuExcess
from llmscale.search.targets import runnable_by
from llmscale.specs.constants import SearchConstants
from llmscale.validation.record import RecordCheck
from llmscale.validation.validate import ValidationReport

_SCALAR_FIELDS = ("capacity_bytes",)


def batch_law(const: SearchConstants) -> str:
    """How plan documents name the critical-batch law they used (search.plan.critical_batch_sequences)."""
    return f"DeepSeek LLM B_opt(C) = {const.batch_law_coefficient:.3g}·C^{const.batch_law_exponent:.4g} tokens"


def job_header(job: Job) -> dict[str, Any]:
    """Provenance every one-layout document starts with: version, input hash, model, cluster, GPUs, layout and
    training run (sequence, batch, precision, attention kernel, ...), and the resolved inputs."""
    return {
        "llmscale_version": __version__,
        "input_sha256": job.input_sha256,
        "model": job.model.name,
        "cluster": job.cluster.name,
        "num_gpus": job.num_gpus,
        "layout": job.resolved_layout.model_dump(mode="json"),
        "train": job.train.model_dump(mode="json"),
        "calibration": job.calibration.as_dict() if job.calibration is not None else None,
        "framework": profile_entry(job),
        "inputs": job.inputs_document(),
    }


def profile_entry(job: Job) -> dict[str, Any]:
    """The framework release the job ran under and what its profile set (catalog/frameworks.yaml): each setting
    with its value and the source it was read in; `kept`: settings it would set that the user gave."""
    application = job.profile
    if application is None:
        return {"release": "any", "applied": [], "kept": [], "dropped": []}
    return {"release": application.release, "engine": application.profile.engine.value if
            application.profile.engine is not None else None,
            "applied": [{"setting": s.name, "value": getattr(s.value, "value", s.value), "source": s.source,
                         "read": s.read} for s in application.applied],
            "kept": list(application.kept), "dropped": list(application.dropped)}


def memory_document(job: Job, result: MemoryBreakdown, i: int = 0) -> dict[str, Any]:
    """The JSON of `llmscale memory`: every breakdown field of layout i, totals, and provenance."""
    document = job_header(job)
    for f in fields(result):
        value = getattr(result, f.name)
        document[f.name] = float(value) if f.name in _SCALAR_FIELDS else value[i].item()
    document["other_bytes"] = float(result.other_bytes[i])
    document["total_bytes"] = float(result.total_bytes[i])
    document["fits"] = bool(result.fits[i])
    return document


def step_parts(step: StepBreakdown, i: int) -> dict[str, float]:
    """Layout i's step breakdown, part by part (`cost.step.STEP_PARTS`, which add up to the step time)."""
    return {name: float(getattr(step, name)[i]) for name in STEP_PARTS}


def excess_entry(excess: MfuExcess | None) -> dict[str, Any] | None:
    """A predicted MFU above the published record (search.plausibility): the record, the same model's prediction
    for the record run's own layout, the terms that carry the difference and the sentence the terminal prints."""
    if excess is None:
        return None
    return {"best_published_mfu": excess.record.mfu, "record_run": excess.record.run,
            "record_run_predicted_mfu": excess.record_predicted_mfu,
            "terms": [asdict(t) | {"feature": f} for t, f in zip(excess.terms, excess.features, strict=True)],
            "note": excess.text()}


def explain_document(job: Job, step: StepBreakdown, i: int = 0) -> dict[str, Any]:
    """The JSON of `llmscale explain`: the step breakdown, the rates, the memory document, and where the MFU lies
    above every published run of the GPU generation (`above_published_mfu`, else null)."""
    document: dict[str, Any] = {
        **job_header(job),
        "step_time_s": float(step.step_time_s[i]),
        "breakdown": step_parts(step, i),
        "mfu": float(step.mfu[i]),
        "mfu_conventions": mfu_conventions(job.model, job.cluster, job.train, step, i).as_dict(),
        "hfu": float(step.hfu[i]),
        "tflops_per_gpu": float(step.tflops_per_gpu[i]),
        "tokens_per_s_per_gpu": float(step.tokens_per_s_per_gpu[i]),
        "tokens_per_step": step.tokens_per_step,
        "above_published_mfu": excess_entry(RecordCheck(job)(step, i)),
        "frameworks": runs_on(job, i),
        "moe_layer": moe_layer_document(job, i),
    }
    document["memory"] = {k: v for k, v in memory_document(job, step.memory, i).items()
                          if k.endswith("_bytes") or k in ("fits", "pipeline_rank")}
    return document


def runs_on(job: Job, i: int = 0) -> list[str]:
    """The catalog frameworks whose features include layout i of the job (catalog/frameworks.yaml)."""
    return [f.value for f in runnable_by(job.layouts.take(np.array([i])), load_frameworks(), job.model.is_moe)[0]]


def validation_document(report: ValidationReport) -> dict[str, Any]:
    """The JSON of `llmscale validate`: every evaluated row, every skipped one with its reason, the error per
    framework and model type, and the summary (null statistics when no row was evaluated)."""
    return {
        "llmscale_version": __version__,
        "rows": [
            {
                "name": row.name, "framework": row.framework, "gpu": row.gpu, "model_type": row.model_type,
                "num_gpus": row.num_gpus, "cluster": row.cluster, "precision": row.precision.value,
                "recompute": row.recompute,
                "predicted_tokens_per_s_per_gpu": row.predicted_tokens_per_s_per_gpu,
                "published_tokens_per_s_per_gpu": row.published_tokens_per_s_per_gpu,
                "error_pct": row.error_pct, "fits": row.fits, "memory_bytes": row.memory_bytes,
                "capacity_bytes": row.capacity_bytes, "predicted_mfu": row.predicted_mfu,
                "published_mfu": row.published_mfu, "best_published_mfu": row.best_published_mfu,
                "above_published_mfu": row.above_published, "release": row.release, "family": row.family,
                "chosen": row.chosen, "entries": list(row.entries),
            }
            for row in report.rows
        ],
        "facts": report.facts.value,
        "skipped": [{"name": s.name, "reason": s.reason} for s in report.skipped],
        "groups": [{"framework": framework, "model_type": kind, **asdict(summary)}
                   for (framework, kind), summary in report.by_group().items()],
        "families": [{"family": family, "model_type": kind, **asdict(summary)}
                     for (family, kind), summary in report.by_family().items()],
        "summary": report.summary(),
        "calibration": report.calibration.as_dict() if report.calibration is not None else None,
    }

def top_entry(c: Candidate, check: RecordCheck) -> dict[str, Any]:
    """One scored layout of a plan: the whole layout, its rates, memory, time, cost, goodput, step parts and where
    its MFU lies above the published record (`check`)."""
    i = c.layout_index
    return {
        "layout": c.layouts.row(i).model_dump(mode="json"),
        "num_gpus": c.num_gpus,
        "step_time_s": float(c.step.step_time_s[i]),
        "mfu": float(c.step.mfu[i]),
        "above_published_mfu": excess_entry(check(c.step, i, c.layouts.row(i))),
        "tokens_per_s_per_gpu": float(c.step.tokens_per_s_per_gpu[i]),
        "memory_bytes": float(c.step.memory.total_bytes[i]),
        "memory_fraction": c.memory_fraction,
        "frameworks": [f.value for f in c.frameworks],
        "days": c.days,
        "cost_usd": c.cost_usd,
        "energy_j": c.energy_j,
        **_reliability_entry(c),
        "breakdown": step_parts(c.step, i),
    }


def _target_entry(result: PlanResult) -> dict[str, Any]:
    """What the search was bounded by: the framework and its checked commit, the user's rules, the memory cap."""
    target = result.target
    return {"name": target.framework.value, "checked": result.framework_label,
            "release": target.release.release.label if target.release and target.release.release else "any",
            "rules": {name: rule.text for name, rule in target.rules.rules.items()},
            "max_memory_fraction": target.max_memory_fraction}


def _reliability_entry(c: Candidate) -> dict[str, Any]:
    """Goodput, checkpoint policy and intervals per tier (minutes), effective days = days / goodput."""
    r = c.reliability
    if r is None:
        return {"goodput": None, "checkpoint_policy": None, "checkpoint_interval_min": None, "effective_days": None}
    return {"goodput": r.goodput, "checkpoint_policy": r.policy.value,
            "checkpoint_interval_min": {tier.value: s / 60.0 for tier, s in r.interval_s.items()},
            "job_mtbf_hours": r.job_mtbf_s / 3600.0, "expected_interruptions": r.expected_interruptions,
            "effective_days": c.days / r.goodput if r.goodput > 0 else None}


def plan_document(result: PlanResult, job: Job) -> dict[str, Any]:
    """The JSON of `llmscale plan`: the search's counts, the best layouts of the chosen job size, the job sizing,
    every job size's best, and the resolved inputs the plan was made for."""
    chosen = result.chosen
    best = chosen.top[0] if chosen.top else None
    per_job = float(best.step.tokens_per_s_per_gpu[best.layout_index]) * best.num_gpus if best else 0.0
    check = RecordCheck(job)
    return {
        "llmscale_version": __version__,
        "input_sha256": job.input_sha256,
        "model": job.model.name,
        "cluster": job.cluster.name,
        "calibration": job.calibration.as_dict() if job.calibration is not None else None,
        "objective": result.objective.value,
        "generated_layouts": result.generated_layouts,
        "evaluated_layouts": result.evaluated_layouts,
        "feasible_layouts": result.feasible_layouts,
        "seconds": result.seconds,
        "global_batch": {"sequences": result.global_batch, "tokens": result.global_batch * job.train.seq_len,
                         "source": batch_law(job.constants.search) if job.batch_from_law else "given"},
        "framework": _target_entry(result) | {"profile": profile_entry(job)},
        "top": [top_entry(c, check) for c in chosen.top],
        "roomier": top_entry(chosen.roomier, check) if chosen.roomier else None,
        "jobs": {"gpus_per_job": result.gpus_per_job, "concurrent_jobs": result.concurrent_jobs,
                 "cluster_gpus": result.cluster_gpus, "tokens_per_s_per_job": per_job,
                 "cluster_tokens_per_s": per_job * result.concurrent_jobs,
                 "days": best.days if best else None, "gpu_hours": best.gpu_hours if best else None,
                 "effective_days": best.effective_days if best else None,
                 "deadline_days": result.deadline_days, "meets_deadline": result.meets_deadline},
        "job_sizes": [
            {"num_gpus": s.num_gpus, "generated": s.generated, "evaluated": s.evaluated, "feasible": s.feasible,
             "rejected": {reason.name.lower(): n for reason, n in s.rejected.items()},
             "best": top_entry(s.top[0], check) if s.top else None}
            for s in result.sizes
        ],
        "inputs": job.inputs_document(),
    }
