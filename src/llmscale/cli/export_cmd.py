"""`llmscale export`: one layout as Megatron-LM flags or a torchtitan TOML, from flags or from a plan file.

The layout comes either from the same flags as `explain` or from `--from-plan FILE`: the JSON of
`llmscale plan --json` (its best layout, `top[0]`) or of `llmscale explain --json` (its `layout`). Neither
document records the precision, so `--precision` still applies; batch and sequence length come from the
document (plan: `global_batch`; explain: `tokens_per_step` with `--seq-len`) unless given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.cli import options as o
from llmscale.errors import InputFileError, LlmscaleError, SpecError
from llmscale.export.document import ExportFormat, export_text
from llmscale.io.files import read_document
from llmscale.io.resolve import JobInputs, resolve_job
from llmscale.specs.train import TrainSpec

FormatOpt = Annotated[str, typer.Option("--format", help="megatron (Megatron-LM flags) or torchtitan (TOML)")]
FromPlanOpt = Annotated[
    Path | None,
    typer.Option("--from-plan", help="JSON of `llmscale plan --json` (top[0]) or `llmscale explain --json`"),
]

@o.with_job_flags
def export(
    job: o.JobFlags,
    fmt: FormatOpt,
    from_plan: FromPlanOpt = None,
    expect_sha256: o.ExpectShaOpt = None,
) -> None:
    """Write one layout as a training framework's launch arguments (Megatron-LM flags or torchtitan TOML)."""
    export_format = parse_format(fmt)
    if from_plan is not None:
        # A model/cluster/GPU/layout flag that differs from its default is ignored (and said so) with --from-plan.
        ignored = [k for k, default in o.JOB_FLAG_DEFAULTS.items()
                   if k not in ("gbs", "seq_len", "precision") and job.values[k] != default]
        if ignored:
            names = ", ".join("--" + k.replace("_", "-") for k in ignored)
            typer.echo(f"warning: {names} ignored: --from-plan takes model, cluster, GPUs and layout from the file",
                       err=True)
        inputs = job_from_document(from_plan, job.train)
    else:
        inputs = resolve_job(job.model, job.cluster, job.gpus, job.train, job.layout)
    if expect_sha256 is not None and expect_sha256.lower() != inputs.input_sha256:
        raise LlmscaleError(
            f"--expect-sha256 {expect_sha256} does not match the inputs' SHA256 {inputs.input_sha256}: refusing to run"
        )
    typer.echo(export_text(inputs, export_format), nl=False)


def parse_format(value: str) -> ExportFormat:
    """--format as an ExportFormat; anything else is one line and exit code 2 (not a usage box)."""
    try:
        return ExportFormat(value.lower())
    except ValueError:
        allowed = ", ".join(f.value for f in ExportFormat)
        raise SpecError("format", value, f"must be one of {allowed}", where="--format") from None


def job_from_document(path: Path, train: dict[str, Any]) -> JobInputs:
    """The job a plan or explain JSON describes; `train` holds the CLI's batch, sequence and precision."""
    doc = read_document(path)
    if "top" in doc:
        top = doc["top"]
        if not isinstance(top, list) or not top or not isinstance(top[0], dict):
            raise InputFileError(f"{path}: 'top' holds no layout (no layout of the plan fits in memory)")
        entry, batch = top[0], _plan_batch(doc, train)
    elif "layout" in doc:
        entry, batch = doc, _explain_batch(doc, train)
    else:
        raise InputFileError(f"{path}: neither a plan (top[0].layout) nor an explain document (layout)")
    layout, num_gpus = entry.get("layout"), entry.get("num_gpus")
    if not isinstance(layout, dict):
        raise InputFileError(f"{path}: 'layout' must be a mapping of layout fields")
    names = (doc.get("model"), doc.get("cluster"))
    if not all(isinstance(name, str) for name in names):
        raise InputFileError(f"{path}: 'model' and 'cluster' must name a catalog entry or a file")
    return resolve_job(str(names[0]), str(names[1]), num_gpus if isinstance(num_gpus, int) else None,
                       {**train, **batch}, layout)


def _plan_batch(doc: dict[str, Any], train: dict[str, Any]) -> dict[str, Any]:
    """A plan records its global batch as sequences and tokens, hence the sequence length."""
    batch = doc.get("global_batch")
    if not isinstance(batch, dict) or not isinstance(batch.get("sequences"), int):
        return {}
    sequences, tokens = batch["sequences"], _whole(batch.get("tokens"))
    fields: dict[str, Any] = {"global_batch": train["global_batch"] or sequences}
    if train["seq_len"] is None and isinstance(tokens, int) and sequences and tokens % sequences == 0:
        fields["seq_len"] = tokens // sequences
    return fields


def _whole(value: object) -> int | None:
    """A count written as a JSON number (explain writes tokens_per_step as a float)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, float) and value.is_integer() else None


def _explain_batch(doc: dict[str, Any], train: dict[str, Any]) -> dict[str, Any]:
    """An explain document records tokens per step = global batch × sequence length."""
    tokens = _whole(doc.get("tokens_per_step"))
    if tokens is None:
        return {}
    seq_len = train["seq_len"] or TrainSpec().seq_len
    gbs = train["global_batch"]
    if gbs is None:
        if tokens % seq_len:
            raise SpecError("seq_len", seq_len, f"does not divide the document's tokens_per_step ({tokens:,})",
                            where="train")
        return {"global_batch": tokens // seq_len}
    if gbs * seq_len != tokens:
        raise SpecError("global_batch", gbs, f"× seq_len ({seq_len}) = {gbs * seq_len:,} ≠ the document's "
                        f"tokens_per_step ({tokens:,})", where="train")
    return {}
