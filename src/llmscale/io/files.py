"""Reading input files and turning validation failures into one-line SpecErrors."""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from llmscale.errors import InputFileError, SpecError
from llmscale.io.strict import parse_text, read_text
from llmscale.specs.base import FieldProblem, Spec

SpecT = TypeVar("SpecT", bound=Spec)


def read_document(path: Path) -> dict[str, Any]:
    """A YAML or JSON file as a mapping, read strictly (`io.strict`: size, duplicate keys, tags, nesting); a missing,
    unreadable or malformed file raises InputFileError naming the path."""
    data = parse_text(read_text(path), str(path), as_json=path.suffix.lower() == ".json")
    if not isinstance(data, dict):
        raise InputFileError(f"{path}: expected a mapping of fields at the top level, got {type(data).__name__}")
    return data


def parse_spec(cls: type[SpecT], data: dict[str, Any], where: str) -> SpecT:
    """Validate `data` as `cls`; the first problem becomes a SpecError naming field, value and rule."""
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise spec_error_from(exc, where) from None


def spec_error_from(exc: ValidationError, where: str) -> SpecError:
    """Translate pydantic's first error into a SpecError (field path, offending value, what is allowed).

    An unknown key is reported before any other problem: a misspelt key (`hiden`) also makes the real
    field (`hidden`) missing, and the misspelling is what the user has to fix."""
    errors = exc.errors(include_url=False)
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    problem = (err.get("ctx") or {}).get("error")
    if isinstance(problem, FieldProblem):
        prefix = ".".join(str(part) for part in err["loc"])
        field = f"{prefix}.{problem.field}" if prefix else problem.field
        return SpecError(field, problem.value, problem.allowed, where=where)
    field = ".".join(str(part) for part in err["loc"]) or "(spec)"
    value = err.get("input")
    message = err["msg"]
    if err["type"] == "extra_forbidden":
        allowed = sorted(_allowed_keys(exc.title, err["loc"]))
        key = str(err["loc"][-1])
        close = difflib.get_close_matches(key, allowed, n=1)
        message = "unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")
        message += f"; allowed keys: {', '.join(allowed)}" if allowed else ""
    elif err["type"] == "missing":
        value = None
        message = "required field is missing"
    elif err["type"] == "value_error":
        field = field if field != "(spec)" else "spec"
        message = message.removeprefix("Value error, ")
        if isinstance(value, dict):
            value = "…"
    return SpecError(field, value, message, where=where)


def _allowed_keys(title: str, loc: tuple[int | str, ...]) -> list[str]:
    """The keys allowed where the unknown key `loc` sits: the fields of the top-level spec named
    `title`, or of the nested spec (`mla`, `node`, `tiers[i]`, ...) that `loc` walks into."""
    from llmscale.specs import calibration, cluster, constants, layout, model, train

    spec: type[Spec] | None = None
    for module in (model, cluster, train, layout, constants, calibration):
        cls = getattr(module, title, None)
        if isinstance(cls, type) and issubclass(cls, Spec):
            spec = cls
            break
    for part in loc[:-1]:
        if spec is None:
            return []
        if isinstance(part, int):  # an index into a tuple of specs
            continue
        info = spec.model_fields.get(part)
        spec = _nested_spec(info.annotation) if info is not None else None
    return list(spec.model_fields) if spec is not None else []


def _nested_spec(annotation: Any) -> type[Spec] | None:
    """The Spec class inside an annotation such as `MLASpec | None` or `tuple[NetworkTier, ...]`."""
    if isinstance(annotation, type) and issubclass(annotation, Spec):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_spec(arg)
        if found is not None:
            return found
    return None
