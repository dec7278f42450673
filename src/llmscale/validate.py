"""Predicted vs published throughput (tokens/s per GPU) for a file of published runs.

Every row becomes model × cluster × train × layout and goes through the same cost model as `explain`
and `plan` (step.estimate_step). The row gives the GPU and the GPU count; the network comes from the
GPU's reference cluster (catalog/reference_clusters.yaml), sized to the row's GPUs. Where the schema
leaves a layout field null, llmscale assumes, and says so here:

  micro_batch   1
  vp            1 (no interleaving) — the schema cannot say which schedule an unknown degree means
  zero          1 (distributed optimizer, the Megatron/NeMo/Bridge default)
  cp, ep        1
  etp           1 for MoE rows (the Megatron-Bridge MoE recipes' expert_tensor_parallel_size)
  sp            on when tp > 1 (Megatron-LM, NeMo and Bridge recipes enable it with TP)
  precision     bf16
  recompute     the lightest of none → selective → full whose memory fits the GPU (recipes enable
                recompute only when memory needs it)

A row that cannot be evaluated (no target, unknown GPU or GPU without numbers, a missing architecture
key, a layout that breaks a rule) is skipped with its reason — never a crash. Extra keys are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import yaml

from llmscale.catalog import load_cluster
from llmscale.errors import LlmscaleError
from llmscale.inputs import JobInputs
from llmscale.memory import memory_breakdown
from llmscale.rules import Reason, check, explain_rejection
from llmscale.runs import PublishedRun, model_from_run
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.layout import Layout, Recompute
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Precision, TrainSpec
from llmscale.step import estimate_step


@dataclass(frozen=True)
class ValidationRow:
    """One evaluated run."""

    name: str
    gpu: str
    model_type: str
    num_gpus: int
    predicted_tokens_per_s_per_gpu: float
    published_tokens_per_s_per_gpu: float
    recompute: str
    """The recompute setting used (the row's, or the lightest that fits)."""

    @property
    def error_pct(self) -> float:
        """Signed: positive when llmscale predicts faster than published."""
        return (self.predicted_tokens_per_s_per_gpu / self.published_tokens_per_s_per_gpu - 1.0) * 100.0


@dataclass(frozen=True)
class SkippedRow:
    name: str
    reason: str


@dataclass(frozen=True)
class ValidationReport:
    rows: tuple[ValidationRow, ...]
    skipped: tuple[SkippedRow, ...]

    def _abs_errors(self) -> np.ndarray:
        return np.abs(np.array([r.error_pct for r in self.rows], dtype=float))

    @property
    def median_abs_error_pct(self) -> float:
        return float(np.median(self._abs_errors())) if self.rows else float("nan")

    @property
    def p90_abs_error_pct(self) -> float:
        return float(np.percentile(self._abs_errors(), 90)) if self.rows else float("nan")

    @property
    def max_abs_error_pct(self) -> float:
        return float(self._abs_errors().max()) if self.rows else float("nan")

    def summary(self) -> dict[str, Any]:
        return {
            "median_abs_error_pct": self.median_abs_error_pct,
            "p90_abs_error_pct": self.p90_abs_error_pct,
            "max_abs_error_pct": self.max_abs_error_pct,
            "evaluated": len(self.rows),
            "skipped": len(self.skipped),
        }


@cache
def _reference_clusters() -> dict[str, Any]:
    text = resources.files("llmscale.catalog").joinpath("reference_clusters.yaml").read_text(encoding="utf-8")
    table: dict[str, Any] = yaml.safe_load(text)
    return table


def reference_cluster(run: PublishedRun) -> ClusterSpec:
    """The cluster a run ran on (catalog/reference_clusters.yaml: the GPU's entry, a matching `by_source`
    rule first), sized to the run's GPUs."""
    entry = _reference_clusters().get(run.gpu or "")
    if not isinstance(entry, dict) or entry.get("cluster") is None:
        raise LlmscaleError(f"gpu {run.gpu!r} has no reference cluster in the catalog")
    name = entry["cluster"]
    for rule in entry.get("by_source") or []:
        if rule["source_contains"] in run.source:
            name = rule["cluster"]
            break
    return load_cluster(name, num_gpus=run.num_gpus)


def _layout(run: PublishedRun, model: ModelSpec, recompute: Recompute) -> Layout:
    vp = run.vp or 1
    return Layout(
        tp=run.tp or 1, pp=run.pp or 1, dp=run.dp, cp=run.cp or 1, ep=run.ep or 1,
        etp=run.etp if run.etp is not None else (1 if model.is_moe else run.tp or 1),
        vpp=vp, mbs=run.micro_batch or 1, zero=run.zero if run.zero is not None else 1,
        recompute=recompute,
        sp=run.sequence_parallel if run.sequence_parallel is not None else (run.tp or 1) > 1,
    )


def job_from_run(run: PublishedRun) -> JobInputs:
    """The run as validated inputs; raises LlmscaleError with the reason when it cannot be built."""
    if run.tokens_per_s_per_gpu is None:
        raise LlmscaleError("no throughput target (tokens_per_s_per_gpu is null)")
    for key in ("num_gpus", "global_batch", "seq_len", "dp"):
        if getattr(run, key) is None:
            raise LlmscaleError(f"{key} is null")
    model = model_from_run(run)
    cluster = reference_cluster(run)
    train = TrainSpec(seq_len=run.seq_len, global_batch=run.global_batch, precision=run.precision or Precision.BF16)
    candidates = [run.recompute] if run.recompute is not None else list(Recompute)
    last: JobInputs | None = None
    for recompute in candidates:
        assert recompute is not None
        job = JobInputs(model, cluster, train, _layout(run, model, recompute), int(run.num_gpus or 0))
        lay = job.layouts
        reason = Reason(int(check(model, train, job.num_gpus, lay)[0]))
        if reason is not Reason.OK:
            raise explain_rejection(reason, model, train, job.num_gpus, lay)
        last = job
        if bool(memory_breakdown(model, cluster, train, lay).fits[0]):
            return job
    assert last is not None
    return last


def validate_runs(runs: list[PublishedRun]) -> ValidationReport:
    """Predict every run; skip (with the reason) those that cannot be evaluated."""
    rows: list[ValidationRow] = []
    skipped: list[SkippedRow] = []
    for run in runs:
        try:
            job = job_from_run(run)
        except LlmscaleError as exc:
            skipped.append(SkippedRow(run.name, str(exc)))
            continue
        step = estimate_step(job.model, job.cluster, job.train, job.layouts)
        rows.append(ValidationRow(
            name=run.name, gpu=run.gpu or "", model_type="moe" if job.model.is_moe else "dense",
            num_gpus=job.num_gpus, predicted_tokens_per_s_per_gpu=float(step.tokens_per_s_per_gpu[0]),
            published_tokens_per_s_per_gpu=float(run.tokens_per_s_per_gpu or 0.0),
            recompute=job.layout.recompute.value,
        ))
    return ValidationReport(tuple(rows), tuple(skipped))

