"""`llmscale allocate`: the shape rules of the candidate families, the three-step deduction per candidate (tokens
from throughput × the reliability model's goodput × deadline, the batch under the critical batch, the law's loss),
the ranking, the "3× compute" decomposition (its goodput lever from the reliability model, checked against Kokolis et
al.), the pure compute-optimal answer, and the CLI (JSON keys, HTML, exit code 2)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import typer

from llmscale.cli.allocate_cmd import resolve_law
from llmscale.cli.main import app, main
from llmscale.cost.params import count_params
from llmscale.cost.step import estimate_step
from llmscale.errors import SpecError
from llmscale.io.catalog import failure_profile, load_cluster, load_constants, load_model
from llmscale.layout.arrays import Layouts
from llmscale.reliability.estimate import layout_goodput
from llmscale.reliability.rates import failures_of
from llmscale.scaling.allocate import (
    SEARCH_SPACE,
    JobPolicy,
    Request,
    allocate,
    choose_job,
    effective_rate,
    evaluate,
    job_rate,
    size_goodput,
)
from llmscale.scaling.family import Family, FamilyOptions, candidates, dense_model, moe_model
from llmscale.scaling.laws import ModelScale, ScalingLaw, predict_loss, training_flops
from llmscale.scaling.multiplier import decompose, hourly_sync_goodput
from llmscale.search.plan import Objective, critical_batch_sequences, plan
from llmscale.search.targets import SearchTarget
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.failures import FailureSpec
from llmscale.specs.framework import Framework
from llmscale.specs.train import TrainSpec
from llmscale.units import SECONDS_PER_DAY
from tests.conftest import make_cluster
from tests.test_cli_errors import assert_one_line, run_inprocess

CONSTANTS = load_constants()
ANY_SPACE = SearchTarget(Framework.ANY, space=SEARCH_SPACE)
"""allocate's pruned space, bounded by no framework (as scaling.allocate searches it)."""

SMALL = FamilyOptions(dense_layers=(16, 24), moe_layers=(16,), expansions=(16,))


def small_cluster(num_gpus: int = 512):  # type: ignore[no-untyped-def]
    return make_cluster(num_gpus=num_gpus).model_copy(update={"usd_per_gpu_hour": 2.0})


def with_failures(cluster: ClusterSpec, profile: str | None = None, scale: float = 1.0) -> ClusterSpec:
    """`cluster` on a catalog failure profile (default: its own), every cause's rate × `scale`."""
    spec = FailureSpec.model_validate(failure_profile(profile)) if profile else failures_of(cluster, CONSTANTS.failures)
    causes = tuple(c.model_copy(update={"per_year": c.per_year * scale}) for c in spec.causes)
    return cluster.model_copy(update={"failures": spec.model_copy(update={"causes": causes})})


# --------------------------------------------------------------------------------------------------
# family.py
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layers", [32, 80, 126, 192])
def test_dense_rule_keeps_llama_proportions(layers: int) -> None:
    model = dense_model(layers)
    assert model.hidden % 1024 == 0 and 100 <= model.hidden / layers <= 140  # h/L ≈ 128 (Llama 3, GPT-3)
    assert model.dim_per_head == 128 and model.num_kv_heads == 8
    assert model.heads % 8 == 0  # tp ≤ 8 divides heads and kv_heads
    assert model.ffn_hidden % 512 == 0 and abs(model.ffn_hidden / model.hidden - 3.5) < 0.1


def test_dense_rule_reproduces_llama3_8b_shape() -> None:
    # Llama 3 8B: 32 layers, h 4096, 32 heads, 8 KV heads, f 14336, vocab 128256 (catalog llama3-8b).
    rule, llama = dense_model(32), load_model("llama3-8b")
    for field in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab"):
        assert getattr(rule, field) == getattr(llama, field)


