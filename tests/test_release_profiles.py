"""Framework release profiles (catalog/frameworks.yaml `releases`): loading, rule order, the user's flags over the
release's, one meaning in explain and in a search, and validate's two readings (`--facts profile|recipe`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from llmscale.errors import LlmscaleError, SpecError
from llmscale.io import releases as releases_module
from llmscale.io.catalog import catalog_file, catalog_section, load_catalog_yaml, load_cluster, load_model
from llmscale.io.releases import Filled, fill, find_release, frameworks, job_facts, load_releases, load_sources
from llmscale.io.resolve import JobRequest, resolve
from llmscale.layout.profile import SEARCH_FILLED, ReleaseLayouts
from llmscale.specs.framework import ReleaseProfile, RuleCondition
from llmscale.specs.layout import Schedule
from llmscale.specs.train import Precision
from llmscale.validation.entries import recipe_entries
from llmscale.validation.jobs import Facts, release_for, row_job
from llmscale.validation.runs import load_runs
from tests.conftest import run_cli_json

RUNS = {run.name: run for run in load_runs()}


def test_every_release_loads_and_every_rule_cites_a_known_source() -> None:
    sources = load_sources()
    releases = load_releases()
    assert {"megatron-bridge", "nemo", "megatron-lm", "megatron-core", "torchtitan"} <= set(frameworks())
    for release in releases:
        assert release.rules, release.label
        for rule in release.rules:
            assert rule.source in sources, (release.label, rule.source)
    # A code source names the commit it was read at; a paper its section.
    assert all(s.commit is not None or s.repository.startswith("arXiv") for s in sources.values())


def test_a_release_read_alone_is_the_release_of_the_whole_file() -> None:
    # io.releases parses a named release's own lines (and reads the source ids from theirs); the whole file parsed
    # at once is the reference, so a layout change of frameworks.yaml that the line reader misses fails here
    whole = catalog_file("frameworks.yaml")
    assert releases_module.source_ids() == frozenset(whole["sources"])
    texts = releases_module._release_texts()
    assert len(texts) == len(whole["releases"]) == len(releases_module._bodies())
    for text, header, body in zip(texts, releases_module._bodies(), whole["releases"], strict=True):
        assert load_catalog_yaml(text) == [body]
        assert header == {key: body[key] for key in ("framework", "release", "date")}
    assert load_catalog_yaml(catalog_section("frameworks.yaml", "engines")) == {"engines": whole["engines"]}


def test_a_framework_without_a_release_is_its_newest_and_a_wrong_one_is_named() -> None:
    bridge = [r for r in load_releases() if r.framework == "megatron-bridge"]
    assert find_release("megatron-bridge") == max(bridge, key=lambda r: r.date)
    assert find_release("megatron-bridge@25.09").label == "megatron-bridge@25.09"
    with pytest.raises(SpecError, match=r"megatron-bridge@25\.09"):
        find_release("megatron-bridge@9.99")  # the message lists the releases there are
    with pytest.raises(SpecError, match="megatron-bridge"):
        find_release("megatron-brige")


def _profile(*rules: dict) -> ReleaseProfile:
    return ReleaseProfile.model_validate({"framework": "test", "release": "1", "date": "2026-01-01", "tag": "t",
                                          "rules": list(rules)})


def test_a_later_rule_overrides_an_earlier_one_where_both_hold() -> None:
    release = _profile({"set": {"tp_comm_overlap": True}, "when": {"tp": ">1"}, "source": "s", "read": "r"},
                       {"set": {"tp_comm_overlap": False}, "when": {"tp": ">4"}, "source": "s", "read": "r"})
    model, cluster = load_model("llama3-70b"), load_cluster("eos-h100")
    overlap = {tp: fill(release, model, cluster, {}, {"tp": tp}, 512).layout.get("tp_comm_overlap")
               for tp in (1, 4, 8)}
    assert overlap == {1: None, 4: True, 8: False}  # tp 1: no rule holds, the layout's default stays


def test_the_users_flag_wins_and_the_job_says_which_settings_it_kept() -> None:
    request = JobRequest(model="llama3-70b", cluster="eos-h100", gpus=512, layout={"tp": 8, "pp": 4},
                         framework="megatron-bridge@26.04.01")
    job = resolve(request)
    assert job.layout is not None and job.layout.tp_comm_overlap  # the Llama recipes overlap TP (catalog source)
    assert job.profile is not None and "tp_comm_overlap" in {s.name for s in job.profile.applied}
    mine = resolve(JobRequest(**{**request.__dict__, "layout": {"tp": 8, "pp": 4, "tp_comm_overlap": False}}))
    assert mine.layout is not None and not mine.layout.tp_comm_overlap
    assert mine.profile is not None and "tp_comm_overlap" in mine.profile.kept


@pytest.mark.parametrize("label", ["megatron-bridge@26.04.01", "megatron-bridge@25.11", "nemo@24.07"])
def test_a_search_prices_each_layout_as_explaining_it_would(label: str) -> None:
    # The settings a search fills per layout (layout.profile) are the ones `fill` gives the same layout alone.
    release = find_release(label)
    model, cluster = load_model("qwen3-235b-a22b"), load_cluster("eos-h100")
    job = resolve(JobRequest(model=model, cluster=cluster, gpus=256, framework=release))
    assert job.profile is not None
    rng = np.random.default_rng(7)
    sizes = {"tp": rng.choice([1, 2, 4, 8], 40), "pp": rng.choice([1, 2, 4], 40), "vpp": np.ones(40, int),
             "cp": np.ones(40, int), "ep": rng.choice([1, 8, 16], 40), "dp": np.full(40, 8),
             "zero": rng.choice([1, 3], 40), "recompute": np.zeros(40, int)}
    sizes["vpp"] = np.where(rng.random(40) < 0.5, 2, 1) * (sizes["pp"] > 1) + (sizes["pp"] == 1)
    sizes["schedule"] = np.where(sizes["vpp"] > 1, Schedule.INTERLEAVED.code, Schedule.ONE_F_ONE_B.code)
    columns = ReleaseLayouts(release, job.profile.facts).columns(sizes)
    for i in range(40):
        one = {name: int(values[i]) for name, values in sizes.items() if name not in ("schedule", "recompute")}
        filled = fill(release, model, cluster, {}, one, 256).layout or {}
        for name in SEARCH_FILLED:
            expected = filled.get(name, one["tp"] > 1 if name == "sp" else False)
            assert bool(columns.get(name, np.full(40, expected))[i]) == bool(expected), (name, one)


def test_every_published_row_of_a_profiled_framework_finds_its_release() -> None:
    known = set(frameworks())
    missing = [name for name, run in RUNS.items() if run.framework in known and release_for(run) is None]
    assert not missing


def test_recipe_entries_name_real_rows_and_none_restates_the_profile() -> None:
    # An entry records what a row's own recipe adds to (or changes in) its release profile: one that gives a row
    # what its profile and table already give it would be a fact filed under a name for nothing (DESIGN principle 11).
    restated = []
    for entry in recipe_entries():
        assert entry.run in RUNS, entry.id
        try:
            built = row_job(RUNS[entry.run], _constants(), facts=Facts.PROFILE)
        except LlmscaleError:
            continue  # a row validate skips (its reason printed there)
        job = built.job
        assert job.layout is not None and job.profile is not None
        profile_kernels = {s.name: s.value for s in job.profile.applied}
        chosen = {{"mbs": "micro_batch", "vpp": "vp"}.get(k, k) for k in built.chosen}
        for name, value in entry.set.given().items():
            if name in chosen:
                continue  # llmscale chose it without the entry: the entry says what was run (the same or not)
            current = _current(job, name, profile_kernels)
            if current == value or (isinstance(value, list) and current == sorted(value)):
                restated.append(f"{entry.id}: {name} {value!r}")
    assert not restated, restated


def _constants():  # type: ignore[no-untyped-def]
    from llmscale.io.catalog import load_constants

    return load_constants()


def _current(job, name: str, kernels: dict):  # type: ignore[no-untyped-def]
    """The value a profile-mode job has for an entry's setting."""
    names = {"micro_batch": "mbs", "vp": "vpp"}
    for spec in (job.layout, job.train, job.model):
        field = names.get(name, name)
        if field in type(spec).model_fields:
            return getattr(spec, field)
    if name == "recompute_modules":
        flags = {"layernorm": "recompute_norm", "mla_up_proj": "recompute_mla_up", "moe_act": "recompute_moe_act",
                 "mlp": "recompute_mlp"}
        return sorted(m for m, flag in flags.items() if getattr(job.layout, flag)) + (
            ["core_attn"] if job.layout.recompute.value == "selective" else [])
    return kernels.get(name)


