"""Failure model and checkpoint costs: the catalog defaults reproduce the published record (each figure with its
source beside it), rates scale as a series system, mitigations remove what they state, a cluster can override
its profile, and checkpoint bytes follow the layout's sharding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from llmscale.errors import InputFileError, SpecError
from llmscale.io.catalog import Kind, entry, failure_profile, load_cluster, load_constants, load_model
from llmscale.layout.arrays import Layouts
from llmscale.reliability.checkpoint import (
    bytes_per_param,
    checkpoint_cost,
    even_checkpoint_cost,
    layout_bytes_per_gpu,
    restart_cost,
    state_bytes,
)
from llmscale.reliability.montecarlo import SimulationInputs, simulate
from llmscale.reliability.rates import (
    SECONDS_PER_YEAR,
    cluster_rates,
    interruption_rates,
    lemon_rate_factors,
)
from llmscale.specs.failures import FailureSpec, Mitigation
from llmscale.specs.layout import Layout
from llmscale.specs.train import TrainSpec
from llmscale.units import SECONDS_PER_DAY, SECONDS_PER_HOUR
from tests.conftest import make_cluster

CONSTANTS = load_constants()

LLAMA3_GPUS, LLAMA3_DAYS = 16_384, 54.0
"""Llama 3 405B pre-training snapshot: 16,384 H100 in 8-GPU servers, 54 days (arXiv:2407.21783 §3.3.1, §3.3.4)."""


def meta_rsc1() -> FailureSpec:
    return FailureSpec.model_validate(failure_profile("meta-rsc1"))


def test_defaults_reproduce_llama3_unexpected_interruptions() -> None:
    # Llama 3 (arXiv:2407.21783 §3.3.4): 419 unexpected (+47 planned) interruptions in 54 days on 16,384 GPUs;
    # issue 5 asks ±10 %.
    rates = interruption_rates(CONSTANTS.failures, LLAMA3_GPUS, gpus_per_node=8)
    wall_s = LLAMA3_DAYS * SECONDS_PER_DAY
    unexpected = float(rates.unplanned_per_s[0]) * wall_s
    planned = float(rates.paused_per_s[0]) * wall_s
    assert unexpected == pytest.approx(419, rel=0.10)
    assert planned == pytest.approx(47, rel=0.10)
    # MTBI 54 d · 24 h / 419 = 3.09 h (unexpected) and 54 d · 24 h / 466 = 2.78 h (all).
    assert float(rates.job_mtbf_s[0]) / SECONDS_PER_HOUR == pytest.approx(3.09, rel=0.01)
    assert 1.0 / float(rates.total_per_s[0]) / SECONDS_PER_HOUR == pytest.approx(2.78, rel=0.01)


def test_simulated_llama3_run_counts_419_interruptions() -> None:
    # The same count by simulation: a Poisson count with mean 419 over 2,000 runs of 54 days (±2σ of one run is ±41).
    rates = interruption_rates(CONSTANTS.failures, LLAMA3_GPUS, gpus_per_node=8)
    inputs = SimulationInputs(rate_per_s=float(rates.unplanned_per_s[0]), storage_share=1.0, tau_s=600.0,
                              blocking_s=5.0, k=1, restart_memory_s=600.0, restart_storage_s=600.0,
                              wall_s=LLAMA3_DAYS * SECONDS_PER_DAY)
    counts = simulate(inputs, trials=2000, seed=7).unplanned
    assert counts.mean() == pytest.approx(419, rel=0.02)
    assert counts.std() == pytest.approx(np.sqrt(419), rel=0.1)


def test_llama3_cause_mix_matches_table5() -> None:
    # Llama 3 Table 5 (arXiv:2407.21783): GPU-attributed 268 of 419 = 64.0 % by its counts; software/dependency
    # 56 of 419 = 13.4 %; network 35 of 419 = 8.4 %.
    rates = interruption_rates(CONSTANTS.failures, LLAMA3_GPUS, gpus_per_node=8)
    per_s = {name: float(r[0]) for name, r in rates.by_cause_per_s.items()}
    unexpected = float(rates.unplanned_per_s[0])
    assert (per_s["gpu"] + per_s["gpu-hbm"]) / unexpected == pytest.approx(268 / 419, abs=0.005)
    assert per_s["software"] / unexpected == pytest.approx(56 / 419, abs=0.005)
    assert per_s["network-switch"] / unexpected == pytest.approx(35 / 419, abs=0.005)


def test_seed_afr_underpredicts_llama3() -> None:
    # An assumed hardware AFR of 1-2 %/GPU-yr (the project's starting assumption; no published H100 fleet AFR
    # was found) predicts 0.01-0.02 · 16,384 · 54/365 = 24-48 interruptions in the snapshot, 8.6-17x under 419.
    # (Issue 28: the test computed 0.02 · 16,384 · 54/365 ≈ 48 and compared it with 48 — it could not fail. It now
    # holds the model's rate to Llama 3's 419 interruptions and the assumption's ratio to the model.)
    rates = interruption_rates(CONSTANTS.failures, LLAMA3_GPUS, gpus_per_node=8)
    per_gpu_year = float(rates.unplanned_per_s[0]) * SECONDS_PER_YEAR / LLAMA3_GPUS
    assert per_gpu_year == pytest.approx(419 / LLAMA3_GPUS * 365 / LLAMA3_DAYS, rel=0.005)  # 0.1729
    assert per_gpu_year / 0.02 >= 8.5 and per_gpu_year / 0.01 <= 17.5  # 1-2 %/GPU-yr: 8.6-17× too few


@pytest.mark.parametrize(("gpus", "hours"), [(16_384, 1.8), (131_072, 0.23)])
def test_meta_projected_mttf(gpus: int, hours: float) -> None:
    # Kokolis et al. (HPCA'25, arXiv:2410.21680) project 1.8 h at 16,384 GPUs and 0.23 h at 131,072 from
    # r_f = 6.50 / 1000 node-days.
    rates = interruption_rates(meta_rsc1(), gpus, gpus_per_node=8)
    assert float(rates.job_mtbf_s[0]) / SECONDS_PER_HOUR == pytest.approx(hours, rel=0.10)


def test_rates_scale_as_a_series_system() -> None:
    # Series system (the causes' rates add): GPU-scoped causes grow with GPUs, node-scoped with nodes, job-scoped
    # not at all.
    spec = CONSTANTS.failures
    one, two = (interruption_rates(spec, g, gpus_per_node=8) for g in (8_192, 16_384))
    assert two.unplanned_per_s[0] == pytest.approx(2 * one.unplanned_per_s[0])
    assert two.paused_per_s[0] == pytest.approx(one.paused_per_s[0])
    # The same GPUs in nodes of 4 double the node-scoped causes only.
    small_nodes = interruption_rates(spec, 16_384, gpus_per_node=4)
    assert small_nodes.by_cause_per_s["network-switch"][0] == pytest.approx(2 * two.by_cause_per_s["network-switch"][0])
    assert small_nodes.by_cause_per_s["gpu"][0] == pytest.approx(two.by_cause_per_s["gpu"][0])


def test_mitigations_remove_their_stated_share_at_their_cost() -> None:
    spec = CONSTANTS.failures
    base = interruption_rates(spec, 16_384, gpus_per_node=8)
    both = (Mitigation.PREDICTIVE_MIGRATION, Mitigation.SUBHEALTHY_EVICTION)
    mitigated = interruption_rates(spec, 16_384, gpus_per_node=8,
                                   mitigations={m: CONSTANTS.mitigations[m] for m in both})
    migrate, evict = (CONSTANTS.mitigations[m] for m in both)
    kept = (1 - migrate.share_removed) * (1 - evict.share_removed)
    assert mitigated.unplanned_per_s[0] == pytest.approx(kept * base.unplanned_per_s[0])
    # Predicted failures become planned pauses of pause_s; eviction costs its steady overhead.
    migration = next(p for p in mitigated.pauses if p.name == Mitigation.PREDICTIVE_MIGRATION.value)
    assert migration.per_s[0] == pytest.approx(migrate.share_removed * base.unplanned_per_s[0])
    assert migration.duration_s == migrate.pause_s
    assert mitigated.overhead_fraction == pytest.approx(evict.overhead_fraction)


def test_memory_tier_loss_share_is_the_rate_weighted_mean() -> None:
    rates = interruption_rates(CONSTANTS.failures, 16_384, gpus_per_node=8)
    unplanned = [c for c in CONSTANTS.failures.causes if c.kind.value == "unplanned"]
    lost = sum(float(rates.by_cause_per_s[c.name][0]) * c.memory_tier_loss for c in unplanned)
    assert rates.memory_miss_share[0] == pytest.approx(lost / float(rates.unplanned_per_s[0]))
    assert 0.0 < rates.memory_miss_share[0] < 0.2


def test_lemon_nodes_keep_the_mean_rate_and_widen_the_spread() -> None:
    # Kokolis et al. (arXiv:2410.21680): 1.2 % of RSC-1's nodes were lemons. The catalog rate is the fleet mean,
    # so the per-trial factor averages 1 while jobs that draw more lemons fail more often.
    spec = CONSTANTS.failures.model_copy(update={"lemon_node_fraction": 0.012, "lemon_rate_multiplier": 20.0})
    rates = interruption_rates(spec, 16_384, gpus_per_node=8)
    factors = lemon_rate_factors(rates, 2_048, 20_000, np.random.default_rng(0))
    assert factors.mean() == pytest.approx(1.0, abs=0.005)
    # Binomial spread: √(n f (1 − f)) (m − 1) / (n (1 − f + f m)) = 0.037 for 2,048 nodes.
    n, f, m = 2_048, 0.012, 20.0
    assert factors.std() == pytest.approx(np.sqrt(n * f * (1 - f)) * (m - 1) / (n * (1 - f + f * m)), rel=0.05)
    homogeneous = interruption_rates(CONSTANTS.failures, 16_384, gpus_per_node=8)
    assert np.all(lemon_rate_factors(homogeneous, 2_048, 10, np.random.default_rng(0)) == 1.0)


def test_catalog_clusters_get_the_default_profile() -> None:
    assert load_cluster("seed-500k").failures == CONSTANTS.failures
    # A hand-built spec without failures falls back to the same default.
    assert cluster_rates(make_cluster(), 4096, CONSTANTS).unplanned_per_s[0] == pytest.approx(
        interruption_rates(CONSTANTS.failures, 4096, 8).unplanned_per_s[0])


def _cluster_file(tmp_path: Path, failures: object) -> str:
    data = {k: v for k, v in entry(Kind.CLUSTERS, "llama3-16k").items() if k != "name"}
    data["name"] = "custom"
    data["failures"] = failures
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_cluster_names_a_profile_or_overrides_fields(tmp_path: Path) -> None:
    assert load_cluster(_cluster_file(tmp_path, "meta-rsc1")).failures == meta_rsc1()
    custom = load_cluster(_cluster_file(tmp_path, {"lemon_node_fraction": 0.01, "lemon_rate_multiplier": 5}))
    assert custom.failures is not None
    assert custom.failures.causes == CONSTANTS.failures.causes
    assert custom.failures.lemon_node_fraction == 0.01


def test_a_bad_failure_profile_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="unknown failure profile 'nope'"):
        load_cluster(_cluster_file(tmp_path, "nope"))
    # A negative rate is no rate: per_year must be ≥ 0.
    bad = {"causes": [{"name": "gpu", "scope": "gpu", "per_year": -1}]}
    with pytest.raises(SpecError, match="per_year"):
        load_cluster(_cluster_file(tmp_path, bad))


def test_checkpoint_bytes_per_param_match_bloom_and_opt() -> None:
    # BLOOM (bigscience-workshop/bigscience train/tr11-176B-ml/README.md): bf16 + fp32 master + Adam = 14 B/param;
    # 176B -> 176e9 · 14 = 2.46e12 B = 2.24 TiB vs BLOOM's measured "2.3T".
    assert bytes_per_param(TrainSpec()) == 14.0
    bloom_tib = 176e9 * bytes_per_param(TrainSpec()) / 2**40
    assert bloom_tib == pytest.approx(2.3, rel=0.05)
    # fp16 weights + fp32 Adam moments (no master copy) = 10 B/param, which fits OPT-175B's checkpoint of 992
    # files of ~1.7 GB (facebookresearch/metaseq projects/OPT/chronicles/27_percent_update.md).
    opt = state_bytes(load_model("gpt3-175b"), TrainSpec(fp32_master_weights=False))
    assert opt == pytest.approx(992 * 1.7e9, rel=0.10)


def test_layout_checkpoint_bytes_follow_the_sharding() -> None:
    model, train = load_model("gpt3-175b"), TrainSpec(seq_len=2048, global_batch=1536)
    lay = Layouts.from_layout(Layout(tp=8, pp=8, dp=24), 1536)
    per_gpu = float(layout_bytes_per_gpu(model, train, lay)[0])
    even = state_bytes(model, train) / 1536
    # The most loaded GPU holds at least the average share, and not much more on a balanced pipeline.
    assert even <= per_gpu <= 1.3 * even
    # ZeRO only changes what is resident, not what is written once: a deduplicated save is the same size.
    zero0 = Layouts.from_layout(Layout(tp=8, pp=8, dp=24, zero=0), 1536)
    assert float(layout_bytes_per_gpu(model, train, zero0)[0]) == pytest.approx(per_gpu)


def test_storage_aggregate_limit_binds_when_every_node_writes() -> None:
    cluster = load_cluster("llama3-16k")  # Tectonic 2 TB/s sustained (arXiv:2407.21783 §3.3.1)
    model, train = load_model("llama3-405b"), TrainSpec()
    ckpt = even_checkpoint_cost(model, cluster, train, np.array([16_384.0]), CONSTANTS.checkpoint)
    # 405B x 14 B = 5.7 TB over 2 TB/s: the storage system, not the 400 GB/s of each node's NICs, sets the time.
    assert bool(ckpt.storage_limited[0])
    assert float(ckpt.storage_write_s[0]) == pytest.approx(state_bytes(model, train) / 2e12, rel=1e-9)
    # The device->host snapshot is one GPU's share over PCIe: well under a second.
    assert float(ckpt.snapshot_s[0]) == pytest.approx(float(ckpt.bytes_per_gpu[0]) / cluster.node.pcie_bytes_per_s)
    assert float(ckpt.snapshot_s[0]) < 1.0


def test_a_job_gets_its_share_of_the_storage_system() -> None:
    cluster = load_cluster("llama3-16k")
    half = checkpoint_cost(cluster, 1e13, np.array([1e9]), np.array([8_192.0]), CONSTANTS.checkpoint)
    whole = checkpoint_cost(cluster, 1e13, np.array([1e9]), np.array([16_384.0]), CONSTANTS.checkpoint)
    assert float(half.storage_write_s[0]) == pytest.approx(2 * float(whole.storage_write_s[0]))


def test_hot_spares_shorten_the_restart() -> None:
    ckpt = even_checkpoint_cost(load_model("llama3-405b"), load_cluster("llama3-16k"), TrainSpec(),
                                np.array([16_384.0]), CONSTANTS.checkpoint)
    spare = restart_cost(ckpt, CONSTANTS.checkpoint, hot_spares=True)
    requeue = restart_cost(ckpt, CONSTANTS.checkpoint, hot_spares=False)
    assert float(spare.from_storage_s[0]) < float(requeue.from_storage_s[0])
    assert float(spare.from_memory_s[0]) < float(spare.from_storage_s[0])
    # An announced stop skips detection.
    assert float(spare.planned_s(from_memory=True)[0]) == pytest.approx(
        float(spare.from_memory_s[0]) - spare.detection_s)
