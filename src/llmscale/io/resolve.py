"""The one way in: `resolve` turns what a user gave — catalog names, YAML/JSON files, Hugging Face config.json,
spec objects, flag values, a calibration profile, a saved plan — into the resolved `Job` every command and the
estimates work on, and checks `--expect-sha256` against it.

Resolution, in order: a saved plan's job (`--from-plan`; a flag given beside it must agree with it), the model and
cluster, the catalog's constants (or the caller's), the calibration profile (measured numbers in place of datasheet
ones, its constant overrides), the training run (the critical batch when the command asks for it and no batch is
given), the precision the GPU must support, the job's GPUs, and — when the command takes one — the layout and its
rules. Every default ends up explicit in the Job, so its SHA256 is the hash of what actually runs.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from llmscale.cost.calibrate import apply_calibration
from llmscale.errors import LlmscaleError, SpecError
from llmscale.io.calibration import CalibrationRecord, load_profile
from llmscale.io.catalog import load_cluster, load_constants, load_gpu, load_model
from llmscale.io.files import parse_spec
from llmscale.io.releases import ProfileApplication, fill, find_release, given_fields, job_gpus
from llmscale.io.run_checks import (
    check_attention,
    check_fp8_attention,
    check_fp8_output_proj,
    check_pipeline_splits,
    check_precision,
)
from llmscale.io.saved import read_saved
from llmscale.layout.arrays import Layouts
from llmscale.layout.rules import validate_one
from llmscale.search.plan import critical_batch_sequences
from llmscale.specs.base import Spec
from llmscale.specs.calibration import CalibrationProfile
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants
from llmscale.specs.fingerprint import sha256_of
from llmscale.specs.framework import ReleaseProfile
from llmscale.specs.layout import LAYOUT_FIELDS, Layout
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TRAIN_FLAGS, TrainSpec

DEFAULT_MODEL = "seed-10t-moe"
DEFAULT_CLUSTER = "seed-500k"


class BatchDefault(str, Enum):
    """The global batch of a job whose user gives none."""

    SPEC = "spec"
    """TrainSpec's default."""
    CRITICAL = "critical"
    """The critical batch of the run's compute (`search.plan.critical_batch_sequences`): what `plan` searches at."""


@dataclass(frozen=True)
class JobRequest:
    """What a user gave, as given (None: not given). Models, clusters, runs, layouts and profiles may be names,
    paths or spec objects."""

    model: str | Path | ModelSpec | None = None
    cluster: str | Path | ClusterSpec | None = None
    gpus: int | None = None
    train: Mapping[str, Any] | TrainSpec = field(default_factory=dict)
    layout: Mapping[str, Any] | Layout | None = None
    """None: the command takes no layout (plan, goodput)."""
    calibration: Path | CalibrationProfile | None = None
    force_calibration: bool = False
    """Apply a calibration profile measured on another kind of device (`check_calibration_device`)."""
    allow_unsealed: bool = False
    """Use a calibration profile file whose seal is missing or broken (`io.calibration.check_seal`); a profile given
    as an object is the caller's own and is not checked."""
    from_plan: Path | None = None
    expect_sha256: str | None = None
    batch: BatchDefault = BatchDefault.SPEC
    constants: Constants | None = None
    """None: the catalog's."""
    origin: str = ""
    """Where the request came from, for its error messages (`published run 'X'`); default: the field's group."""
    framework: str | ReleaseProfile | None = None
    """`NAME[@RELEASE]` (io.releases.find_release), a release profile, or `any` (no profile); None: the default
    framework's newest release. Its rules fill what the user left open."""
    dropless: bool | None = None
    """Whether the job drops tokens, where its MoE model names no capacity factor (a published table's tokendrop
    label): the release's rules for token-dropping jobs then apply (None: as the model says)."""
    from_document: bool = False
    """The job comes whole from a saved document (`--from-plan`): its release is recorded, nothing is filled."""


ANY_FRAMEWORK = "any"
"""`--framework any`: no release profile (every setting at the specs' defaults unless given), no engine bound."""


