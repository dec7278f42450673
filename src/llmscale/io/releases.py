"""Framework release profiles from the catalog (catalog/frameworks.yaml `releases`, `sources`), `--framework
NAME[@RELEASE]`, and a profile applied to what a user gave: every setting the user left out that the release's rules
set for this job is filled in, and the application records which rules set what (explain and memory print it).

A setting the user gave always wins; the profile fills the rest; the specs' own defaults fill what neither sets.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from functools import cache
from typing import Any

from pydantic import ValidationError

from llmscale.errors import SpecError
from llmscale.io.catalog import Kind, catalog_file, catalog_section, gpu_key, load_catalog_yaml, names
from llmscale.io.files import parse_spec
from llmscale.layout.arrays import Layouts
from llmscale.layout.rules import RELEASE_SWITCHES, switch_runs
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.framework import (
    CHOICE_SETTINGS,
    LAYOUT_SETTINGS,
    LAYOUT_SIZES,
    MODEL_SETTINGS,
    TRAIN_SETTINGS,
    ZERO3_ONLY,
    JobFacts,
    ProfileRule,
    ReleaseProfile,
    Source,
    expand,
    layout_holds,
)
from llmscale.specs.layout import Layout, Recompute
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import AttentionKernel, Fp8Recipe, Precision, TrainSpec

DEFAULT_FRAMEWORK = "megatron-bridge"
"""The framework a job runs under when it names none: its newest release (NVIDIA's recommended Megatron-Core trainer;
its recipes set the overlaps and kernels a Megatron-Core job is run with)."""

@cache
def load_sources() -> dict[str, Source]:
    """The sources table of catalog/frameworks.yaml, by id."""
    table: dict[str, Any] = catalog_file("frameworks.yaml")["sources"]
    return {key: parse_spec(Source, body, where=f"catalog frameworks.yaml sources.{key}")
            for key, body in table.items()}


_RELEASE_ITEM = re.compile(r"^  - ", re.MULTILINE)
"""Where an item of the `releases` list starts (the catalog's two-space block style)."""

_HEADER_KEY = re.compile(r"^(?:  - |    )(?:framework|release|date):.*$", re.MULTILINE)
"""A release's own framework, release and date lines (keys of the item itself, not of its rules)."""

_SOURCE_ID = re.compile(r"^  ([^\s#][^:]*):\s*$", re.MULTILINE)
"""A key of the `sources` mapping: an id alone on its line at two spaces (its fields sit at four)."""


@cache
def _release_texts() -> tuple[str, ...]:
    """The text of each item of catalog/frameworks.yaml `releases`, in order: a release is parsed alone when named
    (the whole file takes ~30 ms to parse; tests/test_release_profiles.py checks each item parses as in the whole)."""
    section = catalog_section("frameworks.yaml", "releases")
    starts = [m.start() for m in _RELEASE_ITEM.finditer(section)]
    return tuple(section[a:b] for a, b in zip(starts, [*starts[1:], len(section)], strict=True))


@cache
def _bodies() -> tuple[dict[str, Any], ...]:
    """Each release's framework, release and date, read from its own lines."""
    headers = []
    for text in _release_texts():
        lines = "\n".join(m.group(0).replace("  - ", "    ", 1) for m in _HEADER_KEY.finditer(text))
        headers.append(load_catalog_yaml(textwrap.dedent(lines)))
    return tuple(headers)


@cache
def source_ids() -> frozenset[str]:
    """The ids of catalog/frameworks.yaml `sources`, read from their lines (each source itself: load_sources)."""
    return frozenset(_SOURCE_ID.findall(catalog_section("frameworks.yaml", "sources")))


@cache
def _release(i: int) -> ReleaseProfile:
    """Release i of catalog/frameworks.yaml, checked: each rule cites a known source, and a rule that sets a run or
    model setting conditions only on the job (or on zero, for a ZeRO-3-only setting). Parsed when first needed."""
    where = f"catalog frameworks.yaml releases[{i}]"
    (body,) = load_catalog_yaml(_release_texts()[i])
    release = parse_spec(ReleaseProfile, body, where=where)
    ids = source_ids()
    for j, rule in enumerate(release.rules):
        _check_rule(rule, ids, f"{where} ({release.label}) rules[{j}]")
    return release


def load_releases() -> tuple[ReleaseProfile, ...]:
    """Every release profile of catalog/frameworks.yaml, checked (`_release`)."""
    return tuple(_release(i) for i in range(len(_bodies())))


def _check_rule(rule: ProfileRule, sources: frozenset[str], where: str) -> None:
    if rule.source not in sources:
        raise SpecError("source", rule.source, "an id of the sources table", where=where)
    unknown = sorted(set(rule.when.gpu or ()) - set(names(Kind.GPUS)))
    if unknown:
        raise SpecError("when.gpu", unknown, f"catalog GPU names: {', '.join(names(Kind.GPUS))}", where=where)
    given = set(rule.set.given())
    per_layout = {name for name in LAYOUT_SIZES if getattr(rule.when, name) is not None}
    free = LAYOUT_SETTINGS | CHOICE_SETTINGS
    if given - free and per_layout - ({"zero"} if given <= free | ZERO3_ONLY else set()):
        raise SpecError("when", sorted(per_layout), "a rule that sets run or model settings may condition on the "
                        "job only (a search shares one run among its layouts)", where=where)


def frameworks() -> list[str]:
    """The framework names that have releases."""
    return sorted({str(body["framework"]) for body in _bodies()})


def find_release(text: str | None) -> ReleaseProfile:
    """`NAME@RELEASE`, or `NAME` for its newest release (None: the default framework's newest); only that release
    is parsed."""
    name, at, release = (text or DEFAULT_FRAMEWORK).strip().partition("@")
    if at and not release:
        raise SpecError("--framework", text, f"NAME@RELEASE with a release after the @, or {name} for its newest")
    candidates = [i for i, body in enumerate(_bodies()) if body["framework"] == name]
    if not candidates:
        raise SpecError("--framework", text, f"one of {', '.join(frameworks())} (optionally @RELEASE), or any")
    dated = sorted(candidates, key=lambda i: str(_bodies()[i]["date"]))
    if not release:
        return _release(dated[-1])
    for i in candidates:
        if str(_bodies()[i]["release"]) == release:
            return _release(i)
    known = ", ".join(f"{name}@{_bodies()[i]['release']}" for i in dated)
    raise SpecError("--framework", text, f"a release of {name}: {known}")


@dataclass(frozen=True)
class AppliedSetting:
    """One setting a profile set for a job: its value and the rule that set it."""

    name: str
    value: Any
    source: str
    read: str


@dataclass(frozen=True)
class ProfileApplication:
    """What a release profile did to one job."""

    profile: ReleaseProfile
    facts: JobFacts
    """What its job conditions read (a search evaluates its layout settings per layout with them)."""
    applied: tuple[AppliedSetting, ...]
    """The settings it set (the user gave none of them)."""
    kept: tuple[str, ...]
    """Settings it would have set that the user gave (the user's value was kept)."""
    recorded: bool = False
    """The job came whole from a saved document made under this release: nothing was filled."""
    dropped: tuple[str, ...] = ()
    """Settings it would have turned on that the job cannot run: overlaps outside this layout (as the release drops
    them: TP overlap without sequence parallelism, EP overlap outside what Megatron's combined 1F1B takes;
    layout.rules), and FP8 attention beside the unfused or FlashAttention-2 attention the user asked for."""

    @property
    def release(self) -> str:
        """`megatron-bridge@25.09`."""
        return self.profile.label

    def value(self, name: str) -> Any:
        return next((s.value for s in self.applied if s.name == name), None)


def job_facts(model: ModelSpec, cluster: ClusterSpec, precision: Precision, fp8_recipe: Fp8Recipe | None,
              seq_len: int, gpus: int | None = None) -> JobFacts:
    """What the profile's job conditions read, from the resolved model and cluster, the run's precision and the
    job's GPU count."""
    return JobFacts(gpu=gpu_key(cluster.gpu) or "", generation=cluster.gpu.generation, precision=precision,
                    fp8_recipe=fp8_recipe, moe=model.is_moe, family=model.family,
                    dropless=model.capacity_factor is None, seq_len=seq_len, layers=model.layers, gpus=gpus)


def layout_sizes(layout: Mapping[str, Any], num_gpus: int | None) -> dict[str, Any]:
    """The layout sizes a rule reads, with the layout's defaults for what is not given (dp from the GPUs)."""
    sizes = {name: _count(layout.get(name), 1) for name in ("tp", "pp", "vpp", "cp", "ep")}
    sizes["zero"] = _count(layout.get("zero"), 1, minimum=0)
    replica = sizes["tp"] * sizes["pp"] * sizes["cp"]
    sizes["dp"] = _count(layout.get("dp"), max(num_gpus // replica, 1) if num_gpus else 1)
    return sizes


def job_gpus(layout: Mapping[str, Any] | None, cluster: ClusterSpec, num_gpus: int | None) -> int:
    """The job's GPU count: given, else tp·cp·pp·dp where the layout gives dp, else the cluster's (io.resolve sizes
    the job by it too)."""
    if num_gpus is not None:
        return num_gpus
    if layout is None or _count(layout.get("dp"), 0) == 0:
        return cluster.num_gpus
    sizes = layout_sizes(layout, None)
    return int(sizes["tp"] * sizes["cp"] * sizes["pp"] * sizes["dp"])


def _count(value: Any, default: int, minimum: int = 1) -> int:
    """A layout size as the rules read it: a whole number from `minimum`, else `default` (a wrong value is named
    where the layout is read, in resolve)."""
    whole = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
    return value if whole else default


@dataclass(frozen=True)
class Filled:
    """A request's model, run and layout with a release profile's settings in place, and what it did."""

    model: ModelSpec
    train: dict[str, Any]
    """The run's given fields (non-None), the profile's beside them."""
    layout: dict[str, Any] | None
    """The layout's given fields and the profile's; None for a search (its layouts get the layout settings one by
    one: layout.profile)."""
    application: ProfileApplication


def given_fields(spec_or_mapping: Any) -> dict[str, Any]:
    """The fields a user gave: a mapping's non-None values, or the fields a spec object was built with."""
    if isinstance(spec_or_mapping, Mapping):
        return {k: v for k, v in spec_or_mapping.items() if v is not None}
    return {name: getattr(spec_or_mapping, name) for name in spec_or_mapping.model_fields_set}


def _member(kind: type[Enum], value: Any, default: Any) -> Any:
    """`value` as a member of the str enum `kind`, or `default` where it is none (a wrong type included)."""
    return kind(value) if isinstance(value, str) and value in {m.value for m in kind} else default


def fill(release: ReleaseProfile, model: ModelSpec, cluster: ClusterSpec, train: Mapping[str, Any],
         layout: Mapping[str, Any] | None, num_gpus: int | None, dropless: bool | None = None) -> Filled:
    """The profile's settings for this job in every place the user left open (module docstring); `dropless` says
    whether the job drops tokens where the model does not (it names no capacity factor)."""
    # A value the train spec does not take is named where the spec is read (resolve); the rules see the default.
    defaults = TrainSpec()
    precision = _member(Precision, train.get("precision"), defaults.precision)
    seq_len = train.get("seq_len")
    if not (isinstance(seq_len, int) and not isinstance(seq_len, bool) and seq_len > 0):
        seq_len = defaults.seq_len
    gpus = job_gpus(layout, cluster, num_gpus)
    facts = job_facts(model, cluster, precision, None, seq_len, gpus)
    sizes = layout_sizes(layout, num_gpus) if layout is not None else None
    recipe = _member(Fp8Recipe, train.get("fp8_recipe"), None) or rule_value(release, facts, sizes, "fp8_recipe")
    if precision is Precision.FP8 and recipe is None:
        recipe = defaults.fp8_recipe_on(cluster.gpu.efficiency.gemm_mxfp8 is not None)
    facts = job_facts(model, cluster, precision, Fp8Recipe(recipe) if recipe else None, facts.seq_len, gpus)
    if dropless is not None and model.is_moe and model.capacity_factor is None:
        facts = replace(facts, dropless=dropless)
    chosen = _moot_dropped(_chosen(release, facts, sizes), layout or {})
    if precision is not Precision.FP8:
        chosen.pop("fp8_recipe", None)  # a recipe scales FP8 tensors only
    user = {"train": dict(train), "layout": dict(layout or {}), "model": {}}
    groups: dict[str, dict[str, Any]] = {"train": dict(train), "layout": dict(layout or {}), "model": {}}
    applied, kept = [], []
    for name, rule in chosen.items():
        group = "train" if name in TRAIN_SETTINGS else "model" if name in MODEL_SETTINGS else (
            "layout" if name in LAYOUT_SETTINGS and layout is not None else None)
        value = _value_for(model, name, getattr(rule.set, name))
        if value is None:
            continue
        if group is None:  # a layout setting of a search (set per layout), or a fact no spec holds: recorded
            if name not in LAYOUT_SETTINGS:
                applied.append(AppliedSetting(name, value, rule.source, rule.read))
            continue
        fields = expand(name, value)
        if any(key in user[group] for key in fields) or (group == "model" and _model_given(model, name)):
            kept.append(name)
            continue
        groups[group] |= fields
        applied.append(AppliedSetting(name, value, rule.source, rule.read))
    tied = bool(groups["model"].get("tied_embeddings", model.tied_embeddings))
    applied, dropped = _without_unrunnable(groups, user, applied, layout is not None, tied)
    new_model = model if not groups["model"] else parse_spec(
        ModelSpec, model.model_dump() | groups["model"], where=f"model {model.name} under {release.label}")
    return Filled(new_model, groups["train"], groups["layout"] if layout is not None else None,
                  ProfileApplication(release, facts, tuple(applied), tuple(kept), dropped=tuple(dropped)))


def _without_unrunnable(groups: dict[str, dict[str, Any]], user: dict[str, dict[str, Any]],
                        applied: list[AppliedSetting], has_layout: bool,
                        tied: bool) -> tuple[list[AppliedSetting], list[str]]:
    """`groups` (in place) and `applied` without what the job cannot run or does not read, and the names dropped:
    overlaps its layout cannot take, FP8 attention beside attention that has no FP8 kernel, an MXFP8 output layer
    beside one `tied` to the input embedding (io.run_checks.check_fp8_output_proj), and a CUDA-graph scope without
    graphs (moot: the job keeps the spec's default, not a drop)."""
    dropped = _unrunnable(groups["layout"], user["layout"]) if has_layout else []
    if _fp8_attention_unrunnable(groups["train"], user["train"]):
        dropped.append("fp8_attention")
        groups["train"].pop("fp8_attention")
    if tied and groups["train"].get("fp8_output_proj") and "fp8_output_proj" not in user["train"]:
        dropped.append("fp8_output_proj")
        groups["train"].pop("fp8_output_proj")
    moot = has_layout and not groups["layout"].get("cuda_graphs") and "cuda_graph_scope" not in user["train"]
    if moot:
        groups["train"].pop("cuda_graph_scope", None)
    groups["layout"] = {k: v for k, v in groups["layout"].items() if k not in dropped}
    gone = set(dropped) | ({"cuda_graph_scope"} if moot else set())
    return [s for s in applied if s.name not in gone], dropped


def _fp8_attention_unrunnable(train: Mapping[str, Any], user: Mapping[str, Any]) -> bool:
    """FP8 attention the profile turned on where the user asked for unfused or FlashAttention-2 attention, which
    have no FP8 kernel (io.run_checks.check_fp8_attention): the release's setting yields to the user's."""
    if not train.get("fp8_attention") or "fp8_attention" in user:
        return False
    kernel = _member(AttentionKernel, train.get("attention_kernel"), None)
    return train.get("flash_attention") is False or kernel is AttentionKernel.FLASH2


def _unrunnable(layout: Mapping[str, Any], user: Mapping[str, Any]) -> list[str]:
    """The switches the profile turned on (the user gave none of them) that this layout cannot run: the release
    drops them there (layout.rules.switch_runs, on the layout with its defaults filled)."""
    candidates = [name for name in RELEASE_SWITCHES if layout.get(name) and name not in user]
    if not candidates:
        return []
    try:
        parsed = Layout.model_validate({k: v for k, v in layout.items() if v is not None and k != "dp"})
    except ValidationError:
        return []  # the resolver reports what is wrong with the layout, where the user gave it
    cols = Layouts.from_layout(parsed.model_copy(update={"dp": 1}), 1)
    view = {name: cols.column(name) for name in ("tp", "sp", "ep", "pp", "schedule", "recompute")}
    return [name for name in candidates if not bool(switch_runs(name, view)[0])]


def moot_recompute_setting(has_modules: bool, recompute: Any) -> str | None:
    """Which of Megatron's recompute settings does not act beside the other: a module list decides what a selective
    recompute re-runs (core_attn only when listed), so it replaces the granularity beside it; under full recompute
    (`recompute`, the release's or the user's) the list is moot. None: no module list, both act."""
    if not has_modules:
        return None
    full = _member(Recompute, recompute, None) is Recompute.FULL  # (a value that is no recompute: named later)
    return "recompute_modules" if full else "recompute"


def _value_for(model: ModelSpec, name: str, value: Any) -> Any:
    """A rule's value as the job's spec takes it: a recipe's pipeline splits that place the model's layers, as plain
    data (None: none does, and the setting does not apply)."""
    if name != "pipeline_splits":
        return value
    held = [split.model_dump() for split in value if split.total == model.layers]
    return [split | {"layers": list(split["layers"])} for split in held] or None


def _moot_dropped(chosen: dict[str, ProfileRule], layout: Mapping[str, Any]) -> dict[str, ProfileRule]:
    """`chosen` without the recompute setting that does not act (`moot_recompute_setting`)."""
    recompute = layout.get("recompute") or (chosen["recompute"].set.recompute if "recompute" in chosen else None)
    moot = moot_recompute_setting("recompute_modules" in chosen, recompute)
    return {k: v for k, v in chosen.items() if k != moot}


def _chosen(release: ReleaseProfile, facts: JobFacts, sizes: Mapping[str, Any] | None) -> dict[str, ProfileRule]:
    """The winning rule per setting; for a search (no sizes) the run and model settings, whose layout conditions
    (zero, for ZeRO-3-only settings) are taken as met: they are read only where they hold."""
    chosen: dict[str, ProfileRule] = {}
    for rule in release.rules:
        if facts.holds(rule.when) and (sizes is None or bool(layout_holds(rule.when, dict(sizes)))):
            chosen |= dict.fromkeys(rule.set.given(), rule)
    return chosen


def rule_value(release: ReleaseProfile, facts: JobFacts, sizes: Mapping[str, Any] | None, name: str) -> Any:
    """The value the release's winning rule gives `name` for this job (None: no rule sets it)."""
    rule = _chosen(release, facts, sizes).get(name)
    return getattr(rule.set, name) if rule is not None else None


def _model_given(model: ModelSpec, name: str) -> bool:
    """A model setting the model's own definition states (its file or catalog entry set it)."""
    return name in model.model_fields_set
