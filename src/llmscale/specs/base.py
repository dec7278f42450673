"""Shared pydantic configuration for every spec: frozen, unknown keys rejected, numbers taken as given."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


class FieldProblem(ValueError):
    """Raised by a spec's cross-field validator: names the field, its value and what is allowed, so the
    boundary can report `field = value is invalid: allowed` instead of a whole-spec error."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field} = {value!r} is invalid: {allowed}")


def _is_number_type(annotation: Any) -> bool:
    """int or float, possibly inside Annotated[...] or Optional[...]."""
    if annotation in (int, float):
        return True
    return any(_is_number_type(arg) for arg in typing.get_args(annotation))


MIN_MAGNITUDE = 1e-12
"""The smallest non-zero magnitude a number of a spec may have. No quantity llmscale reads is meaningful below it
in its unit (seconds, µs, fractions, bytes, FLOP/s, rates per year: a fraction of 10⁻¹² of a peak is no kernel, 10⁻¹²
s no latency); a value like 1e-300 is a slip, and a product of two such underflows to 0. Zero itself stays allowed
where the field allows it."""


class Spec(BaseModel):
    """A frozen spec. Unknown keys are errors, values are validated once, and a number
    field takes only a number: `layers: true` or `layers: "4"` is refused rather than read as 1 or 4
    (nothing the user gave is silently altered). Every float is finite: `inf` or `NaN` is refused
    (`allow_inf_nan=False`), and so is a non-zero one below `MIN_MAGNITUDE` (1e-300); the ranges of the fields and
    their reasons are in `specs.bounds`."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True, use_enum_values=False,
                              allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name, value in data.items():
            field = cls.model_fields.get(name)
            if field is None or not isinstance(value, bool | str):
                continue
            if _is_number_type(field.annotation) and not _accepts_text(field.annotation, value):
                raise FieldProblem(name, value, f"must be a number, not {type(value).__name__}")
        return data

    @model_validator(mode="after")
    def _no_vanishing_numbers(self) -> Any:
        for name in type(self).model_fields:  # one level into a mapping or a list; nested specs check themselves
            value = getattr(self, name)
            items = value.values() if isinstance(value, dict) else value if isinstance(value, tuple | list) else [value]
            tiny = next((v for v in items if isinstance(v, float) and 0 < abs(v) < MIN_MAGNITUDE), None)
            if tiny is not None:
                raise FieldProblem(name, tiny, f"a non-zero number below {MIN_MAGNITUDE:g} in magnitude is no "
                                   "measurement in any unit llmscale reads (give 0 where the field allows it)")
        return self


def _accepts_text(annotation: Any, value: object) -> bool:
    """True when the field also takes this bool/str as itself (a str/bool/Enum member of a union)."""
    args = typing.get_args(annotation) or (annotation,)
    for arg in args:
        if isinstance(value, bool) and arg is bool:
            return True
        if isinstance(value, str) and (arg is str or (isinstance(arg, type) and issubclass(arg, str))):
            return True
    return False
