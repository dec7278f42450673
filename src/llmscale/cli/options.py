"""Command-line options shared by the commands that take one model × cluster × layout.

The layout flags are not declared here: `layout_parameters` builds one option per field of the layout's
definition (`specs.layout.LAYOUT_FIELDS`) — its flag, type, choices, help and default — so a new layout field is a
new flag on every job command without a line changed here.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import typer
from rich.markup import escape

from llmscale.errors import SpecError
from llmscale.io.resolve import DEFAULT_CLUSTER, DEFAULT_MODEL, JobRequest
from llmscale.specs.bounds import MAX_GLOBAL_BATCH, MAX_GPUS
from llmscale.specs.layout import Layout, LayoutField, spec_fields
from llmscale.specs.train import TRAIN_FLAGS, AttentionKernel, Fp8Cache, Fp8Recipe, Precision, Routing
from llmscale.units import SI_SUFFIXES, parse_count


class DecimalCountWarning(UserWarning):
    """A count typed with a decimal suffix whose binary reading differs (`--gpus 16K` is 16,000, not 16,384)."""


def count_parser(flag: str, maximum: int, binary_hint: bool = False) -> Callable[[str], int]:
    """A whole-number flag in 0..`maximum` that takes SI and binary suffixes (`16K`, `16Ki`, `1.5e4`:
    `units.parse_count`); a bad value is one error line (exit 2). `binary_hint`: a decimal K/M/G suffix says in a
    warning line what it counts and what the binary one would (GPU counts come in powers of two)."""
    def parse(text: str) -> int:
        try:
            value = parse_count(text)
        except ValueError:
            value = -1.0
        if not math.isfinite(value) or value < 0 or value != int(value):
            raise SpecError(flag, text, f"must be a whole number, e.g. 512, 16K, 16Ki or 1.5e4 ({SI_HELP})")
        if value > maximum:
            raise SpecError(flag, text, f"must be at most {maximum:.0e} (specs.bounds)")
        if binary_hint:
            _hint_binary(flag, text, int(value))
        return int(value)
    return parse


def _hint_binary(flag: str, text: str, value: int) -> None:
    stripped = text.strip()
    suffix = stripped[-1:].upper()
    if suffix not in ("K", "M", "G"):
        return
    binary = parse_count(stripped + "i")
    if binary == int(binary) and int(binary) != value:
        warnings.warn(f"{flag} {stripped} = {value:,} ({suffix} = {SI_SUFFIXES[suffix]:,.0f}); "
                      f"{stripped}i would be {int(binary):,}", DecimalCountWarning, stacklevel=2)


def amount_parser(flag: str, maximum: float) -> Callable[[str], float]:
    """A finite number flag in [0, `maximum`] that takes SI suffixes (`15T`, `1.5e13`, `3e25`)."""
    def parse(text: str) -> float:
        try:
            value = parse_count(text)
        except ValueError:
            raise SpecError(flag, text, f"must be a number, e.g. 15T, 1.5e13 or 500K ({SI_HELP})") from None
        if not 0 <= value <= maximum:  # NaN and inf fail too
            raise SpecError(flag, text, f"must be a finite number in 0..{maximum:.0e} (specs.bounds)")
        return value
    return parse


def number_parser(flag: str, low: float, high: float, integer: bool = False) -> Callable[[str], Any]:
    """A plain number flag in low..high (finite; a whole number when `integer`)."""
    def parse(text: str) -> Any:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise SpecError(flag, text, "must be a whole number" if integer else "must be a number") from None
        if not low <= value <= high:  # NaN and inf fail too
            shown = f"{low:,}..{high:,}" if integer else f"{low:g}..{high:g}"
            raise SpecError(flag, text, f"must be in {shown}")
        return value
    return parse


SI_HELP = "suffixes K M G/B T P = 1e3 … 1e15, Ki Mi Gi = 1024, 1024², 1024³"
ModelOpt = Annotated[str | None, typer.Option("--model", "-m", metavar="NAME|FILE", help="catalog model name, "
                                              "YAML/JSON file or HF config.json"
                                              + escape(f" [default: {DEFAULT_MODEL}]"))]
ClusterOpt = Annotated[str | None, typer.Option("--cluster", "-c", metavar="NAME|GPU:COUNT|FILE",
                                                help="catalog cluster name, a standard topology of a catalog GPU "
                                                "(h100-sxm:512, gb200:72; docs/inputs.md) or YAML/JSON file"
                                                + escape(f" [default: {DEFAULT_CLUSTER}]"))]
GpusOpt = Annotated[int | None, typer.Option("--gpus", parser=count_parser("--gpus", MAX_GPUS, binary_hint=True),
                                             metavar="COUNT", help="GPUs of the job (default tp·cp·pp·dp, else the "
                                             "cluster; 16Ki = 16,384, 16K = 16,000)")]
GbsOpt = Annotated[int | None, typer.Option(TRAIN_FLAGS["global_batch"], parser=count_parser("--gbs", MAX_GLOBAL_BATCH),
                                            metavar="COUNT", help="global batch (sequences)")]
SeqOpt = Annotated[int | None, typer.Option(TRAIN_FLAGS["seq_len"], help="sequence length (tokens)"
                                            + escape(" [default: 4096]"))]
PrecisionOpt = Annotated[Precision | None, typer.Option(TRAIN_FLAGS["precision"], case_sensitive=False,
                                                        help="GEMM precision" + escape(" [default: bf16]"))]
FlashOpt = Annotated[bool | None, typer.Option(TRAIN_FLAGS["flash_attention"] + "/--no-flash-attention", metavar="",
                                               help="fused attention (off: unfused s×s scores, as before 2022; "
                                                    "default: the framework release's, else on)")]
MomentsOpt = Annotated[bool | None, typer.Option(TRAIN_FLAGS["bf16_moments"] + "/--fp32-moments", metavar="",
                                                 help="Adam moments in bf16 (default: the framework release's, "
                                                 "else fp32)")]
Fp8CacheOpt = Annotated[Fp8Cache | None, typer.Option(TRAIN_FLAGS["fp8_cache"], case_sensitive=False,
                                                      help="which saved activations an FP8 run keeps in FP8"
                                                      + escape(" [default: linear-inputs]"))]
RoutingOpt = Annotated[Routing | None, typer.Option(TRAIN_FLAGS["routing"], case_sensitive=False,
                                                    help="how the MoE router balances its experts (sets the busiest "
                                                    "rank's load)" + escape(" [default: aux-loss]"))]
Fp8DispatchOpt = Annotated[bool | None, typer.Option(TRAIN_FLAGS["fp8_dispatch"] + "/--bf16-dispatch", metavar="",
                                                     help="MoE tokens dispatched in FP8 with block scales "
                                                          "(default: 16-bit)")]
Fp8RecipeOpt = Annotated[Fp8Recipe | None, typer.Option(TRAIN_FLAGS["fp8_recipe"], case_sensitive=False,
                                                        help="how an FP8 run scales its tensors (Megatron "
                                                        "--fp8-recipe)" + escape(" [default: the framework release's, "
                                                                                  "else mxfp8 on Blackwell, tensorwise "
                                                                                  "before]"))]
AttentionKernelOpt = Annotated[AttentionKernel | None, typer.Option(
    TRAIN_FLAGS["attention_kernel"], case_sensitive=False,
    help="which fused attention kernel runs: the fastest the catalog measured on the GPU, or FlashAttention-2 "
    "(PyTorch SDPA's flash backend)" + escape(" [default: fastest]"))]
Fp8AttentionOpt = Annotated[bool | None, typer.Option(
    TRAIN_FLAGS["fp8_attention"] + "/--bf16-attention", metavar="",
    help="the fused attention core in FP8 under the FP8 recipe (Megatron-Bridge fp8_dot_product_attention; "
    "default: the framework release's, else 16-bit)")]
Fp8OutputProjOpt = Annotated[bool | None, typer.Option(
    TRAIN_FLAGS["fp8_output_proj"] + "/--bf16-output-proj", metavar="",
    help="the output layer's logits GEMMs in MXFP8 (Megatron-Core fp8_output_proj; default: the framework "
    "release's, else 16-bit)")]
FrameworkOpt = Annotated[str | None, typer.Option(
    "--framework", metavar="NAME[@RELEASE]",
    help="the framework release whose default settings (TP/EP overlap, gradient dtype, CUDA graphs, FP8 recipe, "
    "recompute, fused kernels) fill what the flags leave open, and whose engine bounds a search "
    "(catalog/frameworks.yaml `releases`; a wrong name lists them); any: none" + escape(" [default: megatron-bridge, "
                                                                                   "its newest release]"))]
FromPlanOpt = Annotated[
    Path | None,
    typer.Option("--from-plan", help="the job of a saved `llmscale plan --json` (top[0]) or `explain --json` document; "
                 "a model, cluster, GPU or layout flag beside it must agree with the file"),
]
JsonOpt = Annotated[bool, typer.Option("--json", metavar="", help="machine-readable output")]
HostfileOpt = Annotated[Path | None, typer.Option(
    "--hostfile", metavar="FILE", help="the job's hosts in topology order, one NAME per line (optionally slots=N): "
    "placement puts the job on them (docs/placement.md)")]
ExcludeFromOpt = Annotated[Path | None, typer.Option(
    "--exclude-from", metavar="FILE", help="hosts to leave out (llmscale bench links --exclude-out): the job is "
    "placed, and sized, on the rest")]
PlacementOutOpt = Annotated[Path | None, typer.Option(
    "--placement-out", metavar="DIR", help="write the best placement's host order there: hostfile (llmscale launch "
    "--hostfile, mpirun), slurm_hostfile and srun_args.txt (srun --distribution=arbitrary)")]
ExpectShaOpt = Annotated[
    str | None, typer.Option("--expect-sha256", metavar="SHA256",
                              help="refuse to run unless the inputs hash to this value")
]
CalibrationOpt = Annotated[
    Path | None,
    typer.Option("--calibration", help="profile from `llmscale calibrate`: measured peaks, efficiencies and bandwidths "
                 "replace the datasheet ones"),
]

ForceCalibrationOpt = Annotated[bool, typer.Option("--force-calibration", metavar="",
                                                   help="apply a --calibration profile measured on another kind of "
                                                   "device (a CPU profile on GPUs) [default: off]")]
AllowUnsealedOpt = Annotated[bool, typer.Option("--allow-unsealed", metavar="",
                                                help="use a --calibration profile whose sha256 seal is missing or "
                                                "broken (edited by hand); the output says so [default: off]")]


def layout_option(field: LayoutField) -> tuple[Any, Any]:
    """(annotation, default) of the typer option for one layout field. Every option defaults to None (not given),
    so the framework release's setting or the spec's own default applies and a given value is told from an absent
    one; the help shows the default."""
    return option_for(field, field.default)


def option_for(field: LayoutField, default: Any) -> tuple[Any, Any]:
    """`layout_option` with the default the help names (`default`: the spec's, or a command's own)."""
    flag = field.knob.cli_flag(field.name)
    if field.kind is bool and field.is_flag:  # on/off: a framework release may set it, so off can be asked for too
        switch = typer.Option(f"{flag}/--no-{flag[2:]}", metavar="", help=field.description + escape(
            " [default: the framework release's setting, else off]"))
        return Annotated[bool | None, switch], None
    if field.kind is bool:
        return Annotated[bool | None, typer.Option(f"{flag}/--no-{flag[2:]}", metavar="", help=field.description)], None
    shown = "" if default is None else escape(f" [default: {getattr(default, 'value', default)}]")  # not markup
    option = typer.Option(flag, help=field.description + shown, show_default=False, case_sensitive=False)
    optional: Any = field.kind | None  # a type built at run time: typer reads it, mypy cannot
    return Annotated[optional, option], None


def layout_parameters(spec: type[Layout] = Layout) -> list[inspect.Parameter]:
    """One keyword-only parameter per field of the layout definition, in declaration order."""
    params = []
    for field in spec_fields(spec):
        annotation, default = layout_option(field)
        params.append(inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=annotation))
    return params


def given_layout(values: dict[str, Any], spec: type[Layout] = Layout) -> dict[str, Any]:
    """The layout fields the user gave (on or off)."""
    return {f.name: values[f.name] for f in spec_fields(spec) if values.get(f.name) is not None}


def train_fields(**flags: Any) -> dict[str, Any]:
    """The TrainSpec fields given as run flags (None: not given)."""
    return {"global_batch": flags.get("gbs"), "seq_len": flags.get("seq_len"), "precision": flags.get("precision"),
            "flash_attention": flags.get("flash_attention"), "bf16_moments": flags.get("bf16_moments"),
            "fp8_cache": flags.get("fp8_cache"), "routing": flags.get("routing"),
            "fp8_dispatch": flags.get("fp8_dispatch"), "fp8_recipe": flags.get("fp8_recipe"),
            "attention_kernel": flags.get("attention_kernel"), "fp8_attention": flags.get("fp8_attention"),
            "fp8_output_proj": flags.get("fp8_output_proj")}


@dataclass(frozen=True)
class JobFlags:
    """The model, cluster, GPU, layout and run flags one command received (see `with_job_flags`)."""

    values: dict[str, Any]
    spec: type[Layout] = Layout
    """The layout definition the layout flags came from."""

    @property
    def layout(self) -> dict[str, Any]:
        """The layout fields given on the command line (the spec's defaults fill the rest)."""
        return given_layout(self.values, self.spec)

    def request(self) -> JobRequest:
        """What these flags ask the resolver for (`io.resolve.resolve`)."""
        v = self.values
        return JobRequest(model=v["model"], cluster=v["cluster"], gpus=v["gpus"], train=train_fields(**v),
                          layout=self.layout, calibration=v["calibration"],
                          force_calibration=bool(v["force_calibration"]),
                          allow_unsealed=bool(v["allow_unsealed"]), from_plan=v["from_plan"],
                          expect_sha256=v["expect_sha256"], framework=v["framework"])


_RUN_FLAGS: tuple[tuple[str, Any], ...] = (
    ("model", ModelOpt), ("cluster", ClusterOpt), ("gpus", GpusOpt), ("gbs", GbsOpt), ("seq_len", SeqOpt),
    ("precision", PrecisionOpt), ("flash_attention", FlashOpt), ("bf16_moments", MomentsOpt),
    ("fp8_cache", Fp8CacheOpt), ("routing", RoutingOpt), ("fp8_dispatch", Fp8DispatchOpt),
    ("fp8_recipe", Fp8RecipeOpt), ("attention_kernel", AttentionKernelOpt), ("fp8_attention", Fp8AttentionOpt),
    ("fp8_output_proj", Fp8OutputProjOpt), ("framework", FrameworkOpt),
    ("from_plan", FromPlanOpt),
    ("calibration", CalibrationOpt), ("force_calibration", ForceCalibrationOpt),
    ("allow_unsealed", AllowUnsealedOpt), ("expect_sha256", ExpectShaOpt),
)


def job_parameters(spec: type[Layout] = Layout) -> list[inspect.Parameter]:
    """The shared flags: model, cluster and GPUs, the layout's fields, then the run's and the inputs'."""
    run = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)
           for name, annotation in _RUN_FLAGS]
    return run[:3] + layout_parameters(spec) + run[3:]




