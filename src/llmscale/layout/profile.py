"""A framework release's layout settings over many layouts: the switches its rules turn on for some layouts and not
others (TP overlap where tp > 1, EP all-to-all overlap, CUDA graphs on some GPUs), evaluated per layout with
`np.where`, so that a search prices each candidate as the release runs it (specs.framework). Which settings are
filled and which a search turns on: docs/cost-model.md#profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmscale.layout.rules import RELEASE_SWITCHES, switch_runs
from llmscale.specs.framework import JobFacts, ProfileRule, ReleaseProfile, RuleCondition, layout_holds

SEARCH_FILLED = ("sp", "tp_comm_overlap", "ep_comm_overlap", "cuda_graphs")
"""The release settings a search takes as the release sets them (the others it searches)."""
SEARCHED_ON = ("sp", "tp_comm_overlap", "ep_comm_overlap")
"""Settings a search turns on wherever they can run (docs/cost-model.md#profile-searched-on): sequence parallelism
(it only saves memory and TP overlap needs it) and the TP and EP overlaps (layout.rules Reason.TP_OVERLAP,
Reason.EP_OVERLAP)."""


@dataclass(frozen=True)
class ReleaseLayouts:
    """A release and the job's facts: what its rules set on the layouts of one search."""

    release: ReleaseProfile | None
    facts: JobFacts | None

    @property
    def rules(self) -> list[ProfileRule]:
        """The release's rules whose job conditions hold."""
        if self.release is None or self.facts is None:
            return []
        facts = self.facts
        return [r for r in self.release.rules if facts.holds(r.when)]

    def value(self, name: str) -> Any:
        """The job-level value of `name` (the last matching rule without a layout condition; None: none sets it)."""
        values = [getattr(r.set, name) for r in self.rules if getattr(r.set, name) is not None and not r.when.on_layout]
        return values[-1] if values else None

    def columns(self, cols: Mapping[str, np.ndarray], skip: frozenset[str] = frozenset(),
                search_on: frozenset[str] = frozenset()) -> dict[str, Any]:
        """For each setting of SEARCH_FILLED not in `skip` that a rule sets or the search turns on (`search_on`):
        its column over the layouts whose columns (tp, pp, vpp, cp, ep, dp, zero, recompute, schedule) are given."""
        rules = self.rules
        out: dict[str, Any] = {}
        for name in SEARCH_FILLED:
            if name in skip:
                continue
            column, forced_off = _release_column(name, rules, cols)
            runs = switch_runs(name, {**cols, **out}) if name in RELEASE_SWITCHES else np.asarray(cols["tp"]) > 1
            if name in search_on:
                column = (column if column is not None else False) | (runs & ~forced_off)
            if column is not None and name in RELEASE_SWITCHES:
                column = column & runs  # the release drops a switch the layout cannot run (io.releases.fill)
            if column is not None:
                out[name] = np.broadcast_to(column, np.shape(cols["tp"]))
        return out


def _release_column(name: str, rules: list[ProfileRule], cols: Mapping[str, np.ndarray]) -> tuple[Any, np.ndarray]:
    """The last matching rule's value per layout (the layout's default where none matches; None: no rule sets it),
    and where that rule is a conditioned off."""
    shape = np.shape(cols["tp"])
    column: Any = None
    forced_off = np.zeros(shape, dtype=bool)
    for rule in rules:
        value = getattr(rule.set, name)
        if value is None:
            continue
        held = np.broadcast_to(layout_holds(rule.when, dict(cols)), shape)
        column = np.where(held, value, _default(name, cols) if column is None else column)
        forced_off = np.where(held, (not value) and rule.when != RuleCondition(), forced_off)
    return column, forced_off


def _default(name: str, cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """The layout's own value of a setting no rule sets (specs.layout: sp on when tp > 1, the switches off)."""
    tp = np.asarray(cols["tp"])
    return tp > 1 if name == "sp" else np.zeros(tp.shape, dtype=bool)
