"""A framework release's layout settings over many layouts: the switches its rules turn on for some layouts and not
others (TP overlap where tp > 1, EP all-to-all overlap, CUDA graphs on some GPUs), evaluated per layout with
`np.where`, so that a search prices each candidate as the release runs it (specs.framework).

Only settings the search does not choose itself are filled: recompute, offload, schedule and rank order stay search
dimensions. Of the filled ones, the overlaps only ever shorten a step in the cost model (they hold no memory), so a
search turns them on wherever they can act (`SEARCHED_ON`) — the engine runs both values and a plan recommends how to
run — except where a rule with a condition sets them off: that is the release saying they do not work there (e.g.
no TP overlap under NVFP4). A release's unconditioned default off is only a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmscale.specs.framework import JobFacts, ReleaseProfile, RuleCondition, layout_holds

SEARCH_FILLED = ("sp", "tp_comm_overlap", "ep_comm_overlap", "cuda_graphs")
"""The release settings a search takes as the release sets them (the others it searches)."""
SEARCHED_ON = {"tp_comm_overlap": "tp", "ep_comm_overlap": "ep"}
"""Overlaps a search turns on where their group has more than one rank (module docstring), by the size they need."""


@dataclass(frozen=True)
class ReleaseLayouts:
    """A release and the job's facts: what its rules set on the layouts of one search."""

    release: ReleaseProfile | None
    facts: JobFacts | None

    def columns(self, sizes: Mapping[str, np.ndarray], skip: frozenset[str] = frozenset(),
                search_on: frozenset[str] = frozenset()) -> dict[str, Any]:
        """For each setting of SEARCH_FILLED not in `skip` that a rule sets or the search turns on (`search_on`):
        its column over the layouts whose sizes (tp, pp, vpp, cp, ep, dp, zero arrays) are given."""
        rules = [r for r in (self.release.rules if self.release else ()) if self.facts and self.facts.holds(r.when)]
        out: dict[str, Any] = {}
        for name in SEARCH_FILLED:
            if name in skip:
                continue
            column, forced_off = _release_column(name, rules, sizes)
            if name in search_on:
                helps = np.asarray(sizes[SEARCHED_ON[name]]) > 1
                column = (column if column is not None else False) | (helps & ~forced_off)
            if column is not None:
                out[name] = np.broadcast_to(column, np.shape(sizes["tp"]))
        return out


def _release_column(name: str, rules: list[Any], sizes: Mapping[str, np.ndarray]) -> tuple[Any, np.ndarray]:
    """The last matching rule's value per layout (the layout's default where none matches; None: no rule sets it),
    and where that rule is a conditioned off."""
    shape = np.shape(sizes["tp"])
    column: Any = None
    forced_off = np.zeros(shape, dtype=bool)
    for rule in rules:
        value = getattr(rule.set, name)
        if value is None:
            continue
        held = np.broadcast_to(layout_holds(rule.when, dict(sizes)), shape)
        column = np.where(held, value, _default(name, sizes) if column is None else column)
        forced_off = np.where(held, (not value) and rule.when != RuleCondition(), forced_off)
    return column, forced_off


def _default(name: str, sizes: Mapping[str, np.ndarray]) -> np.ndarray:
    """The layout's own value of a setting no rule sets (specs.layout: sp on when tp > 1, the switches off)."""
    tp = np.asarray(sizes["tp"])
    return tp > 1 if name == "sp" else np.zeros(tp.shape, dtype=bool)
