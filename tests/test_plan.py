"""Layout space and whole-space search: every generated layout is valid, the rejection counts add up, a tiny
space matches a hand enumeration, the search's best is the fastest feasible layout, objectives agree where
they must, the job size follows the scaling floor, the critical batch reproduces DeepSeek LLM's batch-size law, and
`llmscale plan` has the JSON keys and exit codes the issue asks for."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmscale.cli.main import main
from llmscale.cost.params import count_params
from llmscale.cost.step import estimate_step
from llmscale.io.catalog import load_cluster, load_constants, load_model
from llmscale.layout.rules import Reason, check
from llmscale.layout.space import Space, SpaceOptions, generate
from llmscale.search.plan import Objective, critical_batch_sequences, plan, search_job_size
from llmscale.search.targets import SearchTarget
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.framework import Framework
from llmscale.specs.layout import RankOrder, Recompute, Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec
from tests.conftest import make_cluster

CONSTANTS = load_constants()

# A dense toy: 4 layers, 8 heads (tp ∈ {1, 2, 4, 8} all divide the heads), on one 8-GPU node.
TINY = ModelSpec(name="tiny", layers=4, hidden=512, ffn_hidden=2048, heads=8, vocab=32000)
TINY_TRAIN = TrainSpec(seq_len=2048, global_batch=8)
# GPT-3 175B on Selene with the batch of Narayanan et al. 2021 (arXiv:2104.04473) Table 2.
GPT3_TRAIN = TrainSpec(seq_len=2048, global_batch=1536)


def gpt3() -> tuple[ModelSpec, ClusterSpec]:
    return load_model("gpt3-175b"), load_cluster("selene", num_gpus=1536)


def _cases() -> list[tuple[str, ModelSpec, ClusterSpec, TrainSpec, int]]:
    return [
        ("tiny-8", TINY, make_cluster(num_gpus=8), TINY_TRAIN, 8),
        ("gpt3-1536", *gpt3(), GPT3_TRAIN, 1536),
        ("moe-4096", load_model("seed-10t-moe"), load_cluster("seed-500k", num_gpus=4096), TrainSpec(), 4096),
    ]


CASES = {name: (model, cluster, train, gpus) for name, model, cluster, train, gpus in _cases()}


def _space(name: str) -> Space:
    model, cluster, train, gpus = CASES[name]
    return generate(model, cluster, train, gpus)


@pytest.mark.parametrize("name", list(CASES))
def test_every_generated_layout_passes_the_rules_and_fills_the_gpus(name: str) -> None:
    model, _, train, gpus = CASES[name]
    lay = _space(name).layouts
    assert lay.size > 0
    assert np.all(check(model, train, gpus, lay) == Reason.OK)
    assert np.all(lay.tp * lay.cp * lay.pp * lay.dp == gpus)
    # generate prunes what no framework runs: pipelined schedules without a pipeline, ZeRO-3 with pipelining.
    assert np.all((lay.pp > 1) | (lay.schedule == Schedule.ONE_F_ONE_B.code))
    assert not np.any((lay.zero >= 2) & (lay.pp > 1))


@pytest.mark.parametrize("name", list(CASES))
def test_rejections_plus_valid_equal_generated(name: str) -> None:
    space = _space(name)
    # On 8 GPUs tp·pp ∈ {16, 32} (tp 4·pp 4, tp 8·pp 2, tp 8·pp 4) leaves no whole dp: those candidates are built
    # but never reach `check`, and must still be counted (as GPU_COUNT).
    if name == "tiny-8":
        assert space.rejected.get(Reason.GPU_COUNT, 0) > 0
    assert Reason.OK not in space.rejected
    assert all(n > 0 for n in space.rejected.values())
    assert sum(space.rejected.values()) + space.layouts.size == space.generated


def test_tiny_space_matches_hand_enumeration() -> None:
    # 8 GPUs, 4 layers, global batch 8, mbs 1; schedules 1F1B and interleaved only.
    # tp ∈ {1, 2, 4, 8} (divides 8 heads, ≤ the 8-GPU NVLink domain), pp ∈ {1, 2, 4} (divides 8, ≤ 4 layers),
    # dp = 8 / (tp·pp) when whole. 1F1B (vpp 1): every (tp, pp) with tp·pp | 8 — 9 layouts.
    # Interleaved needs vpp > 1, pp > 1 and pp·vpp ≤ 4 layers, so only pp 2 · vpp 2; its 8 / dp micro-batches
    # must be a multiple of pp = 2: dp ∈ {4, 2, 1} all give 2, 4, 8 micro-batches — 3 layouts.
    one_f_one_b = [(1, 1, 8), (1, 2, 4), (1, 4, 2), (2, 1, 4), (2, 2, 2), (2, 4, 1), (4, 1, 2), (4, 2, 1), (8, 1, 1)]
    interleaved = [(1, 2, 4), (2, 2, 2), (4, 2, 1)]
    expected = {(tp, pp, dp, 1, "1f1b") for tp, pp, dp in one_f_one_b}
    expected |= {(tp, pp, dp, 2, "interleaved") for tp, pp, dp in interleaved}
    opts = SpaceOptions(mbs=(1,), zero=(1,), recompute=(Recompute.NONE,),
                        schedules=(Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED))
    lay = generate(TINY, make_cluster(num_gpus=8), TINY_TRAIN, 8, opts).layouts
    names = [s.value for s in Schedule]
    got = [(int(lay.tp[i]), int(lay.pp[i]), int(lay.dp[i]), int(lay.vpp[i]), names[int(lay.schedule[i])])
           for i in range(lay.size)]
    assert len(got) == len(set(got)), "duplicate layouts"
    assert set(got) == expected


def test_best_layout_has_the_most_tokens_per_s_among_feasible() -> None:
    model, cluster = gpt3()
    result = search_job_size(model, cluster, GPT3_TRAIN, 1536, Objective.THROUGHPUT, 5, CONSTANTS)
    space = generate(model, cluster, GPT3_TRAIN, 1536, SearchTarget(Framework.ANY).space_options({}, model.is_moe))
    step = estimate_step(model, cluster, GPT3_TRAIN, space.layouts, CONSTANTS)
    fastest = float(step.tokens_per_s_per_gpu[step.memory.fits].max())
    rates = [float(c.step.tokens_per_s_per_gpu[c.layout_index]) for c in result.top]
    assert rates[0] == pytest.approx(fastest, rel=1e-12)
    assert rates == sorted(rates, reverse=True)
    assert all(bool(c.step.memory.fits[c.layout_index]) for c in result.top)
    assert result.feasible == int(step.memory.fits.sum())
    assert result.rejected[Reason.OUT_OF_MEMORY] == result.evaluated - result.feasible


@pytest.mark.parametrize("objective", [Objective.TIME_TO_TRAIN, Objective.COST, Objective.ENERGY])
def test_objectives_rank_like_throughput_at_one_job_size(objective: Objective) -> None:
    # At a fixed GPU count, time = tokens / (rate·G), GPU-hours = time·G and energy = GPU-hours·watts are all
    # decreasing in the per-GPU rate, so every objective must rank layouts as throughput does (compared by rate:
    # layouts within rounding of each other may swap places).
    model, cluster = gpt3()
    by_rate = search_job_size(model, cluster, GPT3_TRAIN, 1536, Objective.THROUGHPUT, 10, CONSTANTS)
    other = search_job_size(model, cluster, GPT3_TRAIN, 1536, objective, 10, CONSTANTS)
    rate = [float(c.step.tokens_per_s_per_gpu[c.layout_index]) for c in by_rate.top]
    assert [float(c.step.tokens_per_s_per_gpu[c.layout_index]) for c in other.top] == pytest.approx(rate, rel=1e-12)


def test_plan_picks_largest_job_size_within_scaling_floor() -> None:
    # A small global batch (256 sequences) caps data parallelism, so per-GPU throughput falls at large job sizes
    # and the answer is not simply the whole cluster.
    model, cluster = load_model("gpt3-175b"), load_cluster("selene")
    result = plan(model, cluster, TrainSpec(seq_len=2048, global_batch=256), CONSTANTS)
    per_gpu = {s.num_gpus: float(s.top[0].step.tokens_per_s_per_gpu[s.top[0].layout_index]) for s in result.sizes
               if s.top}
    assert len(per_gpu) >= 3
    best = max(per_gpu.values())
    expected = max(g for g, rate in per_gpu.items() if rate >= CONSTANTS.search.scaling_floor * best)
    assert result.gpus_per_job == expected
    assert expected < max(per_gpu), "the case should exercise the floor, not just take the largest size"
    assert all(rate < CONSTANTS.search.scaling_floor * best for g, rate in per_gpu.items() if g > expected)
    assert result.concurrent_jobs == cluster.num_gpus // expected


def test_critical_batch_reproduces_deepseek_law_worked_number() -> None:
    # DeepSeek LLM's batch-size law (arXiv:2401.02954) evaluated: C = 1e25 FLOPs → B_opt = 0.292·C^0.3271 =
    # 43.9M ≈ 44M tokens.
    # total_tokens D is chosen so 6·N_active·D = 1e25. The result is rounded down to a multiple of 1,024
    # sequences; at seq_len 256 that step is 262K tokens (0.6%), so 2% holds after rounding.
    model = load_model("gpt3-175b")
    tokens = 1e25 / (6.0 * count_params(model).active)
    for seq_len in (256, 2048, 4096):
        sequences = critical_batch_sequences(model, TrainSpec(seq_len=seq_len, total_tokens=tokens), CONSTANTS.search)
        assert sequences % 1024 == 0 and sequences >= 1024
        assert 44e6 * 0.98 - 1024 * seq_len < sequences * seq_len <= 44e6 * 1.02
    short = critical_batch_sequences(model, TrainSpec(seq_len=256, total_tokens=tokens), CONSTANTS.search)
    assert short * 256 == pytest.approx(44e6, rel=0.02)


def test_critical_batch_is_at_least_1024_sequences() -> None:
    # A tiny budget: the law gives far less than 1,024 sequences; the planner never goes below that.
    assert critical_batch_sequences(TINY, TrainSpec(total_tokens=1e6), CONSTANTS.search) == 1024


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    code = info.value.code
    return (0 if code is None else int(code)), out, err


def test_plan_json_has_the_required_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "plan", "--json")  # default flagship: seed-10t-moe on seed-500k
    assert code == 0, err
    document = json.loads(out)
    assert {"input_sha256", "evaluated_layouts", "feasible_layouts", "seconds", "top", "jobs"} <= document.keys()
    assert len(document["input_sha256"]) == 64 and int(document["input_sha256"], 16) >= 0
    assert 0 < document["feasible_layouts"] <= document["evaluated_layouts"]
    assert document["seconds"] > 0
    assert document["top"]
    layout_keys = {"tp", "pp", "dp", "cp", "ep", "etp", "vpp", "mbs", "zero", "recompute", "sp", "schedule"}
    for entry in document["top"]:
        assert layout_keys <= entry["layout"].keys()
        assert {"step_time_s", "mfu", "tokens_per_s_per_gpu", "memory_bytes"} <= entry.keys()
        assert 0 < entry["mfu"] < 1 and entry["step_time_s"] > 0 and entry["tokens_per_s_per_gpu"] > 0
    jobs = document["jobs"]
    assert {"gpus_per_job", "concurrent_jobs"} <= jobs.keys()
    assert jobs["gpus_per_job"] * jobs["concurrent_jobs"] <= jobs["cluster_gpus"]
    best = document["top"][0]["layout"]
    assert best["tp"] * best["pp"] * best["dp"] * best["cp"] == jobs["gpus_per_job"]


def test_plan_gpus_larger_than_cluster_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    # selene has 3,072 GPUs (catalog); a job cannot use more than the cluster.
    code, out, err = _run(capsys, "plan", "--model", "gpt3-175b", "--cluster", "selene", "--gpus", "4096")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "gpus" in lines[0] and "3,072" in lines[0]
    assert "Traceback" not in out + err


def test_plan_unknown_objective_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "plan", "--objective", "bogus")
    assert code == 2
    assert "bogus" in err and "Traceback" not in err


def test_a_second_rank_order_only_adds_pipelined_data_parallel_layouts() -> None:
    # The order only matters when both pp and dp exceed 1; elsewhere the second order is the same layout.
    model, cluster = load_model("gpt3-175b"), load_cluster("selene", num_gpus=1536)
    train = TrainSpec(seq_len=2048, global_batch=1536)
    one = generate(model, cluster, train, 1536).layouts
    both = generate(model, cluster, train, 1536, SpaceOptions(rank_orders=tuple(RankOrder))).layouts
    added = both.size - one.size
    assert added == int(((one.pp > 1) & (one.dp > 1)).sum()) > 0
