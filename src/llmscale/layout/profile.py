"""A framework release's layout settings over many layouts: the switches its rules turn on for some layouts and not
others (TP overlap where tp > 1, EP all-to-all overlap where ep > 1, CUDA graphs on some GPUs), evaluated per layout
with `np.where` so that a search prices each candidate as the release would run it (specs.framework).

Only settings the search does not choose itself are filled here: recompute, offload, schedule and rank order stay
search dimensions (a plan looks for the best of them), the rest take the release's value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmscale.specs.framework import JobFacts, ReleaseProfile, layout_holds

SEARCH_FILLED = ("sp", "tp_comm_overlap", "ep_comm_overlap", "cuda_graphs")
"""The release settings a search takes as the release sets them (the others it searches)."""


@dataclass(frozen=True)
class ReleaseLayouts:
    """A release and the job's facts: what its rules set on the layouts of one search."""

    release: ReleaseProfile
    facts: JobFacts

    def columns(self, sizes: Mapping[str, np.ndarray], skip: frozenset[str] = frozenset()) -> dict[str, Any]:
        """For each setting of SEARCH_FILLED not in `skip` that a rule of this job sets: its column over the layouts
        whose sizes (tp, pp, vpp, cp, ep, dp, zero arrays) are given: the last matching rule's value, the layout's own
        default where no rule matches."""
        out: dict[str, Any] = {}
        rules = [r for r in self.release.rules if self.facts.holds(r.when)]
        for name in SEARCH_FILLED:
            if name in skip:
                continue
            column: Any = None
            for rule in rules:
                value = getattr(rule.set, name)
                if value is None:
                    continue
                held = np.broadcast_to(layout_holds(rule.when, dict(sizes)), np.shape(sizes["tp"]))
                column = np.where(held, value, _default(name, sizes) if column is None else column)
            if column is not None:
                out[name] = column
        return out


def _default(name: str, sizes: Mapping[str, np.ndarray]) -> np.ndarray:
    """The layout's own value of a setting no rule sets (specs.layout: sp on when tp > 1, the switches off)."""
    tp = np.asarray(sizes["tp"])
    return tp > 1 if name == "sp" else np.zeros(tp.shape, dtype=bool)