def with_job_flags(command: Callable[..., Any], spec: type[Layout] = Layout) -> Callable[..., Any]:
    """Give a command the shared model/cluster/GPU/layout/run flags; the command takes `job: JobFlags` instead of
    repeating two dozen parameters (typer reads the rewritten signature). `spec` is the layout definition the
    layout flags come from."""
    return _with_flags(command, "job", job_parameters(spec), lambda values: JobFlags(values, spec))


def with_layout_flags(*names: str, **defaults: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the flags of some layout fields, with defaults of its own where given; it takes
    `layout: dict` (every named field: the value given, else the command's default, else the spec's)."""
    chosen = [f for f in spec_fields(Layout) if f.name in names]

    def parameter(field: LayoutField) -> inspect.Parameter:
        annotation, default = option_for(field, defaults.get(field.name, field.default))
        return inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)

    def pack(values: dict[str, Any]) -> dict[str, Any]:
        return {f.name: values[f.name] if values[f.name] is not None else defaults.get(f.name, f.default)
                for f in chosen}

    return lambda command: _with_flags(command, "layout", [parameter(f) for f in chosen], pack)


def _with_flags(command: Callable[..., Any], target: str, shared: list[inspect.Parameter],
                pack: Callable[[dict[str, Any]], Any]) -> Callable[..., Any]:
    """`command` with the parameters `shared` spliced into its signature (after its required ones); their values,
    packed by `pack`, reach it as the argument `target`."""
    signature = inspect.signature(command)
    hints = get_type_hints(command, include_extras=True)
    own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()
           if p.name != target]
    first_defaulted = next((i for i, p in enumerate(own) if p.default is not inspect.Parameter.empty), len(own))
    names = [p.name for p in shared]
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if i >= first_defaulted else p for i, p in enumerate(own)]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in names}
        return command(**{target: pack(values)}, **kwargs)

    parameters = own[:first_defaulted] + shared + own[first_defaulted:]
    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": hints.get("return")}
    return wrapper


def rule_option(field: LayoutField) -> Any:
    """The `plan` option of one layout field: a text that fixes or bounds it (layout.constraints)."""
    if field.kind is bool:
        form = "on|off"
    elif field.kind is int:
        form = "8 · 1,2,4 · 4..16"
    else:
        form = ",".join(m.value for m in field.kind)  # type: ignore[attr-defined]
    return Annotated[str | None, typer.Option(field.knob.cli_flag(field.name), metavar=form, show_default=False,
                                              help=field.description, rich_help_panel="Layout: fix or bound a field")]


def with_rule_flags(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command one text option per layout field (`rule_option`); it takes `rules: dict[str, str | None]`."""
    shared = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=rule_option(f))
              for f in spec_fields(Layout)]
    return _with_flags(command, "rules", shared, lambda values: values)


