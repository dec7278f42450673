"""Terminal tables of the job commands (memory, explain, validate) and of the catalog, read from the same results
the JSON documents (`report.documents`) are built from. Human units (GiB, B params) exist only in llmscale.report."""

from __future__ import annotations

import itertools
import os
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from llmscale import __version__
from llmscale.cost.memory import MemoryBreakdown
from llmscale.cost.step import STEP_PARTS, StepBreakdown
from llmscale.io.catalog import Kind
from llmscale.io.resolve import Job
from llmscale.report.mfu_conventions import mfu_conventions
from llmscale.report.moe_table import moe_layer_table
from llmscale.report.text import layout_line
from llmscale.specs.cluster import Fp8AttentionScaling
from llmscale.specs.framework import CHOICE_SETTINGS
from llmscale.specs.train import AttentionKernel, Precision
from llmscale.units import GIB
from llmscale.validation.validate import ValidationReport, ValidationRow


def _width() -> int | None:
    """The terminal's width; when piped, COLUMNS if set (as `COLUMNS=200 llmscale … | less`), else 150."""
    if sys.stdout.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) >= 40 else 150


console = Console(width=_width())

def _gib(value: float) -> str:
    return f"{value / GIB:,.2f}"


CATALOG_COLUMNS: dict[Kind, tuple[str, ...]] = {
    Kind.CLUSTERS: ("name", "GPU", "GPUs", "nodes", "GPUs/node", "tiers: ranks @ GB/s per GPU one way"),
    Kind.GPUS: ("name", "GPU", "BF16 TFLOP/s", "FP8 TFLOP/s", "FP4 TFLOP/s", "HBM GiB", "HBM TB/s", "NVLink GB/s"),
    Kind.MODELS: ("name", "type", "layers", "hidden", "total params", "active params"),
}
"""The key facts `llmscale catalog` shows per kind (report.documents.catalog_rows builds them)."""


def catalog_tables(rows: dict[Kind, list[dict[str, Any]]], sources: bool = False) -> None:
    """`llmscale catalog`: a table of each kind's key facts (`catalog_rows`), the sources only when asked."""
    for kind, kind_rows in rows.items():
        table = Table(title=f"catalog {kind.value}", title_justify="left")
        columns = CATALOG_COLUMNS[kind]
        for column in columns:
            table.add_column(column, justify="left" if column in ("name", "GPU", "type") or ":" in column
                             else "right")
        if sources:
            table.add_column("source", overflow="fold", max_width=80)
        for row in kind_rows:
            cells = [_cell(row["facts"].get(column)) for column in columns]
            table.add_row(*cells, *([row["source"]] if sources else []))
        console.print(table)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if value < 1000 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def spec_table(kind: str, name: str, document: dict[str, Any]) -> None:
    """`llmscale show`: a spec's fields, then the figures derived from it."""
    table = Table(title=f"{kind} {name} · input_sha256 {document['input_sha256'][:16]}…", title_justify="left",
                  show_header=False)
    for key, value in document["spec"].items():
        table.add_row(key, str(value))
    for key, value in document.items():
        if key not in ("spec", "input_sha256"):
            table.add_row(key, f"{value:,}" if isinstance(value, int) else str(value))
    console.print(table)


