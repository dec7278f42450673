"""Predicted vs published throughput (tokens/s per GPU) for a file of published runs, through the same cost model as
`explain` and `plan`; per row also fit to memory and MFU above the published record; summary per framework and model
type; a row that cannot be evaluated is skipped with its reason, never a crash.
What is reported and why: docs/published-runs.md#validation-validate.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmscale.cost.step import estimate_step
from llmscale.errors import LlmscaleError, SpecError
from llmscale.io.calibration import CalibrationRecord, load_profile
from llmscale.io.catalog import load_constants, load_published_mfu
from llmscale.io.releases import find_release, frameworks
from llmscale.search.plausibility import PublishedMfu, mfu_record
from llmscale.specs.calibration import CalibrationProfile
from llmscale.specs.constants import Constants
from llmscale.specs.train import Precision
from llmscale.validation.jobs import Facts, release_for, row_job
from llmscale.validation.runs import PublishedRun, run_from_row


@dataclass(frozen=True)
class ValidationRow:
    """One evaluated run."""

    name: str
    framework: str
    gpu: str
    model_type: str
    num_gpus: int
    cluster: str
    precision: Precision
    predicted_tokens_per_s_per_gpu: float
    published_tokens_per_s_per_gpu: float
    recompute: str
    """The recompute setting used (the row's, or the lightest that fits)."""
    fits: bool
    """The row's own layout is predicted to fit its GPU's memory."""
    memory_bytes: float
    """Predicted peak memory of the row's layout on its most loaded GPU (cost.memory.MemoryBreakdown)."""
    capacity_bytes: float
    """The GPU memory it is compared with."""
    predicted_mfu: float
    best_published_mfu: float | None
    """The best MFU a published run reached on this GPU generation and precision (None: no record)."""
    release: str | None = None
    """The framework release profile the row ran under (`megatron-bridge@25.09`; None: none known)."""
    family: str | None = None
    """The model family (ModelSpec.family)."""
    chosen: dict[str, str] = field(default_factory=dict)
    """Layout fields llmscale chose rather than read, and the rule (validation.jobs)."""
    entries: tuple[str, ...] = ()
    """The recipe entries applied (`--facts recipe`)."""

    @property
    def error_pct(self) -> float:
        """Signed: positive when llmscale predicts faster than published (the published figure is > 0:
    `runs.run_from_row` refuses any other)."""
        return (self.predicted_tokens_per_s_per_gpu / self.published_tokens_per_s_per_gpu - 1.0) * 100.0

    @property
    def published_mfu(self) -> float:
        """The published throughput as MFU under llmscale's convention (step.StepBreakdown.mfu)."""
        return self.predicted_mfu * self.published_tokens_per_s_per_gpu / self.predicted_tokens_per_s_per_gpu

    @property
    def above_published(self) -> bool:
        """The predicted MFU exceeds every published run's on this generation and precision."""
        return self.best_published_mfu is not None and self.predicted_mfu > self.best_published_mfu


@dataclass(frozen=True)
class SkippedRow:
    name: str
    reason: str


@dataclass(frozen=True)
class ErrorSummary:
    """|error| statistics of a set of rows (percent)."""

    rows: int
    median_abs_error_pct: float | None
    p90_abs_error_pct: float | None
    max_abs_error_pct: float | None

    @classmethod
    def of(cls, rows: list[ValidationRow] | tuple[ValidationRow, ...]) -> ErrorSummary:
        if not rows:
            return cls(0, None, None, None)
        errors = np.abs(np.array([r.error_pct for r in rows], dtype=float))
        return cls(len(rows), float(np.median(errors)), float(np.percentile(errors, 90)), float(errors.max()))


@dataclass(frozen=True)
class ValidationReport:
    rows: tuple[ValidationRow, ...]
    skipped: tuple[SkippedRow, ...]
    calibration: CalibrationRecord | None = None
    """The calibration profile applied to the runs on its GPU (None: none)."""
    facts: Facts = Facts.PROFILE
    """What the predictions read (validation.jobs.Facts)."""

    @property
    def median_abs_error_pct(self) -> float | None:
        return ErrorSummary.of(self.rows).median_abs_error_pct

    @property
    def p90_abs_error_pct(self) -> float | None:
        return ErrorSummary.of(self.rows).p90_abs_error_pct

    @property
    def max_abs_error_pct(self) -> float | None:
        return ErrorSummary.of(self.rows).max_abs_error_pct

    @property
    def fit_recall(self) -> float | None:
        """Published layouts predicted to fit / all evaluated rows."""
        return sum(r.fits for r in self.rows) / len(self.rows) if self.rows else None

    def by_group(self) -> dict[tuple[str, str], ErrorSummary]:
        """|error| per (framework, model type), and per model type over all frameworks ("all", type)."""
        groups: dict[tuple[str, str], list[ValidationRow]] = defaultdict(list)
        for row in self.rows:
            groups[(row.framework, row.model_type)].append(row)
            groups[("all", row.model_type)].append(row)
        return {key: ErrorSummary.of(rows) for key, rows in sorted(groups.items())}

    def by_family(self) -> dict[tuple[str, str], ErrorSummary]:
        """|error| per (model family, model type): MoE families apart (their kernels differ), dense as one."""
        groups: dict[tuple[str, str], list[ValidationRow]] = defaultdict(list)
        for row in self.rows:
            family = (row.family or "unknown") if row.model_type == "moe" else "all dense"
            groups[(family, row.model_type)].append(row)
        return {key: ErrorSummary.of(rows) for key, rows in sorted(groups.items())}

    def summary(self) -> dict[str, Any]:
        """The statistics over all rows; a statistic without a value (no row evaluated) is null with a `_reason`
        key beside it, so the JSON stays strict (no NaN)."""
        overall = ErrorSummary.of(self.rows)
        summary: dict[str, Any] = {
            "median_abs_error_pct": overall.median_abs_error_pct,
            "p90_abs_error_pct": overall.p90_abs_error_pct,
            "max_abs_error_pct": overall.max_abs_error_pct,
            "evaluated": len(self.rows),
            "skipped": len(self.skipped),
            "fit_recall": self.fit_recall,
            "above_published_mfu": sum(r.above_published for r in self.rows),
        }
        reason = f"no row was evaluated ({len(self.skipped)} skipped: see `skipped`)"
        return {key: value for name, given in summary.items()
                for key, value in ((name, given), *(((f"{name}_reason", reason),) if given is None else ()))}


def validate_rows(raw_rows: list[dict[str, Any]], where: str, calibration: Path | None = None,
                  allow_unsealed: bool = False, facts: Facts = Facts.PROFILE,
                  framework: str | None = None, force_calibration: bool = False) -> ValidationReport:
    """Predict every row of a published-runs file; a row that cannot be read or evaluated (a wrong type, a
    missing field, an unknown GPU, a layout that breaks a rule) is skipped with its reason, never a crash. A
    profile measured on a CPU is refused (`check_profile_device`) unless `force_calibration`."""
    runs: list[PublishedRun] = []
    skipped: list[SkippedRow] = []
    for i, row in enumerate(raw_rows):
        try:
            runs.append(run_from_row(row, where))
        except LlmscaleError as exc:
            skipped.append(SkippedRow(str(row.get("name", f"row {i + 1}")), str(exc)))
    if framework is not None:
        _check_framework(framework, runs)
        runs = [run for run in runs if _of_framework(run, framework)]
    profile = load_profile(calibration, allow_unsealed) if calibration is not None else None
    if profile is not None and not force_calibration:
        check_profile_device(profile, str(calibration))
    report = validate_runs(runs, load_constants(), profile, facts)
    record = CalibrationRecord.of(profile) if profile is not None else None
    return ValidationReport(report.rows, tuple(skipped) + report.skipped, record, facts)


def check_profile_device(profile: CalibrationProfile, where: str) -> None:
    """Refuse a profile whose device measurements come from a CPU: every published run ran on GPUs, and a CPU's
    GEMM peak would set their predicted throughput near zero (as `plan` and `explain` refuse it: io.resolve
    .check_calibration_device). A storage-only profile measured the file system and applies anywhere."""
    if profile.device.kind == "cpu" and (profile.gemm or profile.memory or profile.scopes):
        raise LlmscaleError(f"--calibration {where} was measured on {profile.device.kind} ({profile.device.name}), "
                            "not on a GPU; the published runs ran on GPUs: refusing to apply it (give "
                            "--force-calibration to apply it anyway)")


def _check_framework(framework: str, runs: list[PublishedRun]) -> None:
    """`--framework` names a catalog release (io.releases.find_release) or a framework some row names."""
    name, at, release = framework.partition("@")
    if name in frameworks() and (release or not at):
        find_release(framework)  # a wrong release is one SpecError listing the releases
        return
    if not at and any(run.framework == name for run in runs):
        return
    raise SpecError("--framework", framework, f"one of {', '.join(frameworks())} (optionally @RELEASE), or a "
                    "framework the runs name")


def _of_framework(run: PublishedRun, framework: str) -> bool:
    """`--framework NAME` keeps the rows of that framework, `NAME@RELEASE` those of that release."""
    name, _, release = framework.partition("@")
    if run.framework != name:
        return False
    found = release_for(run)
    return not release or (found is not None and found.release == release)


def validate_runs(runs: list[PublishedRun], constants: Constants, calibration: CalibrationProfile | None = None,
                  facts: Facts = Facts.PROFILE) -> ValidationReport:
    """Predict every run; skip (with the reason) those that cannot be evaluated."""
    rows: list[ValidationRow] = []
    skipped: list[SkippedRow] = []
    record = load_published_mfu()
    for run in runs:
        try:
            rows.append(_evaluate(run, constants, calibration, record, facts))
        except LlmscaleError as exc:
            skipped.append(SkippedRow(run.name, str(exc)))
    return ValidationReport(tuple(rows), tuple(skipped), facts=facts)


def _evaluate(run: PublishedRun, constants: Constants, calibration: CalibrationProfile | None,
              record: PublishedMfu, facts: Facts) -> ValidationRow:
    built = row_job(run, constants, calibration, facts)
    job = built.job
    step = estimate_step(job.model, job.cluster, job.train, job.layouts, job.constants)
    best = mfu_record(record, job.cluster.gpu, job.train.precision)
    return ValidationRow(
        name=run.name, framework=run.framework or "unknown", gpu=run.gpu or "",
        model_type="moe" if job.model.is_moe else "dense", num_gpus=job.num_gpus, cluster=job.cluster.name,
        precision=job.train.precision,
        predicted_tokens_per_s_per_gpu=float(step.tokens_per_s_per_gpu[0]),
        published_tokens_per_s_per_gpu=float(run.tokens_per_s_per_gpu or 0.0),
        recompute=job.resolved_layout.recompute.value, fits=bool(step.memory.fits[0]),
        memory_bytes=float(step.memory.total_bytes[0]), capacity_bytes=float(step.memory.capacity_bytes),
        predicted_mfu=float(step.mfu[0]), best_published_mfu=best.mfu if best is not None else None,
        release=built.release, family=job.model.family, chosen=built.chosen, entries=built.entries,
    )
