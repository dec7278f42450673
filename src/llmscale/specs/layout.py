"""Layout: one parallel layout as the user gives it (validated, frozen), the enums of its modes — and the one
definition of every layout field.

Each field of `Layout` is declared once, here: its name, type, allowed values, default, help text (the pydantic
`description`) and how it shows outside the spec (its `Knob`: label, CLI flag, when the short text names it, and
the rule that gives its value when the user leaves it out). The array struct of many layouts
(`llmscale.layout.arrays.Layouts`), the CLI options (`llmscale.cli.options`), the JSON documents (`model_dump`)
and the texts (`llmscale.report.text`) are all derived from `LAYOUT_FIELDS`, so adding a field here is enough for
it to reach every one of them.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Annotated, Any

import numpy as np
from pydantic import Field, PositiveInt
from pydantic.fields import FieldInfo

from llmscale.specs.base import Spec
from llmscale.specs.bounds import MAX_GPUS, MAX_LAYERS, MAX_MBS, MAX_VPP


class Recompute(str, Enum):
    """Activation recomputation (Korthikanti et al. 2022)."""

    NONE = "none"
    """Keep every activation the backward pass needs."""
    SELECTIVE = "selective"
    """Recompute the attention core (softmax, dropout, score matrix); Korthikanti §4.2."""
    FULL = "full"
    """Keep only each layer's input; recompute the whole layer in backward."""

    @property
    def code(self) -> int:
        return _CODES[type(self)][self]


class Schedule(str, Enum):
    """Pipeline schedule (bubbles and memory: `llmscale.cost.pipeline`, `llmscale.cost.activations`)."""

    ONE_F_ONE_B = "1f1b"
    """PipeDream-Flush 1F1B: bubble (p−1)/m, p micro-batches in flight on stage 0 (Narayanan et al. 2021 §2.2)."""
    INTERLEAVED = "interleaved"
    """Megatron interleaved 1F1B with vpp chunks per rank: bubble (p−1)/(v·m) (Narayanan et al. 2021 §2.2)."""
    ZB_H1 = "zb-h1"
    """Zero-bubble ZB-H1 (Qi et al., ICLR 2024): bubble (p−1)/(3m), 1F1B memory."""
    ZB_V = "zbv"
    """Zero-bubble V schedule (Qi et al.): two chunks per rank in a V, ~zero bubble, 1F1B memory."""
    DUALPIPE = "dualpipe"
    """DeepSeek-V3 DualPipe (§3.2.1): bidirectional, 2× parameters, PP+1 micro-batches of activations."""

    @property
    def code(self) -> int:
        return _CODES[type(self)][self]


class RankOrder(str, Enum):
    """How global ranks map to the parallel dimensions, innermost first (Megatron-Core
    parallel_state.initialize_model_parallel `order`; Megatron-LM picks the second with --use-tp-pp-dp-mapping)."""

    TP_CP_EP_DP_PP = "tp-cp-ep-dp-pp"
    """Megatron's default: data-parallel replicas of a stage are neighbours, pipeline stages are far apart."""
    TP_CP_EP_PP_DP = "tp-cp-ep-pp-dp"
    """Pipeline inside data parallel: a replica's stages are neighbours, DP groups span the job (Llama 3
    §3.3.2 orders its groups [TP, CP, PP, DP])."""

    @property
    def code(self) -> int:
        return _CODES[type(self)][self]


_CODES: dict[type, dict[Any, int]] = {
    cls: {member: i for i, member in enumerate(cls)} for cls in (Recompute, Schedule, RankOrder)
}
"""Each mode's position in its enum: the code an array column holds."""


def from_code(cls: type[Enum], code: int) -> Enum:
    """The member of `cls` whose `.code` is `code` (array columns hold codes)."""
    return list(cls)[code]


class Show(str, Enum):
    """When the short text of a layout (`llmscale.report.text.layout_text`) names a field."""

    ALWAYS = "always"
    """Every layout's text names it."""
    CHANGED = "changed"
    """Only when its value differs from its default (or, for a derived field, from the derived value)."""


