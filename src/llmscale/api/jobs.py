"""The API of one model × cluster job: `plan` (search), `explain` and `memory` (one layout), `export` (launch
arguments). Each takes catalog names, file paths or spec objects, resolves them with the one resolver
(io.resolve) the CLI uses, and returns a typed result (api.results) whose `to_dict()` is the command's JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from llmscale.api.checks import fields_arg, flag_arg, path_arg, ref_arg, text_arg
from llmscale.api.placement import DEFAULT_PLACEMENTS, MAX_PLACEMENTS, FabricRequest, capped, place
from llmscale.api.results import Explain, Memory, Plan
from llmscale.api.sizes import SizedJobs
from llmscale.cost.memory import memory_breakdown
from llmscale.cost.step import estimate_step
from llmscale.errors import SpecError
from llmscale.io.catalog import load_frameworks
from llmscale.io.resolve import BatchDefault, Job, JobRequest, resolve
from llmscale.launch.document import ExportFormat, export_text
from llmscale.layout.constraints import parse_rules
from llmscale.layout.profile import ReleaseLayouts
from llmscale.report.documents import explain_document, memory_document, plan_document
from llmscale.search.plan import Objective, leftover_sizes
from llmscale.search.plan import plan as search_plan
from llmscale.search.targets import SearchTarget
from llmscale.specs.bounds import MAX_DAYS, MIN_DAYS
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.framework import Framework
from llmscale.specs.layout import Layout
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec

ModelRef = str | Path | ModelSpec | None
ClusterRef = str | Path | ClusterSpec | None
LayoutRef = Mapping[str, Any] | Layout | None
RuleValue = str | int | bool | Enum | list[Any] | tuple[Any, ...] | None
E = TypeVar("E", bound=Enum)


def choice(cls: type[E], value: E | str, name: str) -> E:
    """An enum member from itself or its value; a SpecError lists the values."""
    if isinstance(value, cls):
        return value
    try:
        return cls(str(value).lower())
    except ValueError:
        raise SpecError(name, value, "one of " + ", ".join(m.value for m in cls)) from None


def rule_text(value: RuleValue) -> str | None:
    """A layout rule from Python: 8 → '8', [1, 2, 4] → '1,2,4', True → 'on', '4..16' as is."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, list | tuple):
        return ",".join(t for t in (rule_text(v) for v in value) if t is not None)
    return str(value)


def whole(name: str, value: Any, allow_none: bool = True) -> None:
    """A count given from Python must be a positive int (not a bool, a float or a text); a SpecError otherwise."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(name, value, "a positive whole number")


def within(name: str, value: Any, minimum: float, maximum: float, allow_none: bool = True) -> None:
    """A number given from Python must be a real in [minimum, maximum] (not a bool or a text; NaN fails); a
    SpecError otherwise."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not minimum <= value <= maximum:
        raise SpecError(name, value, f"a number in {minimum:g}..{maximum:g}")


def job_request(model: ModelRef, cluster: ClusterRef, gpus: int | None, train: Mapping[str, Any] | TrainSpec | None,
                layout: LayoutRef = None, **rest: Any) -> JobRequest:
    """The resolver's request for these inputs (`rest`: calibration, from_plan, expect_sha256, batch), every
    argument checked at the door (api.checks)."""
    whole("gpus", gpus)
    for name in ("calibration", "from_plan"):
        if name in rest:
            rest[name] = path_arg(name, rest[name])
    if "expect_sha256" in rest:
        text_arg("expect_sha256", rest["expect_sha256"])
    if "allow_unsealed" in rest:
        flag_arg("allow_unsealed", rest["allow_unsealed"])
    train = fields_arg("train", train, TrainSpec, "{'seq_len': 8192}")
    return JobRequest(model=ref_arg("model", model, ModelSpec), cluster=ref_arg("cluster", cluster, ClusterSpec),
                      gpus=gpus, train=train if train is not None else {},
                      layout=fields_arg("layout", layout, Layout), **rest)


