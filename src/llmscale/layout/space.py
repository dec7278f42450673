"""The layout space of a model on a number of GPUs as arrays (docs/architecture.md principle 1): the Cartesian
product of each field's candidate values, checked by `rules.check` with no Python loop over layouts, the leading
rules applied before the rest is built (`_early_kept`). `SpaceOptions.rules` narrow the lists. Candidates, pruning
and why: docs/cost-model.md#space."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmscale.errors import SpecError
from llmscale.layout.arrays import Layouts
from llmscale.layout.constraints import FieldRule, LayoutRules
from llmscale.layout.profile import ReleaseLayouts
from llmscale.layout.rules import Reason, check, decided_by
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.layout import RankOrder, Recompute, Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec


@dataclass(frozen=True)
class SpaceOptions:
    """Which values each layout field may take (None = the defaults, docs/cost-model.md#space-candidates)."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    mbs: tuple[int, ...] = (1, 2, 4, 8)
    zero: tuple[int, ...] = (0, 1, 2)
    """ZeRO-3 is left out by default: `llmscale validate` still overshoots the 2021 DeepSpeed ZeRO-3 baselines by
    +5 % to +43 % (the 530B rows most), so a search could recommend it for the wrong reason. Pass (0, 1, 2, 3) to
    include it."""
    recompute: tuple[Recompute, ...] = tuple(Recompute)
    module_recompute: tuple[bool, ...] | None = None
    """Whether layouts recompute the norms, MLA up-projections and expert activations (each where the model has it);
    None = (False, True) for MoE and MLA models, whose activations these dominate, else (False,)."""
    schedules: tuple[Schedule, ...] = tuple(Schedule)
    offload_optimizer: tuple[bool, ...] = (False,)
    rank_orders: tuple[RankOrder, ...] = (RankOrder.TP_CP_EP_DP_PP,)
    """Megatron's default order only; add RankOrder.TP_CP_EP_PP_DP to let the search also place the pipeline
    inside data parallel (it doubles the pipelined, data-parallel part of the space)."""
    max_cp: int = field(default=0, metadata={"doc": "0 = 1 below 16K tokens, else 16"})
    rules: LayoutRules = field(default_factory=LayoutRules.none)
    """What the user fixed or bounded and what the target framework runs (layout.constraints), merged: the
    candidate lists are narrowed to it and the rows it excludes are rejected as Reason.EXCLUDED."""
    zero_with_pp: tuple[int, ...] = (0, 1)
    """ZeRO stages searched with pipelining (pp > 1): the target framework's (catalog/frameworks.yaml)."""
    zero_without_pp: tuple[int, ...] = (0, 1, 2, 3)
    """ZeRO stages searched without (pp = 1)."""
    release: ReleaseLayouts | None = None
    """The framework release whose layout settings (TP/EP overlap, CUDA graphs, sequence parallelism) each layout
    takes where the user rules on none of them (layout.profile); None: the layout's own defaults."""
    search_on: frozenset[str] = frozenset()
    """Overlaps the search turns on wherever they can act (layout.profile.SEARCHED_ON): those the target engine
    runs and the user rules on none of."""
    given: frozenset[str] = frozenset()
    """The fields the user ruled on (a subset of `rules`): a finite set of values given for one of them replaces
    its default candidates (`--tp 16` on an 8-GPU NVLink domain is tried), and a field the space does not vary
    (CUDA graphs, TP overlap, …) becomes one more product dimension over the values given."""


@dataclass(frozen=True)
class Space:
    """The valid layouts and how many candidates each rule rejected."""

    layouts: Layouts
    generated: int
    rejected: dict[Reason, int]


def _divisors(n: int) -> list[int]:
    """The divisors of n in ascending order, by trial division up to √n."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def _powers_of_two(limit: int) -> list[int]:
    return [2**i for i in range(0, max(limit, 1).bit_length()) if 2**i <= limit]


def candidate_values(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, num_gpus: int,
                     opts: SpaceOptions) -> dict[str, list[int]]:
    """The values each field may take before the rules filter combinations."""
    kv = model.heads if model.mla is not None else model.num_kv_heads
    scale_up = cluster.tiers[0].ranks
    tp = list(opts.tp) if opts.tp else [t for t in _powers_of_two(scale_up) if model.heads % t == 0 and kv % t == 0]
    max_cp = opts.max_cp or (16 if train.seq_len >= 16384 else 1)
    cp = list(opts.cp) if opts.cp else [c for c in _powers_of_two(max_cp) if train.seq_len % (2 * c) == 0 or c == 1]
    pp = list(opts.pp) if opts.pp else [p for p in _divisors(num_gpus) if p <= model.layers]
    pp = _ruled(opts, "pp", pp)
    vpp = list(opts.vpp) if opts.vpp else sorted({v for p in pp for v in _divisors(model.layers // p) if v <= 8})
    ep = [1]
    if model.is_moe:
        ep = list(opts.ep) if opts.ep else [e for e in _divisors(model.experts) if e <= num_gpus]
    zero = list(range(4)) if "zero" in opts.given else list(opts.zero)
    return {"tp": _ruled(opts, "tp", tp), "cp": _ruled(opts, "cp", cp), "pp": pp, "vpp": _ruled(opts, "vpp", vpp),
            "ep": _ruled(opts, "ep", ep), "mbs": _ruled(opts, "mbs", list(opts.mbs)),
            "zero": _ruled(opts, "zero", zero)}


def _ruled(opts: SpaceOptions, name: str, defaults: list[Any]) -> list[Any]:
    """`defaults` narrowed by the rule on `name`; a finite set the user gave replaces them."""
    rule = opts.rules.get(name)
    if rule is None:
        return defaults
    if name in opts.given and rule.values is not None:
        return sorted(rule.values, key=lambda v: getattr(v, "code", v))
    return rule.keep(defaults)


def candidate_count(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, num_gpus: int,
                    opts: SpaceOptions | None = None) -> int:
    """How many combinations `generate` would build for `num_gpus` GPUs (before the rules), without building them:
    the search's work, estimated up front."""
    opts = opts or SpaceOptions()
    values = candidate_values(model, cluster, train, num_gpus, opts) | _mode_values(model, opts)
    return math.prod(len(v) for v in values.values())


def _product(columns: dict[str, list[int]]) -> dict[str, np.ndarray]:
    """Cartesian product of the value lists as flat arrays."""
    grids = np.meshgrid(*(np.asarray(v) for v in columns.values()), indexing="ij")
    return {name: grid.reshape(-1) for name, grid in zip(columns, grids, strict=True)}


def generate(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, num_gpus: int,
             opts: SpaceOptions | None = None) -> Space:
    """All valid layouts for `num_gpus` GPUs (docs/cost-model.md#space), with rejection counts by reason."""
    opts = opts or SpaceOptions()
    values = candidate_values(model, cluster, train, num_gpus, opts)
    values |= _mode_values(model, opts)
    generated = math.prod(len(v) for v in values.values())
    index, early_rejected = _early_kept(model, train, num_gpus, values)
    lay = built_layouts(model, num_gpus, {name: np.asarray(values[name], dtype=np.int64)[index[name]]
                                          for name in values}, opts)
    reasons = layout_reasons(model, train, num_gpus, lay, opts, both_orders=len(values["rank_order"]) > 1)
    counts = Counter({Reason(int(r)): int(n) for r, n in zip(*np.unique(reasons, return_counts=True), strict=True)})
    counts.update(early_rejected)
    listed = [r for r in sorted(counts) if r not in (Reason.OK, Reason.GPU_COUNT) and counts[r]]
    rejected: dict[Reason, int] = {r: counts[r] for r in listed}
    if counts[Reason.GPU_COUNT]:  # listed last, as the space always has
        rejected[Reason.GPU_COUNT] = counts[Reason.GPU_COUNT]
    return Space(lay.take(reasons == Reason.OK), generated=generated, rejected=rejected)


def built_layouts(model: ModelSpec, num_gpus: int, cols: dict[str, np.ndarray], opts: SpaceOptions) -> Layouts:
    """Layouts from product columns (values, not indices): dp, etp and the module flags derived from them, and the
    release's and the search's switches where the user gave none."""
    cols = dict(cols)
    flags: dict[str, np.ndarray] = {}
    if "module_recompute" in cols:  # one switch for every module the model has (else the user gave them one by one)
        modules = cols.pop("module_recompute") == 1
        flags = {"recompute_norm": modules, "recompute_mla_up": modules & (model.mla is not None),
                 "recompute_moe_act": modules & model.is_moe}
    etp = _etp(cols)
    dp = num_gpus // (cols["tp"] * cols["cp"] * cols["pp"])
    columns: dict[str, Any] = {**cols, **flags, "dp": dp, "etp": etp}  # sp: the layout's rule (on when tp > 1)
    if opts.release is not None or opts.search_on:
        release = opts.release or ReleaseLayouts(None, None)
        columns |= release.columns(columns, skip=opts.given | frozenset(columns), search_on=opts.search_on)
    return Layouts.from_columns(**columns)


def layout_reasons(model: ModelSpec, train: TrainSpec, num_gpus: int, lay: Layouts, opts: SpaceOptions,
                   both_orders: bool) -> np.ndarray:
    """`check`'s reason per layout, then SCHEDULE for the combinations that are no distinct runnable layout
    (`_pruned`) and EXCLUDED for those the rules mask."""
    reasons = check(model, train, num_gpus, lay)
    extra = _pruned(lay, opts, both_orders)
    reasons = np.where((reasons == Reason.OK) & extra, np.int8(Reason.SCHEDULE), reasons)
    return np.where((reasons == Reason.OK) & ~opts.rules.mask(lay), np.int8(Reason.EXCLUDED), reasons)


def _etp(cols: dict[str, np.ndarray]) -> np.ndarray:
    """etp from the product's etp_is_tp column (removed from `cols`): tp where set, else 1."""
    result: np.ndarray = np.where(cols.pop("etp_is_tp") == 1, cols["tp"], 1)
    return result


EARLY = ("tp", "cp", "pp", "vpp", "ep", "etp_is_tp", "schedule")
"""The product columns that, with dp and etp derived from them, hold what the leading rules of `check` read
(rules.decided_by): their combinations are checked, and those rejected dropped, before the rest is built."""


def _early_kept(model: ModelSpec, train: TrainSpec, num_gpus: int,
                values: dict[str, list[Any]]) -> tuple[dict[str, np.ndarray], Counter[Reason]]:
    """Index arrays into `values` of every combination whose EARLY columns pass the rules those columns decide, in
    the Cartesian product's own order (the first column varies slowest: the order ties are ranked in), and how many
    combinations of the whole product each of those rules rejected."""
    names = list(values)
    shape = [len(values[name]) for name in names]
    early = [name for name in names if name in EARLY]
    vals: dict[str, Any] = _product({name: values[name] for name in early})
    per_row = math.prod(len(values[name]) for name in names if name not in EARLY)
    whole = num_gpus % (vals["tp"] * vals["cp"] * vals["pp"]) == 0
    rejected: Counter[Reason] = Counter({Reason.GPU_COUNT: int((~whole).sum()) * per_row})
    vals = {name: v[whole] for name, v in vals.items()}
    etp = _etp(vals)
    reasons = check(model, train, num_gpus, Layouts.from_columns(**vals, etp=etp, num_gpus=num_gpus))
    decided = np.isin(reasons, list(decided_by(frozenset(vals) | {"dp", "etp"})))
    failed = zip(*np.unique(reasons[decided], return_counts=True), strict=True)
    rejected.update({Reason(int(r)): int(n) * per_row for r, n in failed})
    kept = np.zeros(whole.shape, dtype=bool)
    kept[np.flatnonzero(whole)[~decided]] = True
    # The kept early combinations spread over the other columns' axes: np.nonzero lists the whole product's
    # surviving positions in its own order, one index array per column.
    axes = [len(values[name]) if name in EARLY else 1 for name in names]
    index = np.nonzero(np.broadcast_to(kept.reshape(axes), shape))
    return dict(zip(names, index, strict=True)), rejected


_PRODUCT = frozenset({"tp", "cp", "pp", "vpp", "ep", "mbs", "zero", "recompute", "schedule", "offload_optimizer",
                       "rank_order", "recompute_norm", "recompute_mla_up", "recompute_moe_act", "dp", "etp"})
"""The layout columns `generate` builds itself (directly, or derived from the product: dp, etp, module flags)."""


def _mode_values(model: ModelSpec, opts: SpaceOptions) -> dict[str, list[Any]]:
    """The product's mode columns (codes), narrowed by the rules, and one column per field the user ruled on that
    the space does not otherwise vary."""
    rules = opts.rules
    light = (False, True) if model.is_moe or model.mla is not None else (False,)
    modules = opts.module_recompute if opts.module_recompute else light
    values: dict[str, list[Any]] = {
        "etp_is_tp": [0, 1] if model.is_moe else [1],
        "recompute": [r.code for r in _ruled(opts, "recompute", list(opts.recompute))],
        "schedule": [s.code for s in _ruled(opts, "schedule", list(opts.schedules))],
        "offload_optimizer": [int(b) for b in _ruled(opts, "offload_optimizer", list(opts.offload_optimizer))],
        "rank_order": [o.code for o in _ruled(opts, "rank_order", list(opts.rank_orders))],
    }
    if opts.given & MODULE_FLAGS:  # each module flag as given (the others off)
        values |= {name: [int(v) for v in _finite(rules.get(name))] if name in opts.given else [0]
                   for name in sorted(MODULE_FLAGS)}
    else:
        values["module_recompute"] = [int(b) for b in modules if not b or rules.allows("recompute_norm", True)]
    for name in sorted(opts.given - _PRODUCT):
        rule = rules.get(name)
        assert rule is not None, f"{name} is given without a rule"
        values[name] = [getattr(v, "code", v) for v in _finite(rule)]
    return values


MODULE_FLAGS = frozenset({"recompute_norm", "recompute_mla_up", "recompute_moe_act"})
"""The module recomputes the space varies as one switch unless the user rules on one of them."""


def _finite(rule: FieldRule | None) -> list[Any]:
    """The values of a rule on a field the space does not vary: its set, or the ints of a bounded range (≤ 64)."""
    assert rule is not None, "a given field has a rule"
    if rule.values is not None:
        return sorted(rule.values, key=lambda v: getattr(v, "code", v))
    low = rule.low if rule.low is not None else 0
    if rule.high is None or rule.high - low > 64:
        raise SpecError(rule.field, rule.text, "a range of a field the search does not vary needs an upper bound "
                        "within 64 of its lower one")
    return list(range(low, rule.high + 1))


def _pruned(lay: Layouts, opts: SpaceOptions, both_orders: bool) -> np.ndarray:
    """Combinations that are not distinct or runnable layouts: pipelined schedules without a pipeline, a ZeRO stage
    the target does not run with (or without) pipelining (SpaceOptions.zero_with_pp / zero_without_pp), the second
    rank order where pp or dp is 1 when both orders are searched (the same layout twice), and module recompute
    beside full recompute."""
    no_pipeline = (lay.pp == 1) & (lay.schedule != Schedule.ONE_F_ONE_B.code)
    other_zero = np.where(lay.pp > 1, ~np.isin(lay.zero, opts.zero_with_pp), ~np.isin(lay.zero, opts.zero_without_pp))
    same_order = ((lay.pp == 1) | (lay.dp == 1)) & (lay.rank_order != RankOrder.TP_CP_EP_DP_PP.code) & both_orders
    modules = lay.recompute_norm | lay.recompute_mla_up | lay.recompute_moe_act
    modules_with_full = modules & (lay.recompute == Recompute.FULL.code)  # full re-runs them all anyway
    result: np.ndarray = no_pipeline | other_zero | same_order | modules_with_full
    return result
