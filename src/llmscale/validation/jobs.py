"""Published runs as jobs: a row of the published-runs file under its framework release's profile (`release_for`),
resolved through the one resolver (`io.resolve`) as every command resolves its inputs. The table is read as given
(layout, batch, precision, its FP8 label's recipe); what neither table nor profile gives, llmscale chooses and each
row's `chosen` says so: docs/published-runs.md ("How `validate` builds a job", and #validation-jobs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from llmscale.cost.calibrate import calibrates
from llmscale.cost.memory import memory_breakdown
from llmscale.errors import LlmscaleError
from llmscale.io.releases import fill, job_facts, load_releases, moot_recompute_setting, rule_value
from llmscale.io.resolve import ANY_FRAMEWORK, Job, JobRequest, resolve
from llmscale.specs.calibration import CalibrationProfile
from llmscale.specs.cluster import ClusterSpec, Generation
from llmscale.specs.constants import Constants
from llmscale.specs.framework import LAYOUT_SETTINGS, MODEL_SETTINGS, TRAIN_SETTINGS, ReleaseProfile, expand
from llmscale.specs.layout import Recompute
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Fp8Recipe, Precision, TrainSpec
from llmscale.validation.clusters import reference_cluster
from llmscale.validation.runs import ModelType, PublishedRun, model_from_run


class Facts(str, Enum):
    """What a row's prediction may read."""

    PROFILE = "profile"
    """The published table and the release profile: what a user knows (the headline)."""
    RECIPE = "recipe"
    """Also the row's own recipe entries (data/run_settings.yaml)."""


@dataclass(frozen=True)
class RowJob:
    """A row's job and how it was built."""

    job: Job
    release: str | None
    """The release profile it ran under (`megatron-bridge@25.09`); None: none known."""
    chosen: dict[str, str]
    """Layout fields llmscale chose (neither the table nor an entry gave them) and the rule it chose them by."""
    entries: tuple[str, ...]
    """The recipe entries applied (Facts.RECIPE)."""


def release_for(run: PublishedRun) -> ReleaseProfile | None:
    """The row's release: of its framework's releases, the one its name names (the longest match, any case), or the
    only one."""
    releases = [r for r in load_releases() if r.framework == run.framework]
    named = sorted((r for r in releases if r.release.lower() in run.name.lower()), key=lambda r: len(r.release))
    if named:
        return named[-1]
    return releases[0] if len(releases) == 1 else None


PRINTED_PRECISION = re.compile(r"precision as printed: '([^']*)'")
"""How the dataset's notes quote the precision label of the published table (docs/published-runs.md)."""
FP8_LABELS = (("FP8-CS", Fp8Recipe.TENSORWISE), ("FP8-MX", Fp8Recipe.MXFP8), ("MXFP8", Fp8Recipe.MXFP8),
              ("first value = per-tensor current scaling", Fp8Recipe.TENSORWISE),
              ("1x128 act / 128x128 weight", Fp8Recipe.BLOCKWISE))
"""The FP8 recipe a published table's precision label names (Megatron-Bridge: FP8-CS per-tensor current scaling,
FP8-MX / MXFP8 32-element block scaling; the 25.09 table's first values are current scaling; DeepSeek-V3's tiles
are 1x128 / 128x128 blocks, arXiv:2412.19437 §3.3.2)."""
BLOCK_SCALED = "parenthesised = block-scaled FP8"
"""The 25.09 table's parenthesised second values: MXFP8 on Blackwell, 128x128 / 1x128 blocks on Hopper."""


def table_fp8_recipe(run: PublishedRun, generation: Generation | None) -> Fp8Recipe | None:
    """The FP8 recipe the row's printed precision label names (as the dataset's notes quote it, else its name);
    None: the label names none (the release's default then applies)."""
    if run.precision is not Precision.FP8:
        return None
    match = PRINTED_PRECISION.search(run.notes)
    label = match.group(1) if match else run.name
    if BLOCK_SCALED in label:
        return Fp8Recipe.BLOCKWISE if generation is Generation.HOPPER else Fp8Recipe.MXFP8
    return next((recipe for text, recipe in FP8_LABELS if text in label), None)


