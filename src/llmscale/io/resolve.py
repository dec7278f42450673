"""Resolving the user's inputs (catalog names or files, flags) into validated specs for one job."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmscale.cost.calibrate import apply_calibration
from llmscale.errors import SpecError
from llmscale.io.calibration import load_profile
from llmscale.io.catalog import load_cluster, load_constants, load_model
from llmscale.io.files import parse_spec
from llmscale.layout.arrays import Layouts
from llmscale.layout.rules import validate_one
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants
from llmscale.specs.fingerprint import sha256_of
from llmscale.specs.layout import Layout
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec


@dataclass(frozen=True)
class JobInputs:
    """Everything one estimate needs, validated."""

    model: ModelSpec
    cluster: ClusterSpec
    train: TrainSpec
    layout: Layout
    num_gpus: int
    """GPUs of the job (≤ the cluster's)."""
    constants: Constants
    """The model constants the estimates use (the catalog's, or a calibration profile's overrides)."""

    @property
    def layouts(self) -> Layouts:
        return Layouts.from_layout(self.layout, self.num_gpus)

    @property
    def input_sha256(self) -> str:
        return sha256_of(model=self.model, cluster=self.cluster, train=self.train, layout=self.resolved_layout,
                         constants=constants_if_changed(self.constants))

    @property
    def resolved_layout(self) -> Layout:
        """The layout with every default made explicit (dp, etp, sp, schedule)."""
        return self.layouts.row(0)


def constants_if_changed(constants: Constants) -> Constants | None:
    """`constants` when they differ from the catalog's (then they are part of the inputs' hash), else None: the
    shipped constants are part of the llmscale version, which every output records beside the hash."""
    return None if constants == load_constants() else constants


def check_precision(cluster: ClusterSpec, train: TrainSpec) -> None:
    """FP8/FP4 need the GPU to have that tensor-core precision (A100 has neither)."""
    if not cluster.gpu.supports(train.precision):
        raise SpecError(
            "precision", train.precision.value, f"gpu {cluster.gpu.name} has no {train.precision.value} tensor cores"
        )


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


def resolve_job(
    model: str, cluster: str, gpus: int | None, train: dict[str, Any], layout: dict[str, Any],
    calibration: Path | None = None,
) -> JobInputs:
    """Load model and cluster, validate train and layout flags, check the layout's rules. A calibration profile
    replaces the cluster's datasheet numbers with measured ones (calibration.apply_calibration)."""
    model_spec = load_model(model)
    cluster_spec = load_cluster(cluster)
    constants = load_constants()
    if calibration is not None:
        calibrated = apply_calibration(cluster_spec, constants, load_profile(calibration))
        cluster_spec, constants = calibrated.cluster, calibrated.constants
    train_spec = parse_spec(TrainSpec, {k: v for k, v in train.items() if v is not None}, where="train")
    layout_spec = parse_spec(Layout, {k: v for k, v in layout.items() if v is not None}, where="layout")
    check_precision(cluster_spec, train_spec)
    num_gpus = _job_gpus(layout_spec, cluster_spec, gpus)
    job = JobInputs(model_spec, cluster_spec, train_spec, layout_spec, num_gpus, constants)
    validate_one(model_spec, train_spec, num_gpus, job.layouts)
    return job
