"""Model constants kept in the catalog as `key: {value: …, source: …}` files (memory.yaml, comm.yaml, …)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml


@cache
def catalog_values(filename: str) -> dict[str, Any]:
    """The `value` of every entry of a catalog constants file; each entry's `source` stays in the file."""
    text = resources.files("llmscale.catalog").joinpath(filename).read_text(encoding="utf-8")
    return {key: entry["value"] for key, entry in yaml.safe_load(text).items()}
