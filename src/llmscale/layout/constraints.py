"""What a search may choose for each layout field: the values a user fixes or bounds on `plan` and what a framework
can run (`specs.framework`), both as `FieldRule`s (a value set or an int range) over the layout's field definition.

Text form (`parse_rule`): `8` · `1,2,4` · `4..16` · `..16` · `4..` for ints; `on`/`off` (also true/false, yes/no,
1/0) for switches; enum names (`1f1b,interleaved`). How the space applies them: docs/cost-model.md#constraints."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any

import numpy as np
from pydantic import TypeAdapter, ValidationError

from llmscale.errors import SpecError
from llmscale.layout.arrays import Layouts
from llmscale.specs.framework import FrameworkSupport
from llmscale.specs.layout import Layout, LayoutField, spec_fields

_TRUE = ("on", "true", "yes", "1")
_FALSE = ("off", "false", "no", "0")


@dataclass(frozen=True)
class FieldRule:
    """The values one layout field may take: `values` (a finite set), or the inclusive range low..high of an int
    field (None: unbounded on that side)."""

    field: str
    values: frozenset[Any] | None = None
    low: int | None = None
    high: int | None = None

    def allows(self, value: Any) -> bool:
        if self.values is not None:
            return value in self.values
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def keep(self, candidates: Iterable[Any]) -> list[Any]:
        """The candidates this rule allows, in their order."""
        return [c for c in candidates if self.allows(c)]

    def allows_codes(self, column: np.ndarray, kind: type) -> np.ndarray:
        """Elementwise `allows` over an array column (enum fields hold codes)."""
        if self.values is not None:
            codes = [_code(v) for v in self.values]
            return np.isin(column, np.asarray(codes, dtype=np.int64 if kind is not bool else bool))
        ok = np.ones(column.shape, dtype=bool)
        if self.low is not None:
            ok &= column >= self.low
        if self.high is not None:
            ok &= column <= self.high
        return ok

    @property
    def text(self) -> str:
        """The rule as the flag would take it."""
        if self.values is not None:
            return ",".join(sorted(_show(v) for v in self.values))
        return f"{'' if self.low is None else self.low}..{'' if self.high is None else self.high}"


def _code(value: Any) -> Any:
    return getattr(value, "code") if isinstance(value, Enum) else value  # noqa: B009 (Enum declares no code)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(getattr(value, "value", value))


def field_of(name: str, spec: type[Layout] = Layout) -> LayoutField:
    """The layout field `name`, or a SpecError listing the fields."""
    found = next((f for f in spec_fields(spec) if f.name == name), None)
    if found is None:
        raise SpecError("layout", name, f"not a layout field; fields: {', '.join(f.name for f in spec_fields(spec))}")
    return found


def parse_rule(name: str, text: str, spec: type[Layout] = Layout) -> FieldRule:
    """A `FieldRule` from its text form (module docstring); a SpecError names the field, the text and the form, or
    the bound of the layout field a value breaks (tp > 0, zero 0..3)."""
    field = field_of(name, spec)
    flag = field.knob.cli_flag(name)
    raw = text.strip()
    check = _bounds(spec, name, flag, text)
    if field.kind is int and ".." in raw:
        low, _, high = raw.partition("..")
        bounds = [check(_int(flag, part)) if part.strip() else None for part in (low, high)]
        if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
            raise SpecError(flag, text, "a range low..high needs low ≤ high")
        return FieldRule(name, low=bounds[0], high=bounds[1])
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not parts:
        raise SpecError(flag, text, "give a value, a comma list or (ints) a range low..high")
    return FieldRule(name, values=frozenset(check(_value(field, flag, p)) for p in parts))


def _bounds(spec: type[Layout], name: str, flag: str, text: str) -> Callable[[Any], Any]:
    """A check of one value against the layout field's own bounds (its pydantic annotation)."""
    info = spec.model_fields[name]
    bounds = [m for m in info.metadata if type(m).__module__.startswith(("annotated_types", "pydantic"))]
    parts: tuple[Any, ...] = (info.annotation, *bounds)
    annotation: Any = Annotated[parts] if bounds else info.annotation
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)

    def check(value: Any) -> Any:
        try:
            adapter.validate_python(value)
        except ValidationError as err:
            raise SpecError(flag, text, f"{value!r}: {err.errors()[0]['msg'].lower()}") from None
        return value

    return check