def _given(value: Any, default: Any) -> Any:
    return default if value is None else value


def _table_layout(run: PublishedRun, model: ModelSpec, settings: dict[str, Any]) -> tuple[dict[str, Any], dict]:
    """The layout fields the row (or an entry) gives, the micro-batch llmscale chooses where none does, and what
    was chosen."""
    chosen: dict[str, str] = {}
    mbs = _given(run.micro_batch, settings.get("micro_batch"))
    if mbs is None:
        mbs, chosen["mbs"] = 1, "1: no micro-batch stated"
    tp = _given(run.tp, 1)
    layout: dict[str, Any] = {
        "tp": tp, "pp": _given(run.pp, 1), "dp": run.dp, "cp": _given(run.cp, 1), "ep": _given(run.ep, 1),
        "etp": _given(run.etp, 1 if model.is_moe else tp), "mbs": mbs, "zero": _given(run.zero, 1)}
    if run.sequence_parallel is not None:
        layout["sp"] = run.sequence_parallel
    if run.recompute is not None:
        layout["recompute"] = run.recompute
    moot = moot_recompute_setting("recompute_modules" in settings, layout.get("recompute", settings.get("recompute")))
    for name, value in settings.items():
        if name not in LAYOUT_SETTINGS or name in layout or name == moot:
            continue
        layout |= {key: v for key, v in expand(name, value).items() if key not in layout}  # the table's stand
    return layout, chosen