def memory_table(job: Job, result: MemoryBreakdown, i: int = 0, command: str = "memory") -> None:
    """The memory breakdown of layout i under a `# llmscale VERSION COMMAND · …` header."""
    console.print(
        f"# llmscale {__version__} {command} · model {job.model.name} · cluster {job.cluster.name} · "
        f"{job.num_gpus:,} GPUs · input_sha256 {job.input_sha256[:16]}…"
    )
    console.print(f"# {layout_line(job.resolved_layout)}")
    train = job.train
    recipe = (f" ({job.cluster.gpu.fp8_recipe(train).value})"
              if train.precision is Precision.FP8 else "")
    kernel = train.attention_kernel
    attention = (" · unfused attention" if not train.flash_attention else
                 "" if kernel is AttentionKernel.FASTEST else f" · {kernel.value} attention")
    if train.fp8_attention:
        scaling = Fp8AttentionScaling.of(job.cluster.gpu.fp8_recipe(train))
        attention += f" · FP8 attention ({scaling.value if scaling else '-'})"
    if train.fp8_output_proj:
        attention += " · MXFP8 output layer"
    console.print(f"# seq {train.seq_len} gbs {train.global_batch} {train.precision.value}{recipe}{attention}")
    for line in profile_lines(job):
        console.print(escape(line))
    table = Table(title_justify="left")
    table.add_column("class")
    table.add_column("GiB", justify="right")
    table.add_column("share", justify="right")
    total = float(result.total_bytes[i])
    rows = [
        ("weights", result.weights_bytes[i]),
        ("gradients", result.gradients_bytes[i]),
        ("optimizer", result.optimizer_bytes[i]),
        ("activations", result.activations_bytes[i]),
        ("comm buffers", result.comm_buffer_bytes[i]),
        ("runtime (CUDA, NCCL)", result.runtime_bytes[i]),
        ("fragmentation", result.fragmentation_bytes[i]),
    ]
    for label, value in rows:
        table.add_row(label, _gib(float(value)), f"{float(value) / total:.1%}")
    table.add_row("total", _gib(total), "100.0%", style="bold")
    table.add_row("capacity", _gib(result.capacity_bytes), "")
    console.print(table)
    verdict = "FITS" if bool(result.fits[i]) else "OUT OF MEMORY"
    console.print(
        f"{verdict}: {_gib(total)} of {_gib(result.capacity_bytes)} GiB on pipeline rank "
        f"{int(result.pipeline_rank[i])}"
    )
    if float(result.host_bytes_per_node[i]) > 0:
        console.print(
            f"offload: {_gib(float(result.host_bytes_per_node[i]))} GiB host memory per node "
            f"(node has {job.cluster.node.host_memory_gib:,.0f} GiB), "
            f"{_gib(float(result.pcie_bytes_per_step[i]))} GiB PCIe traffic per GPU per step "
            f"({float(result.pcie_s_per_step[i]):.2f} s at {job.cluster.node.pcie_gb_per_s:.0f} GB/s)"
        )


PART_LABELS = {"compute_s": "compute", "recompute_s": "recompute", "tp_exposed_s": "TP exposed",
               "cp_exposed_s": "CP exposed", "ep_exposed_s": "EP exposed", "pp_exposed_s": "PP exposed",
               "dp_exposed_s": "DP exposed", "host_wait_s": "host wait", "bubble_s": "pipeline bubble",
               "optimizer_s": "optimizer", "overhead_s": "overhead", "offload_s": "offload (PCIe)"}
"""How the terminal names a step part; a part without a label is named after its field."""


def profile_lines(job: Job) -> list[str]:
    """`# framework megatron-bridge@25.09: tp overlap on, fp32 grads off (bridge-…), …` — what the release profile
    set for this job, with the source of each; the settings the user's flags kept."""
    application = job.profile
    if application is None:
        return ["# framework any: no release profile (settings as given, else llmscale's defaults)"]
    family = f" (model family {job.model.family})" if job.model.family else ""
    if application.recorded:
        return [f"# framework {application.release}{family}: as the saved document recorded it (every setting "
                "written out)"]
    lay = job.resolved_layout
    applied = ", ".join(f"{s.name} {_setting_text(s.value, (lay.pp, lay.vpp))} ({s.source})"
                        for s in application.applied if s.name not in CHOICE_SETTINGS)
    lines = [f"# framework {application.release}{family}: " + (applied or "no rule applies to this job")]
    if application.kept:
        lines.append(f"# kept as given (the release would set them): {', '.join(application.kept)}")
    if application.dropped:
        reasons = {"fp8_attention": "yields to the unfused or FlashAttention-2 attention asked for",
                   "fp8_output_proj": "the output layer is tied to the input embedding"}
        lines.append("# not turned on: " + ", ".join(
            f"{name} ({reasons.get(name, 'this layout cannot run it; the release drops it')})"
            for name in application.dropped))
    return lines


