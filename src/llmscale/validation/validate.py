"""Predicted vs published throughput (tokens/s per GPU) for a file of published runs.

Every row becomes model × cluster × train × layout and goes through the same cost model as `explain`
and `plan` (step.estimate_step). The row gives the GPU and the GPU count; the network comes from the
GPU's reference cluster (catalog/reference_clusters.yaml), sized to the row's GPUs. Where the schema
leaves a layout field null, llmscale assumes, and says so here:

  micro_batch   1
  vp            1 (1F1B); where the source states that it interleaves without the degree (Narayanan et al.
                2021 Table 1, Llama 3: `interleaved: true` in run_settings.yaml), the largest v ≤ 8 dividing the
                layers per stage (Megatron allows down to one layer per virtual stage), falling back to 1F1B
                when the micro-batch count is not a multiple of pp
  zero          1 (distributed optimizer, the Megatron/NeMo/Bridge default)
  cp, ep        1
  etp           1 for MoE rows (the Megatron-Bridge MoE recipes' expert_tensor_parallel_size)
  sp            on when tp > 1 (Megatron-LM, NeMo and Bridge recipes enable it with TP)
  precision     bf16
  recompute     the lightest of none → selective → full whose memory fits the GPU (recipes enable
                recompute only when memory needs it)
  overlaps      TP and EP communication not overlapped

Before those assumptions, null fields of a shipped row are filled from data/run_settings.yaml: layout facts
(recompute, sequence parallelism, micro-batch, interleaving, TP/EP communication overlap, activation offload)
read in the public recipe code that produced the row, each entry citing the file and commit. A value the
row itself gives is never replaced.

A row that cannot be evaluated (no target, unknown GPU or GPU without numbers, a missing architecture
key, a layout that breaks a rule) is skipped with its reason — never a crash. Extra keys are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from llmscale.cost.calibrate import calibrates
from llmscale.cost.memory import memory_breakdown
from llmscale.cost.step import estimate_step
from llmscale.errors import LlmscaleError
from llmscale.io.calibration import load_profile
from llmscale.io.catalog import catalog_file, dataset_file, load_cluster, load_constants
from llmscale.io.files import parse_spec
from llmscale.io.resolve import Job, JobRequest, resolve
from llmscale.specs.calibration import CalibrationProfile
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants
from llmscale.specs.layout import Layout, RankOrder, Recompute
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Precision
from llmscale.validation.runs import PublishedRun, model_from_run, run_from_row


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


def _settings_entries() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = dataset_file("run_settings.yaml")
    return entries


def run_settings() -> dict[str, dict[str, Any]]:
    """Recipe facts for shipped rows, by exact row name (data/run_settings.yaml)."""
    return {entry["name"]: entry for entry in _settings_entries() if "name" in entry}


def run_facts(run: PublishedRun) -> dict[str, Any]:
    """The recipe facts of one row: those of every `source_contains` entry whose text is in the row's source
    (facts shared by all rows of one paper, such as its attention kernel), then the row's own entry."""
    facts: dict[str, Any] = {}
    for entry in _settings_entries():
        if "source_contains" in entry and entry["source_contains"] in run.source:
            facts |= entry
    return facts | run_settings().get(run.name, {})


def _reference_clusters() -> dict[str, Any]:
    table: dict[str, Any] = catalog_file("reference_clusters.yaml")
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


