"""The typed results of the Python API (`llmscale.plan`, `explain`, …): the numbers a notebook reads as attributes,
the command's JSON document (`to_dict()`, the same document `--json` prints) and a pandas table (`to_frame()`;
pandas is the optional extra `llmscale[frame]`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmscale.cost.memory import MemoryBreakdown
from llmscale.cost.step import StepBreakdown
from llmscale.errors import LlmscaleError
from llmscale.io.resolve import Job
from llmscale.reliability.goodput import GoodputEstimate
from llmscale.search.plan import PlanResult
from llmscale.specs.failures import Mitigation
from llmscale.specs.layout import Layout

if TYPE_CHECKING:
    from llmscale.placement.search import PlacementSearch


def _pandas() -> Any:
    try:
        import pandas  # type: ignore[import-untyped]  # the optional extra llmscale[frame]
    except ImportError:
        raise LlmscaleError("to_frame() needs pandas: pip install 'llmscale[frame]'") from None
    return pandas


def _flat_row(entry: dict[str, Any]) -> dict[str, Any]:
    """One scored layout of a document as a flat table row: layout fields, rates, memory, goodput, step parts."""
    row = {f"layout.{k}": v for k, v in entry["layout"].items()}
    row |= {k: v for k, v in entry.items() if not isinstance(v, dict | list) and k != "layout"}
    row |= {f"step.{k}": v for k, v in (entry.get("breakdown") or {}).items()}
    return row


@dataclass(frozen=True)
class LayoutScore:
    """One scored layout: what a lead compares first."""

    layout: Layout
    num_gpus: int
    step_time_s: float
    mfu: float
    tokens_per_s_per_gpu: float
    memory_bytes: float
    memory_fraction: float
    days: float
    frameworks: tuple[str, ...]
    """The catalog frameworks that run it."""

    @classmethod
    def of(cls, entry: dict[str, Any]) -> LayoutScore:
        return cls(layout=Layout.model_validate(entry["layout"]), num_gpus=entry["num_gpus"],
                   step_time_s=entry["step_time_s"], mfu=entry["mfu"],
                   tokens_per_s_per_gpu=entry["tokens_per_s_per_gpu"], memory_bytes=entry["memory_bytes"],
                   memory_fraction=entry["memory_fraction"], days=entry["days"],
                   frameworks=tuple(entry["frameworks"]))


@dataclass(frozen=True)
class Plan:
    """`llmscale.plan(...)`: the best layouts of the chosen job size, the job sizing and the whole search."""

    document: dict[str, Any] = field(repr=False)
    result: PlanResult = field(repr=False)
    """The search result itself (search.plan.PlanResult), for everything the document summarizes."""
    job: Job = field(repr=False)
    top: tuple[LayoutScore, ...]
    roomier: LayoutScore | None
    gpus_per_job: int
    concurrent_jobs: int
    placements: tuple[PlacementSearch, ...] = field(default=(), repr=False)
    """The placement search of the first layouts of `top` (document["placement"])."""

    @classmethod
    def of(cls, document: dict[str, Any], result: PlanResult, job: Job,
           placements: tuple[PlacementSearch, ...] = ()) -> Plan:
        roomier = document["roomier"]
        return cls(document, result, job, tuple(LayoutScore.of(e) for e in document["top"]),
                   LayoutScore.of(roomier) if roomier else None, document["jobs"]["gpus_per_job"],
                   document["jobs"]["concurrent_jobs"], placements)

    @property
    def best(self) -> LayoutScore | None:
        return self.top[0] if self.top else None

    def to_dict(self) -> dict[str, Any]:
        """The document `llmscale plan --json` prints."""
        return self.document

    def to_frame(self) -> Any:
        """The chosen job size's top layouts, one row each (pandas.DataFrame)."""
        return _pandas().DataFrame([_flat_row(e) for e in self.document["top"]])


@dataclass(frozen=True)
class Explain:
    """`llmscale.explain(...)`: one layout's step time, rates and breakdowns."""

    document: dict[str, Any] = field(repr=False)
    job: Job = field(repr=False)
    step: StepBreakdown = field(repr=False)
    """The cost model's breakdown itself (one layout: index 0)."""
    step_time_s: float
    mfu: float
    tokens_per_s_per_gpu: float
    fits: bool
    memory_bytes: float
    breakdown: dict[str, float] = field(repr=False)
    placement: PlacementSearch | None = field(default=None, repr=False)
    """The layout's placement search where one was asked for (document["placement"])."""

    @classmethod
    def of(cls, document: dict[str, Any], job: Job, step: StepBreakdown,
           placement: PlacementSearch | None = None) -> Explain:
        memory = document["memory"]
        return cls(document, job, step, document["step_time_s"], document["mfu"], document["tokens_per_s_per_gpu"],
                   bool(memory["fits"]), memory["total_bytes"], document["breakdown"], placement)

    def to_dict(self) -> dict[str, Any]:
        """The document `llmscale explain --json` prints."""
        return self.document

    def to_frame(self) -> Any:
        """The step breakdown: one row per part, seconds and share of the step."""
        rows = [{"part": k, "seconds": v, "share": v / self.step_time_s} for k, v in self.breakdown.items()]
        return _pandas().DataFrame(rows)


@dataclass(frozen=True)
class Document:
    """A result whose JSON document is the whole answer (memory, goodput, allocate, validate), with the table
    rows `to_frame()` shows named by `rows_key`."""

    document: dict[str, Any] = field(repr=False)
    rows_key: str | None = None
    job: Job | None = field(default=None, repr=False)

    def __getitem__(self, key: str) -> Any:
        return self.document[key]

    def to_dict(self) -> dict[str, Any]:
        return self.document

    def to_frame(self) -> Any:
        """The document's table (validate: one row per published run; goodput: per policy; allocate: per
        candidate; memory: one row of every class)."""
        pandas = _pandas()
        if self.rows_key is None:
            return pandas.DataFrame([{k: v for k, v in self.document.items() if not isinstance(v, dict | list)}])
        rows = self.document[self.rows_key]
        if isinstance(rows, dict):  # keyed rows (goodput's policies): the key becomes the first column
            rows = [{"name": key, **value} for key, value in rows.items()]
        return pandas.DataFrame([{k: v for k, v in r.items() if not isinstance(v, dict | list)} for r in rows])


@dataclass(frozen=True)
class Memory(Document):
    """`llmscale.memory(...)`: the document (`["total_bytes"]`, `["fits"]`, …) and the breakdown itself."""

    breakdown: MemoryBreakdown | None = field(default=None, repr=False)

    @property
    def fits(self) -> bool:
        return bool(self.document["fits"])


@dataclass(frozen=True)
class Goodput(Document):
    """`llmscale.goodput(...)`: the document (`["goodput"]`, `["best_policy"]`, …) and the estimate it came from."""

    estimate: GoodputEstimate | None = field(default=None, repr=False)
    mitigations: tuple[Mitigation, ...] = ()
