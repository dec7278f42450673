"""The training frameworks a plan can target: what each engine can run at the version llmscale checked
(catalog/frameworks.yaml `engines`, per layout field at a cited commit), and the framework releases' default run
settings as ordered rules (`releases`, `sources`), applied in plan, explain and validate alike.
Engine choice, release profiles and how their rules apply: docs/design-notes.md#specs-framework.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from enum import Enum
from typing import Any

import numpy as np
from pydantic import Field, field_validator

from llmscale.specs.base import Spec
from llmscale.specs.cluster import Generation
from llmscale.specs.layout import RankOrder, Recompute, Schedule
from llmscale.specs.train import (
    AttentionKernel,
    CudaGraphScope,
    Fp8Cache,
    Fp8Recipe,
    GroupedGemm,
    MoeDispatcher,
    PipelineSplit,
    Precision,
    Routing,
    Zero3Gather,
)


class Framework(str, Enum):
    """Which framework's features bound the layout search."""

    MEGATRON_CORE = "megatron-core"
    """NVIDIA Megatron-Core (Megatron-LM / Megatron-Bridge / NeMo run on it)."""
    TORCHTITAN = "torchtitan"
    """PyTorch torchtitan (FSDP2, DTensor TP, torch.distributed.pipelining)."""
    ANY = "any"
    """Every layout the cost model prices; the output says which framework could run each."""


class FieldSupport(Spec):
    """The values of one layout field a framework supports, and where its source says so."""

    values: list[str | int | bool] = Field(min_length=1)
    source: str = Field(min_length=1)


class FrameworkSupport(Spec):
    """What one framework runs at one commit."""

    name: Framework
    repository: str = Field(min_length=1)
    commit: str = Field(min_length=7)
    version: str = Field(min_length=1)
    fields: dict[str, FieldSupport]
    """Layout field → supported values; a field not named is supported in full."""
    searched_zero: list[int] = Field(min_length=1)
    """ZeRO stages the search tries by default (a user's `--zero` may widen it within `fields['zero']`)."""
    searched_zero_source: str = Field(min_length=1)
    zero_with_pipeline: list[int] = Field(min_length=1)
    """ZeRO stages it runs with pipeline parallelism (pp > 1), as the cost model prices them."""
    zero_without_pipeline: list[int] = Field(min_length=1)
    """ZeRO stages it runs without (pp = 1)."""
    zero_by_pipeline_source: str = Field(min_length=1)

    @property
    def label(self) -> str:
        """`megatron-core @ d98e8a6`."""
        return f"{self.name.value} @ {self.commit[:7]}"

_COMPARISON = re.compile(r"^(>=|<=|>|<|==|!=)?\s*(\d+)$")
_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq, "!=": operator.ne,
    "": operator.eq}

LAYOUT_SIZES = ("tp", "pp", "vp", "cp", "ep", "dp", "zero")
"""Conditions on the layout: evaluated per layout (`vp` is the layout's vpp)."""


class Comparison(str):
    """`4`, `>1`, `>=2`, `<=8`, `!=64`: a whole-number comparison a layout size, the sequence length, the model's
    layers or the job's GPU count must meet."""

    def holds(self, value: Any) -> Any:
        """Elementwise on arrays."""
        match = _COMPARISON.match(self.strip())
        assert match is not None  # checked by RuleCondition
        return _OPERATORS[match.group(1) or ""](value, int(match.group(2)))


def _comparison(value: Any) -> Comparison | None:
    if value is None:
        return None
    text = str(value)
    if isinstance(value, bool) or not _COMPARISON.match(text.strip()):
        raise ValueError(f"{value!r} is not a comparison: give 4, >1, >=2, <=8, <16 or !=64")
    return Comparison(text)


class ModelKind(str, Enum):
    DENSE = "dense"
    MOE = "moe"