@dataclass(frozen=True)
class Job:
    """A resolved job: validated specs with every default explicit."""

    model: ModelSpec
    cluster: ClusterSpec
    train: TrainSpec
    layout: Layout | None
    """The layout with dp, etp, sp and schedule filled in; None for a command that searches layouts."""
    num_gpus: int
    """GPUs of the job (≤ the cluster's)."""
    constants: Constants
    """The model constants the estimates use (the catalog's, or a calibration profile's overrides)."""
    batch_from_law: bool = False
    """The global batch is the critical batch (`BatchDefault.CRITICAL`), not the user's."""
    calibration: CalibrationRecord | None = None
    """The calibration profile applied (None: none)."""
    profile: ProfileApplication | None = None
    """What the framework release's profile set (None: `--framework any`)."""

    @property
    def layouts(self) -> Layouts:
        """The layout as arrays of size one (the cost model's input)."""
        return Layouts.from_layout(self.resolved_layout, self.num_gpus)

    @property
    def resolved_layout(self) -> Layout:
        if self.layout is None:
            raise LlmscaleError("this job has no layout (it was resolved for a search)")
        return self.layout

    @property
    def input_sha256(self) -> str:
        """SHA256 of the canonical resolved inputs (the constants only when they are not the catalog's)."""
        return sha256_of(model=self.model, cluster=self.cluster, train=self.train, layout=self.layout,
                         constants=constants_if_changed(self.constants))

    def inputs_document(self) -> dict[str, Any]:
        """The resolved specs as a JSON document embeds them (`io.saved` reads them back)."""
        document = {"model": self.model.model_dump(mode="json"), "cluster": self.cluster.model_dump(mode="json"),
                    "train": self.train.model_dump(mode="json")}
        changed = constants_if_changed(self.constants)
        return document | ({"constants": changed.model_dump(mode="json")} if changed is not None else {})


def constants_if_changed(constants: Constants) -> Constants | None:
    """`constants` when they differ from the catalog's (then they are part of the inputs' hash), else None: the
    shipped constants are part of the llmscale version, which every output records beside the hash."""
    return None if constants == load_constants() else constants


@dataclass(frozen=True)
class Setting:
    """What a job runs on and with, before a model and a layout are chosen: the (calibrated) cluster, the constants,
    the run, and the GPUs. `allocate`, which weighs many models on one setting, resolves only this."""

    cluster: ClusterSpec
    constants: Constants
    train: TrainSpec
    num_gpus: int
    calibration: CalibrationRecord | None = None


def resolve(request: JobRequest) -> Job:
    """The Job the request describes (module docstring); a problem is one LlmscaleError naming it."""
    request = _with_saved(request) if request.from_plan is not None else request
    request, model, application = _with_profile(request, resolve_model(request.model))
    setting = resolve_setting(request)
    check_pipeline_splits(model, setting.train)
    check_fp8_attention(model, setting.cluster, setting.train)
    check_fp8_output_proj(model, setting.cluster, setting.train)
    train, from_law = setting.train, False
    if request.batch is BatchDefault.CRITICAL and not _batch_given(request.train):
        law = critical_batch_sequences(model, train, setting.constants.search)
        train, from_law = train.model_copy(update={"global_batch": law}), True
    job = replace(_with_layout(request, model, replace(setting, train=train), from_law), profile=application)
    check_sha256(job.input_sha256, request.expect_sha256)
    return job


def release_of(framework: str | ReleaseProfile | None) -> ReleaseProfile | None:
    """The release profile a request names (None for `any`)."""
    if isinstance(framework, ReleaseProfile):
        return framework
    if framework is not None and framework.strip() == ANY_FRAMEWORK:
        return None
    return find_release(framework)


def _with_profile(request: JobRequest, model: ModelSpec) -> tuple[JobRequest, ModelSpec, ProfileApplication | None]:
    """The request with its framework release's settings filled in where the user left them open."""
    release = release_of(request.framework)
    if release is None:
        return request, model, None
    cluster = resolve_cluster(request.cluster)
    layout = given_fields(request.layout) if request.layout is not None else None
    filled = fill(release, model, cluster, given_fields(request.train), layout, request.gpus, request.dropless)
    if request.from_document:  # every setting was written out by the document: the release is only recorded
        return replace(request, cluster=cluster), model, replace(filled.application, applied=(), kept=(), dropped=(),
                                                                 recorded=True)
    return (replace(request, cluster=cluster, train=filled.train, layout=filled.layout), filled.model,
            filled.application)