def _setting_text(value: Any, shape: tuple[int, int]) -> str:
    """A profile setting's value; of pipeline splits, the one for this layout's (pp, vpp), run-length written."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list) and value and isinstance(value[0], dict):
        split = next((s for s in value if (s["pp"], s["vpp"]) == shape), None)
        if split is None:
            return f"(none for pp {shape[0]} vpp {shape[1]}: llmscale's split)"
        runs = [(n, len(list(group))) for n, group in itertools.groupby(split["layers"])]
        return "[" + ",".join(f"{n}×{k}" if k > 1 else str(n) for n, k in runs) + "]"
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(getattr(value, "value", value))


def part_label(part: str) -> str:
    return PART_LABELS.get(part, part.removesuffix("_s").replace("_", " "))


def explain_table(job: Job, step: StepBreakdown, i: int = 0, record_note: str | None = None,
                  frameworks: list[str] | None = None) -> None:
    """The step and memory breakdowns of layout i and its rates; `record_note` (search.plausibility.MfuExcess.text,
    or the `above_published_mfu` note of its document) is printed beside the MFU when it lies above the published
    record; `frameworks` (report.documents.runs_on) which catalog frameworks run it."""
    total = float(step.step_time_s[i])
    table = Table(title="step breakdown", title_justify="left")
    table.add_column("part")
    table.add_column("s", justify="right")
    table.add_column("share", justify="right")
    for part in STEP_PARTS:
        value = float(getattr(step, part)[i])
        table.add_row(part_label(part), f"{value:,.3f}", f"{value / total:.1%}")
    table.add_row("step", f"{total:,.3f}", "100.0%", style="bold")
    memory_table(job, step.memory, i, command="explain")
    console.print(table)
    moe_layer_table(console, job, i)
    if not bool(step.memory.fits[i]):
        console.print(
            f"[bold red]NOT RUNNABLE[/bold red]: the layout does not fit in memory "
            f"({_gib(float(step.memory.total_bytes[i]))} of {_gib(step.memory.capacity_bytes)} GiB on pipeline rank "
            f"{int(step.memory.pipeline_rank[i])}); the step time above assumes it did"
        )
        return
    console.print(
        f"MFU {float(step.mfu[i]):.1%} · HFU {float(step.hfu[i]):.1%} · "
        f"{float(step.tflops_per_gpu[i]):,.0f} model TFLOP/s per GPU · "
        f"{float(step.tokens_per_s_per_gpu[i]):,.0f} tokens/s per GPU · {step.tokens_per_step:,.0f} tokens per step"
    )
    for line in mfu_conventions(job.model, job.cluster, job.train, step, i).lines():
        console.print(line)
    if record_note is not None:
        console.print(f"[yellow]MFU {float(step.mfu[i]):.1%} is {escape(record_note)}[/yellow]")
    if frameworks is not None:
        console.print("runs on: " + (", ".join(frameworks) or "no catalog framework (catalog/frameworks.yaml: none "
                                     "runs all of this layout)"))


def validation_table(report: ValidationReport) -> None:
    reads = {"profile": "the published table and each row's framework release profile",
             "recipe": "the published table, the release profile and each row's own recipe facts"}
    console.print(f"# llmscale {__version__} validate · predicted vs published tokens/s per GPU · facts "
                  f"{report.facts.value}: {reads[report.facts.value]}")
    table = Table(title_justify="left")
    for column, justify in (("run", "left"), ("release", "left"), ("gpu", "left"), ("type", "left"),
                            ("GPUs", "right"), ("predicted", "right"), ("published", "right"), ("error", "right"),
                            ("fits", "left"), ("MFU", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in report.rows:
        mfu = f"{row.predicted_mfu:.1%}" + (" > published" if row.above_published else "")
        table.add_row(escape(row.name), row.release or f"{row.framework} (no profile)", row.gpu, row.model_type,
                      f"{row.num_gpus:,}",
                      f"{row.predicted_tokens_per_s_per_gpu:,.0f}", f"{row.published_tokens_per_s_per_gpu:,.0f}",
                      f"{row.error_pct:+.1f}%", _fit_cell(row), mfu)
    console.print(table)
    for skipped in report.skipped:
        console.print(escape(f"skipped: {skipped.name}: {skipped.reason}"))
    _group_table(report)
    s = report.summary()
    if not report.rows:
        console.print(f"no row evaluated · skipped {s['skipped']}")
        return
    console.print(
        f"|error| median {s['median_abs_error_pct']:.1f}% · p90 {s['p90_abs_error_pct']:.1f}% · "
        f"max {s['max_abs_error_pct']:.1f}% · evaluated {s['evaluated']} · skipped {s['skipped']} · "
        f"fit recall {s['fit_recall']:.1%} · above the best published MFU {s['above_published_mfu']}"
    )


def _fit_cell(row: ValidationRow) -> str:
    """'yes', or 'NO' with the predicted peak beside the GPU's memory: how far the published layout misses."""
    if row.fits:
        return "yes"
    return f"NO {row.memory_bytes / GIB:.1f}/{row.capacity_bytes / GIB:.0f} GiB"


def _group_table(report: ValidationReport) -> None:
    for title, first, groups in (("framework and model type", "framework", report.by_group()),
                                 ("model family", "family", report.by_family())):
        table = Table(title=f"|error| by {title}", title_justify="left")
        for column, justify in ((first, "left"), ("type", "left"), ("rows", "right"), ("median", "right"),
                                ("p90", "right"), ("max", "right")):
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        for (name, kind), summary in groups.items():
            table.add_row(name, kind, str(summary.rows), f"{summary.median_abs_error_pct:.1f}%",
                          f"{summary.p90_abs_error_pct:.1f}%", f"{summary.max_abs_error_pct:.1f}%")
        console.print(table)


def print_placement(entry: dict[str, Any]) -> None:
    """One layout's placement (report.placement)."""
    from llmscale.report.placement import placement_tables

    for part in placement_tables(entry):
        console.print(part)