class RuleCondition(Spec):
    """When a rule applies: every condition given must hold (a missing one holds for every job)."""

    gpu: list[str] | None = Field(None, description="catalog GPU names")
    generation: list[Generation] | None = None
    precision: list[Precision] | None = None
    fp8_recipe: list[Fp8Recipe] | None = Field(None, description="the FP8 recipe the job runs (fp8 jobs only)")
    model: ModelKind | None = None
    family: list[str] | None = Field(None, description="model families (ModelSpec.family)")
    dropless: bool | None = Field(None, description="MoE without token dropping (no capacity factor)")
    tp: str | None = None
    pp: str | None = None
    vp: str | None = None
    cp: str | None = None
    ep: str | None = None
    dp: str | None = None
    zero: list[int] | None = None
    seq_len: str | None = None
    layers: str | None = Field(None, description="the model's transformer layers, a comparison (presets that differ "
                               "by model size within a family)")
    gpus: str | None = Field(None, description="the job's GPU count, a comparison (presets that differ by job size; a "
                             "plan fills the run settings again at each job size it tries where this differs)")

    @field_validator("tp", "pp", "vp", "cp", "ep", "dp", "seq_len", "layers", "gpus", mode="before")
    @classmethod
    def _comparisons(cls, value: Any) -> Any:
        return _comparison(value)

    @property
    def on_layout(self) -> bool:
        """Whether any condition reads the layout's sizes."""
        return any(getattr(self, name) is not None for name in LAYOUT_SIZES)


class ProfileSettings(Spec):
    """The settings one rule sets (None: not set by it). Field groups: layout, run (TrainSpec), model, MoE kernels
    (recorded from the release's code; `cost` prices them as far as MoEKernels says)."""

    sp: bool | None = None
    tp_comm_overlap: bool | None = None
    ep_comm_overlap: bool | None = None
    cuda_graphs: bool | None = None
    recompute: Recompute | None = None
    recompute_modules: list[str] | None = Field(None, description="Megatron recompute_modules, as the recipe lists "
                                                "them (core_attn is recompute selective)")
    offload_activations: int | None = Field(None, ge=0, le=1000)

    @field_validator("recompute_modules")
    @classmethod
    def _modelled(cls, value: list[str] | None) -> list[str] | None:
        unknown = sorted(set(value or ()) - set(MODULE_FLAGS) - {"core_attn"})
        if unknown:
            raise ValueError(f"recompute modules {unknown} are not modelled: llmscale models core_attn, "
                             f"{', '.join(MODULE_FLAGS)}")
        return value
    schedule: Schedule | None = None
    interleave: bool | None = Field(None, description="the release interleaves its pipeline when the job gives no "
                                    "degree (llmscale chooses it)")
    rank_order: RankOrder | None = None
    fp32_grads: bool | None = None
    bf16_moments: bool | None = None
    fp8_recipe: Fp8Recipe | None = None
    fp8_cache: Fp8Cache | None = None
    fp8_params: bool | None = None
    fsdp_double_buffer: bool | None = None
    fused_cross_entropy: bool | None = None
    flash_attention: bool | None = None
    attention_kernel: AttentionKernel | None = None
    fp8_attention: bool | None = None
    fp8_output_proj: bool | None = None
    routing: Routing | None = None
    fp8_dispatch: bool | None = None
    zero3_gather: Zero3Gather | None = None
    zero3_synchronous: bool | None = None
    dropout: bool | None = None
    tied_embeddings: bool | None = None
    capacity_factor: float | None = Field(None, gt=0, le=64)
    pad_to_capacity: bool | None = None
    moe_grouped_gemm: bool | None = None
    moe_permute_fusion: bool | None = None
    moe_router_fusion: bool | None = None
    moe_grouped_gemm_impl: GroupedGemm | None = None
    moe_dispatcher: MoeDispatcher | None = None
    cuda_graph_scope: CudaGraphScope | None = None
    moe_shared_expert_overlap: bool | None = None
    pipeline_splits: list[PipelineSplit] | None = Field(
        None, description="layers per pipeline stage the release's recipe gives a model family, per pp and vpp "
        "(applied where they hold the model's layer count)")

    def given(self) -> dict[str, Any]:
        """The settings this rule sets."""
        return {name: value for name, value in self if value is not None}


class Source(Spec):
    """Where a rule was read: a repository at a commit and a path (or a paper and its section)."""

    repository: str = Field(min_length=1, description="owner/name, or a paper (arXiv id)")
    commit: str | None = Field(None, pattern=r"^[0-9a-f]{40}$", description="the full commit read (code sources)")
    path: str = Field(min_length=1, description="file path, or the paper's section")
    what: str = Field(min_length=1)


class ProfileRule(Spec):
    """Settings a release applies when its condition holds, and where that was read."""

    set: ProfileSettings
    when: RuleCondition = Field(default_factory=RuleCondition)
    source: str = Field(min_length=1, description="a source id of the catalog's sources table")
    read: str = Field(min_length=1, description="what the source says, briefly")


