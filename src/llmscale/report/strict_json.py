"""Strict JSON for every `--json` output and JSON file llmscale writes: no `NaN`, `Infinity` or `-Infinity` (which
`json.dumps` writes by default and no strict parser reads, RFC 8259 §6).

A value that is not a finite number is written as `null`; inside a mapping a `<key>_reason` key beside it says why,
so a reader never mistakes a missing figure for a measured one. Documents should not hold such values in the first
place (inputs are bounded at the boundary); this is the last line, and `json.dumps(..., allow_nan=False)` behind it
turns anything it missed into an error rather than invalid JSON.
"""

from __future__ import annotations

import json
import math
from typing import Any


def strict_dumps(document: Any, indent: int | None = 2) -> str:
    """`document` as strict JSON (module docstring)."""
    return json.dumps(finite_only(document), indent=indent, allow_nan=False)


def finite_only(value: Any) -> Any:
    """`value` with every non-finite float replaced by None (and, in a mapping, a `<key>_reason` beside it)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            out[key] = finite_only(item)
            if isinstance(item, float) and not math.isfinite(item) and f"{key}_reason" not in value:
                out[f"{key}_reason"] = f"not a finite number ({item!r})"
        return out
    if isinstance(value, (list, tuple)):
        return [finite_only(item) for item in value]
    return value
