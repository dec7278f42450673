"""Per-row recipe facts (data/run_settings.yaml): where a published row's own recipe deviates from its release's
profile, or states a layout fact the published table leaves out (micro-batch, interleaving degree). Each entry is
keyed by an explicit `id`, names its row exactly (`run`) and cites a source of the catalog's sources table by id.
`validate --facts recipe` applies them; the headline (`--facts profile`) does not: it scores what a user knows.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import Field, PositiveInt

from llmscale.errors import SpecError
from llmscale.io.catalog import dataset_file
from llmscale.io.files import parse_spec
from llmscale.io.releases import load_sources
from llmscale.specs.base import Spec
from llmscale.specs.bounds import MAX_MBS, MAX_VPP
from llmscale.specs.framework import ProfileSettings


class RowSettings(ProfileSettings):
    """A row's own settings: any profile setting, and the layout facts a published table may leave out."""

    micro_batch: PositiveInt | None = Field(None, le=MAX_MBS)
    vp: PositiveInt | None = Field(None, le=MAX_VPP, description="virtual pipeline stages per rank (1 = none)")


class RecipeEntry(Spec):
    """What one row's recipe sets beyond (or against) its release profile."""

    id: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9._-]*$")
    run: str = Field(min_length=1, description="the published row's exact name")
    set: RowSettings
    source: str = Field(min_length=1, description="a source id of catalog frameworks.yaml")
    read: str = Field(min_length=1, description="what the source says, briefly")


@cache
def recipe_entries() -> tuple[RecipeEntry, ...]:
    """Every entry of data/run_settings.yaml, checked: unique ids, known sources."""
    sources = load_sources()
    entries: list[RecipeEntry] = []
    for i, body in enumerate(dataset_file("run_settings.yaml")):
        entry = parse_spec(RecipeEntry, body, where=f"data run_settings.yaml [{i}]")
        if entry.source not in sources:
            raise SpecError("source", entry.source, "an id of catalog frameworks.yaml sources", where=entry.id)
        if any(e.id == entry.id for e in entries):
            raise SpecError("id", entry.id, "unique", where="data run_settings.yaml")
        entries.append(entry)
    return tuple(entries)


def row_settings(name: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The settings the entries of row `name` give (later entries override earlier ones), and their ids."""
    settings: dict[str, Any] = {}
    ids: list[str] = []
    for entry in recipe_entries():
        if entry.run == name:
            settings |= entry.set.given()
            ids.append(entry.id)
    return settings, tuple(ids)