def test_the_two_readings_differ_only_on_rows_with_recipe_entries() -> None:
    from llmscale.validation.validate import validate_runs

    with_entries = {e.run for e in recipe_entries()}
    runs = [RUNS[name] for name in sorted(RUNS) if RUNS[name].framework == "nemo"]
    profile = {r.name: r.predicted_tokens_per_s_per_gpu for r in validate_runs(runs, _constants()).rows}
    recipe = {r.name: r.predicted_tokens_per_s_per_gpu
              for r in validate_runs(runs, _constants(), facts=Facts.RECIPE).rows}
    assert profile.keys() == recipe.keys() and len(profile) == 12
    for name in profile:
        if name not in with_entries:
            assert profile[name] == recipe[name], name
    assert any(profile[n] != recipe[n] for n in profile if n in with_entries)


@pytest.mark.parametrize(("args", "needle"), [
    (["explain", "--model", "llama3-8b", "--cluster", "eos-h100", "--gpus", "8", "--framework", "nope"],
     "--framework = 'nope' is invalid: one of"),
    (["explain", "--model", "llama3-8b", "--cluster", "eos-h100", "--gpus", "8", "--framework", "megatron-bridge@1.0"],
     "megatron-bridge@26.08"),  # the releases there are
    (["validate", "--facts", "recipes"], "--facts = 'recipes' is invalid: one of profile, recipe"),
])
def test_a_wrong_framework_or_facts_is_one_line_and_exit_2(args: list[str], needle: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from llmscale.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and needle in err[0]


def test_explain_prints_which_release_rules_applied(capsys: pytest.CaptureFixture[str]) -> None:
    from llmscale.cli.main import main

    with pytest.raises(SystemExit):
        main(["explain", "--model", "llama3-70b", "--cluster", "eos-h100", "--gpus", "512", "--tp", "8", "--pp", "4",
              "--framework", "megatron-bridge@26.04.01", "--no-tp-comm-overlap"])
    out = " ".join(capsys.readouterr().out.split())
    assert "# framework megatron-bridge@26.04.01 (model family llama3): " in out and "fp32_grads off (" in out
    assert "kept as given (the release would set them): tp_comm_overlap" in out


def test_a_switch_the_layout_cannot_run_is_dropped_not_refused() -> None:
    # Megatron-Bridge 26.04.01's Qwen3 presets capture CUDA graphs on GB200; CUDA graphs cannot capture full
    # recompute (layout.rules Reason.CUDA_GRAPHS): a user asking for full recompute gets the job without them, said.
    job = resolve(JobRequest(model="qwen3-235b-a22b", cluster="gb200-nvl72", gpus=256,
                             layout={"tp": 2, "pp": 4, "ep": 16, "recompute": "full"},
                             framework="megatron-bridge@26.04.01"))
    assert job.layout is not None and not job.layout.cuda_graphs
    assert job.profile is not None and "cuda_graphs" in job.profile.dropped


def test_a_graph_scope_without_graphs_is_moot_not_dropped() -> None:
    # Megatron-Bridge 26.08's Qwen3-30B B200 recipes capture TE graphs of attention, router and preprocess
    # (cuda_graph_impl 'transformer_engine', cuda_graph_scope ['attn', 'moe_router', 'moe_preprocess'], qwen3_moe.py
    # b200 8gpu configs): the scope goes with the graphs. Where the user turns the graphs off, the scope is moot: the
    # job keeps the spec's default and the release neither applies nor drops it.
    release = find_release("megatron-bridge@26.08")
    model, cluster = load_model("qwen3-30b-a3b"), load_cluster("b200:8")
    train = {"precision": "bf16", "seq_len": 4096}
    graphs = fill(release, model, cluster, train, {"ep": 8}, 8)
    assert graphs.layout is not None and graphs.layout["cuda_graphs"]
    assert graphs.train["cuda_graph_scope"] == "attn-moe-router"
    assert "cuda_graph_scope" in {s.name for s in graphs.application.applied}
    off = fill(release, model, cluster, train, {"ep": 8, "cuda_graphs": False}, 8)
    assert "cuda_graph_scope" not in off.train
    assert "cuda_graph_scope" not in {s.name for s in off.application.applied}
    assert "cuda_graph_scope" not in off.application.dropped and "cuda_graphs" in off.application.kept


@pytest.mark.parametrize(("model", "cluster", "gpus", "layout", "expected", "precision"), [
    # NVIDIA-NeMo/Megatron-Bridge@c810129 scripts/performance/configs/qwen/qwen3_workload_base_configs.py:
    # QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_*_V1 cuda_graph_impl 'transformer_engine'; the QWEN3_235B_A22B B200 presets
    # (V1 and the V2 that replace() them) give none, so the qwen3_moe recipe's 'none' stays.
    ("qwen3-30b-a3b", "dgx-b200", 8, {"ep": 8}, {"cuda_graphs": True}, "fp8"),
    ("qwen3-235b-a22b", "dgx-b200", 256, {"pp": 8, "ep": 8}, {"cuda_graphs": False}, "fp8"),
    # QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V1 moe_a2a_overlap=True, inherited by _V2; qwen3_llm_pretrain.py
    # qwen3_235b_a22b_pretrain_config_h100: CommOverlapConfig(tp_comm_overlap=False).
    ("qwen3-235b-a22b", "eos-h100", 256, {"tp": 2, "pp": 8, "vpp": 4, "ep": 32, "etp": 1},
     {"ep_comm_overlap": True, "tp_comm_overlap": False}, "fp8"),
    # QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_*_V1 moe_a2a_overlap=False; its BF16 preset captures TE graphs, the 235B
    # H100 presets none.
    ("qwen3-30b-a3b", "eos-h100", 16, {"ep": 16}, {"ep_comm_overlap": False}, "fp8"),
    ("qwen3-30b-a3b", "eos-h100", 16, {"ep": 16}, {"cuda_graphs": True}, "bf16"),
    ("qwen3-235b-a22b", "eos-h100", 256, {"tp": 2, "pp": 8, "vpp": 4, "ep": 32, "etp": 1}, {"cuda_graphs": False},
     "bf16"),
])
def test_bridge_26_04_01_qwen3_presets_differ_by_model_size(model: str, cluster: str, gpus: int,
                                                          layout: dict[str, int], expected: dict[str, bool],
                                                          precision: str) -> None:
    job = resolve(JobRequest(model=model, cluster=cluster, gpus=gpus, layout=layout,
                             train={"precision": precision}, framework="megatron-bridge@26.04.01"))
    assert job.layout is not None
    assert {name: getattr(job.layout, name) for name in expected} == expected


@pytest.mark.parametrize(("model", "release", "offload", "double_buffer"), [
    # NVIDIA-NeMo/Megatron-Bridge@7af9601c scripts/performance/configs/llama3/workload_base_configs.py: only the 70B
    # presets offload activations under FSDP (LLAMA3_70B_GB200_FP8_CS_BASE_CONFIG cpu_offloading_num_layers 40), and
    # llama3_llm_pretrain.py sets fsdp_double_buffer in the 70B gb300/gb200/b200 builders alone; @6725f704
    # run_script.py L169-171 sets it for 70b/405b on every GPU and its perf_matrix offloads 40 layers of the 70B under
    # fp8_cs (current scaling) alone.
    ("llama3-8b", "25.11", 0, False),
    ("llama3-70b", "25.11", 40, True),
    ("llama3-8b", "25.09", 0, False),
    ("llama3-70b", "25.09", 40, True),
])
def test_bridge_llama3_fsdp_presets_differ_by_model_size(model: str, release: str, offload: int,
                                                         double_buffer: bool) -> None:
    job = resolve(JobRequest(model=model, cluster="gb200-nvl72", gpus=64, layout={"zero": 3},
                             train={"precision": "fp8", "fp8_recipe": "tensorwise"},
                             framework=f"megatron-bridge@{release}"))
    assert job.layout is not None
    assert (job.layout.offload_activations, job.train.fsdp_double_buffer) == (offload, double_buffer)


def test_a_saved_document_without_a_release_replays_without_one(tmp_path: Path) -> None:
    # Plans written before release profiles name none: they were priced at the specs' own defaults.
    document = {"model": "gpt3-175b", "cluster": "selene", "train": {"global_batch": 1536, "seq_len": 2048},
                "num_gpus": 1536, "layout": {"tp": 8, "pp": 8, "dp": 24}}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    job = resolve(JobRequest(from_plan=path))
    assert job.profile is None and job.train.fp32_grads  # the spec default, not a release's bf16 reduction


def test_validate_refuses_a_framework_it_does_not_know(capsys: pytest.CaptureFixture[str]) -> None:
    from llmscale.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["validate", "--framework", "nope"])
    assert info.value.code == 2 and "--framework = 'nope'" in capsys.readouterr().err


