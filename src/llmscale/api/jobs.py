"""The API of one model × cluster job: `plan` (search), `explain` and `memory` (one layout), `export` (launch
arguments). Each takes catalog names, file paths or spec objects, resolves them with the one resolver
(io.resolve) the CLI uses, and returns a typed result (api.results) whose `to_dict()` is the command's JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from llmscale.api.results import Document, Explain, Plan
from llmscale.cost.memory import memory_breakdown
from llmscale.cost.step import estimate_step
from llmscale.errors import SpecError
from llmscale.export.document import ExportFormat, export_text
from llmscale.io.catalog import load_frameworks
from llmscale.io.resolve import BatchDefault, Job, JobRequest, resolve
from llmscale.layout.constraints import parse_rules
from llmscale.report.documents import explain_document, memory_document, plan_document
from llmscale.search.plan import Objective
from llmscale.search.plan import plan as search_plan
from llmscale.search.targets import SearchTarget
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


def job_request(model: ModelRef, cluster: ClusterRef, gpus: int | None, train: Mapping[str, Any] | TrainSpec | None,
                layout: LayoutRef = None, **rest: Any) -> JobRequest:
    """The resolver's request for these inputs (`rest`: calibration, from_plan, expect_sha256, batch)."""
    return JobRequest(model=model, cluster=cluster, gpus=gpus, train=train if train is not None else {},
                      layout=layout, **rest)


def plan(model: ModelRef = None, cluster: ClusterRef = None, *, gpus: int | None = None,
         train: Mapping[str, Any] | TrainSpec | None = None, objective: Objective | str = Objective.THROUGHPUT,
         framework: Framework | str = Framework.MEGATRON_CORE, rules: Mapping[str, RuleValue] | None = None,
         max_memory_fraction: float = 1.0, top: int = 5, calibration: Path | None = None,
         expect_sha256: str | None = None, on_size: Callable[[int, int, int], None] | None = None) -> Plan:
    """Search every layout (and job size) of `model` on `cluster` and recommend the best (`llmscale plan`).

    train: TrainSpec fields ({'total_tokens': 15e12, 'seq_len': 8192, 'precision': 'fp8'}); without a
    `global_batch` the critical batch law sets it. rules: layout fields fixed or bounded ({'tp': 8, 'pp': '4..16',
    'schedule': ['1f1b', 'interleaved']})."""
    if not isinstance(top, int) or top < 1:
        raise SpecError("top", top, "a positive number of layouts")
    job = resolve(job_request(model, cluster, gpus, train, calibration=calibration, expect_sha256=expect_sha256,
                              batch=BatchDefault.CRITICAL))
    texts = {name: rule_text(value) for name, value in (rules or {}).items()}
    target = SearchTarget(choice(Framework, framework, "framework"), parse_rules(texts), max_memory_fraction)
    result = search_plan(job.model, job.cluster, job.train, job.constants, load_frameworks(), gpus=gpus,
                         objective=choice(Objective, objective, "objective"), top=top, target=target,
                         on_size=on_size)
    return Plan.of(plan_document(result, job), result, job)


def _one_layout(model: ModelRef, cluster: ClusterRef, gpus: int | None, layout: LayoutRef,
                train: Mapping[str, Any] | TrainSpec | None, from_plan: Path | None, calibration: Path | None,
                expect_sha256: str | None) -> Job:
    return resolve(job_request(model, cluster, gpus, train, layout if layout is not None else {},
                               from_plan=from_plan, calibration=calibration, expect_sha256=expect_sha256))


def explain(model: ModelRef = None, cluster: ClusterRef = None, *, layout: LayoutRef = None, gpus: int | None = None,
            train: Mapping[str, Any] | TrainSpec | None = None, from_plan: Path | None = None,
            calibration: Path | None = None, expect_sha256: str | None = None) -> Explain:
    """Step time, MFU, throughput and the step and memory breakdowns of one layout (`llmscale explain`)."""
    job = _one_layout(model, cluster, gpus, layout, train, from_plan, calibration, expect_sha256)
    step = estimate_step(job.model, job.cluster, job.train, job.layouts, job.constants)
    return Explain.of(explain_document(job, step), job)


def memory(model: ModelRef = None, cluster: ClusterRef = None, *, layout: LayoutRef = None, gpus: int | None = None,
           train: Mapping[str, Any] | TrainSpec | None = None, from_plan: Path | None = None,
           calibration: Path | None = None, expect_sha256: str | None = None) -> Document:
    """Memory of the most-loaded GPU by class and whether it fits (`llmscale memory`)."""
    job = _one_layout(model, cluster, gpus, layout, train, from_plan, calibration, expect_sha256)
    result = memory_breakdown(job.model, job.cluster, job.train, job.layouts, job.constants)
    return Document(memory_document(job, result))


def export(model: ModelRef = None, cluster: ClusterRef = None, *, layout: LayoutRef = None, gpus: int | None = None,
           train: Mapping[str, Any] | TrainSpec | None = None, fmt: ExportFormat | str = ExportFormat.MEGATRON,
           from_plan: Path | None = None, calibration: Path | None = None) -> str:
    """One layout as a training framework's launch arguments (`llmscale export`): the text the command writes."""
    job = _one_layout(model, cluster, gpus, layout, train, from_plan, calibration, None)
    return export_text(job, choice(ExportFormat, fmt, "format"))