def plan(model: ModelRef = None, cluster: ClusterRef = None, *, gpus: int | None = None,
         train: Mapping[str, Any] | TrainSpec | None = None, objective: Objective | str = Objective.THROUGHPUT,
         framework: str | None = None, rules: Mapping[str, RuleValue] | None = None,
         max_memory_fraction: float = 1.0, top: int = 5, calibration: Path | None = None,
         allow_unsealed: bool = False, expect_sha256: str | None = None,
         on_size: Callable[[int, int, int], None] | None = None, force: bool = False,
         deadline_days: float | None = None, hostfile: Path | None = None, exclude_from: Path | None = None,
         placements: int = DEFAULT_PLACEMENTS) -> Plan:
    """Search every layout (and job size) of `model` on `cluster` and recommend the best (`llmscale plan`).

    train: TrainSpec fields ({'total_tokens': 15e12, 'seq_len': 8192, 'precision': 'fp8'}); without a
    `global_batch` the critical batch law sets it. rules: layout fields fixed or bounded ({'tp': 8, 'pp': '4..16',
    'schedule': ['1f1b', 'interleaved']}). force: search even past search.plan.MAX_SEARCH_CANDIDATES.
    deadline_days: the cheapest job size whose effective time is within it (`plan --deadline`). hostfile,
    exclude_from, placements: where the job is placed and how many of the best layouts (docs/placement.md)."""
    if rules is not None and not (isinstance(rules, Mapping) and all(isinstance(k, str) for k in rules)):
        raise SpecError("rules", rules, "a mapping of layout fields to rules, e.g. {'tp': 8, 'pp': '4..16'}")
    if isinstance(max_memory_fraction, bool) or not isinstance(max_memory_fraction, int | float) \
            or not 0 < max_memory_fraction <= 1:
        raise SpecError("max_memory_fraction", max_memory_fraction, "a share of GPU memory in (0, 1]")
    texts = {name: rule_text(value) for name, value in (rules or {}).items()}
    target = SearchTarget(rules=parse_rules(texts), max_memory_fraction=max_memory_fraction)
    request = job_request(model, cluster, gpus, train, calibration=calibration, allow_unsealed=allow_unsealed,
                          expect_sha256=expect_sha256, framework=framework_text(framework))
    fabric = FabricRequest(path_arg("hostfile", hostfile), path_arg("exclude_from", exclude_from))
    return plan_job(request, choice(Objective, objective, "objective"), target, top, on_size, force, deadline_days,
                    fabric, placements)


def plan_job(request: JobRequest, objective: Objective, target: SearchTarget, top: int = 5,
             on_size: Callable[[int, int, int], None] | None = None, force: bool = False,
             deadline_days: float | None = None, fabric: FabricRequest | None = None,
             placements: int = DEFAULT_PLACEMENTS) -> Plan:
    """`plan` of a resolver request (the CLI's way in); the batch defaults to the critical batch law. The job fits
    the nodes `fabric` leaves (the cluster's, without one), and the first `placements` layouts are placed there."""
    whole("top", top, allow_none=False)
    within("deadline_days", deadline_days, MIN_DAYS, MAX_DAYS)  # as the CLI's --deadline
    if isinstance(placements, bool) or not isinstance(placements, int) or not 0 <= placements <= MAX_PLACEMENTS:
        raise SpecError("placements", placements, f"a whole number of layouts to place, 0..{MAX_PLACEMENTS}")
    job = resolve(replace(request, batch=BatchDefault.CRITICAL))
    nodes = (fabric or FabricRequest()).fabric(job)
    whole_cluster = job.cluster.num_gpus
    job = capped(job, nodes, request.gpus)
    leftover = leftover_sizes(job.cluster.num_gpus, job.cluster.node.gpus_per_node) if (
        job.cluster.num_gpus < whole_cluster) else ()
    target = replace(target, framework=engine_of(job), release=(
        ReleaseLayouts(job.profile.profile, job.profile.facts) if job.profile is not None else None))
    sized = SizedJobs(request, job, nodes)
    result = search_plan(job.model, job.cluster, job.train, job.constants, load_frameworks(), gpus=request.gpus,
                         objective=objective, top=top, target=target, on_size=on_size, force=force,
                         deadline_days=deadline_days, extra_sizes=leftover, at_size=sized.search_inputs)
    job = sized(result.gpus_per_job)
    chosen = result.chosen.top[:placements]
    placed = place(job, [c.layouts.row(c.layout_index) for c in chosen], nodes,
                   [float(c.step.step_time_s[c.layout_index]) for c in chosen])
    from llmscale.report.placement import placement_entry

    document = plan_document(result, job) | {"placement": [placement_entry(p) for p in placed]}
    return Plan.of(document, result, job, placed)


def framework_text(framework: Any) -> str | None:
    """`--framework` from Python: NAME[@RELEASE], `any`, or None (the default framework); a SpecError otherwise."""
    if framework is None:
        return None
    value = getattr(framework, "value", framework)
    if not isinstance(value, str) or not value.strip():
        raise SpecError("framework", framework, "NAME or NAME@RELEASE (llmscale catalog frameworks), or any")
    return value