def test_moe_rule_keeps_active_ffn_of_the_backbone() -> None:
    # Krajewski granularity: G experts of size f/G hold as many weights as the dense MLP.
    model, base = moe_model(64, granularity=8, expansion=16, shared_experts=1), dense_model(64)
    assert model.name == "moe-L64-e128k8" and moe_model(64, shared_experts=0).name == "moe-L64-e512k8s0"
    assert model.experts == 128 and model.top_k == 8 and model.shared_experts == 1
    assert model.expert_ffn_hidden * 8 == base.ffn_hidden
    scale = ModelScale.of(model)
    assert scale.granularity == 8 and scale.expansion == 16
    counts, dense = count_params(model), count_params(base)
    # Active = backbone + one shared expert (f/8 more MLP) + router.
    assert counts.active == pytest.approx(dense.total * 1.0 + 64 * 3 * model.hidden * model.expert_ffn_hidden
                                          + 64 * model.hidden * 128, rel=1e-9)


def test_candidates_by_family_and_extra_models_once() -> None:
    both = candidates(Family.BOTH, ("seed-10t-moe", "seed-10t-moe"), SMALL)
    assert [m.name for m in both] == ["dense-L16", "dense-L24", "moe-L16-e128k8", "seed-10t-moe"]
    assert all(not m.is_moe for m in candidates(Family.DENSE, (), SMALL))
    assert all(m.is_moe for m in candidates(Family.MOE, (), SMALL))


# --------------------------------------------------------------------------------------------------
# allocate.py
# --------------------------------------------------------------------------------------------------


def test_evaluate_turns_throughput_into_tokens_and_loss() -> None:
    cluster = small_cluster()
    request = Request(cluster, ScalingLaw.BESIROGLU, CONSTANTS, days=10.0)
    model = dense_model(16)
    o = evaluate(model, request)
    assert o.feasible and o.layout is not None and o.reliability is not None
    # D = tokens/s · goodput · deadline, the goodput the reliability model's (failures make it < 1).
    assert 0 < o.goodput < 1
    assert o.tokens == pytest.approx(o.tokens_per_s * o.goodput * 10 * SECONDS_PER_DAY)
    assert o.global_batch <= o.critical_batch
    assert o.critical_batch == critical_batch_sequences(model, TrainSpec(total_tokens=o.tokens), CONSTANTS.search)
    assert o.compute_flops == pytest.approx(6 * o.scale.total_params * o.tokens)
    assert o.loss == pytest.approx(predict_loss(ScalingLaw.BESIROGLU, o.scale, o.tokens))
    assert o.compute_efficiency <= 1.0 + 1e-9  # no dense model beats the law's own dense frontier
    assert o.cost_usd == pytest.approx(o.gpus_per_job * 10 * 24 * 2.0)  # the job holds its GPUs all 10 days
    assert o.concurrent_jobs == cluster.num_gpus // o.gpus_per_job


def test_flop_budget_fixes_tokens_and_gives_days() -> None:
    request = Request(small_cluster(), ScalingLaw.BESIROGLU, CONSTANTS, days=None, flops=1e21)
    o = evaluate(dense_model(16), request)
    assert o.tokens == pytest.approx(1e21 / training_flops(ScalingLaw.BESIROGLU, o.scale, 1.0))
    assert o.days == pytest.approx(o.tokens / (o.tokens_per_s * o.goodput) / SECONDS_PER_DAY)
    assert o.passes == 1  # tokens do not depend on throughput: one search


def test_goodput_is_the_reliability_models_for_the_chosen_layout() -> None:
    # The candidate's goodput is resilience.layout_goodput's best policy for its own layout, GPUs and step time,
    # recomputed here from the layout alone.
    cluster, model = small_cluster(), dense_model(16)
    o = evaluate(model, Request(cluster, ScalingLaw.BESIROGLU, CONSTANTS, days=10.0))
    assert o.layout is not None
    train = TrainSpec(total_tokens=o.tokens, global_batch=o.global_batch)
    lay = Layouts.from_layout(o.layout, o.gpus_per_job)
    job_cluster = cluster.model_copy(update={"num_gpus": o.gpus_per_job})
    step = estimate_step(model, job_cluster, train, lay, CONSTANTS)
    est = layout_goodput(model, job_cluster, train, lay, step.step_time_s, CONSTANTS, cluster_gpus=cluster.num_gpus)
    assert o.goodput == pytest.approx(float(est.goodput[0]), rel=1e-6)
    assert o.reliability is not None and o.reliability.policy is est.best_policy[0]