class ReleaseProfile(Spec):
    """One framework release: its engine (whose layout support bounds a search) and its default settings."""

    framework: str = Field(min_length=1)
    release: str = Field(min_length=1)
    engine: Framework | None = Field(None, description="catalog frameworks.yaml engine whose layouts it runs; None: "
                                     "not catalogued (a search is bounded by the cost model only)")
    date: date
    tag: str = Field(min_length=1, description="the tag or commit read, and why it is this release's")
    rules: list[ProfileRule] = Field(default_factory=list)

    @property
    def label(self) -> str:
        """`megatron-bridge@25.09`."""
        return f"{self.framework}@{self.release}"


@dataclass(frozen=True)
class JobFacts:
    """What a profile's job-level conditions read: the job's GPU, precision, FP8 recipe, model and sequence."""

    gpu: str
    generation: Generation | None
    precision: Precision
    fp8_recipe: Fp8Recipe | None
    moe: bool
    family: str | None
    dropless: bool
    seq_len: int
    layers: int
    gpus: int | None = None
    """The job's GPU count (None: not known, and a rule on it does not hold)."""

    def holds(self, when: RuleCondition) -> bool:
        """Whether every job-level condition of `when` holds (layout sizes are `layout_holds`')."""
        checks = (
            when.gpu is None or self.gpu in when.gpu,
            when.generation is None or self.generation in when.generation,
            when.precision is None or self.precision in when.precision,
            when.fp8_recipe is None or (self.precision is Precision.FP8 and self.fp8_recipe in when.fp8_recipe),
            when.model is None or (when.model is ModelKind.MOE) == self.moe,
            when.family is None or self.family in when.family,
            when.dropless is None or (self.moe and when.dropless == self.dropless),
            when.seq_len is None or bool(Comparison(when.seq_len).holds(self.seq_len)),
            when.layers is None or bool(Comparison(when.layers).holds(self.layers)),
            when.gpus is None or (self.gpus is not None and bool(Comparison(when.gpus).holds(self.gpus))),
        )
        return all(checks)


def layout_holds(when: RuleCondition, sizes: dict[str, Any]) -> Any:
    """Whether the layout-size conditions of `when` hold, elementwise over arrays (or scalars) of `sizes` (tp, pp,
    vpp, cp, ep, dp, zero)."""
    result: Any = True
    for name in LAYOUT_SIZES:
        condition = getattr(when, name)
        if condition is None:
            continue
        value = sizes["vpp" if name == "vp" else name]
        held = np.isin(value, condition) if name == "zero" else Comparison(condition).holds(value)
        result = result & held
    return result


LAYOUT_SETTINGS = frozenset({"sp", "tp_comm_overlap", "ep_comm_overlap", "cuda_graphs", "recompute",
                             "recompute_modules", "offload_activations", "schedule", "rank_order"})
TRAIN_SETTINGS = frozenset({"fp32_grads", "bf16_moments", "fp8_recipe", "fp8_cache", "fp8_params", "fsdp_double_buffer",
                            "fused_cross_entropy", "flash_attention", "attention_kernel", "fp8_attention",
                            "fp8_output_proj", "routing", "fp8_dispatch", "zero3_gather", "zero3_synchronous",
                            "moe_dispatcher", "moe_grouped_gemm_impl", "moe_permute_fusion", "moe_router_fusion",
                            "cuda_graph_scope", "pipeline_splits"})
MODEL_SETTINGS = frozenset({"dropout", "tied_embeddings", "capacity_factor", "pad_to_capacity"})
CHOICE_SETTINGS = frozenset({"interleave"})
"""Hints for what llmscale chooses where a job leaves it open (validation.jobs: the interleaving degree); recorded,
never a spec field, so they may condition on the layout."""
ZERO3_ONLY = frozenset({"fsdp_double_buffer", "fp8_params", "zero3_gather", "zero3_synchronous"})
"""Run settings the cost model reads only at ZeRO-3: a rule on one of them may condition on the layout's zero."""

MODULE_FLAGS = {"layernorm": "recompute_norm", "mla_up_proj": "recompute_mla_up", "moe_act": "recompute_moe_act",
                "mlp": "recompute_mlp"}
"""Megatron --recompute-modules names and the layout switch of each (`core_attn` is recompute = selective)."""


def expand(name: str, value: Any) -> dict[str, Any]:
    """A profile setting as the spec fields it sets (`recompute_modules` → recompute and module switches)."""
    if name != "recompute_modules":
        return {name: value}
    core = Recompute.SELECTIVE if "core_attn" in value else Recompute.NONE
    return {"recompute": core, **{flag: module in value for module, flag in MODULE_FLAGS.items()}}
