"""`llmscale` commands. Thin: parse flags, resolve them with the one resolver (`io.resolve`), call the estimate
functions, hand the results to `llmscale.report`.

Every user error (bad value, unknown key, missing file, unknown catalog name) becomes one line on
stderr and exit code 2 — never a traceback (docs/architecture.md principle 3).
"""

from __future__ import annotations

import sys
import warnings
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale import __version__
from llmscale.cli import options as o
from llmscale.cli.help_width import keep_option_names_whole
from llmscale.cli.plan_cmd import plan_cmd
from llmscale.errors import LlmscaleError
from llmscale.io.calibration import UnsealedProfileWarning
from llmscale.io.catalog import Kind
from llmscale.io.resolve import PartialNodeWarning
from llmscale.report.strict_json import strict_dumps

app = typer.Typer(
    name="llmscale",
    help="Plan, predict and check LLM training on very large GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


EXIT_NOT_RUNNABLE = 3
"""`explain` or `memory` of a layout that does not fit in memory (README, commands); bad input is 2."""
EXIT_NOTHING_EVALUATED = 4
"""`validate` of a file none of whose rows could be evaluated (README, commands): the report is printed, every row
skipped with its reason, and no statistic has a value."""


class ShowKind(str, Enum):
    """What `llmscale show` describes."""

    MODEL = "model"
    GPU = "gpu"
    CLUSTER = "cluster"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"llmscale {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True)] = False,
) -> None:
    """Plan, predict and check LLM training on very large GPU clusters."""


@app.command()
def catalog(
    kind: Annotated[Kind | None, typer.Argument(help="models, gpus or clusters")] = None,
    sources: Annotated[bool, typer.Option("--sources", metavar="", help="add each entry's source")] = False,
    as_json: o.JsonOpt = False,
) -> None:
    """The built-in models, GPUs and clusters: a table of each one's key facts (sources with --sources or --json)."""
    from llmscale.report.catalog_rows import catalog_rows
    from llmscale.report.tables import catalog_tables

    rows = catalog_rows([kind] if kind else list(Kind))
    if as_json:
        typer.echo(strict_dumps({k.value: v for k, v in rows.items()}))
    else:
        catalog_tables(rows, sources=sources)


@app.command()
def show(
    kind: Annotated[ShowKind, typer.Argument(help="model, gpu or cluster")],
    name: Annotated[str, typer.Argument(help="catalog name or file")],
    as_json: o.JsonOpt = False,
) -> None:
    """Describe a model (parameter counts by class), a GPU or a cluster."""
    from llmscale.cost.params import count_params
    from llmscale.io.catalog import load_gpu
    from llmscale.io.resolve import resolve_cluster, resolve_model
    from llmscale.report.tables import spec_table
    from llmscale.specs.fingerprint import sha256_of

    if kind is ShowKind.MODEL:
        model = resolve_model(name)
        document = {"input_sha256": sha256_of(model=model), "spec": model.model_dump(mode="json"),
                    **count_params(model).as_dict()}
    elif kind is ShowKind.GPU:
        gpu = load_gpu(name)
        document = {"input_sha256": sha256_of(gpu=gpu), "spec": gpu.model_dump(mode="json")}
    else:
        cluster = resolve_cluster(name)
        document = {"input_sha256": sha256_of(cluster=cluster), "spec": cluster.model_dump(mode="json")}
    if as_json:
        typer.echo(strict_dumps(document))
    else:
        spec_table(kind.value, name, document)


@app.command()
@o.with_job_flags
def memory(job: o.JobFlags, as_json: o.JsonOpt = False) -> None:
    """Memory of the most-loaded GPU for one layout, by class, and whether it fits (exit 3: it does not)."""
    from llmscale.api.jobs import memory_job
    from llmscale.report.tables import memory_table

    result = memory_job(job.request())
    if as_json:
        typer.echo(strict_dumps(result.to_dict()))
    else:
        assert result.job is not None and result.breakdown is not None
        memory_table(result.job, result.breakdown)
    if not result.fits:
        raise typer.Exit(EXIT_NOT_RUNNABLE)


@app.command()
@o.with_job_flags
def explain(job: o.JobFlags, as_json: o.JsonOpt = False,
            placement: Annotated[bool, typer.Option("--placement", metavar="", help=(
                "also place the layout on the cluster's nodes: the map, each group's span, per-tier traffic, the "
                "step placed vs in host order (docs/placement.md)"))] = False,
            hostfile: o.HostfileOpt = None, exclude_from: o.ExcludeFromOpt = None,
            placement_out: o.PlacementOutOpt = None) -> None:
    """Step time, MFU and throughput of one layout, with the step and memory breakdowns."""
    from llmscale.api.jobs import explain_job
    from llmscale.api.placement import FabricRequest, check_out_dir, write_host_order
    from llmscale.report.tables import explain_table, print_placement

    wanted = placement or any(v is not None for v in (hostfile, exclude_from, placement_out))
    if placement_out is not None:
        check_out_dir(placement_out)
    result = explain_job(job.request(), FabricRequest(hostfile, exclude_from) if wanted else None)
    if as_json:
        typer.echo(strict_dumps(result.to_dict()))
    else:
        excess = result.document["above_published_mfu"]
        explain_table(result.job, result.step, record_note=excess["note"] if excess else None,
                      frameworks=result.document["frameworks"])
        if result.placement is not None:
            print_placement(result.document["placement"])
    if placement_out is not None and result.placement is not None:
        for path in write_host_order(result.placement, placement_out):
            o.wrote(path)
    if not result.fits:
        raise typer.Exit(EXIT_NOT_RUNNABLE)


