"""`llmscale export`: one layout as Megatron-LM flags or a torchtitan TOML, from flags or from a saved plan.

The job comes from the same flags as `explain` or from `--from-plan FILE` (the JSON of `llmscale plan --json`,
its best layout `top[0]`, or of `llmscale explain --json`), resolved by the one resolver (`io.resolve`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from llmscale.cli import options as o
from llmscale.errors import SpecError
from llmscale.export.document import ExportFormat, export_text
from llmscale.io.resolve import resolve

FormatOpt = Annotated[str, typer.Option("--format", help="megatron (Megatron-LM flags) or torchtitan (TOML)")]


@o.with_job_flags
def export(job: o.JobFlags, fmt: FormatOpt) -> None:
    """Write one layout as a training framework's launch arguments (Megatron-LM flags or torchtitan TOML)."""
    export_format = parse_format(fmt)
    typer.echo(export_text(resolve(job.request()), export_format), nl=False)


def parse_format(value: str) -> ExportFormat:
    """--format as an ExportFormat; anything else is one line and exit code 2 (not a usage box)."""
    try:
        return ExportFormat(value.lower())
    except ValueError:
        allowed = ", ".join(f.value for f in ExportFormat)
        raise SpecError("format", value, f"must be one of {allowed}", where="--format") from None