def _interleaving(run: PublishedRun, model: ModelSpec, vp: int | None, mbs: int, interleaved: bool) -> int:
    """The row's vp; for vp null on a source that states it interleaves, the largest v ≤ 8 dividing the
    layers per stage; else 1."""
    pp = run.pp or 1
    if vp is not None or pp == 1 or not interleaved:
        return vp or 1
    per_stage = max(model.layers // pp, 1)
    num_micro = (run.global_batch or 0) // max((run.dp or 1) * mbs, 1)
    if num_micro % pp:
        return 1
    return max(v for v in range(1, 9) if per_stage % v == 0)


def _given(value: Any, default: Any) -> Any:
    """The row's value when it gives one (0 included: the spec rejects it), else the default."""
    return default if value is None else value


def _layout(run: PublishedRun, model: ModelSpec, recompute: Recompute, facts: dict[str, Any]) -> Layout:
    tp = _given(run.tp, 1)
    mbs = _given(run.micro_batch, facts.get("micro_batch", 1))
    sp = _given(run.sequence_parallel, facts.get("sequence_parallel"))
    fields = {
        "tp": tp, "pp": _given(run.pp, 1), "dp": run.dp, "cp": _given(run.cp, 1), "ep": _given(run.ep, 1),
        "etp": _given(run.etp, 1 if model.is_moe else tp),
        "vpp": _interleaving(run, model, _given(run.vp, facts.get("vp")), max(int(mbs), 1),
                             bool(facts.get("interleaved", False))),
        "mbs": mbs, "schedule": facts.get("schedule"), "zero": _given(run.zero, 1), "recompute": recompute,
        "sp": sp,  # None: the layout's rule (on when tp > 1)
        "tp_comm_overlap": bool(facts.get("tp_comm_overlap", False)) and isinstance(tp, int) and tp > 1,
        "ep_comm_overlap": bool(facts.get("moe_a2a_overlap", False)),
        "rank_order": facts.get("rank_order", RankOrder.TP_CP_EP_DP_PP),
    }
    return parse_spec(Layout, fields, where=f"published run {run.name!r}")


def job_from_run(run: PublishedRun, constants: Constants, calibration: CalibrationProfile | None = None) -> Job:
    """The run as a resolved job (through the one resolver, io.resolve); raises LlmscaleError with the reason when it
    cannot be built. A calibration profile replaces the datasheet numbers — and its constant overrides, if any —
    of runs on its GPU only (every run when it names none): runs on other GPUs keep the catalog's."""
    if run.tokens_per_s_per_gpu is None:
        raise LlmscaleError("no throughput target (tokens_per_s_per_gpu is null)")
    for key in ("num_gpus", "global_batch", "seq_len", "dp"):
        if getattr(run, key) is None:
            raise LlmscaleError(f"{key} is null")
    model = model_from_run(run)
    facts = run_facts(run)
    train = {"seq_len": run.seq_len, "global_batch": run.global_batch, "precision": run.precision or Precision.BF16,
             "flash_attention": bool(facts.get("flash_attention", True))}
    request = JobRequest(model=model, cluster=reference_cluster(run), gpus=run.num_gpus, train=train,
                         calibration=calibration if calibration is not None and calibrates(calibration, run.gpu)
                         else None, constants=constants, origin=f"published run {run.name!r}")
    given = run.recompute or (Recompute(facts["recompute"]) if "recompute" in facts else None)
    last: Job | None = None
    for recompute in [given] if given is not None else list(Recompute):
        job = resolve(replace(request, layout=_layout(run, model, recompute, facts)))
        last = job
        if bool(memory_breakdown(job.model, job.cluster, job.train, job.layouts, job.constants).fits[0]):
            return job
    assert last is not None
    return last


def validate_rows(raw_rows: list[dict[str, Any]], where: str, calibration: Path | None = None) -> ValidationReport:
    """Predict every row of a published-runs file; a row that cannot be read or evaluated (a wrong type, a
    missing field, an unknown GPU, a layout that breaks a rule) is skipped with its reason, never a crash."""
    runs: list[PublishedRun] = []
    skipped: list[SkippedRow] = []
    for i, row in enumerate(raw_rows):
        try:
            runs.append(run_from_row(row, where))
        except LlmscaleError as exc:
            skipped.append(SkippedRow(str(row.get("name", f"row {i + 1}")), str(exc)))
    report = validate_runs(runs, load_constants(), load_profile(calibration) if calibration is not None else None)
    return ValidationReport(report.rows, tuple(skipped) + report.skipped)


def validate_runs(runs: list[PublishedRun], constants: Constants,
                  calibration: CalibrationProfile | None = None) -> ValidationReport:
    """Predict every run; skip (with the reason) those that cannot be evaluated."""
    rows: list[ValidationRow] = []
    skipped: list[SkippedRow] = []
    for run in runs:
        try:
            job = job_from_run(run, constants, calibration)
        except LlmscaleError as exc:
            skipped.append(SkippedRow(run.name, str(exc)))
            continue
        step = estimate_step(job.model, job.cluster, job.train, job.layouts, job.constants)
        rows.append(ValidationRow(
            name=run.name, gpu=run.gpu or "", model_type="moe" if job.model.is_moe else "dense",
            num_gpus=job.num_gpus, predicted_tokens_per_s_per_gpu=float(step.tokens_per_s_per_gpu[0]),
            published_tokens_per_s_per_gpu=float(run.tokens_per_s_per_gpu or 0.0),
            recompute=job.resolved_layout.recompute.value,
        ))
    return ValidationReport(tuple(rows), tuple(skipped))

