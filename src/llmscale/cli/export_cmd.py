"""`llmscale export`: one layout as Megatron-LM flags or a torchtitan recipe module, from flags or from a saved plan;
`llmscale read-megatron FILE` and `llmscale read-torchtitan FILE`, which read such text back (io.megatron_args,
io.torchtitan_recipe) and explain the job it describes.

The job comes from the same flags as `explain` or from `--from-plan FILE` (the JSON of `llmscale plan --json`,
its best layout `top[0]`, or of `llmscale explain --json`), resolved by the one resolver (`io.resolve`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmscale.api.jobs import explain_job, export_job
from llmscale.cli import options as o
from llmscale.errors import SpecError
from llmscale.io.megatron_args import parse_megatron_args
from llmscale.io.resolve import JobRequest
from llmscale.io.strict import read_text
from llmscale.io.torchtitan_recipe import parse_torchtitan_recipe
from llmscale.launch.document import ExportFormat
from llmscale.report.strict_json import strict_dumps
from llmscale.specs.bounds import MAX_GPUS

FormatOpt = Annotated[str, typer.Option("--format", help="megatron (Megatron-LM flags) or torchtitan (a Trainer.Config "
                                                        "recipe module)")]


@o.with_job_flags
def export(job: o.JobFlags, fmt: FormatOpt) -> None:
    """Write one layout as a training framework's launch arguments (Megatron-LM flags or a torchtitan recipe)."""
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
GpusOpt = Annotated[int | None, typer.Option("--gpus", parser=o.count_parser("--gpus", MAX_GPUS, binary_hint=True),
                                             help="GPUs (default: the preamble's)")]


def read_megatron(path: FileArg, cluster: ClusterOpt = None, gpus: GpusOpt = None, as_json: o.JsonOpt = False) -> None:
    """Explain the job that Megatron-LM launch flags describe (the round trip of `export --format megatron`)."""
    _explain(parse_megatron_args(_read(path)).request(cluster=cluster, gpus=gpus), as_json)


RecipeArg = Annotated[Path, typer.Argument(help="a torchtitan recipe, as `llmscale export --format torchtitan` writes")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="catalog name or file (default: the flavor's model, "
                                              "else the preamble's)")]


def read_torchtitan(path: RecipeArg, model: ModelOpt = None, cluster: ClusterOpt = None, gpus: GpusOpt = None,
                    as_json: o.JsonOpt = False) -> None:
    """Explain the job a torchtitan recipe describes (the round trip of `export --format torchtitan`)."""
    _explain(parse_torchtitan_recipe(_read(path), model).request(cluster=cluster, gpus=gpus), as_json)


def _read(path: Path) -> str:
    return read_text(path)  # one line naming the path for any file-system problem (io.strict)


def _explain(request: JobRequest, as_json: bool) -> None:
    from llmscale.report.tables import explain_table

    result = explain_job(request)
    if as_json:
        typer.echo(strict_dumps(result.to_dict()))
    else:
        explain_table(result.job, result.step)
