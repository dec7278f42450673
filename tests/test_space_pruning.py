"""Pruning the layout space before it is built: each rule reads only the columns it declares (rules.RULE_READS), and
`generate` keeps the same layouts, in the same order, with the same rejection counts as checking the whole Cartesian
product (written out here the plain way, as `generate` did before it pruned)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from llmscale.api.jobs import engine_of
from llmscale.io.catalog import load_cluster, load_frameworks, load_model
from llmscale.io.resolve import JobRequest, resolve
from llmscale.layout.arrays import Layouts
from llmscale.layout.constraints import parse_rules
from llmscale.layout.profile import ReleaseLayouts
from llmscale.layout.rules import RULE_READS, Reason, check, conditions, decided_by, explain_rejection
from llmscale.layout.space import (
    SpaceOptions,
    _mode_values,
    _product,
    built_layouts,
    candidate_values,
    generate,
    layout_reasons,
)
from llmscale.search.targets import SearchTarget
from llmscale.specs.framework import Framework
from llmscale.specs.layout import RankOrder, Recompute, Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import MoeDispatcher, TrainSpec

SUPPORTS = load_frameworks()


def _random_layouts(rng: np.random.Generator, size: int) -> Layouts:
    """Layouts with every column drawn independently, so that every rule both passes and fails somewhere."""
    pick = lambda *values: rng.choice(np.asarray(values), size)  # noqa: E731
    return Layouts.from_columns(
        tp=pick(1, 2, 3, 4, 8), cp=pick(1, 2, 3), pp=pick(1, 2, 3, 4, 8, 40), dp=pick(1, 2, 3, 4, 6, 8, 64),
        vpp=pick(1, 2, 3), ep=pick(1, 2, 3, 8), etp=pick(1, 2, 4), mbs=pick(1, 2, 3), sp=pick(False, True),
        schedule=pick(*(s.code for s in Schedule)), recompute=pick(*(r.code for r in Recompute)),
        recompute_norm=pick(False, True), recompute_mla_up=pick(False, True), recompute_moe_act=pick(False, True),
        recompute_mlp=pick(False, True), offload_activations=pick(0, 1, 40), cuda_graphs=pick(False, True),
        tp_comm_overlap=pick(False, True), ep_comm_overlap=pick(False, True), zero=pick(0, 1, 2, 3),
        rank_order=pick(*(o.code for o in RankOrder)))


@pytest.mark.parametrize("model_name", ["llama3-70b", "deepseek-v3"])
def test_each_rule_reads_only_the_columns_it_declares(model_name: str) -> None:
    rng = np.random.default_rng(0)
    model, train = load_model(model_name), TrainSpec(seq_len=4096, global_batch=96)
    lay = _random_layouts(rng, 20_000)
    before = dict(conditions(model, train, 512, lay))
    assert list(before) == list(RULE_READS)  # the same rules in the same order: decided_by relies on it
    for reason, failed in before.items():
        if reason is Reason.RANK_ORDER and not model.is_moe:
            assert not failed.any()  # a rule of MoE models: their expert and dense pipeline groups must agree
            continue
        if reason is Reason.TIED_OUTPUT:
            assert not failed.any()  # a rule of tied MXFP8 output layers (tests/test_fp8_output_proj.py)
            continue
        assert failed.any() and not failed.all(), reason  # the draw exercises the rule both ways
    for name in lay.names:
        shuffled = dict(conditions(model, train, 512, lay.replace(**{name: rng.permutation(lay.column(name))})))
        for reason, failed in before.items():
            if name not in RULE_READS[reason]:
                assert np.array_equal(shuffled[reason], failed), (reason, name)


def test_the_leading_rules_decided_by_the_early_columns() -> None:
    early = frozenset({"tp", "cp", "pp", "dp", "vpp", "ep", "etp", "schedule"})
    assert decided_by(early) == (Reason.GPU_COUNT, Reason.TP_HEADS, Reason.PP_LAYERS, Reason.SCHEDULE,
                                 Reason.EP_EXPERTS, Reason.EP_FOLD)
    assert decided_by(frozenset({"tp"})) == ()  # GPU_COUNT needs cp, pp and dp too: nothing is decided


def _whole_product_space(model: ModelSpec, cluster_name: str, train: TrainSpec, gpus: int,
                         opts: SpaceOptions) -> tuple[Layouts, dict[Reason, int]]:
    """The space as the whole Cartesian product, then checked (the reference `generate` must agree with): built whole,
    every combination through the same column derivation and checks, none rejected before it is built."""
    cluster = load_cluster(cluster_name, num_gpus=gpus)
    values = candidate_values(model, cluster, train, gpus, opts) | _mode_values(model, opts)
    cols = _product(values)
    whole = gpus % (cols["tp"] * cols["cp"] * cols["pp"]) == 0
    lay = built_layouts(model, gpus, {name: v[whole] for name, v in cols.items()}, opts)
    reasons = layout_reasons(model, train, gpus, lay, opts, both_orders=len(values["rank_order"]) > 1)
    counts = Counter(Reason(int(r)) for r in reasons)
    counts[Reason.GPU_COUNT] += int((~whole).sum())
    assert counts.total() == math.prod(len(v) for v in values.values())
    return lay.take(reasons == Reason.OK), {r: n for r, n in counts.items() if r is not Reason.OK and n}


JOBS = [
    ("gpt3-175b", "selene", 1536, TrainSpec(seq_len=2048, global_batch=1536), SearchTarget(Framework.ANY)),
    ("mixtral-8x22b", "eos-h100", 256, TrainSpec(seq_len=4096, global_batch=512),
     SearchTarget(Framework.ANY, space=SpaceOptions(zero=(0, 1, 2, 3), rank_orders=tuple(RankOrder),
                                                    offload_optimizer=(False, True)))),
    ("deepseek-v3", "deepseek-v3-h800", 2048, TrainSpec(seq_len=4096, global_batch=15360),
     SearchTarget(Framework.MEGATRON_CORE)),
    ("llama3-70b", "eos-h100", 384, TrainSpec(seq_len=32768, global_batch=96),
     SearchTarget(Framework.MEGATRON_CORE, rules=parse_rules({"tp": "4..8", "cuda_graphs": "on,off", "mbs": "1"}))),
    ("qwen3-30b-a3b", "dgx-b200", 64, TrainSpec(seq_len=4096, global_batch=512), "megatron-bridge@26.04.01"),
    ("seed-10t-moe", "seed-500k", 4096, TrainSpec(seq_len=4096, global_batch=8192), None),
    ("deepseek-v3", "deepseek-v3-h800", 128, TrainSpec(seq_len=4096, global_batch=30), SearchTarget(Framework.ANY)),
]
"""Each job with its target: a SearchTarget, or a framework release whose profile the space takes (as `plan` does;
None: the default framework's newest)."""


@pytest.mark.parametrize(("model_name", "cluster_name", "gpus", "train", "target"), JOBS, ids=[j[0] for j in JOBS])
def test_pruning_before_building_keeps_the_whole_products_layouts_order_and_counts(
        model_name: str, cluster_name: str, gpus: int, train: TrainSpec, target: SearchTarget | str | None) -> None:
    model = load_model(model_name)
    if not isinstance(target, SearchTarget):
        job = resolve(JobRequest(model=model_name, cluster=cluster_name, gpus=gpus, framework=target))
        assert job.profile is not None
        target = SearchTarget(engine_of(job), release=ReleaseLayouts(job.profile.profile, job.profile.facts))
    opts = target.space_options(SUPPORTS, model.is_moe)
    want_layouts, want_rejected = _whole_product_space(model, cluster_name, train, gpus, opts)
    space = generate(model, load_cluster(cluster_name, num_gpus=gpus), train, gpus, opts)
    assert space.layouts.size == want_layouts.size > 0
    for name in want_layouts.names:  # the same rows in the same order: the search ranks ties by position
        assert np.array_equal(space.layouts.column(name), want_layouts.column(name)), name
    assert space.rejected == want_rejected
    assert space.generated == sum(want_rejected.values()) + want_layouts.size


def test_ep_overlap_needs_the_all_to_all_or_flex_dispatcher() -> None:
    # NVIDIA/Megatron-LM@cd4afffa648 transformer_config.py asserts moe_token_dispatcher_type in [alltoall, flex] for
    # overlap_moe_expert_parallel_comm: with the allgather dispatcher the layout is refused, naming the dispatcher.
    model = load_model("mixtral-8x7b")
    lay = Layouts.from_columns(tp=1, dp=64, ep=8, ep_comm_overlap=True)
    for dispatcher in MoeDispatcher:
        train = TrainSpec(moe_dispatcher=dispatcher)
        reason = Reason(int(check(model, train, 64, lay)[0]))
        assert reason is (Reason.EP_OVERLAP if dispatcher is MoeDispatcher.ALLGATHER else Reason.OK), dispatcher
    message = str(explain_rejection(Reason.EP_OVERLAP, model, TrainSpec(moe_dispatcher=MoeDispatcher.ALLGATHER), 64,
                                    lay))
    assert "the job's is allgather" in message and "--framework any" in message