def resolve_setting(request: JobRequest) -> Setting:
    """The cluster with the calibration profile applied, the constants, the run (its precision supported by the
    GPU) and the job's GPUs (given, else the cluster's), checked; the model, layout and hash are `resolve`'s."""
    cluster = resolve_cluster(request.cluster)
    constants = request.constants if request.constants is not None else load_constants()
    profile: CalibrationProfile | None = None
    if request.calibration is not None:
        given = request.calibration
        profile = given if isinstance(given, CalibrationProfile) else load_profile(given, request.allow_unsealed)
        if not request.force_calibration:
            check_calibration_device(cluster, profile, str(given) if isinstance(given, Path) else "profile")
        calibrated = apply_calibration(cluster, constants, profile)
        cluster, constants = calibrated.cluster, calibrated.constants
    train = request.train if isinstance(request.train, TrainSpec) else parse_spec(
        TrainSpec, {k: v for k, v in request.train.items() if v is not None}, where=_where(request, "train"))
    check_precision(cluster, train)
    check_attention(cluster, train)
    gpus = request.gpus if request.gpus is not None else cluster.num_gpus
    if not 0 < gpus <= cluster.num_gpus:
        raise SpecError("gpus", gpus, f"must be in 1..{cluster.num_gpus:,} (cluster {cluster.name!r})")
    warn_partial_node(cluster, gpus)
    record = CalibrationRecord.of(profile) if profile is not None else None
    return Setting(cluster, constants, train, gpus, record)


class PartialNodeWarning(UserWarning):
    """A job whose GPUs are not a whole number of the cluster's nodes."""


def warn_partial_node(cluster: ClusterSpec, gpus: int) -> None:
    """One warning line when `gpus` is not a whole number of nodes, naming the whole-node counts on either side: a
    count typed with a decimal suffix (`16K` = 16,000) is rarely the one meant."""
    per_node = cluster.node.gpus_per_node
    if gpus % per_node == 0:
        return
    below, above = gpus // per_node * per_node, min(-(-gpus // per_node) * per_node, cluster.num_gpus)
    nearest = " or ".join(f"{n:,}" for n in dict.fromkeys((below, above)) if n > 0)
    warnings.warn(f"--gpus {gpus:,} is not a whole number of the {per_node}-GPU nodes of cluster {cluster.name!r} "
                  f"(nearest whole-node counts: {nearest})", PartialNodeWarning, stacklevel=2)


def resolve_model(ref: str | Path | ModelSpec | None) -> ModelSpec:
    """A model: a spec as given, a catalog name, a llmscale YAML/JSON file or an HF config.json (default: the
    flagship)."""
    return ref if isinstance(ref, ModelSpec) else load_model(str(ref if ref is not None else DEFAULT_MODEL))


def resolve_cluster(ref: str | Path | ClusterSpec | None) -> ClusterSpec:
    """A cluster: a spec as given, a catalog name or a YAML/JSON file (default: the flagship)."""
    return ref if isinstance(ref, ClusterSpec) else load_cluster(str(ref if ref is not None else DEFAULT_CLUSTER))


def check_calibration_device(cluster: ClusterSpec, profile: CalibrationProfile, where: str) -> None:
    """Refuse a profile measured on another kind of device than the cluster's: a CPU profile on GPUs (its GEMM peak
    would set an MFU of ~0 %), or one made for another catalog GPU (`calibrate --gpu`). `--force-calibration`
    skips this check. A storage-only profile (`bench storage --profile-out`) measured the file system, not the
    device: it applies to any cluster."""
    if not (profile.gemm or profile.memory or profile.scopes):
        return
    measured_on = f"{profile.device.kind} ({profile.device.name})"
    if profile.device.kind == "cpu":
        problem = f"was measured on {measured_on}, not on cluster {cluster.name!r}'s {cluster.gpu.name}"
    elif profile.gpu is not None and load_gpu(profile.gpu).name != cluster.gpu.name:
        problem = f"stands for GPU {profile.gpu!r}, not cluster {cluster.name!r}'s {cluster.gpu.name}"
    else:
        return
    raise LlmscaleError(f"--calibration {where} {problem}: refusing to apply it (give --force-calibration to apply "
                        "it anyway)")


def check_sha256(actual: str, expected: str | None) -> None:
    """`--expect-sha256`: refuse to run on inputs that hash differently."""
    if expected is not None and expected.lower() != actual:
        raise LlmscaleError(f"--expect-sha256 {expected} does not match the inputs' SHA256 {actual}: refusing to run")


