"""What a search may choose: the target framework's features (specs.framework, catalog/frameworks.yaml) merged
with the layout fields the user fixed or bounded (layout.constraints), as the space's options; and, for each
layout found, which frameworks could run it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from llmscale.errors import SpecError
from llmscale.layout.arrays import Layouts
from llmscale.layout.constraints import MOE_ONLY, FieldRule, LayoutRules, field_of, framework_rules
from llmscale.layout.profile import SEARCHED_ON, ReleaseLayouts
from llmscale.layout.space import SpaceOptions
from llmscale.specs.framework import Framework, FrameworkSupport

Supports = Mapping[Framework, FrameworkSupport]


@dataclass(frozen=True)
class SearchTarget:
    """The framework a plan is for and the user's layout rules (empty: search everything that framework runs)."""

    framework: Framework = Framework.MEGATRON_CORE
    rules: LayoutRules = field(default_factory=LayoutRules.none)
    max_memory_fraction: float = 1.0
    """A layout fits when its most-loaded GPU needs at most this share of the GPU's memory."""
    space: SpaceOptions | None = None
    """The space to start from (None: layout.space's defaults with the framework's searched ZeRO stages)."""
    release: ReleaseLayouts | None = None
    """The framework release whose layout settings each layout takes (None: the layouts' own defaults)."""

    def check(self, supports: Supports, moe: bool = True) -> None:
        """Every value the user fixed must be one the framework runs and mean something for the model; a SpecError
        names the flag, the value, what is allowed (and where the framework's source says so) and the way out."""
        if isinstance(self.max_memory_fraction, bool) or not isinstance(self.max_memory_fraction, int | float) or (
                not 0 < self.max_memory_fraction <= 1):
            raise SpecError("--max-memory-fraction", self.max_memory_fraction, "a share of GPU memory in (0, 1]")
        for name, rule in self.rules.rules.items():
            if not moe and name in MOE_ONLY:
                raise SpecError(field_of(name).knob.cli_flag(name), rule.text, "applies to mixture-of-experts models "
                                "only; this model has no experts")
        if self.framework is Framework.ANY or self.framework not in supports:
            return
        support = supports[self.framework]
        allowed = framework_rules(support, moe)
        for name, rule in self.rules.rules.items():
            limit = allowed.get(name)
            if limit is not None and _empty(limit, rule):
                self._refuse(name, rule, limit, supports)

    def _refuse(self, name: str, rule: FieldRule, limit: FieldRule, supports: Supports) -> None:
        support = supports[self.framework]
        flag = field_of(name).knob.cli_flag(name)
        others = ", ".join(f.value for f, s in supports.items() if f is not self.framework
                           and not _empty(framework_rules(s).get(name), rule))
        raise SpecError(flag, rule.text, f"{support.label} runs only {limit.text} (catalog/frameworks.yaml says where "
                        f"its source shows it); use --framework {others or 'any'}" + (" or any" if others else ""))

    def _search_on(self, supports: Supports, moe: bool, given: frozenset[str]) -> frozenset[str]:
        """The overlaps the search turns on where they act: those the engine runs and the user rules on none of."""
        support = supports.get(self.framework)
        dispatcher = self.release.value("moe_dispatcher") if self.release is not None else None
        ep_ok = moe and dispatcher != "allgather"  # Megatron's EP overlap needs the alltoall or flex dispatcher
        return frozenset(name for name in SEARCHED_ON if name not in given and (ep_ok or name != "ep_comm_overlap")
                         and _search_on_rule(support, moe, name))

    def space_options(self, supports: Supports, moe: bool = True) -> SpaceOptions:
        """The space's options: the framework's features and searched ZeRO stages, narrowed by the user's rules
        (`moe`: whether the model has experts, so that expert-only features bound it)."""
        given = frozenset(self.rules.rules)
        base = replace(self.space or SpaceOptions(), search_on=self._search_on(supports, moe, given))
        if self.framework is Framework.ANY:
            zero = tuple(sorted({z for s in supports.values() for z in s.searched_zero})) or base.zero
            with_pp = tuple(sorted({z for s in supports.values() for z in s.zero_with_pipeline})) or base.zero_with_pp
            without = tuple(sorted({z for s in supports.values() for z in s.zero_without_pipeline})) or (
                base.zero_without_pp)
            return replace(base, zero=base.zero if self.space else zero, rules=self.rules, given=given,
                           zero_with_pp=with_pp, zero_without_pp=without, release=self.release)
        if self.framework not in supports:
            raise SpecError("--framework", self.framework.value, f"no catalog entry; known: "
                            f"{', '.join(f.value for f in supports)}, any")
        support = supports[self.framework]
        rules = framework_rules(support, moe).merged(self.rules)
        zero = base.zero if self.space else tuple(support.searched_zero)
        return replace(base, zero=zero, rules=rules, given=given, zero_with_pp=tuple(support.zero_with_pipeline),
                       zero_without_pp=tuple(support.zero_without_pipeline), release=self.release)


def _search_on_rule(support: FrameworkSupport | None, moe: bool, name: str) -> bool:
    """Whether the engine (None: any) runs `name` on."""
    if support is None:
        return True
    limit = framework_rules(support, moe).get(name)
    return limit is None or limit.allows(True)


def _empty(limit: FieldRule | None, rule: FieldRule) -> bool:
    """Whether a user's rule refuses everything the framework allows (or, for a set, names a value it lacks)."""
    if limit is None:
        return False
    if rule.values is not None:
        return any(not limit.allows(v) for v in rule.values)
    merged = LayoutRules({rule.field: limit}).merged(LayoutRules({rule.field: rule})).get(rule.field)
    assert merged is not None
    if merged.values is not None:
        return not merged.values
    return merged.low is not None and merged.high is not None and merged.low > merged.high


def runnable_by(lay: Layouts, supports: Supports, moe: bool = True) -> list[list[Framework]]:
    """For each layout (row of `lay`), the frameworks whose features include all of it (`moe`: whether the model
    has experts; a dense model's expert fields bind nothing)."""
    fits = {fw: runnable_mask(lay, s, moe) for fw, s in supports.items()}
    return [[fw for fw, ok in fits.items() if bool(ok[i])] for i in range(lay.size)]


def runnable_mask(lay: Layouts, support: FrameworkSupport, moe: bool = True) -> np.ndarray:
    """Rows of `lay` that `support`'s framework runs: its per-field features and the ZeRO stages it runs with and
    without pipelining."""
    ok: np.ndarray = framework_rules(support, moe).mask(lay)
    ok &= np.where(lay.pp > 1, np.isin(lay.zero, support.zero_with_pipeline),
                   np.isin(lay.zero, support.zero_without_pipeline))
    return ok