def test_more_failures_mean_less_goodput_and_fewer_tokens() -> None:
    # Same cluster, every failure cause 20× as frequent: the job loses more work and trains fewer tokens.
    cluster, model = small_cluster(), dense_model(16)
    calm = evaluate(model, Request(with_failures(cluster), ScalingLaw.BESIROGLU, CONSTANTS, days=10.0, gpus=256))
    stormy = evaluate(model, Request(with_failures(cluster, scale=20.0), ScalingLaw.BESIROGLU, CONSTANTS, days=10.0,
                                     gpus=256))
    assert stormy.goodput < calm.goodput
    assert stormy.tokens < calm.tokens and stormy.loss > calm.loss


def test_llama3_405b_goodput_above_90_percent() -> None:
    # Llama 3 (arXiv:2407.21783 §3.3.4): 'higher than 90% effective training time' for 405B on 16,384 H100s over
    # 54 days, the run the default failure profile (catalog/failures.yaml llama3-h100) is derived from.
    request = Request(load_cluster("llama3-16k"), ScalingLaw.BESIROGLU, CONSTANTS, days=54.0, gpus=16_384)
    o = evaluate(load_model("llama3-405b"), request)
    assert o.feasible and 0.90 < o.goodput < 1.0


def test_a_model_that_fits_nowhere_is_infeasible_and_ranked_last() -> None:
    cluster = small_cluster(64)
    request = Request(cluster, ScalingLaw.KRAJEWSKI, CONSTANTS, days=5)
    result = allocate([dense_model(16), load_model("seed-10t-moe")], request)
    assert [o.model.name for o in result.outcomes] == ["dense-L16", "seed-10t-moe"]
    last = result.outcomes[-1]
    assert not last.feasible and last.problems == ("no layout fits in memory",) and math.isinf(last.loss)


def test_ranking_is_by_predicted_loss() -> None:
    request = Request(small_cluster(), ScalingLaw.KRAJEWSKI, CONSTANTS, days=20)
    result = allocate(candidates(Family.BOTH, (), SMALL), request)
    losses = [o.loss for o in result.outcomes if o.feasible]
    assert losses == sorted(losses) and result.best is result.outcomes[0]
    assert set(result.frontier) == {"dense", "moe"}  # both families → both frontiers


def test_unique_token_limit_costs_loss() -> None:
    cluster, model = small_cluster(), dense_model(16)
    free = evaluate(model, Request(cluster, ScalingLaw.BESIROGLU, CONSTANTS, days=20))
    limited = evaluate(model, Request(cluster, ScalingLaw.BESIROGLU, CONSTANTS, days=20, unique_tokens=free.tokens / 8))
    assert limited.tokens == pytest.approx(free.tokens, rel=1e-9)  # same run, same tokens …
    assert limited.loss > free.loss and limited.epochs == pytest.approx(8.0)  # … but 8 epochs are worth ~6.6


def test_fastest_policy_takes_the_smallest_job_within_slack_of_the_most_tokens() -> None:
    model, cluster = dense_model(16), small_cluster(1024)
    train = TrainSpec(total_tokens=1e11)
    train = train.model_copy(update={"global_batch": critical_batch_sequences(model, train, CONSTANTS.search)})
    result = plan(model, cluster, train, CONSTANTS, objective=Objective.EFFECTIVE_TIME, top=1, target=ANY_SPACE)
    fastest = choose_job(result.sizes, JobPolicy.FASTEST, result.gpus_per_job)
    efficient = choose_job(result.sizes, JobPolicy.EFFICIENT, result.gpus_per_job)
    assert fastest is not None and efficient is not None
    # "Fastest" is tokens per second of wall time: throughput × goodput.
    best_rate = max(effective_rate(s) for s in result.sizes if s.top)
    assert effective_rate(fastest) >= 0.98 * best_rate
    assert all(effective_rate(s) < 0.98 * best_rate
               for s in result.sizes if s.top and s.num_gpus < fastest.num_gpus)
    assert efficient.num_gpus == result.gpus_per_job