def test_a_rule_may_read_the_jobs_gpu_count() -> None:
    # Megatron-Bridge 26.08 (NVIDIA-NeMo/Megatron-Bridge@51885cf perf_recipes/qwen/b200/qwen3_moe.py): the 8-GPU 30B
    # and 256-GPU 235B MXFP8 recipes call _enable_hybridep_full_iteration_mxfp8 (HybridEP, full-iteration graphs, the
    # fused grouped MLP, FP8 attention); the 64-GPU 235B one (:130) calls no helper
    release, model, train = find_release("megatron-bridge@26.08"), load_model("qwen3-235b-a22b"), {
        "precision": "fp8", "fp8_recipe": "mxfp8"}
    on = fill(release, model, load_cluster("b200:256"), train, {"pp": 8, "ep": 8}, 256)
    off = fill(release, model, load_cluster("b200:64"), train, {"pp": 8, "ep": 8}, 64)
    assert (on.train["moe_grouped_gemm_impl"], on.train["fp8_attention"], on.layout["cuda_graphs"]) == (
        "te-fused", True, True)
    assert off.train.get("moe_grouped_gemm_impl") != "te-fused" and not off.train.get("fp8_attention")
    assert not off.layout.get("cuda_graphs")
    # without --gpus the count is tp·cp·pp·dp where the layout gives dp, else the cluster's, as resolve sizes the job
    given_dp = fill(release, model, load_cluster("b200:256"), train, {"pp": 8, "ep": 8, "dp": 8}, None).train
    whole = fill(release, model, load_cluster("b200:64"), train, {"pp": 8, "ep": 8}, None).train
    assert given_dp.get("moe_grouped_gemm_impl") != "te-fused" and whole.get("moe_grouped_gemm_impl") != "te-fused"
    assert fill(release, model, load_cluster("b200:256"), train, {"pp": 8, "ep": 8}, None).train[
        "moe_grouped_gemm_impl"] == "te-fused"