def wrote(path: Path) -> None:
    """Say on stderr that a file was written (stdout stays clean for --json)."""
    typer.echo(f"wrote {path}", err=True)


MULTI_VALUE_FLAGS = frozenset({"--interval-min"})
"""List flags that take several values after one flag (`--interval-min 5 10 30`, or `5,10,30`); click options take
one value each, so `expand_multi_values` rewrites them as repeated flags before parsing."""


def expand_multi_values(argv: list[str]) -> list[str]:
    """`--interval-min 5 10 30` and `--interval-min 5,10,30` as `--interval-min 5 --interval-min 10 …`; the values
    run to the next argument that starts with `--` (or `-` and is not a number)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        name, eq, given = argv[i].partition("=")
        i += 1
        if name not in MULTI_VALUE_FLAGS:
            out.append(argv[i - 1])
            continue
        values = [given] if eq else []
        while not eq and i < len(argv) and not _is_flag(argv[i]):
            values.append(argv[i])
            i += 1
        parts = [part for value in values for part in value.split(",") if part != ""]
        out.extend([name] if not parts else [x for part in parts for x in (name, part)])
    return out


def _is_flag(arg: str) -> bool:
    if not arg.startswith("-"):
        return False
    try:
        float(arg)
    except ValueError:
        return True
    return False


def within(name: str, value: float | None, low: float, high: float) -> None:
    """A numeric flag of a measuring command (bench, probe) inside [low, high] and finite (NaN fails every
    comparison, so it is refused too); one error line otherwise. None: not given."""
    if value is None:
        return
    if not (low <= value <= high):
        raise SpecError(name, value, f"must be within {low:g}..{high:g}")