def test_goodput_falls_with_job_size() -> None:
    # More GPUs and nodes, more interruptions (a series system: every component's failure rate adds): each
    # doubling of the job can only lower the best layout's goodput on the same cluster.
    model, cluster = dense_model(16), small_cluster(1024)
    train = TrainSpec(total_tokens=1e11)
    train = train.model_copy(update={"global_batch": critical_batch_sequences(model, train, CONSTANTS.search)})
    result = plan(model, cluster, train, CONSTANTS, objective=Objective.EFFECTIVE_TIME, top=1, target=ANY_SPACE)
    goodputs = [size_goodput(s) for s in result.sizes if s.top]
    assert len(goodputs) >= 3 and goodputs == sorted(goodputs, reverse=True)


def test_pruned_space_loses_little_against_the_whole_space() -> None:
    # allocate.py's claim: the pruned space's best tokens/s stays within a few percent of the whole space's.
    from llmscale.search.plan import Objective, search_job_size

    cluster = load_cluster("llama3-16k")
    for model in (load_model("llama3-70b"), load_model("mixtral-8x7b")):
        train = TrainSpec(total_tokens=15e12)
        train = train.model_copy(update={"global_batch": critical_batch_sequences(model, train, CONSTANTS.search)})
        pruned = search_job_size(model, cluster, train, 2048, Objective.THROUGHPUT, 1, CONSTANTS, ANY_SPACE)
        whole = search_job_size(model, cluster, train, 2048, Objective.THROUGHPUT, 1, CONSTANTS)
        assert job_rate(pruned) >= 0.95 * job_rate(whole)


@pytest.mark.parametrize(("fields", "why"), [
    ({"days": 90.0, "flops": 1e25}, "exactly one"),  # a deadline and a budget cannot both bind
    ({"days": None}, "exactly one"),  # neither: nothing to allocate
    ({"days": -3.0}, "positive"),  # negative time
    ({"unique_tokens": 0.0}, "positive"),  # no data at all
    ({"gpus": 10**7}, "must be in 1.."),  # more GPUs than the cluster has
])
def test_request_rejects_bad_budgets(fields: dict[str, object], why: str) -> None:
    with pytest.raises(SpecError, match=why):
        Request(small_cluster(), ScalingLaw.KRAJEWSKI, CONSTANTS, **fields)  # type: ignore[arg-type]


def test_law_and_family_resolution() -> None:
    assert resolve_law(None, None, pure=False) == (Family.BOTH, ScalingLaw.KRAJEWSKI)
    assert resolve_law(None, None, pure=True) == (Family.DENSE, ScalingLaw.BESIROGLU)
    assert resolve_law(None, ScalingLaw.CHINCHILLA, pure=False) == (Family.DENSE, ScalingLaw.CHINCHILLA)
    assert resolve_law(Family.MOE, None, pure=False) == (Family.MOE, ScalingLaw.KRAJEWSKI)
    with pytest.raises(SpecError, match="no mixture-of-experts term"):
        resolve_law(Family.BOTH, ScalingLaw.BESIROGLU, pure=False)  # Chinchilla-form laws cannot score an MoE


# --------------------------------------------------------------------------------------------------
# multiplier.py
# --------------------------------------------------------------------------------------------------