def test_a_gpu_count_condition_is_a_comparison_and_holds_only_where_the_count_is_known() -> None:
    condition = RuleCondition(gpus="!=64")
    facts = job_facts(load_model("qwen3-235b-a22b"), load_cluster("b200:64"), Precision.FP8, None, 4096, 64)
    assert not facts.holds(condition) and replace(facts, gpus=256).holds(condition)
    assert not replace(facts, gpus=None).holds(condition)
    assert replace(facts, gpus=None).holds(RuleCondition())
    with pytest.raises(ValueError, match="not a comparison"):
        RuleCondition(gpus="=!64")


@pytest.mark.parametrize(("model", "cluster", "precision", "dispatcher"), [
    # NVIDIA-NeMo/Megatron-Bridge@51885cf perf_recipes/qwen/{h100,b200,b300,gb200,gb300}/qwen3_moe.py, every
    # recipe's moe_token_dispatcher_type / moe_flex_dispatcher_backend: the 30B ones run HybridEP everywhere, the 235B
    # ones all-to-all on H100 and B200 (HybridEP on B300, GB200, GB300, and on B200 through the 256-GPU MXFP8 helper)
    ("qwen3-30b-a3b", "b200:8", "bf16", "flex-hybridep"),
    ("qwen3-30b-a3b", "h100-sxm:16", "bf16", "flex-hybridep"),
    ("qwen3-235b-a22b", "h100-sxm:256", "bf16", "alltoall"),
    ("qwen3-235b-a22b", "h100-sxm:256", "fp8cs", "alltoall"),
    ("qwen3-235b-a22b", "b200:64", "bf16", "alltoall"),
    ("qwen3-235b-a22b", "b200:256", "bf16", "alltoall"),
    ("qwen3-235b-a22b", "b200:256", "fp8cs", "alltoall"),
    ("qwen3-235b-a22b", "b200:64", "mxfp8", "alltoall"),
    ("qwen3-235b-a22b", "b200:256", "mxfp8", "flex-hybridep"),
    ("qwen3-235b-a22b", "b300:64", "bf16", "flex-hybridep"),
    ("qwen3-235b-a22b", "gb200:64", "bf16", "flex-hybridep"),
])
def test_bridge_26_08_qwen3_dispatchers_by_model_size_and_gpu(model: str, cluster: str, precision: str,
                                                             dispatcher: str) -> None:
    train = ({"precision": "fp8", "fp8_recipe": {"mxfp8": "mxfp8", "fp8cs": "tensorwise"}[precision]}
             if precision in ("mxfp8", "fp8cs") else {"precision": precision})
    assert _bridge_26_08(model, cluster, train).train["moe_dispatcher"] == dispatcher


