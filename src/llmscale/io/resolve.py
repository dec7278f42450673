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

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from llmscale.cost.calibrate import apply_calibration
from llmscale.errors import LlmscaleError, SpecError
from llmscale.io.calibration import load_profile
from llmscale.io.catalog import load_cluster, load_constants, load_model
from llmscale.io.files import parse_spec
from llmscale.io.saved import read_saved
from llmscale.layout.arrays import Layouts
from llmscale.layout.rules import validate_one
from llmscale.search.plan import critical_batch_sequences
from llmscale.specs.calibration import CalibrationProfile
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants
from llmscale.specs.fingerprint import sha256_of
from llmscale.specs.layout import Layout
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec

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
    from_plan: Path | None = None
    expect_sha256: str | None = None
    batch: BatchDefault = BatchDefault.SPEC
    constants: Constants | None = None
    """None: the catalog's."""
    origin: str = ""
    """Where the request came from, for its error messages (`published run 'X'`); default: the field's group."""


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


def resolve(request: JobRequest) -> Job:
    """The Job the request describes (module docstring); a problem is one LlmscaleError naming it."""
    request = _with_saved(request) if request.from_plan is not None else request
    model = resolve_model(request.model)
    cluster = resolve_cluster(request.cluster)
    constants = request.constants if request.constants is not None else load_constants()
    if request.calibration is not None:
        profile = request.calibration
        calibrated = apply_calibration(cluster, constants, profile if isinstance(profile, CalibrationProfile)
                                       else load_profile(profile))
        cluster, constants = calibrated.cluster, calibrated.constants
    train, from_law = _train(request, model, constants)
    check_precision(cluster, train)
    job = _with_layout(request, model, cluster, train, constants, from_law)
    check_sha256(job.input_sha256, request.expect_sha256)
    return job


def resolve_model(ref: str | Path | ModelSpec | None) -> ModelSpec:
    """A model: a spec as given, a catalog name, a llmscale YAML/JSON file or an HF config.json (default: the
    flagship)."""
    return ref if isinstance(ref, ModelSpec) else load_model(str(ref if ref is not None else DEFAULT_MODEL))


def resolve_cluster(ref: str | Path | ClusterSpec | None) -> ClusterSpec:
    """A cluster: a spec as given, a catalog name or a YAML/JSON file (default: the flagship)."""
    return ref if isinstance(ref, ClusterSpec) else load_cluster(str(ref if ref is not None else DEFAULT_CLUSTER))


def check_sha256(actual: str, expected: str | None) -> None:
    """`--expect-sha256`: refuse to run on inputs that hash differently."""
    if expected is not None and expected.lower() != actual:
        raise LlmscaleError(f"--expect-sha256 {expected} does not match the inputs' SHA256 {actual}: refusing to run")


def check_precision(cluster: ClusterSpec, train: TrainSpec) -> None:
    """FP8/FP4 need the GPU to have that tensor-core precision (A100 has neither)."""
    if not cluster.gpu.supports(train.precision):
        raise SpecError(
            "precision", train.precision.value, f"gpu {cluster.gpu.name} has no {train.precision.value} tensor cores"
        )


def _with_saved(request: JobRequest) -> JobRequest:
    """The request with the saved document's job in place; a flag given beside `--from-plan` must agree with the
    document (else one error naming it), so nothing the user typed is silently ignored."""
    assert request.from_plan is not None
    saved = read_saved(request.from_plan)
    given_layout = dict(request.layout) if isinstance(request.layout, Mapping) else {}
    conflicts = [f"--{k.replace('_', '-')}" for k, v in given_layout.items() if saved.layout.get(k) != _plain(v)]
    conflicts += [f"--{name}" for name, value in (("model", request.model), ("cluster", request.cluster),
                                                 ("gpus", request.gpus)) if value is not None]
    train = {k: v for k, v in request.train.items() if v is not None} if isinstance(request.train, Mapping) else {}
    conflicts += [f"--{_TRAIN_FLAGS.get(k, k)}" for k, v in train.items() if k in saved.train
                  and saved.train[k] != _plain(v)]
    if conflicts:
        raise LlmscaleError(f"--from-plan {request.from_plan}: {', '.join(conflicts)} given too: the file sets the "
                            "model, cluster, GPUs, layout and (where it records them) the run; drop the flag or the "
                            "file")
    return JobRequest(model=saved.model, cluster=saved.cluster, gpus=saved.gpus, train={**saved.train, **train},
                      layout={**saved.layout}, calibration=request.calibration, expect_sha256=request.expect_sha256,
                      batch=request.batch, constants=request.constants or saved.constants, origin=request.origin)


_TRAIN_FLAGS = {"global_batch": "gbs", "seq_len": "seq-len"}
"""CLI flag names of the train fields that differ from the field name."""


def _plain(value: Any) -> Any:
    """A flag value as a JSON document writes it (an enum member as its value)."""
    return value.value if isinstance(value, Enum) else value


def _train(request: JobRequest, model: ModelSpec, constants: Constants) -> tuple[TrainSpec, bool]:
    if isinstance(request.train, TrainSpec):
        return request.train, False
    given = {k: v for k, v in request.train.items() if v is not None}
    train = parse_spec(TrainSpec, given, where=request.origin or "train")
    if request.batch is BatchDefault.CRITICAL and "global_batch" not in given:
        law = critical_batch_sequences(model, train, constants.search)
        return train.model_copy(update={"global_batch": law}), True
    return train, False


def _with_layout(request: JobRequest, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, constants: Constants,
                 from_law: bool) -> Job:
    """The Job, with its GPUs and (when the command takes one) its layout resolved and checked against the rules."""
    if request.layout is None:
        gpus = request.gpus if request.gpus is not None else cluster.num_gpus
        if not 0 < gpus <= cluster.num_gpus:
            raise SpecError("gpus", gpus, f"must be in 1..{cluster.num_gpus:,} (cluster {cluster.name!r})")
        return Job(model, cluster, train, None, gpus, constants, from_law)
    given = request.layout if isinstance(request.layout, Layout) else parse_spec(
        Layout, {k: v for k, v in request.layout.items() if v is not None}, where=request.origin or "layout")
    num_gpus = _job_gpus(given, cluster, request.gpus)
    lay = Layouts.from_layout(given, num_gpus)
    validate_one(model, train, num_gpus, lay)
    return Job(model, cluster, train, lay.row(0), num_gpus, constants, from_law)


def _job_gpus(layout: Layout, cluster: ClusterSpec, gpus: int | None) -> int:
    if gpus is not None:
        if gpus < 1:
            raise SpecError("gpus", gpus, "must be a positive number of GPUs")
        job = gpus
    elif layout.dp is not None:
        job = layout.tp * layout.cp * layout.pp * layout.dp
        if job > cluster.num_gpus:
            raise SpecError(
                "dp", layout.dp,
                f"tp ({layout.tp}) × cp ({layout.cp}) × pp ({layout.pp}) × dp ({layout.dp}) = {job:,} GPUs exceeds "
                f"cluster {cluster.name!r} ({cluster.num_gpus:,} GPUs)",
                where="layout",
            )
    else:
        job = cluster.num_gpus
    if job > cluster.num_gpus:
        raise SpecError("gpus", job, f"cluster {cluster.name!r} has {cluster.num_gpus:,} GPUs")
    return job