def _with_saved(request: JobRequest) -> JobRequest:
    """The request with the saved document's job in place. A flag given beside `--from-plan` must agree with the
    document, else one error names it (nothing the user typed is silently ignored); a calibration profile may only
    join a document that names its inputs (one that embeds them is calibrated already, or was planned without)."""
    assert request.from_plan is not None
    saved = read_saved(request.from_plan)
    conflicts = _layout_conflicts(request, saved.layout) + _train_conflicts(request, saved.train)
    if request.model is not None and _differs(resolve_model(request.model), saved.model, resolve_model):
        conflicts.append("--model")
    if request.cluster is not None and _differs(resolve_cluster(request.cluster), saved.cluster, resolve_cluster):
        conflicts.append("--cluster")
    if request.gpus is not None and request.gpus != saved.gpus:
        conflicts.append("--gpus")
    if request.calibration is not None and isinstance(saved.model, ModelSpec):
        conflicts.append("--calibration")
    if request.framework is not None and saved.framework is not None and _release_label(request.framework) != (
            _release_label(saved.framework)):
        conflicts.append("--framework")
    if conflicts:
        raise LlmscaleError(f"--from-plan {request.from_plan}: {', '.join(conflicts)} disagree(s) with the file, "
                            "which sets the model, cluster, GPUs, layout, run and calibration it was made with; drop "
                            "the flag or the file")
    train = {k: v for k, v in request.train.items() if v is not None} if isinstance(request.train, Mapping) else {}
    return JobRequest(model=saved.model, cluster=saved.cluster, gpus=saved.gpus, train={**saved.train, **train},
                      layout={**saved.layout}, calibration=request.calibration,
                      force_calibration=request.force_calibration, allow_unsealed=request.allow_unsealed,
                      expect_sha256=request.expect_sha256,
                      batch=request.batch, constants=request.constants if request.constants is not None
                      else saved.constants, origin=f"{request.from_plan}",
                      framework=request.framework if request.framework is not None else (
                          saved.framework or ANY_FRAMEWORK), from_document=True)


def _release_label(framework: str | ReleaseProfile) -> str:
    """A framework as its resolved release (`megatron-bridge` → `megatron-bridge@26.08`), or `any`."""
    release = release_of(framework)
    return release.label if release is not None else ANY_FRAMEWORK


def _layout_conflicts(request: JobRequest, saved: Mapping[str, Any]) -> list[str]:
    given = request.layout if isinstance(request.layout, Mapping) else {}
    return [f.knob.cli_flag(f.name) for f in LAYOUT_FIELDS
            if f.name in given and saved.get(f.name) != _plain(given[f.name])]


def _train_conflicts(request: JobRequest, saved: Mapping[str, Any]) -> list[str]:
    given = request.train if isinstance(request.train, Mapping) else {}
    return [TRAIN_FLAGS.get(k, f"--{k}") for k, v in given.items()
            if v is not None and k in saved and saved[k] != _plain(v)]


def _differs(given: Spec, saved: str | Spec, load: Any) -> bool:
    """Whether a given model or cluster is another than the document's (compared as resolved specs)."""
    return sha256_of(spec=given) != sha256_of(spec=saved if isinstance(saved, Spec) else load(saved))


def _plain(value: Any) -> Any:
    """A flag value as a JSON document writes it (an enum member as its value)."""
    return value.value if isinstance(value, Enum) else value


def _batch_given(train: Mapping[str, Any] | TrainSpec) -> bool:
    return isinstance(train, TrainSpec) or train.get("global_batch") is not None


def _where(request: JobRequest, group: str) -> str:
    """Where a problem with one group of the request's fields is reported: `train`, or `plan.json: train`."""
    return f"{request.origin}: {group}" if request.origin else group


def _with_layout(request: JobRequest, model: ModelSpec, setting: Setting, from_law: bool) -> Job:
    """The Job, with (when the command takes one) its layout resolved, its GPUs, and the layout's rules checked."""
    if request.layout is None:
        return Job(model, setting.cluster, setting.train, None, setting.num_gpus, setting.constants, from_law,
                   setting.calibration)
    given = request.layout if isinstance(request.layout, Layout) else parse_spec(
        Layout, {k: v for k, v in request.layout.items() if v is not None}, where=_where(request, "layout"))
    num_gpus = _job_gpus(given, setting.cluster, request.gpus)
    lay = Layouts.from_layout(given, num_gpus)
    validate_one(model, setting.train, num_gpus, lay)
    return Job(model, setting.cluster, setting.train, lay.row(0), num_gpus, setting.constants, from_law,
               setting.calibration)


def _job_gpus(layout: Layout, cluster: ClusterSpec, gpus: int | None) -> int:
    """The job's GPUs (io.releases.job_gpus, the count the release rules read): given (checked against the cluster by
    `resolve_setting`), else tp·cp·pp·dp, else the cluster."""
    job = job_gpus(layout.model_dump(), cluster, gpus)
    if gpus is None and job > cluster.num_gpus:
        raise SpecError(
            "dp", layout.dp,
            f"tp ({layout.tp}) × cp ({layout.cp}) × pp ({layout.pp}) × dp ({layout.dp}) = {job:,} GPUs exceeds "
            f"cluster {cluster.name!r} ({cluster.num_gpus:,} GPUs)",
            where="layout",
        )
    return job
