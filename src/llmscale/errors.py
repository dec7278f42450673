"""User-facing errors. Raised at the boundary (file loading, spec validation, CLI flags) and turned
into one line plus exit code 2 by the CLI; never a traceback."""

from __future__ import annotations

from typing import Any


class LlmscaleError(Exception):
    """Base class: a message a user can act on."""


class SpecError(LlmscaleError):
    """A bad input value: names the field, the value and what is allowed."""

    def __init__(self, field: str, value: Any, allowed: str, where: str = "") -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{field} = {value!r} is invalid: {allowed}")


class InputFileError(LlmscaleError):
    """A file that is missing, unreadable, or not valid YAML/JSON."""


class CatalogError(LlmscaleError):
    """An unknown catalog name."""