def _interleavings(run: PublishedRun, model: ModelSpec, layout: dict[str, Any], vp: int | None,
                   interleave: bool) -> tuple[list[int], str | None]:
    """The vpp degrees to try and, when llmscale chose them, why (module docstring)."""
    pp = layout["pp"]
    if vp is not None:
        return [vp], None
    if pp == 1 or not interleave:
        return [1], None if pp == 1 else "1 (1F1B): no interleaving stated"
    per_stage = max(model.layers // pp, 1)
    if (run.global_batch or 0) // max(layout["dp"] * layout["mbs"], 1) % pp:
        return [1], "1 (1F1B): the micro-batches are not a multiple of pp"
    smallest = next((v for v in range(2, per_stage + 1) if per_stage % v == 0), None)
    if smallest is None:
        return [1], "1 (1F1B): no degree divides the layers per stage"
    return [smallest, 1], f"smallest v > 1 dividing the {per_stage} layers per stage (1F1B if it does not fit)"


def row_job(run: PublishedRun, constants: Constants, calibration: CalibrationProfile | None = None,
            facts: Facts = Facts.PROFILE) -> RowJob:
    """The row as a resolved job (module docstring); raises LlmscaleError with the reason when it cannot be built."""
    _check_row(run)
    release = release_for(run)
    settings, ids = _recipe(run.name) if facts is Facts.RECIPE else ({}, ())
    cluster = reference_cluster(run)
    precision = run.precision or Precision.BF16
    dropless, dropping, chosen_factor = _token_dropping(run, release, cluster, precision)
    model = model_from_run(run, dropping | {k: v for k, v in settings.items() if k in MODEL_SETTINGS})
    train: dict[str, Any] = {"seq_len": run.seq_len, "global_batch": run.global_batch, "precision": precision,
                             "fp8_recipe": table_fp8_recipe(run, cluster.gpu.generation)}
    train |= {k: v for k, v in settings.items() if k in TRAIN_SETTINGS}
    if precision is not Precision.FP8:
        train.pop("fp8_recipe", None)  # a recipe fact of a release's rows describes its FP8 runs only
    layout, chosen = _table_layout(run, model, settings)
    chosen |= chosen_factor
    if release is None and run.framework is not None:
        chosen["release"] = f"none: no release of {run.framework} in catalog/frameworks.yaml matches the row"
    request = JobRequest(model=model, cluster=cluster, gpus=run.num_gpus, train=train, layout=layout,
                         calibration=calibration if calibration is not None and calibrates(calibration, run.gpu)
                         else None, force_calibration=True,  # validate picks the runs a profile applies to itself
                         constants=constants, origin=f"published run {run.name!r}",
                         framework=release if release is not None else ANY_FRAMEWORK, dropless=dropless)
    interleave = bool(settings.get("interleave")) or _release_interleaves(release, request)
    degrees, why = _interleavings(run, model, layout, _given(run.vp, settings.get("vp")), interleave)
    if why is not None:
        chosen["vpp"] = why
    job, how = _fitting(request, degrees)
    chosen |= {"recompute": how} if how is not None else {}
    if len(degrees) > 1 and job.resolved_layout.vpp == 1:
        chosen["vpp"] = "1 (1F1B): the smallest interleaving degree does not fit"
    return RowJob(job, release.label if release is not None else None, chosen, ids)


def job_from_run(run: PublishedRun, constants: Constants, calibration: CalibrationProfile | None = None,
                 facts: Facts = Facts.PROFILE) -> Job:
    """`row_job`'s job."""
    return row_job(run, constants, calibration, facts).job


def _token_dropping(run: PublishedRun, release: ReleaseProfile | None, cluster: ClusterSpec,
                    precision: Precision) -> tuple[bool | None, dict[str, Any], dict[str, str]]:
    """A row that drops tokens (moe_dropless false) is a token-dropping job for its release, whose rules give the
    capacity factor and padding (Megatron-Bridge's apply_moe_token_drop: 1.0, padded); where the release names no
    factor, llmscale takes 1.0, unpadded, and says so."""
    if run.model_type is not ModelType.MOE or run.moe_dropless is not False:
        return None, {}, {}
    facts = replace(job_facts(model_from_run(run), cluster, precision, None, run.seq_len or TrainSpec().seq_len,
                              run.num_gpus), dropless=False)
    if release is not None and rule_value(release, facts, None, "capacity_factor") is not None:
        return False, {}, {}
    return False, {"capacity_factor": 1.0}, {"capacity_factor": "1.0, unpadded: the row drops tokens, its release "
                                                                  "names no factor"}


def _check_row(run: PublishedRun) -> None:
    if run.tokens_per_s_per_gpu is None:
        raise LlmscaleError("no throughput target (tokens_per_s_per_gpu is null)")
    for key in ("num_gpus", "global_batch", "seq_len", "dp"):
        if getattr(run, key) is None:
            raise LlmscaleError(f"{key} is null")


def _recipe(name: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The row's recipe entries (validation.entries, read only by `--facts recipe`: not imported at start-up)."""
    from llmscale.validation.entries import row_settings

    return row_settings(name)


def _release_interleaves(release: ReleaseProfile | None, request: JobRequest) -> bool:
    """Whether the release's rules say it interleaves its pipeline for this job (io.releases.fill, before the
    layout is complete)."""
    if release is None:
        return False
    assert isinstance(request.model, ModelSpec) and isinstance(request.cluster, ClusterSpec)
    assert isinstance(request.train, dict)
    filled = fill(release, request.model, request.cluster, request.train, dict(request.layout or {}), request.gpus,
                  request.dropless)  # as resolve fills the same request
    return bool(filled.application.value("interleave"))


def _fits(job: Job) -> bool:
    return bool(memory_breakdown(job.model, job.cluster, job.train, job.layouts, job.constants).fits[0])


def _fitting(request: JobRequest, degrees: list[int]) -> tuple[Job, str | None]:
    """The first job over interleaving degrees that fits: at the recompute the row, an entry or the release sets,
    else the lightest that fits (and that choice, said)."""
    layout = dict(request.layout or {})
    last: Job | None = None
    for vpp in degrees:
        job = resolve(replace(request, layout=layout | {"vpp": vpp}))
        last = job
        set_by_release = job.profile is not None and any(
            s.name in ("recompute", "recompute_modules") for s in job.profile.applied)
        if "recompute" in layout or set_by_release:
            if _fits(job):
                return job, None
            continue
        for recompute in Recompute:
            job = resolve(replace(request, layout=layout | {"vpp": vpp, "recompute": recompute}))
            last = job
            if _fits(job):
                return job, f"{recompute.value}: the lightest that fits"
    assert last is not None
    return last, None if "recompute" in layout else f"{last.resolved_layout.recompute.value}: none fits"