Columns = Mapping[str, Any]
"""Layout columns by name: numpy arrays of shape (N,) (or scalars), enum fields as their codes; `num_gpus` too."""


@dataclass(frozen=True)
class Knob:
    """How one layout field shows outside the spec (module docstring)."""

    label: str
    """Its name in texts and tables: `tp`, `offload optimizer`."""
    show: Show = Show.CHANGED
    derive: Callable[[Columns], Any] | None = None
    """Its value, vectorized over layouts, when the user leaves it out (the field's default is then None)."""
    flag: str | None = None
    """The CLI flag; default `--` and the name with dashes."""

    def cli_flag(self, name: str) -> str:
        return self.flag or "--" + name.replace("_", "-")


def _default_dp(c: Columns) -> Any:
    """GPUs / (tp·cp·pp), at least 1."""
    return np.maximum(c["num_gpus"] // (c["tp"] * c["cp"] * c["pp"]), 1)


def _default_schedule(c: Columns) -> Any:
    """Interleaved when vpp > 1, else 1F1B."""
    return np.where(c["vpp"] > 1, Schedule.INTERLEAVED.code, Schedule.ONE_F_ONE_B.code)


class Layout(Spec):
    """One parallel layout. Sizes multiply: tp × cp × pp × dp = GPUs of the job. Expert layers
    re-partition the tp × cp × dp ranks of a stage as etp × ep × edp (Megatron MoE parallel folding)."""

    tp: Annotated[PositiveInt, Knob("tp", Show.ALWAYS)] = Field(1, le=MAX_GPUS, description="tensor parallel size")
    pp: Annotated[PositiveInt, Knob("pp", Show.ALWAYS)] = Field(1, le=MAX_GPUS, description="pipeline stages")
    dp: Annotated[PositiveInt | None, Knob("dp", Show.ALWAYS, derive=_default_dp)] = Field(
        None, le=MAX_GPUS, description="data parallel size (default: GPUs / (tp·cp·pp))")
    cp: Annotated[PositiveInt, Knob("cp")] = Field(1, le=MAX_GPUS, description="context parallel size")
    ep: Annotated[PositiveInt, Knob("ep")] = Field(1, le=MAX_GPUS, description="expert parallel size")
    etp: Annotated[PositiveInt | None, Knob("etp", derive=lambda c: c["tp"])] = Field(
        None, le=MAX_GPUS, description="expert tensor parallel size (default: tp, as Megatron)")
    vpp: Annotated[PositiveInt, Knob("vpp")] = Field(1, le=MAX_VPP, description="virtual stages per pipeline rank")
    mbs: Annotated[PositiveInt, Knob("mbs", Show.ALWAYS)] = Field(
        1, le=MAX_MBS, description="micro-batch size (sequences)"
    )
    zero: Annotated[int, Knob("zero", Show.ALWAYS)] = Field(
        1, ge=0, le=3, description="ZeRO stage 0-3 (0 DDP · 1 distributed optimizer · 2 +gradients · 3 +parameters)")
    recompute: Annotated[Recompute, Knob("recompute", Show.ALWAYS)] = Field(
        Recompute.NONE, description="activation recompute")
    recompute_norm: Annotated[bool, Knob("recompute norm")] = Field(
        False, description="recompute the norms in backward instead of keeping their outputs "
        "(Megatron --recompute-modules layernorm)")
    recompute_mla_up: Annotated[bool, Knob("recompute mla up")] = Field(
        False, description="recompute the MLA up-projections and RoPE instead of keeping Q, K, V (mla_up_proj)")
    recompute_moe_act: Annotated[bool, Knob("recompute moe act")] = Field(
        False, description="recompute the experts' activation function instead of keeping its output (moe_act)")
    recompute_mlp: Annotated[bool, Knob("recompute mlp")] = Field(
        False, description="recompute the dense layers' MLPs from their input (mlp)")
    sp: Annotated[bool | None, Knob("sp", derive=lambda c: c["tp"] > 1)] = Field(
        None, description="sequence parallel (default: on when tp > 1)")
    schedule: Annotated[Schedule | None, Knob("schedule", Show.ALWAYS, derive=_default_schedule)] = Field(
        None, description="pipeline schedule (default: interleaved when vpp > 1, else 1f1b)")
    offload_optimizer: Annotated[bool, Knob("offload optimizer")] = Field(
        False, description="optimizer state and fp32 master weights in host memory")
    offload_params: Annotated[bool, Knob("offload params")] = Field(
        False, description="weights in host memory, streamed in per layer")
    offload_activations: Annotated[int, Knob("offload activations")] = Field(
        0, ge=0, le=MAX_LAYERS,
        description="layers whose activations go to host memory (Megatron --cpu-offloading-num-layers)")
    cuda_graphs: Annotated[bool, Knob("cuda graphs")] = Field(
        False, description="capture each layer in a CUDA graph: no launch gaps, graph buffers resident "
        "(Megatron --cuda-graph-impl transformer_engine)")
    tp_comm_overlap: Annotated[bool, Knob("tp overlap")] = Field(
        False, description="overlap TP collectives with GEMMs (Megatron --tp-comm-overlap)")
    ep_comm_overlap: Annotated[bool, Knob("ep overlap")] = Field(
        False, description="overlap expert all-to-alls with compute (Megatron --overlap-moe-expert-parallel-comm)")
    rank_order: Annotated[RankOrder, Knob("rank order")] = Field(
        RankOrder.TP_CP_EP_DP_PP, description="rank order of the parallel groups, innermost first")

    @property
    def resolved_etp(self) -> int:
        return self.etp if self.etp is not None else int(self._derived("etp"))

    @property
    def resolved_sp(self) -> bool:
        return self.sp if self.sp is not None else bool(self._derived("sp"))

    @property
    def resolved_schedule(self) -> Schedule:
        if self.schedule is not None:
            return self.schedule
        return Schedule(from_code(Schedule, int(self._derived("schedule"))))

    def _derived(self, name: str) -> Any:
        """Field `name`'s value by its Knob's rule, from this layout's other fields."""
        knob = next(m for m in type(self).model_fields[name].metadata if isinstance(m, Knob))
        assert knob.derive is not None
        return knob.derive({key: getattr(value, "code", value) for key, value in self})


@dataclass(frozen=True)
class LayoutField:
    """One field of a layout spec as everything outside the spec sees it (read from the spec's declaration)."""

    name: str
    kind: type
    """int, bool or the field's Enum class."""
    optional: bool
    """None is allowed: the value is then derived (`knob.derive`) or left to the spec's default."""
    default: Any
    description: str
    knob: Knob

    @property
    def is_flag(self) -> bool:
        """A bool that defaults to False: a plain on-switch (`--offload-optimizer`), never given as False."""
        return self.kind is bool and not self.optional

    def code(self, value: Any) -> Any:
        """The value as an array column holds it (an enum member as its code)."""
        return getattr(value, "code") if isinstance(value, Enum) else value  # noqa: B009 (Enum declares no code)


@cache
def spec_fields(spec: type[Spec]) -> tuple[LayoutField, ...]:
    """Every field of a layout spec class with its `Knob`, in declaration order (read once per class)."""
    return tuple(_field(name, info) for name, info in spec.model_fields.items())


def _field(name: str, info: FieldInfo) -> LayoutField:
    knob = next((m for m in info.metadata if isinstance(m, Knob)), None)
    if knob is None:
        raise TypeError(f"layout field {name!r} declares no Knob")
    kind, optional = _base_type(info.annotation)
    return LayoutField(name, kind, optional, info.default, info.description or "", knob)


def _base_type(annotation: Any) -> tuple[type, bool]:
    """(int, bool or an Enum class; whether None is allowed) of an annotation such as `PositiveInt | None`."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional = type(None) in typing.get_args(annotation)
    if typing.get_origin(annotation) is Annotated:
        return _base_type(typing.get_args(annotation)[0])[0], optional
    if args:
        return _base_type(args[0])[0], optional
    if isinstance(annotation, type) and (annotation in (int, bool) or issubclass(annotation, Enum)):
        return annotation, optional
    raise TypeError(f"unsupported layout field type {annotation!r}")


LAYOUT_FIELDS = spec_fields(Layout)
"""The one definition of the layout's fields, in order."""
