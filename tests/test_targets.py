"""Framework-aware search and layout rules on `plan` (issue 13 item 1): the rule texts, what each framework's
catalog entry lets the space hold (checked against the framework's source at the cited commit), the user's rules
narrowing the space, a rule the framework cannot run refused, `any` naming who runs each layout, the memory cap,
the roomier alternative, and the job size of `--objective time`."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.errors import SpecError
from llmscale.io.catalog import load_cluster, load_constants, load_frameworks, load_model
from llmscale.layout.constraints import LayoutRules, parse_rule, parse_rules
from llmscale.layout.rules import Reason
from llmscale.layout.space import generate
from llmscale.search.plan import Objective, plan, search_job_size
from llmscale.search.targets import SearchTarget
from llmscale.specs.framework import Framework
from llmscale.specs.layout import Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec
from tests.conftest import run_cli, run_cli_json

CONSTANTS = load_constants()
SUPPORTS = load_frameworks()
LLAMA_TRAIN = TrainSpec(seq_len=4096, global_batch=512)
TINY = ModelSpec(name="tiny", layers=8, hidden=1024, ffn_hidden=4096, heads=16, vocab=32000)
TINY_TRAIN = TrainSpec(seq_len=2048, global_batch=64)


def _space(target: SearchTarget, model: ModelSpec = TINY, gpus: int = 64, train: TrainSpec = TINY_TRAIN):
    cluster = load_cluster("eos-h100", num_gpus=gpus)
    return generate(model, cluster, train, gpus, target.space_options(SUPPORTS, model.is_moe))


@pytest.mark.parametrize(("name", "text", "allowed", "refused"), [
    ("tp", "8", [8], [4, 16]),
    ("pp", "4..16", [4, 8, 16], [2, 32]),
    ("pp", "..4", [1, 4], [8]),
    ("mbs", "1,2", [1, 2], [4]),
    ("schedule", "1f1b,interleaved", [Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED], [Schedule.ZB_V]),
    ("cuda_graphs", "on", [True], [False]),
])
def test_rule_texts(name: str, text: str, allowed: list, refused: list) -> None:
    rule = parse_rule(name, text)
    assert all(rule.allows(v) for v in allowed)
    assert not any(rule.allows(v) for v in refused)


@pytest.mark.parametrize(("name", "text"), [("tp", "x"), ("pp", "8..4"), ("schedule", "gpipe"), ("sp", "maybe"),
                                            ("nonsense", "1"), ("tp", " , ")])
def test_bad_rule_texts_name_the_flag(name: str, text: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_rule(name, text)
    assert text in str(err.value) or name in str(err.value)


def test_megatron_core_space_holds_only_its_schedules() -> None:
    # NVIDIA/Megatron-LM@d98e8a6 megatron/core/pipeline_parallel/schedules.py: no pipelining, 1F1B, interleaved.
    lay = _space(SearchTarget(Framework.MEGATRON_CORE)).layouts
    schedules = {Schedule(s) for s in (list(Schedule)[c].value for c in np.unique(lay.schedule))}
    assert schedules == {Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED}
    assert not lay.offload_params.any()
    any_lay = _space(SearchTarget(Framework.ANY)).layouts
    assert any_lay.size > lay.size  # zero-bubble and DualPipe layouts exist in the unbounded space


def test_torchtitan_space_has_fsdp_and_no_expert_tp_or_module_recompute() -> None:
    # pytorch/torchtitan@b5bcd76 configs.py: FSDP2 / DDP (no ZeRO-1), EP borrows FSDP and TP ranks (etp 1), block-level
    # activation checkpointing only; torch.distributed.pipelining has no single-chunk ZB-H1 or two-copy DualPipe.
    moe = load_model("mixtral-8x7b")
    lay = _space(SearchTarget(Framework.TORCHTITAN), model=moe, gpus=64, train=LLAMA_TRAIN).layouts
    assert lay.size > 0
    piped, flat = lay.pp > 1, lay.pp == 1
    assert set(np.unique(lay.zero[flat])) == {0, 2, 3}  # DDP, FSDP2 'never', 'always'
    assert set(np.unique(lay.zero[piped])) <= {0, 1}  # FSDP2 over stages is ZeRO-1 (torch pipelining/stage.py)
    assert np.all(lay.etp == 1)
    assert not (lay.recompute_norm | lay.recompute_moe_act).any()
    assert Schedule.DUALPIPE.code not in lay.schedule and Schedule.ZB_H1.code not in lay.schedule


def test_user_rules_narrow_the_space_and_count_what_they_exclude() -> None:
    rules = parse_rules({"tp": "4", "pp": "2..4", "cuda_graphs": "on"})
    space = _space(SearchTarget(Framework.MEGATRON_CORE, rules))
    lay = space.layouts
    assert lay.size > 0
    assert np.all(lay.tp == 4) and np.all((lay.pp >= 2) & (lay.pp <= 4)) and np.all(lay.cuda_graphs)
    dp_rule = _space(SearchTarget(Framework.MEGATRON_CORE, parse_rules({"dp": "4"})))  # derived: masked, counted
    assert np.all(dp_rule.layouts.dp == 4) and dp_rule.rejected[Reason.EXCLUDED] > 0


def test_a_given_value_outside_the_defaults_is_tried() -> None:
    # tp 16 spans two 8-GPU NVLink domains: never a default candidate, but a user who fixes it gets it scored.
    lay = _space(SearchTarget(Framework.MEGATRON_CORE, parse_rules({"tp": "16"}))).layouts
    assert lay.size > 0 and np.all(lay.tp == 16)


def test_a_rule_the_framework_cannot_run_is_refused_with_the_way_out() -> None:
    target = SearchTarget(Framework.MEGATRON_CORE, parse_rules({"schedule": "zbv"}))
    with pytest.raises(SpecError) as err:
        target.check(SUPPORTS)
    assert "megatron-core" in str(err.value) and "torchtitan" in str(err.value)
    SearchTarget(Framework.TORCHTITAN, parse_rules({"schedule": "zbv"})).check(SUPPORTS)  # torchtitan runs it


def test_any_names_the_frameworks_that_run_each_layout() -> None:
    model, cluster = load_model("llama3-70b"), load_cluster("eos-h100", num_gpus=256)
    result = search_job_size(model, cluster, LLAMA_TRAIN, 256, Objective.THROUGHPUT, 30, CONSTANTS,
                             SearchTarget(Framework.ANY), SUPPORTS)
    for c in result.top:
        layout = c.layouts.row(c.layout_index)
        pipelined = layout.resolved_schedule in (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED)
        fsdp_over_stages = layout.zero >= 2 and layout.pp > 1  # not verified for Megatron-FSDP (frameworks.yaml)
        megatron = pipelined and not layout.offload_params and not fsdp_over_stages
        assert (Framework.MEGATRON_CORE in c.frameworks) == megatron
        titan_zero = layout.zero in ((0, 1) if layout.pp > 1 else (0, 2, 3))
        if layout.resolved_schedule is Schedule.DUALPIPE or not titan_zero:
            assert Framework.TORCHTITAN not in c.frameworks


def test_memory_cap() -> None:
    model, cluster = load_model("llama3-70b"), load_cluster("eos-h100", num_gpus=256)
    free = search_job_size(model, cluster, LLAMA_TRAIN, 256, Objective.THROUGHPUT, 50, CONSTANTS, SearchTarget(),
                           SUPPORTS)
    assert any(c.memory_fraction > 0.6 for c in free.top)  # the cap below has something to remove
    capped = search_job_size(model, cluster, LLAMA_TRAIN, 256, Objective.THROUGHPUT, 50, CONSTANTS,
                             SearchTarget(max_memory_fraction=0.6), SUPPORTS)
    assert capped.top and all(c.memory_fraction <= 0.6 for c in capped.top)


@pytest.mark.parametrize("framework", [Framework.ANY, Framework.MEGATRON_CORE])
def test_roomier_alternative_is_the_best_layout_under_the_headroom_cap(framework: Framework) -> None:
    # Definition (catalog/plan.yaml headroom_*): the best layout needing ≤ best's share − margin, listed only when
    # it is within tolerance of the best. The same search capped at that share must find it.
    model, cluster = load_model("llama3-70b"), load_cluster("eos-h100", num_gpus=512)
    train = TrainSpec(seq_len=4096, global_batch=7168)

    def search(cap: float = 1.0):
        return search_job_size(model, cluster, train, 512, Objective.THROUGHPUT, 5, CONSTANTS,
                               SearchTarget(framework, max_memory_fraction=cap), SUPPORTS)

    def rate(c) -> float:
        return float(c.step.tokens_per_s_per_gpu[c.layout_index])

    free = search()
    best = free.top[0]
    under = search(best.memory_fraction - CONSTANTS.search.headroom_margin)
    close = bool(under.top) and rate(under.top[0]) >= (1 - CONSTANTS.search.headroom_tolerance) * rate(best)
    assert (free.roomier is not None) == close
    if free.roomier is not None:
        spare = free.roomier
        assert spare.layouts.row(spare.layout_index) == under.top[0].layouts.row(under.top[0].layout_index)


def test_objective_time_picks_the_size_that_trains_one_model_soonest() -> None:
    model, cluster = load_model("llama3-8b"), load_cluster("eos-h100", num_gpus=1024)
    train = TrainSpec(seq_len=4096, global_batch=1024, total_tokens=1e12)
    result = plan(model, cluster, train, CONSTANTS, SUPPORTS, objective=Objective.TIME_TO_TRAIN, top=1)
    days = {s.num_gpus: s.top[0].days for s in result.sizes if s.top}
    assert result.gpus_per_job == min(days, key=lambda g: days[g])
    by_rate = plan(model, cluster, train, CONSTANTS, SUPPORTS, objective=Objective.THROUGHPUT, top=1)
    assert days[result.gpus_per_job] <= days[by_rate.gpus_per_job]


def test_plan_cli_rules_framework_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_cli_json(capsys, "plan", "--model", "llama3-70b", "--cluster", "eos-h100", "--gpus", "256", "--gbs",
                       "512", "--tp", "8", "--pp", "2..8", "--framework", "megatron-core")
    # `--framework megatron-core` is Megatron-LM's own defaults (its newest catalogued release) on its engine.
    assert doc["framework"]["name"] == "megatron-core" and doc["framework"]["release"].startswith("megatron-core@")
    assert doc["framework"]["checked"].endswith("on megatron-core @ d98e8a6")
    assert doc["framework"]["rules"] == {"tp": "8", "pp": "2..8"}
    for entry in doc["top"]:
        assert entry["layout"]["tp"] == 8 and 2 <= entry["layout"]["pp"] <= 8
        assert "megatron-core" in entry["frameworks"]
    code, _, err = run_cli(capsys, "plan", "--model", "llama3-70b", "--cluster", "eos-h100", "--gpus", "256",
                           "--schedule", "zbv")
    assert code == 2 and err.startswith("error: --schedule") and "megatron-core" in err


def test_plan_says_none_valid_apart_from_none_fits(capsys: pytest.CaptureFixture[str]) -> None:
    # 3 does not divide 256 GPUs' tp·cp·pp: no valid layout at all — not "nothing fits in memory".
    _, out, _ = run_cli(capsys, "plan", "--model", "llama3-70b", "--cluster", "eos-h100", "--gpus", "256", "--tp", "3")
    assert "no valid layout" in out and "fits in memory" not in out
    _, out, _ = run_cli(capsys, "plan", "--model", "llama3-70b", "--cluster", "eos-h100", "--gpus", "8", "--tp", "1",
                        "--pp", "1")
    assert "no layout fits in memory" in out


def test_no_rules_is_empty() -> None:
    assert not LayoutRules.none() and parse_rules({"tp": None}).rules == {}


def test_explain_says_which_framework_runs_the_layout(capsys: pytest.CaptureFixture[str]) -> None:
    base = ("explain", "--model", "llama3-70b", "--cluster", "eos-h100", "--gpus", "512", "--tp", "8", "--pp", "4")
    # 1F1B with ZeRO-1 over four stages: Megatron's distributed optimizer, or torchtitan's FSDP2 under pipelining.
    assert run_cli_json(capsys, *base)["frameworks"] == ["megatron-core", "torchtitan"]
    # ZB-V over FSDP2 stages (ZeRO-1 under torch pipelining): torchtitan's ZBVZeroBubble; Megatron-Core has no
    # zero-bubble schedule.
    assert run_cli_json(capsys, *base, "--schedule", "zbv")["frameworks"] == ["torchtitan"]
    assert run_cli_json(capsys, *base, "--schedule", "zbv", "--zero", "3")["frameworks"] == []  # ZeRO-3 over stages


def test_a_dense_model_keeps_tensor_parallel_on_torchtitan() -> None:
    # etp (experts' tensor parallelism) binds only MoE models: a dense model's etp is its tp (Megatron's default),
    # and torchtitan's "no expert TP" must not strip TP from a dense search.
    lay = _space(SearchTarget(Framework.TORCHTITAN)).layouts
    assert lay.size > 0 and {1, 2, 4, 8} <= set(np.unique(lay.tp))


@pytest.mark.parametrize(("name", "text"), [("pp", "0"), ("zero", "7"), ("mbs", "0"), ("tp", "-2"), ("pp", "0.."),
                                            ("dp", "0"), ("offload_activations", "-1")])
def test_a_rule_outside_the_fields_bounds_is_refused(name: str, text: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_rule(name, text)
    assert text in str(err.value)


def test_a_rule_the_framework_cannot_meet_as_a_range_is_refused() -> None:
    with pytest.raises(SpecError, match="torchtitan @"):  # no activation offload in torchtitan (frameworks.yaml)
        SearchTarget(Framework.TORCHTITAN, parse_rules({"offload_activations": "1..4"})).check(SUPPORTS)
    SearchTarget(Framework.TORCHTITAN, parse_rules({"offload_activations": "0..4"})).check(SUPPORTS)  # 0 is left


def test_expert_fields_are_refused_for_a_dense_model() -> None:
    with pytest.raises(SpecError, match="mixture-of-experts models only"):
        SearchTarget(rules=parse_rules({"etp": "1"})).check(SUPPORTS, moe=False)
    SearchTarget(rules=parse_rules({"etp": "1"})).check(SUPPORTS, moe=True)


def test_the_other_rank_order_alone_keeps_layouts_without_a_pipeline() -> None:
    # With only tp-cp-ep-pp-dp asked for, pp = 1 layouts are not duplicates of a default-order row: they stay.
    lay = _space(SearchTarget(rules=parse_rules({"rank_order": "tp-cp-ep-pp-dp"}))).layouts
    assert (lay.pp == 1).any() and np.all(lay.rank_order == 1)


def test_module_recomputes_can_be_chosen_one_by_one() -> None:
    dense = _space(SearchTarget(rules=parse_rules({"recompute_norm": "on"}))).layouts  # a dense model's norms
    assert dense.size > 0 and dense.recompute_norm.all()
    moe = _space(SearchTarget(rules=parse_rules({"recompute_moe_act": "on", "recompute_norm": "off"})),
                 model=load_model("mixtral-8x7b"), train=LLAMA_TRAIN).layouts
    assert moe.size > 0 and moe.recompute_moe_act.all() and not moe.recompute_norm.any()


def test_zero_stages_with_and_without_a_pipeline_follow_the_framework() -> None:
    # torch 2.13 pipelining/stage.py keeps FSDP2 weights and gradients unsharded across micro-batches: over pipeline
    # stages torchtitan runs ZeRO-1, not 2/3 (frameworks.yaml); Megatron-FSDP over stages is not verified.
    for framework in (Framework.TORCHTITAN, Framework.MEGATRON_CORE):
        deep = _space(SearchTarget(framework, parse_rules({"pp": "2..", "zero": "2,3"}))).layouts
        assert deep.size == 0, framework
    titan = _space(SearchTarget(Framework.TORCHTITAN, parse_rules({"pp": "2..", "zero": "1"}))).layouts
    assert titan.size > 0
    from llmscale.search.targets import runnable_by
    assert all(Framework.TORCHTITAN in fws for fws in runnable_by(titan, SUPPORTS, moe=False))


def test_roomier_alternative_under_effective_time_is_roomier_than_the_reranked_best() -> None:
    model, cluster = load_model("llama3-70b"), load_cluster("eos-h100", num_gpus=512)
    result = search_job_size(model, cluster, TrainSpec(seq_len=4096, global_batch=7168), 512,
                             Objective.EFFECTIVE_TIME, 5, CONSTANTS, SearchTarget(Framework.ANY), SUPPORTS)
    best, spare = result.top[0], result.roomier
    if spare is not None:
        assert spare is not best and spare.memory_fraction <= best.memory_fraction - CONSTANTS.search.headroom_margin


def test_plan_table_says_none_valid_and_why_a_given_size(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_cli(capsys, "plan", "--model", "llama3-70b", "--cluster", "eos-h100", "--gpus", "256", "--tp", "3")
    assert "none valid" in out and "none fits" not in out
    _, out, _ = run_cli(capsys, "plan", "--model", "llama3-8b", "--cluster", "eos-h100", "--gpus", "64",
                        "--objective", "time")
    assert "the job size given" in out


def test_the_search_estimates_its_work_exactly_and_refuses_past_the_limit(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 14 item 5: the search states its work up front. The estimate is the number generate() builds.
    from llmscale.layout.space import candidate_count
    target = SearchTarget(Framework.MEGATRON_CORE)
    cluster = load_cluster("eos-h100", num_gpus=64)
    assert candidate_count(TINY, cluster, TINY_TRAIN, 64, target.space_options(SUPPORTS, False)) == _space(
        target).generated
    import llmscale.search.plan as search_plan
    monkeypatch.setattr(search_plan, "MAX_SEARCH_CANDIDATES", 1000)  # the mechanism, at a small limit
    base = ("plan", "--model", "llama3-8b", "--cluster", "eos-h100", "--gpus", "64")
    code, _, err = run_cli(capsys, *base)
    assert code == 2 and err.startswith("error: search = ") and "--force" in err
    code, _, _ = run_cli(capsys, *base, "--force")
    assert code == 0