app.command("plan")(plan_cmd)


@app.command()
def validate(
    runs: Annotated[Path | None, typer.Option("--runs", help="published-runs YAML (default: the shipped set)")] = None,
    as_json: o.JsonOpt = False,
    calibration: o.CalibrationOpt = None,
    allow_unsealed: o.AllowUnsealedOpt = False,
    facts: Annotated[str, typer.Option(
        "--facts", metavar="profile|recipe", help="what each prediction reads: profile — the published table and the "
        "row's framework release profile, what a user knows (the headline); recipe — also the row's own recipe facts "
        "(data/run_settings.yaml)")] = "profile",
    framework: Annotated[str | None, typer.Option(
        "--framework", metavar="NAME[@RELEASE]", help="only the rows of this framework (or release)")] = None,
    force_calibration: o.ForceCalibrationOpt = False,
) -> None:
    """Predicted vs published tokens/s per GPU for every run of a published-runs file (exit 4: no row evaluated)."""
    from llmscale.api.jobs import choice
    from llmscale.api.runs import validate_report
    from llmscale.report.documents import validation_document
    from llmscale.report.tables import validation_table
    from llmscale.validation.jobs import Facts

    report = validate_report(runs, calibration, allow_unsealed, choice(Facts, facts, "--facts"), framework,
                             force_calibration)
    if as_json:
        typer.echo(strict_dumps(validation_document(report)))
    else:
        validation_table(report)
    if not report.rows:
        typer.echo(f"error: no row of {runs or 'the shipped set'} was evaluated ({len(report.skipped)} skipped, each "
                   "with its reason)", err=True)
        raise typer.Exit(EXIT_NOTHING_EVALUATED)


@app.command("hash")
def hash_(files: Annotated[list[Path], typer.Argument(help="model or cluster files (YAML/JSON/HF config)")]) -> None:
    """SHA256 of each file's canonical resolved spec (the value `--expect-sha256` checks)."""
    from llmscale.io.catalog import model_file
    from llmscale.io.files import read_document
    from llmscale.io.resolve import resolve_cluster, resolve_model
    from llmscale.specs.fingerprint import sha256_of

    for given in files:
        path = model_file(given)  # a Hugging Face snapshot folder stands for its config.json
        data = read_document(path)
        digest = sha256_of(cluster=resolve_cluster(path)) if "tiers" in data else sha256_of(model=resolve_model(path))
        typer.echo(f"{digest}  {given}")


# The larger commands live in their own modules; registered here, after the commands above.
from llmscale.cli.allocate_cmd import allocate_cmd  # noqa: E402
from llmscale.cli.bench_cmd import bench_app  # noqa: E402
from llmscale.cli.calibrate_cmd import calibrate  # noqa: E402
from llmscale.cli.dashboard_cmd import dashboard_cmd  # noqa: E402
from llmscale.cli.export_cmd import export, read_megatron, read_torchtitan  # noqa: E402
from llmscale.cli.goodput_cmd import goodput  # noqa: E402
from llmscale.cli.journal_cmd import journal  # noqa: E402
from llmscale.cli.launch_cmd import launch  # noqa: E402
from llmscale.cli.probe_cmd import probe  # noqa: E402
from llmscale.cli.profile_cmd import profile_cmd  # noqa: E402
from llmscale.cli.storage_cmd import storage  # noqa: E402, F401  (registers `bench storage` on bench_app)

app.command("export")(export)
app.command("read-megatron")(read_megatron)
app.command("read-torchtitan")(read_torchtitan)
app.command("goodput")(goodput)
app.command("allocate")(allocate_cmd)
app.command("probe")(probe)
app.add_typer(bench_app, name="bench")
app.command("calibrate")(calibrate)
app.command("profile")(profile_cmd)
app.command("dashboard")(dashboard_cmd)
app.command("journal")(journal)
app.command("launch")(launch)


def _warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """A warning as one `warning:` line on stderr (not Python's two-line form with a source line)."""
    typer.echo(f"warning: {message}", err=True)


def main(argv: list[str] | None = None) -> Any:
    """Entry point: run the app, turning LlmscaleError into one line and exit code 2, and warnings into one line."""
    warnings.showwarning = _warning_line
    for category in (UnsealedProfileWarning, PartialNodeWarning, o.DecimalCountWarning):
        warnings.simplefilter("always", category)  # every run says so, not only the first in a process
    try:
        args = o.expand_multi_values(sys.argv[1:] if argv is None else argv)
        keep_option_names_whole(args, {group.name for group in app.registered_groups if group.name})
        return app(args=args, standalone_mode=True)
    except LlmscaleError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