def test_three_x_decomposition_multiplies_its_factors() -> None:
    d = decompose(load_model("mixtral-8x7b"), load_cluster("llama3-16k"), 2e12, CONSTANTS)
    assert d is not None
    gains = {f.name: f.gain for f in d.factors}
    assert set(gains) == {"layout (MFU)", "FP8", "goodput", "batch / job size"}
    assert math.prod(gains.values()) == pytest.approx(d.product)
    goodput = next(f for f in d.factors if f.name == "goodput")
    # The baseline is one job of the largest size checkpointing hourly: no better than the planned (smaller) job
    # at its best policy, which includes hourly synchronous checkpoints among its choices.
    assert 0 < goodput.baseline <= goodput.planned <= 1
    assert gains["layout (MFU)"] >= 1.0  # the whole space contains the rule-of-thumb layouts
    assert gains["batch / job size"] >= 1.0  # plan's job size has the best per-GPU throughput within 10%
    assert d.largest_job >= d.gpus_per_job


@pytest.mark.parametrize("model_name", ["llama3-70b", "mixtral-8x7b"])
def test_hourly_sync_baseline_reproduces_kokolis(model_name: str) -> None:
    # Kokolis et al. (HPCA'25, arXiv:2410.21680): E[ETTR] ≈ 0.7 for a 16k-GPU job checkpointing every 60
    # minutes at RSC-1's failure rate (catalog/failures.yaml meta-rsc1), 5-minute restarts; issue 5 asks within
    # 0.03. The goodput lever's baseline is that setting, so the model must reproduce it on such a job.
    cluster = with_failures(load_cluster("llama3-16k"), "meta-rsc1")
    model = load_model(model_name)
    train = TrainSpec(total_tokens=2e12)
    train = train.model_copy(update={"global_batch": critical_batch_sequences(model, train, CONSTANTS.search)})
    size = plan(model, cluster, train, CONSTANTS, gpus=16_384, top=1, target=ANY_SPACE).chosen
    assert hourly_sync_goodput(model, cluster, train, size, CONSTANTS) == pytest.approx(0.70, abs=0.03)
    # The best policy does better.
    assert size_goodput(size) > hourly_sync_goodput(model, cluster, train, size, CONSTANTS)


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """The `allocate --json` document; main() always leaves through SystemExit (0 on success)."""
    with pytest.raises(SystemExit) as info:
        main(["allocate", *args, "--json"])
    assert info.value.code in (None, 0), capsys.readouterr().err
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def test_cli_pure_compute_optimal_is_besiroglu(capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 6: "1e25 FLOPs → ≈312B params, ≈5.33T tokens": Hoffmann et al. 2022 Eq. 4 closed form (C = 6ND)
    # evaluated with Besiroglu et al. 2024's refit constants (arXiv:2404.10102).
    doc = run_json(capsys, "--flops", "1e25")
    opt = doc["compute_optimal"]
    assert doc["law"] == "besiroglu"
    assert abs(opt["params"] / 312e9 - 1) < 0.02 and abs(opt["tokens"] / 5.33e12 - 1) < 0.02


def test_cli_pure_krajewski_moe_matches_table_2(capsys: pytest.CaptureFixture[str]) -> None:
    # Krajewski et al. 2024 Table 2 row 64×300B: 2.96T tokens, G = 64 at 5.69e24 FLOPs.
    doc = run_json(capsys, "--flops", "5.69e24", "--law", "krajewski")
    moe = doc["by_family"]["moe"]
    assert abs(moe["active_params"] / 300e9 - 1) < 0.05 and moe["granularity"] == 64
    assert doc["compute_optimal"] == moe  # the MoE optimum has the lower loss


def test_cli_allocate_json_and_html(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    page = tmp_path / "allocate.html"
    doc = run_json(capsys, "--cluster", "selene", "--days", "10", "--family", "dense", "--html", str(page))
    for key in ("input_sha256", "candidates", "recommendation", "recommendation_at_ladder_edge", "compute_optimal",
                "frontier", "goodput", "law"):
        assert key in doc
    entry = doc["candidates"][0]
    for key in ("model", "total_params", "active_params", "tokens", "layout", "gpus_per_job", "concurrent_jobs",
                "days", "loss", "compute_efficiency", "cost_usd", "energy_j", "feasible", "goodput",
                "checkpoint_policy", "checkpoint_interval_min", "job_mtbf_hours"):
        assert key in entry
    assert doc["goodput"]["failure_profile"] == "llama3-h100"  # Selene names no profile: the catalog default
    assert all(0 < e["goodput"] < 1 for e in doc["candidates"] if e["feasible"])
    html = page.read_text(encoding="utf-8")
    assert "<svg" in html and "<script" not in html and "http" not in html.split("<body>")[1]
    width, height = (float(v) for v in re.search(r'<svg width="([\d.]+)" height="([\d.]+)"', html).groups())  # type: ignore[union-attr]
    for cx, cy in re.findall(r'<circle cx="([\d.-]+)" cy="([\d.-]+)"', html):
        assert 0 <= float(cx) <= width and 0 <= float(cy) <= height  # every point on the chart


def test_cli_default_answers_the_seed_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    # The scenario: 500k GPUs × 90 days, is seed-10t-moe a good use, and what is the 3× made of.
    # (Its run time, ~13 s on two cores, is a benchmark figure, not asserted here: a shared machine made it flaky.)
    doc = run_json(capsys, "--explain-3x")
    assert doc["cluster"] == "seed-500k" and doc["days"] == 90 and doc["law"] == "krajewski"
    compared = doc["compared"][0]
    assert compared["model"] == "seed-10t-moe" and compared["loss_gap"] >= 0
    three = doc["compute_3x"]
    assert three["product"] == pytest.approx(math.prod(f["gain"] for f in three["factors"]))
    # Hourly checkpoints lose too much at this scale (Kokolis et al., arXiv:2410.21680: E[ETTR] ≈ 0.7 already at
    # 16k GPUs) — the one big job checkpointing hourly keeps less goodput than plan's job at its best policy.
    goodput = next(f for f in three["factors"] if f["name"] == "goodput")
    assert goodput["baseline"] < goodput["planned"] <= 1
    # Every candidate's tokens are throughput × its own goodput × the deadline.
    for e in doc["candidates"]:
        if e["feasible"]:
            assert e["tokens"] == pytest.approx(e["tokens_per_s"] * e["goodput"] * 90 * SECONDS_PER_DAY)


@pytest.mark.parametrize(("args", "needle"), [
    (["--days", "90", "--flops", "1e25"], "not both"),  # a deadline and a budget cannot both bind
    (["--law", "chinchilla", "--family", "moe"], "no mixture-of-experts term"),  # Chinchilla has no MoE term
    (["--cluster", "selene", "--days", "-1"], "days"),  # negative deadline
    (["--cluster", "selene", "--days", "0"], "days"),  # no time at all
    (["--cluster", "selene", "--unique-tokens", "0"], "unique_tokens"),  # no data
    (["--cluster", "selene", "--gpus", "100000"], "gpus"),  # more GPUs than Selene's 3072
    (["--flops", "1e25", "--html", "x.html"], "need a cluster"),  # the pure answer has no chart to draw
    (["--flops", "-5"], "flops"),  # negative budget
    (["--cluster", "no-such-cluster"], "no-such-cluster"),  # unknown catalog name
])
def test_cli_bad_input_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], args: list[str],
                                             needle: str) -> None:
    code, stderr = run_inprocess(capsys, "allocate", *args)
    assert_one_line(code, stderr, needle)


def test_allocate_flags_are_frozen() -> None:
    # Renaming or dropping a flag breaks every script that uses it: change this set on purpose.
    command = typer.main.get_command(app)
    assert isinstance(command, typer.core.TyperGroup)
    params = command.commands["allocate"].params
    flags = {opt for param in params for opt in (*param.opts, *param.secondary_opts)}
    assert flags == {
        "--cluster", "-c", "--gpus", "--days", "--flops", "--family", "--law", "--max-tokens", "--unique-tokens",
        "--model", "-m",
        "--precision", "--seq-len", "--job-size", "--top", "--explain-3x", "--json", "--html",
            "--calibration", "--expect-sha256",
    }
