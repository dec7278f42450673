"""`llmscale plan`: resolve the inputs (the critical batch when none is given), search with a progress bar, write
the document, the HTML page or the terminal view."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress

from llmscale.api.jobs import plan_job
from llmscale.api.placement import DEFAULT_PLACEMENTS, MAX_PLACEMENTS, FabricRequest, check_out_dir, write_host_order
from llmscale.api.results import Plan
from llmscale.cli import options as o
from llmscale.errors import SpecError
from llmscale.io.resolve import JobRequest
from llmscale.layout.constraints import parse_rules
from llmscale.report.plan_table import plan_table
from llmscale.report.strict_json import strict_dumps
from llmscale.report.tables import console
from llmscale.search.plan import Objective
from llmscale.search.targets import SearchTarget
from llmscale.specs.bounds import MAX_DAYS, MAX_TOKENS, MIN_DAYS
from llmscale.specs.train import TRAIN_FLAGS, TrainSpec

MAX_TOP = 10_000
"""Rows `--top` shows: a table of more is not read (each row is a full step estimate)."""
TokensOpt = Annotated[float | None, typer.Option(TRAIN_FLAGS["total_tokens"],
                                                 parser=o.amount_parser("--tokens", MAX_TOKENS),
                                                 metavar="TOKENS", help="tokens to train: 15T, 1.5e13 (default 10T)")]
ObjectiveOpt = Annotated[Objective, typer.Option("--objective", case_sensitive=False, help="what to rank by")]
DeadlineOpt = Annotated[float | None, typer.Option(
    "--deadline", metavar="DAYS", parser=o.number_parser("--deadline", MIN_DAYS, MAX_DAYS),
    help="the cheapest job (fewest GPU-hours) whose effective time, failures included, is within DAYS")]
TopOpt = Annotated[int, typer.Option("--top", parser=o.number_parser("--top", 1, MAX_TOP, integer=True),
                                          help="layouts to show (1..10⁴)")]
BatchCapOpt = Annotated[float | None, typer.Option("--max-global-batch-tokens", metavar="TOKENS",
                                                   parser=o.amount_parser("--max-global-batch-tokens",
                                                                          MAX_TOKENS),
                                                   help="global batch cap (default: critical batch law)")]
HtmlOpt = Annotated[Path | None, typer.Option("--html", help="write a self-contained HTML report")]
ForceOpt = Annotated[bool, typer.Option("--force", help="search even when the estimated layouts pass the limit "
                                        "(search.plan.MAX_SEARCH_CANDIDATES, 10⁸)")]
PlacementsOpt = Annotated[int, typer.Option(
    "--placements", metavar="K", parser=o.number_parser("--placements", 0, MAX_PLACEMENTS, integer=True),
    help="place the K best layouts on the cluster's nodes (0: none; docs/placement.md)")]
MemoryFractionOpt = Annotated[float, typer.Option(
    "--max-memory-fraction", help="a layout fits when it needs at most this share of GPU memory, in (0, 1]")]


@o.with_rule_flags
def plan_cmd(
    rules: dict[str, str | None],
    model: o.ModelOpt = None,
    cluster: o.ClusterOpt = None,
    gpus: o.GpusOpt = None,
    tokens: TokensOpt = None,
    objective: ObjectiveOpt = Objective.THROUGHPUT,
    deadline: DeadlineOpt = None,
    framework: o.FrameworkOpt = None,
    max_memory_fraction: MemoryFractionOpt = 1.0,
    top: TopOpt = 5,
    gbs: o.GbsOpt = None,
    max_global_batch_tokens: BatchCapOpt = None,
    seq_len: o.SeqOpt = None,
    precision: o.PrecisionOpt = None,
    bf16_moments: o.MomentsOpt = None,
    fp8_cache: o.Fp8CacheOpt = None,
    routing: o.RoutingOpt = None,
    fp8_dispatch: o.Fp8DispatchOpt = None,
    fp8_recipe: o.Fp8RecipeOpt = None,
    attention_kernel: o.AttentionKernelOpt = None,
    fp8_attention: o.Fp8AttentionOpt = None,
    fp8_output_proj: o.Fp8OutputProjOpt = None,
    as_json: o.JsonOpt = False,
    html: HtmlOpt = None,
    expect_sha256: o.ExpectShaOpt = None,
    calibration: o.CalibrationOpt = None,
    force_calibration: o.ForceCalibrationOpt = False,
    force: ForceOpt = False,
    allow_unsealed: o.AllowUnsealedOpt = False,
    hostfile: o.HostfileOpt = None,
    exclude_from: o.ExcludeFromOpt = None,
    placements: PlacementsOpt = DEFAULT_PLACEMENTS,
    placement_out: o.PlacementOutOpt = None,
) -> None:
    """Search every layout (and job size) for the model on the cluster; recommend the best."""
    train = o.train_fields(gbs=_batch(gbs, max_global_batch_tokens, seq_len), seq_len=seq_len, precision=precision,
                           bf16_moments=bf16_moments, fp8_cache=fp8_cache, routing=routing,
                           fp8_dispatch=fp8_dispatch, fp8_recipe=fp8_recipe, attention_kernel=attention_kernel,
                           fp8_attention=fp8_attention, fp8_output_proj=fp8_output_proj)
    request = JobRequest(model=model, cluster=cluster, gpus=gpus, train={**train, "total_tokens": tokens},
                         calibration=calibration, force_calibration=force_calibration,
                         allow_unsealed=allow_unsealed, expect_sha256=expect_sha256, framework=framework)
    target = SearchTarget(rules=parse_rules(rules), max_memory_fraction=max_memory_fraction)
    _check_placement_out(placement_out, placements)
    fabric = FabricRequest(hostfile, exclude_from)
    result = _search(request, objective, top, target, quiet=as_json, force=force, deadline_days=deadline,
                     placing=(fabric, placements))
    if html is not None:
        from llmscale.report.plan_html import write_plan_html

        write_plan_html(html, result.result, result.document)
        o.wrote(html)
    if as_json:
        typer.echo(strict_dumps(result.document))
    else:
        plan_table(result.result, result.document, result.job)
    if placement_out is not None and result.placements:
        for path in write_host_order(result.placements[0], placement_out):
            o.wrote(path)


def _check_placement_out(placement_out: Path | None, placements: int) -> None:
    """--placement-out needs a placement to write and a folder it may write into."""
    if placement_out is not None:
        if placements == 0:
            raise SpecError("placement_out", str(placement_out), "needs --placements ≥ 1 (a placement to write)")
        check_out_dir(placement_out)


def _batch(gbs: int | None, cap_tokens: float | None, seq_len: int | None) -> int | None:
    """--gbs, or the largest batch of sequences under --max-global-batch-tokens (None: the critical batch)."""
    if gbs is not None or cap_tokens is None:
        return gbs
    if cap_tokens <= 0:
        raise SpecError("max_global_batch_tokens", cap_tokens, "must be a positive number of tokens")
    return max(1, int(cap_tokens // (seq_len or TrainSpec().seq_len)))


def _search(request: JobRequest, objective: Objective, top: int, target: SearchTarget, quiet: bool,
            force: bool = False, deadline_days: float | None = None,
            placing: tuple[FabricRequest, int] = (FabricRequest(), DEFAULT_PLACEMENTS)) -> Plan:
    """api.plan_job with a progress bar over job sizes; Ctrl-C stops cleanly."""
    try:
        with Progress(console=console, transient=True, disable=quiet) as progress:
            task = progress.add_task("searching layouts", total=None)

            def on_size(i: int, n: int, size: int) -> None:
                progress.update(task, total=n, completed=i, description=f"searching layouts on {size:,} GPUs")

            return plan_job(request, objective, target, top, on_size, force, deadline_days, *placing)
    except KeyboardInterrupt:
        console.print("interrupted: no plan written")
        raise typer.Exit(130) from None
