"""`llmscale allocate`: which model, how many tokens, for this cluster and deadline (src/llmscale/scaling/allocate.py).

Defaults: the flagship cluster (seed-500k) for 90 days, dense and MoE candidates plus the flagship model
(seed-10t-moe), Krajewski et al.'s law (the one that scores dense and MoE on one scale), 30.4T unique tokens
(`--max-tokens`, catalog/scaling_laws.yaml `unique_tokens`: repetition beyond them is scored with Muennighoff et al.
2023's data-constrained law). `--flops F` with no
`--cluster`/`--gpus` answers the pure compute-optimal question (the classic dense one unless --family/--law say
otherwise: Besiroglu et al.'s constants, arXiv:2404.10102, whose refit agrees with Hoffmann et al.'s Approaches 1-2
where Hoffmann's own Approach-3 constants do not). `--explain-3x` adds the "3× compute" decomposition
(src/llmscale/scaling/multiplier.py) for the first `--model` (default the flagship) on the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.measure import Measurement
from rich.progress import Progress
from rich.table import Table

from llmscale.api.allocation import allocate, resolve_law
from llmscale.cli import options as o
from llmscale.errors import SpecError
from llmscale.report.allocate_html import COLUMNS, Column, write_allocate_html
from llmscale.report.strict_json import strict_dumps
from llmscale.report.tables import console
from llmscale.scaling.allocate import JobPolicy
from llmscale.scaling.family import Family
from llmscale.scaling.laws import ScalingLaw
from llmscale.scaling.multiplier import TARGET
from llmscale.specs.bounds import MAX_DAYS, MAX_TOKENS, MIN_DAYS
from llmscale.specs.train import Precision

__all__ = ["allocate_cmd", "resolve_law"]

AllocPrecisionOpt = Annotated[Precision, typer.Option("--precision", case_sensitive=False, help="GEMM precision")]

MAX_FLOPS = 1e32
"""A training budget in FLOPs: ~10⁶× the largest published run (~5·10²⁵, Llama 3.1 405B: 3.8·10²⁵)."""
ClusterArg = Annotated[str | None, typer.Option("--cluster", "-c", help="catalog cluster or file (default seed-500k)")]
DaysOpt = Annotated[float | None, typer.Option("--days", parser=o.number_parser("--days", MIN_DAYS, MAX_DAYS),
                                                help="deadline in days (default 90)")]
FlopsOpt = Annotated[float | None, typer.Option("--flops", parser=o.amount_parser("--flops", MAX_FLOPS),
                                               metavar="FLOPS",
                                               help="training FLOP budget instead of a deadline (3e25)")]
FamilyOpt = Annotated[Family | None, typer.Option("--family", case_sensitive=False, help="dense, moe or both")]
LawOpt = Annotated[ScalingLaw | None, typer.Option("--law", case_sensitive=False, help="scaling law for the loss")]
UniqueOpt = Annotated[float | None, typer.Option(
    "--max-tokens", "--unique-tokens", parser=o.amount_parser("--max-tokens", MAX_TOKENS), metavar="TOKENS",
    help="unique (deduplicated) tokens the run can draw on; beyond them it repeats data, scored with Muennighoff et "
         "al. 2023's law (default 30.4T: RedPajama-Data-v2, catalog/scaling_laws.yaml; 1e16: no cap)")]
ModelsOpt = Annotated[list[str] | None, typer.Option("--model", "-m", help="extra catalog model or file (repeatable)")]
PolicyOpt = Annotated[JobPolicy, typer.Option("--job-size", case_sensitive=False, help="fastest or efficient")]
TopOpt = Annotated[int | None, typer.Option("--top", parser=o.number_parser("--top", 1, 10_000, integer=True),
                                                  help="rows to print (default all)")]
Explain3xOpt = Annotated[bool, typer.Option("--explain-3x", help="decompose '3× compute' on the cluster")]
HtmlOpt = Annotated[Path | None, typer.Option("--html", help="write a self-contained HTML report")]


def allocate_cmd(
    cluster: ClusterArg = None, gpus: o.GpusOpt = None, days: DaysOpt = None, flops: FlopsOpt = None,
    family: FamilyOpt = None, law: LawOpt = None, unique_tokens: UniqueOpt = None, model: ModelsOpt = None,
    precision: AllocPrecisionOpt = Precision.BF16, seq_len: o.SeqOpt = None, job_size: PolicyOpt = JobPolicy.FASTEST,
    top: TopOpt = None, explain_3x: Explain3xOpt = False, as_json: o.JsonOpt = False, html: HtmlOpt = None,
    calibration: o.CalibrationOpt = None, expect_sha256: o.ExpectShaOpt = None,
) -> None:
    """Which model and how many tokens for a cluster and deadline: candidates → best layout → tokens → loss."""
    pure = flops is not None and cluster is None and gpus is None
    if pure and (html is not None or explain_3x):
        raise SpecError("--html/--explain-3x", str(html or "--explain-3x"), "need a cluster: add --cluster")
    with _progress(quiet=as_json or pure) as on_model:
        result = allocate(cluster, gpus, days=days, flops=flops, family=family, law=law, unique_tokens=unique_tokens,
                          models=model or (), precision=precision, seq_len=seq_len, job_size=job_size,
                          explain_3x=explain_3x, calibration=calibration, expect_sha256=expect_sha256,
                          on_model=on_model)
    document = result.to_dict()
    if html is not None:
        write_allocate_html(html, document)
        o.wrote(html)
    if as_json:
        typer.echo(strict_dumps(document))
    elif pure:
        _pure(document)
    else:
        _render(document, top)


@contextmanager
def _progress(quiet: bool) -> Iterator[Callable[[int, int, str], None]]:
    """A progress bar over candidate models; Ctrl-C stops cleanly."""
    try:
        with Progress(console=console, transient=True, disable=quiet) as progress:
            task = progress.add_task("allocating", total=None)

            def on_model(i: int, n: int, name: str) -> None:
                progress.update(task, total=n, completed=i, description=f"searching layouts for {name}")

            yield on_model
    except KeyboardInterrupt:
        console.print("interrupted: no allocation written")
        raise typer.Exit(130) from None


def _pure(document: dict[str, Any]) -> None:
    console.print(f"# llmscale allocate · compute-optimal allocation of {document['flops']:.3g} FLOPs (C = 6·N·D) · "
                  f"law {document['law']}")
    for kind, a in document["by_family"].items():
        gran = f", granularity {a['granularity']}" if a["granularity"] else ""
        console.print(f"{kind}: {a['params'] / 1e9:,.1f}B params ({a['active_params'] / 1e9:,.1f}B active{gran}), "
                      f"{a['tokens'] / 1e12:,.2f}T tokens ({a['tokens_per_param']:.1f} per active parameter), "
                      f"predicted loss {a['loss']:.4f}")


def _render(document: dict[str, Any], top: int | None) -> None:
    budget = f"{document['days']:g} days" if document["days"] else f"{document['flops']:.3g} FLOPs"
    console.print(f"# llmscale {document['llmscale_version']} allocate · cluster {document['cluster']} "
                  f"({document['cluster_gpus']:,} GPUs) · {budget} · law {document['law']} · family "
                  f"{document['family']} · input_sha256 {document['input_sha256'][:16]}…")
    console.print(f"# goodput per job from failures {document['goodput']['failure_profile']} at the best checkpoint "
                  f"policy · job size {document['job_policy']} · batch = critical batch · "
                  f"{len(document['candidates'])} candidates in {document['seconds']:.1f} s")
    rows = document["candidates"][:top]
    for table in _candidate_tables(document, rows):
        console.print(table)
    best = document["recommendation"]
    if best is None:
        reasons = dict.fromkeys(p for c in document["candidates"] for p in c.get("problems", []))
        console.print("no candidate is feasible on this cluster: " + ("; ".join(reasons) or "none fits in memory"))
        return
    console.print(f"[bold]recommendation[/bold]: {best['model']} — {best['total_params'] / 1e9:,.0f}B total / "
                  f"{best['active_params'] / 1e9:,.0f}B active on {best['tokens'] / 1e12:,.1f}T tokens, "
                  f"{best['gpus_per_job']:,} GPUs per job, predicted loss {best['loss']:.4f}")
    for c in document["compared"]:
        alt = document.get("loss_gap_by_moe_fit", {}).get(c["model"])
        refit = f" (under Krajewski's E=16 refit: {alt:+.4f})" if alt is not None else ""
        console.print(f"{c['model']}: rank {c['rank']}, loss {c['loss']:.4f} → {c['loss_gap']:+.4f} nats vs the "
                      f"recommendation{refit}")
    _optimum_lines(document)
    if document["recommendation_at_ladder_edge"]:
        console.print("note: the recommendation is the largest candidate of its kind — the law would take a larger "
                      "one; add bigger models with --model to see how far")
    frontier = Table(title="compute-optimal frontier of the law", title_justify="left")
    for header in ("kind", "C FLOPs", "params", "active", "tokens", "D/N", "loss"):
        frontier.add_column(header, justify="right")
    for kind, points in document["frontier"].items():
        for p in points:
            frontier.add_row(kind, f"{p['compute_flops']:.2e}", f"{p['params'] / 1e9:,.0f}B",
                             f"{p['active_params'] / 1e9:,.0f}B", f"{p['tokens'] / 1e12:,.2f}T",
                             f"{p['tokens_per_param']:.0f}", f"{p['loss']:.4f}")
    console.print(frontier)
    if "moe" in document["frontier"]:
        console.print("note: Krajewski et al. fitted ≤ 3.7B-parameter models on ≤ 130B tokens; at 1e25+ FLOPs every "
                      "MoE figure here is an extrapolation of 4+ orders of magnitude")
    if "compute_3x" in document:
        _render_3x(document["compute_3x"])


def _candidate_tables(document: dict[str, Any], rows: list[dict[str, Any]]) -> list[Table]:
    """The ranked candidates as one table, or — when the terminal is narrower than that table — as several, each
    with the rank and model and as many further columns as fit: no cell is ever cut short ("…")."""
    # Under a deadline every row's days are the deadline (in the header): the terminal leaves them out.
    repeats = any((e["epochs"] or 0) > 1 for e in document["candidates"])
    columns = [c for c in COLUMNS if c.terminal and not (c.key == "days" and document["days"])
               and (c.key != "epochs" or repeats)]
    keys, rest = columns[:2], columns[2:]
    groups: list[list[Column]] = [[]]
    for c in rest:
        if groups[-1] and _natural_width(_candidate_table(keys + groups[-1] + [c], rows)) > console.width:
            groups.append([])
        groups[-1].append(c)
    tables = [_candidate_table(keys + group, rows) for group in groups]
    for k, table in enumerate(tables[1:], start=2):
        table.title = f"candidates, continued ({k} of {len(tables)})"
    return tables


def _natural_width(table: Table) -> int:
    """The width `table` takes when nothing has to fold."""
    return Measurement.get(console, console.options.update(max_width=100_000), table).maximum


def _candidate_table(columns: list[Column], rows: list[dict[str, Any]]) -> Table:
    table = Table(title="candidates, best predicted loss first", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, collapse_padding=True)
    for c in columns:
        table.add_column(f"{c.header}\n{c.unit}" if c.unit else c.header, no_wrap=True,
                         justify="left" if c.key in ("model", "layout_text") else "right")
    for entry in rows:
        table.add_row(*[c.fmt(entry[c.key]) for c in columns], style=None if entry["feasible"] else "dim")
    return table


def _optimum_lines(document: dict[str, Any]) -> None:
    """The least loss the recommendation's shape reaches at its compute (counted as the candidates are, so never
    above the recommendation's), and the unique-token cap with the candidates that repeat data."""
    opt, best = document["shape_optimum"], document["recommendation"]
    shape = f"MoE, granularity {opt['granularity']}, total/active as its own" if best["moe"] else "dense"
    console.print(f"law optimum of its shape ({shape}) at its compute ({opt['compute_flops']:.3g} FLOPs, C = "
                  f"6·N_active·D): {opt['params'] / 1e9:,.0f}B params ({opt['active_params'] / 1e9:,.0f}B active), "
                  f"{opt['tokens'] / 1e12:,.1f}T tokens, loss {opt['loss']:.4f} ({opt['loss'] - best['loss']:+.4f} "
                  "vs the recommendation)")
    cap = document["unique_tokens"]
    repeating = [e for e in document["candidates"] if (e["epochs"] or 0) > 1]
    given = document["unique_tokens_source"] == "given"
    where = "--max-tokens" if given else "default, RedPajama-Data-v2; --max-tokens"
    console.print(f"unique data {cap / 1e12:,.3g}T tokens ({where}): {len(repeating)} of "
                  f"{len(document['candidates'])} candidates repeat it (epochs > 1), scored with Muennighoff et al. "
                  "2023's effective data D′ = U + U·R*(1 − e^(−(D/U − 1)/R*)), R* = 15.39")


def _render_3x(d: dict[str, Any]) -> None:
    table = Table(title=f"what '3× compute' is made of: {d['model']} on {d['cluster']}", title_justify="left")
    for header in ("lever", "baseline", "planned", "unit", "gain", "baseline is", "planned is"):
        table.add_column(header, justify="left" if header in ("lever", "baseline is", "planned is") else "right")
    for f in d["factors"]:
        table.add_row(f["name"], f"{f['baseline']:.3g}", f"{f['planned']:.3g}", f["unit"], f"{f['gain']:.2f}×",
                      f["baseline_means"], f["planned_means"])
    table.add_row("product", "", "", "", f"{d['product']:.2f}×", f"target {TARGET:g}×", "")
    console.print(table)
    for note in d["notes"]:
        console.print(f"note: {note}")