def _int(flag: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise SpecError(flag, text, "an integer, a comma list of integers or a range low..high") from None


def _value(field: LayoutField, flag: str, text: str) -> Any:
    if field.kind is bool:
        lowered = text.lower()
        if lowered in _TRUE or lowered in _FALSE:
            return lowered in _TRUE
        raise SpecError(flag, text, f"one of {'/'.join(_TRUE[:2] + _FALSE[:2])}")
    if field.kind is int:
        return _int(flag, text)
    enum: Any = field.kind  # an Enum class
    choices = [m.value for m in enum]
    if text.lower() not in choices:
        raise SpecError(flag, text, f"one or more of {', '.join(choices)} (comma-separated)")
    return enum(text.lower())


@dataclass(frozen=True)
class LayoutRules:
    """Rules by field; a field without a rule is free."""

    rules: Mapping[str, FieldRule]

    @classmethod
    def none(cls) -> LayoutRules:
        return cls({})

    def __bool__(self) -> bool:
        return bool(self.rules)

    def get(self, name: str) -> FieldRule | None:
        return self.rules.get(name)

    def keep(self, name: str, candidates: Iterable[Any]) -> list[Any]:
        rule = self.rules.get(name)
        return list(candidates) if rule is None else rule.keep(candidates)

    def allows(self, name: str, value: Any) -> bool:
        rule = self.rules.get(name)
        return rule is None or rule.allows(value)

    def mask(self, lay: Layouts) -> np.ndarray:
        """Rows of `lay` every rule allows (shape (N,))."""
        ok = np.ones(lay.size, dtype=bool)
        kinds = {f.name: f.kind for f in lay.fields}
        for name, rule in self.rules.items():
            ok &= rule.allows_codes(lay.column(name), kinds[name])
        return ok

    def merged(self, other: LayoutRules) -> LayoutRules:
        """Both sets of rules; a field ruled by both keeps the values both allow (finite sets only on one side
        are filtered by the other's range)."""
        out = dict(self.rules)
        for name, rule in other.rules.items():
            mine = out.get(name)
            out[name] = rule if mine is None else _intersect(mine, rule)
        return LayoutRules(out)


def _intersect(a: FieldRule, b: FieldRule) -> FieldRule:
    if a.values is not None or b.values is not None:
        finite, other = (a, b) if a.values is not None else (b, a)
        assert finite.values is not None
        return FieldRule(a.field, values=frozenset(v for v in finite.values if other.allows(v)))
    lows = [x for x in (a.low, b.low) if x is not None]
    highs = [x for x in (a.high, b.high) if x is not None]
    return FieldRule(a.field, low=max(lows) if lows else None, high=min(highs) if highs else None)


def parse_rules(texts: Mapping[str, str | None], spec: type[Layout] = Layout) -> LayoutRules:
    """Rules from {field: text} (None: not given)."""
    return LayoutRules({name: parse_rule(name, text, spec) for name, text in texts.items() if text is not None})


MOE_ONLY = frozenset({"ep", "etp", "recompute_moe_act", "ep_comm_overlap"})
"""Layout fields that only mean something for a mixture-of-experts model (a dense model's etp is tp, by Megatron's
default, and no expert runs on it)."""


def framework_rules(support: FrameworkSupport, moe: bool = True, spec: type[Layout] = Layout) -> LayoutRules:
    """The rules of what `support`'s framework runs (catalog/frameworks.yaml), in the same text form; for a dense
    model (`moe` False) without the MoE-only fields."""
    def text(value: str | int | bool) -> str:
        return ("on" if value else "off") if isinstance(value, bool) else str(value)

    return LayoutRules({name: parse_rule(name, ",".join(text(v) for v in fs.values), spec)
                        for name, fs in support.fields.items() if moe or name not in MOE_ONLY})