def _bridge_26_08(model: str, cluster: str, train: dict[str, str], layout: dict[str, int] | None = None,
                  gpus: int | None = None) -> Filled:
    """Megatron-Bridge 26.08's settings for `model` on `cluster` (`name:count`; the job takes `gpus`, else them all)."""
    count = gpus if gpus is not None else int(cluster.split(":")[1])
    return fill(find_release("megatron-bridge@26.08"), load_model(model), load_cluster(cluster), train, layout, count)



def _helper(model: str, cluster: str, gpus: int | None, layout: dict[str, int] | None = None) -> bool:
    """Whether Megatron-Bridge 26.08 gives this MXFP8 job the full-iteration helper's fused grouped MLP."""
    filled = _bridge_26_08(model, cluster, {"precision": "fp8", "fp8_recipe": "mxfp8"}, layout, gpus)
    return filled.train.get("moe_grouped_gemm_impl") == "te-fused"


def test_the_64_gpu_exception_is_the_235b_models_alone() -> None:
    # perf_recipes/qwen/b200/qwen3_moe.py @51885cf: the 64-GPU 30B recipes are the 8-GPU ones at a larger batch
    # (:566-594), which call the helper (:313); only the 64-GPU 235B recipes (b200:130, b300:139) call none
    assert all(_helper("qwen3-30b-a3b", f"{gpu}:128", n) for gpu in ("b200", "b300") for n in (8, 32, 64, 128))
    assert not _helper("qwen3-235b-a22b", "b300:64", 64) and _helper("qwen3-235b-a22b", "b300:256", 256)
    # an explicit GPU count on a larger cluster is the job's count, not the cluster's
    assert not _helper("qwen3-235b-a22b", "b200:256", 64) and _helper("qwen3-235b-a22b", "b200:256", 256)


