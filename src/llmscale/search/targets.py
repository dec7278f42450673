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
from llmscale.layout.constraints import LayoutRules, field_of, framework_rules
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

    def check(self, supports: Supports) -> None:
        """Every value the user fixed must be one the framework runs; a SpecError names the flag, the value, what
        the framework supports (and where its source says so) and the way out."""
        if not 0 < self.max_memory_fraction <= 1:
            raise SpecError("--max-memory-fraction", self.max_memory_fraction, "a share of GPU memory in (0, 1]")
        if self.framework is Framework.ANY or self.framework not in supports:
            return
        support = supports[self.framework]
        allowed = framework_rules(support)
        for name, rule in self.rules.rules.items():
            limit = allowed.get(name)
            if limit is None or rule.values is None:
                continue
            refused = [v for v in rule.values if not limit.allows(v)]
            if refused:
                flag = field_of(name).knob.cli_flag(name)
                others = ", ".join(f.value for f, s in supports.items() if f is not self.framework
                                   and all(framework_rules(s).allows(name, v) for v in rule.values))
                raise SpecError(flag, rule.text, f"{support.label} runs only {limit.text} (catalog/frameworks.yaml "
                                f"says where its source shows it); use --framework {others or 'any'}"
                                + (" or any" if others else ""))

    def space_options(self, supports: Supports, moe: bool = True) -> SpaceOptions:
        """The space's options: the framework's features and searched ZeRO stages, narrowed by the user's rules
        (`moe`: whether the model has experts, so that expert-only features bound it)."""
        given = frozenset(self.rules.rules)
        base = self.space or SpaceOptions()
        if self.framework is Framework.ANY:
            zero = tuple(sorted({z for s in supports.values() for z in s.searched_zero})) or base.zero
            return replace(base, zero=base.zero if self.space else zero, rules=self.rules, given=given)
        if self.framework not in supports:
            raise SpecError("--framework", self.framework.value, f"no catalog entry; known: "
                            f"{', '.join(f.value for f in supports)}, any")
        support = supports[self.framework]
        rules = framework_rules(support, moe).merged(self.rules)
        zero = base.zero if self.space else tuple(support.searched_zero)
        return replace(base, zero=zero, rules=rules, given=given)


def runnable_by(lay: Layouts, supports: Supports, moe: bool = True) -> list[list[Framework]]:
    """For each layout (row of `lay`), the frameworks whose features include all of it (`moe`: whether the model
    has experts; a dense model's expert fields bind nothing)."""
    fits = {fw: framework_rules(s, moe).mask(lay) for fw, s in supports.items()}
    return [[fw for fw, ok in fits.items() if bool(ok[i])] for i in range(lay.size)]


def runnable_mask(lay: Layouts, support: FrameworkSupport, moe: bool = True) -> np.ndarray:
    """Rows of `lay` that `support`'s framework runs."""
    return framework_rules(support, moe).mask(lay)
