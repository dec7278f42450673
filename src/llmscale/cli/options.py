"""Command-line options shared by the commands that take one model × cluster × layout."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.specs.layout import Recompute, Schedule
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
OffloadOptOpt = Annotated[bool, typer.Option("--offload-optimizer", help="optimizer state in host memory")]
OffloadParamsOpt = Annotated[bool, typer.Option("--offload-params", help="weights in host memory")]
TpOverlapOpt = Annotated[bool, typer.Option("--tp-comm-overlap", help="overlap TP collectives with GEMMs")]
EpOverlapOpt = Annotated[bool, typer.Option("--ep-comm-overlap", help="overlap expert all-to-alls with compute")]
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
            "offload_optimizer", "offload_params", "tp_comm_overlap", "ep_comm_overlap")
    return {k: flags[k] for k in keys}