@pytest.mark.parametrize(("gpus", "zero", "expected"), [
    # perf_recipes/deepseek/common.py:88-121 _apply_deepseek_v3_64gpu_gb300_fsdp_configs (recompute_modules :114,
    # no EP A2A overlap); gb300/deepseek_v3.py:270 (64 GPUs: no graph impl, no op fuser, FP8 attention at its
    # default, off) and :310 (128 GPUs: full-iteration graphs :328, op fuser :342, FP8 attention off :345); :133
    # (256 GPUs: the full-iteration helper, FP8 attention on :157)
    (64, 3, {"cuda_graphs": False, "ep_comm_overlap": False, "recompute_norm": True, "recompute_mla_up": True,
             "recompute_moe_act": True, "moe_grouped_gemm_impl": "te", "fp8_attention": False}),
    (128, 3, {"cuda_graphs": True, "ep_comm_overlap": False, "recompute_norm": True, "recompute_mla_up": True,
              "recompute_moe_act": True, "moe_grouped_gemm_impl": "te-fused", "fp8_attention": False}),
    (256, 1, {"cuda_graphs": True, "ep_comm_overlap": True, "recompute_norm": False, "recompute_mla_up": False,
              "recompute_moe_act": False, "moe_grouped_gemm_impl": "te-fused", "fp8_attention": True}),
])
def test_bridge_26_08_deepseek_gb300_fsdp_and_hsdp_recipes(gpus: int, zero: int, expected: dict[str, object]) -> None:
    layout = {"pp": 1, "ep": 64, "zero": zero} if gpus == 64 else (
        {"pp": 1, "ep": 32, "zero": zero} if gpus == 128 else {"pp": 2, "vpp": 8, "ep": 32, "zero": zero})
    job = resolve(JobRequest(model="deepseek-v3", cluster=f"gb300:{gpus}", gpus=gpus, layout=layout,
                             train={"precision": "fp8", "fp8_recipe": "mxfp8"}, framework="megatron-bridge@26.08"))
    assert job.layout is not None
    got = {name: getattr(job.layout, name) if hasattr(job.layout, name) else getattr(job.train, name)
           for name in expected}
    assert {k: getattr(v, "value", v) for k, v in got.items()} == expected


