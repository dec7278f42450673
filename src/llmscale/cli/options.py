"""Command-line options shared by the commands that take one model × cluster × layout."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import typer

from llmscale.specs.layout import RankOrder, Recompute, Schedule
from llmscale.specs.train import Precision

DEFAULT_MODEL = "seed-10t-moe"
DEFAULT_CLUSTER = "seed-500k"

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="catalog model name, YAML/JSON file or HF config.json")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="catalog cluster name or YAML/JSON file")]
GpusOpt = Annotated[int | None, typer.Option("--gpus", help="GPUs of the job (default tp·cp·pp·dp, else the cluster)")]
TpOpt = Annotated[int, typer.Option("--tp", help="tensor parallel size")]
PpOpt = Annotated[int, typer.Option("--pp", help="pipeline stages")]
DpOpt = Annotated[int | None, typer.Option("--dp", help="data parallel size (default: GPUs / (tp·cp·pp))")]
CpOpt = Annotated[int, typer.Option("--cp", help="context parallel size")]
EpOpt = Annotated[int, typer.Option("--ep", help="expert parallel size")]
EtpOpt = Annotated[int | None, typer.Option("--etp", help="expert tensor parallel size (default: tp)")]
VppOpt = Annotated[int, typer.Option("--vpp", help="virtual stages per pipeline rank")]
MbsOpt = Annotated[int, typer.Option("--mbs", help="micro-batch size (sequences)")]
GbsOpt = Annotated[int | None, typer.Option("--gbs", help="global batch (sequences)")]
SeqOpt = Annotated[int | None, typer.Option("--seq-len", help="sequence length (tokens)")]
ZeroOpt = Annotated[int, typer.Option("--zero", help="ZeRO stage 0-3 (1 = distributed optimizer)")]
RecomputeOpt = Annotated[Recompute, typer.Option("--recompute", case_sensitive=False, help="activation recompute")]
SpOpt = Annotated[bool | None, typer.Option("--sp/--no-sp", help="sequence parallel (default: on when tp > 1)")]
ScheduleOpt = Annotated[Schedule | None, typer.Option("--schedule", case_sensitive=False, help="pipeline schedule")]
PrecisionOpt = Annotated[Precision, typer.Option("--precision", case_sensitive=False, help="GEMM precision")]
FlashOpt = Annotated[bool, typer.Option("--flash-attention/--no-flash-attention",
                                        help="fused attention (off: unfused s×s scores, as before 2022)")]
OffloadOptOpt = Annotated[bool, typer.Option("--offload-optimizer", help="optimizer state in host memory")]
OffloadParamsOpt = Annotated[bool, typer.Option("--offload-params", help="weights in host memory")]
TpOverlapOpt = Annotated[bool, typer.Option("--tp-comm-overlap", help="overlap TP collectives with GEMMs")]
EpOverlapOpt = Annotated[bool, typer.Option("--ep-comm-overlap", help="overlap expert all-to-alls with compute")]
RankOrderOpt = Annotated[RankOrder, typer.Option("--rank-order", case_sensitive=False,
                                                 help="rank order of the parallel groups, innermost first")]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
ExpectShaOpt = Annotated[
    str | None, typer.Option("--expect-sha256", help="refuse to run unless the inputs hash to this value")
]
CalibrationOpt = Annotated[
    Path | None,
    typer.Option("--calibration", help="profile from `llmscale calibrate`: measured peaks, efficiencies and bandwidths "
                 "replace the datasheet ones"),
]


def layout_fields(**flags: Any) -> dict[str, Any]:
    """Layout keyword arguments from CLI flags (None = take the spec's default)."""
    keys = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "mbs", "zero", "recompute", "sp", "schedule",
            "offload_optimizer", "offload_params", "tp_comm_overlap", "ep_comm_overlap", "rank_order")
    return {k: flags[k] for k in keys}


@dataclass(frozen=True)
class JobFlags:
    """The model, cluster, GPU, layout and run flags one command received (see `with_job_flags`)."""

    values: dict[str, Any]

    @property
    def model(self) -> str:
        return str(self.values["model"])

    @property
    def cluster(self) -> str:
        return str(self.values["cluster"])

    @property
    def gpus(self) -> int | None:
        gpus: int | None = self.values["gpus"]
        return gpus

    @property
    def layout(self) -> dict[str, Any]:
        return layout_fields(**self.values)

    @property
    def train(self) -> dict[str, Any]:
        return {"global_batch": self.values["gbs"], "seq_len": self.values["seq_len"],
                "precision": self.values["precision"], "flash_attention": self.values["flash_attention"]}


_JOB_FLAGS: tuple[tuple[str, Any, Any], ...] = (
    ("model", ModelOpt, DEFAULT_MODEL), ("cluster", ClusterOpt, DEFAULT_CLUSTER), ("gpus", GpusOpt, None),
    ("tp", TpOpt, 1), ("pp", PpOpt, 1), ("dp", DpOpt, None), ("cp", CpOpt, 1), ("ep", EpOpt, 1),
    ("etp", EtpOpt, None), ("vpp", VppOpt, 1), ("mbs", MbsOpt, 1), ("gbs", GbsOpt, None), ("seq_len", SeqOpt, None),
    ("zero", ZeroOpt, 1), ("recompute", RecomputeOpt, Recompute.NONE), ("sp", SpOpt, None),
    ("schedule", ScheduleOpt, None), ("precision", PrecisionOpt, Precision.BF16),
    ("flash_attention", FlashOpt, True),
    ("offload_optimizer", OffloadOptOpt, False), ("offload_params", OffloadParamsOpt, False),
    ("tp_comm_overlap", TpOverlapOpt, False), ("ep_comm_overlap", EpOverlapOpt, False),
    ("rank_order", RankOrderOpt, RankOrder.TP_CP_EP_DP_PP),
)
JOB_FLAG_DEFAULTS: dict[str, Any] = {name: default for name, _, default in _JOB_FLAGS}


def with_job_flags(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the shared model/cluster/GPU/layout/run flags, declared once here; the command takes
    `job: JobFlags` instead of repeating two dozen parameters (typer reads the rewritten signature)."""
    signature = inspect.signature(command)
    hints = get_type_hints(command, include_extras=True)
    own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()
           if p.name != "job"]
    first_defaulted = next((i for i, p in enumerate(own) if p.default is not inspect.Parameter.empty), len(own))
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
              for name, annotation, default in _JOB_FLAGS]
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if i >= first_defaulted else p for i, p in enumerate(own)]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in JOB_FLAG_DEFAULTS}
        return command(job=JobFlags(values), **kwargs)

    parameters = own[:first_defaulted] + shared + own[first_defaulted:]
    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": hints.get("return")}
    return wrapper
