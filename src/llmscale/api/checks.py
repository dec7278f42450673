"""The Python API's arguments checked at the door: a wrong type is one SpecError naming the argument, its value and
what it takes — never a TypeError or AttributeError from deep inside, nor an int read as a file descriptor
(`export(from_plan=5)` waited on descriptor 5)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from llmscale.errors import SpecError
from llmscale.specs.base import Spec


def path_arg(name: str, value: Any) -> Path | None:
    """A file argument: a Path or a str (None: not given)."""
    if value is None or isinstance(value, Path):
        return value
    if isinstance(value, str) and value:
        return Path(value)
    raise SpecError(name, value, "a path (str or pathlib.Path) or None")


def ref_arg(name: str, value: Any, spec: type[Spec]) -> Any:
    """A model or cluster: a catalog name, a file path, a spec object, or None (the default)."""
    if value is None or isinstance(value, str | Path | spec):
        return value
    raise SpecError(name, value, f"a catalog name, a file path, a {spec.__name__} or None")


def fields_arg(name: str, value: Any, spec: type[Spec], example: str = "{'tp': 8}") -> Any:
    """Layout or run fields: a mapping of field names to values, a spec object, or None."""
    if value is None or isinstance(value, spec):
        return value
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return value
    raise SpecError(name, value, f"a mapping of field names to values (e.g. {example}), a {spec.__name__} or None")


def numbers_arg(name: str, value: Any) -> list[float]:
    """A list of numbers (None or empty: none)."""
    if value is None:
        return []
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise SpecError(name, value, "a list of numbers, e.g. [5, 10, 30]")
    items = list(value)
    bad = next((v for v in items if isinstance(v, bool) or not isinstance(v, int | float)), None)
    if bad is not None:
        raise SpecError(name, bad, "a number (in a list of numbers, e.g. [5, 10, 30])")
    return [float(v) for v in items]


def names_arg(name: str, value: Any, example: str = "['llama3-70b']") -> list[Any]:
    """A list of names or enum members (None or empty: none)."""
    if value is None:
        return []
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise SpecError(name, value, f"a list of names, e.g. {example}")
    return list(value)


def flag_arg(name: str, value: Any) -> bool:
    """A switch: True or False."""
    if not isinstance(value, bool):
        raise SpecError(name, value, "True or False")
    return value


def text_arg(name: str, value: Any) -> str | None:
    """A text argument (a digest): a str or None."""
    if value is None or isinstance(value, str):
        return value
    raise SpecError(name, value, "a str or None")