def engine_of(job: Job) -> Framework:
    """The engine whose layout support bounds a search of the job: its release's (any without one)."""
    release = job.profile.profile if job.profile is not None else None
    return release.engine if release is not None and release.engine is not None else Framework.ANY


def _request(model: ModelRef, cluster: ClusterRef, gpus: int | None, layout: LayoutRef,
             train: Mapping[str, Any] | TrainSpec | None, from_plan: Path | None, calibration: Path | None,
             expect_sha256: str | None, allow_unsealed: bool = False, framework: Any = None) -> JobRequest:
    return job_request(model, cluster, gpus, train, layout if layout is not None else {}, from_plan=from_plan,
                       calibration=calibration, allow_unsealed=allow_unsealed, expect_sha256=expect_sha256,
                       framework=framework_text(framework))


def explain(model: ModelRef = None, cluster: ClusterRef = None, *, layout: LayoutRef = None, gpus: int | None = None,
            train: Mapping[str, Any] | TrainSpec | None = None, from_plan: Path | None = None,
            calibration: Path | None = None, allow_unsealed: bool = False,
            expect_sha256: str | None = None, framework: str | None = None, placement: bool = False,
            hostfile: Path | None = None, exclude_from: Path | None = None) -> Explain:
    """Step time, MFU, throughput and the step and memory breakdowns of one layout (`llmscale explain`); with
    `placement` (or a hostfile or an exclusion list) also its placement on the cluster (docs/placement.md)."""
    flag_arg("placement", placement)
    hosts, excluded = path_arg("hostfile", hostfile), path_arg("exclude_from", exclude_from)
    fabric = FabricRequest(hosts, excluded) if placement or hosts or excluded else None
    return explain_job(_request(model, cluster, gpus, layout, train, from_plan, calibration, expect_sha256,
                                allow_unsealed, framework), fabric)


def explain_job(request: JobRequest, fabric: FabricRequest | None = None) -> Explain:
    """`explain` of a resolver request (the CLI's way in); with `fabric`, the layout is also placed there."""
    job = resolve(request)
    step = estimate_step(job.model, job.cluster, job.train, job.layouts, job.constants)
    document = explain_document(job, step)
    if fabric is None:
        return Explain.of(document, job, step)
    nodes = fabric.fabric(job)
    placed = place(capped(job, nodes, job.num_gpus), [job.resolved_layout], nodes)[0]
    from llmscale.report.placement import placement_entry

    return Explain.of(document | {"placement": placement_entry(placed)}, job, step, placed)


def memory(model: ModelRef = None, cluster: ClusterRef = None, *, layout: LayoutRef = None, gpus: int | None = None,
           train: Mapping[str, Any] | TrainSpec | None = None, from_plan: Path | None = None,
           calibration: Path | None = None, allow_unsealed: bool = False,
           expect_sha256: str | None = None, framework: str | None = None) -> Memory:
    """Memory of the most-loaded GPU by class and whether it fits (`llmscale memory`)."""
    return memory_job(_request(model, cluster, gpus, layout, train, from_plan, calibration, expect_sha256,
                               allow_unsealed, framework))


def memory_job(request: JobRequest) -> Memory:
    """`memory` of a resolver request (the CLI's way in)."""
    job = resolve(request)
    result = memory_breakdown(job.model, job.cluster, job.train, job.layouts, job.constants)
    return Memory(memory_document(job, result), job=job, breakdown=result)


def export(model: ModelRef = None, cluster: ClusterRef = None, *, layout: LayoutRef = None, gpus: int | None = None,
           train: Mapping[str, Any] | TrainSpec | None = None, fmt: ExportFormat | str = ExportFormat.MEGATRON,
           from_plan: Path | None = None, calibration: Path | None = None, framework: str | None = None) -> str:
    """One layout as a training framework's launch arguments (`llmscale export`): the text the command writes.
    A layout (or `from_plan`) is required: the default one-GPU-per-replica layout is rarely one anybody runs."""
    return export_job(_request(model, cluster, gpus, layout, train, from_plan, calibration, None, framework=framework),
                      choice(ExportFormat, fmt, "fmt"))


def export_job(request: JobRequest, fmt: ExportFormat) -> str:
    """`export` of a resolver request (the CLI's way in)."""
    if not request.layout and request.from_plan is None:
        raise SpecError("layout", "none given", "export writes one planned layout: give layout flags (--tp 8 --pp 16 "
                        "…) or --from-plan FILE from `llmscale plan --json`")
    if fmt is ExportFormat.TORCHTITAN and request.framework is None and request.from_plan is None:
        request = replace(request, framework="torchtitan")  # a torchtitan recipe runs torchtitan's defaults
    return export_text(resolve(request), fmt)
