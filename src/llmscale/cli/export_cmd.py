"""`llmscale export`: one layout as Megatron-LM flags or a torchtitan TOML, from flags or from a saved plan; and
`llmscale read-megatron FILE`, which reads such flags back (io.megatron_args) and explains the job they describe.

The job comes from the same flags as `explain` or from `--from-plan FILE` (the JSON of `llmscale plan --json`,
its best layout `top[0]`, or of `llmscale explain --json`), resolved by the one resolver (`io.resolve`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from llmscale.api.jobs import export_job
from llmscale.cli import options as o
from llmscale.errors import SpecError
from llmscale.export.document import ExportFormat
from llmscale.io.megatron_args import parse_megatron_args

FormatOpt = Annotated[str, typer.Option("--format", help="megatron (Megatron-LM flags) or torchtitan (TOML)")]


@o.with_job_flags
def export(job: o.JobFlags, fmt: FormatOpt) -> None:
    """Write one layout as a training framework's launch arguments (Megatron-LM flags or torchtitan TOML)."""
    typer.echo(export_job(job.request(), parse_format(fmt)), nl=False)


def parse_format(value: str) -> ExportFormat:
    """--format as an ExportFormat; anything else is one line and exit code 2 (not a usage box)."""
    try:
        return ExportFormat(value.lower())
    except ValueError:
        allowed = ", ".join(f.value for f in ExportFormat)
        raise SpecError("format", value, f"must be one of {allowed}", where="--format") from None


FileArg = Annotated[Path, typer.Argument(help="Megatron-LM arguments, as `llmscale export --format megatron` writes")]
ClusterOpt = Annotated[str | None, typer.Option("--cluster", help="catalog name or file (default: the preamble's)")]
GpusOpt = Annotated[int | None, typer.Option("--gpus", help="GPUs (default: the preamble's)")]


def read_megatron(path: FileArg, cluster: ClusterOpt = None, gpus: GpusOpt = None, as_json: o.JsonOpt = False) -> None:
    """Explain the job that Megatron-LM launch flags describe (the round trip of `export --format megatron`)."""
    from llmscale.api.jobs import explain_job
    from llmscale.report.tables import explain_table

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError("FILE", str(path), f"cannot be read ({err.strerror})") from None
    result = explain_job(parse_megatron_args(text).request(cluster=cluster, gpus=gpus))
    inputs, step = result.job, result.step
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        explain_table(inputs, step)
