"""Shared pydantic configuration for every spec: frozen, unknown keys rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Spec(BaseModel):
    """A frozen spec. Unknown keys are errors (STYLE habit 6), values are validated once."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True, use_enum_values=False)


class FieldProblem(ValueError):
    """Raised by a spec's cross-field validator: names the field, its value and what is allowed, so the
    boundary can report `field = value is invalid: allowed` instead of a whole-spec error."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field} = {value!r} is invalid: {allowed}")