def test_a_plan_prices_each_job_size_with_the_release_settings_of_that_size(capsys: pytest.CaptureFixture[str]) -> None:
    # 26.08 gives a 235B MXFP8 job on B200 the full-iteration helper at 256 GPUs and not at 64
    # (perf_recipes/qwen/b200/qwen3_moe.py:130, :434): a plan over both sizes prices its 64-GPU layout as explain
    # --gpus 64 does, and records the settings of the size it chose
    flags = ("-m", "qwen3-235b-a22b", "-c", "b200:256", "--framework", "megatron-bridge@26.08", "--precision", "fp8",
             "--fp8-recipe", "mxfp8", "--seq-len", "4096", "--gbs", "2048")
    plan = run_cli_json(capsys, "plan", *flags, "--tp", "1", "--pp", "8", "--ep", "8", "--cp", "1", "--mbs", "1",
                        "--vpp", "1")
    steps = {s["num_gpus"]: s["best"]["step_time_s"] for s in plan["job_sizes"] if s["best"]}
    explained = {n: run_cli_json(capsys, "explain", *flags, "--gpus", str(n), "--tp", "1", "--pp", "8", "--dp",
                                 str(n // 8), "--ep", "8", "--mbs", "1")["step_time_s"] for n in (64, 256)}
    assert steps[64] == pytest.approx(explained[64], rel=1e-9) and steps[256] == pytest.approx(explained[256], rel=1e-9)
    applied = {a["setting"]: a["value"] for a in plan["framework"]["profile"]["applied"]}
    assert (applied.get("moe_grouped_gemm_impl") == "te-fused") is (plan["jobs"]["gpus_per_job"] != 64)



@pytest.mark.parametrize(("model", "cluster", "precision", "scope"), [
    # NVIDIA-NeMo/Megatron-Bridge@51885cf perf_recipes, each recipe's cuda_graph_scope under cuda_graph_impl
    # 'transformer_engine': qwen/{b200,gb200}/qwen3_moe.py ['attn', 'moe_router', 'moe_preprocess'] (GB300 235B too),
    # qwen/{b300,gb300}/qwen3_moe.py 30B ['moe_router', 'moe_preprocess'], deepseek/{gb200,gb300}/deepseek_v3.py BF16
    # ['attn', 'moe_router', 'moe_preprocess']
    ("qwen3-30b-a3b", "b200:8", "bf16", "attn-moe-router"),
    ("qwen3-30b-a3b", "b300:8", "bf16", "moe-router"),
    ("qwen3-30b-a3b", "gb200:8", "bf16", "attn-moe-router"),
    ("qwen3-30b-a3b", "gb300:8", "bf16", "moe-router"),
    ("qwen3-235b-a22b", "gb300:256", "bf16", "attn-moe-router"),
    ("deepseek-v3", "gb200:256", "bf16", "attn-moe-router"),
    ("deepseek-v3", "gb300:256", "bf16", "attn-moe-router"),
])
def test_bridge_26_08_graph_scopes_are_the_recipes_module_lists(model: str, cluster: str, precision: str,
                                                                scope: str) -> None:
    layout = {"ep": 8} if cluster.endswith(":8") else {"pp": 4, "ep": 64}
    filled = _bridge_26_08(model, cluster, {"precision": precision}, layout)
    assert filled.layout is not None and filled.layout["cuda_graphs"]
    assert filled.train["cuda_graph_scope"] == scope



def test_a_layout_larger_than_the_cluster_is_refused_where_it_sizes_the_job() -> None:
    # without --gpus the job is tp·cp·pp·dp GPUs (io.releases.job_gpus, the count the release rules read too)
    with pytest.raises(SpecError, match="= 512 GPUs exceeds cluster") as info:
        resolve(JobRequest(model="llama3-70b", cluster="h100-sxm:64", layout={"tp": 8, "dp": 64}, framework="any"))
    assert info.value.field == "dp"
    assert resolve(JobRequest(model="llama3-70b", cluster="h100-sxm:64", layout={"tp": 8, "dp": 4},
                              framework="any")).num_gpus == 32
