"""The built-in GPU and cluster catalog: every entry loads, GPU numbers match the hardware facts file
shipped in the package (llmscale/data/hardware.yaml), the flagship cluster has its stated size, every published
run has a reference cluster that can hold it (catalog/reference_clusters.yaml), and bad cluster files fail with one
message that names the field and the value."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmscale.errors import LlmscaleError
from llmscale.io.catalog import Kind, load_cluster, load_gpu, names
from llmscale.io.catalog import entry as catalog_entry


def _hardware() -> dict[str, dict[str, Any]]:
    text = resources.files("llmscale.data").joinpath("hardware.yaml").read_text(encoding="utf-8")
    return {entry["id"]: entry for entry in yaml.safe_load(text)}


HARDWARE = _hardware()
GPU_IDS = names(Kind.GPUS)
CLUSTER_NAMES = names(Kind.CLUSTERS)


def test_catalog_lists_the_expected_entries() -> None:
    assert set(GPU_IDS) == {
        "a100-40gb", "a100-80gb", "h100-sxm", "h800", "h200", "b200", "b300",
        "gb200", "gb300", "mi300x", "tpu-v4", "tpu-v5p",
    }  # fmt: skip
    assert set(CLUSTER_NAMES) == {
        "selene", "llama3-16k", "deepseek-v3-h800", "gb200-nvl72", "seed-500k",
        "eos-h100", "dgx-b200", "dgx-b300", "gb300-nvl72", "tpu-v4-pod", "jean-zay-a100",
    }  # fmt: skip


@pytest.mark.parametrize("gpu_id", GPU_IDS)
def test_every_gpu_loads_and_cites_a_source(gpu_id: str) -> None:
    gpu = load_gpu(gpu_id)
    assert gpu.source.strip()
    assert gpu.memory_bytes > 0


@pytest.mark.parametrize("name", CLUSTER_NAMES)
def test_every_cluster_loads_and_cites_a_source(name: str) -> None:
    cluster = load_cluster(name)
    assert cluster.source.strip()
    assert cluster.num_nodes * cluster.node.gpus_per_node == cluster.num_gpus
    assert cluster.tiers[-1].ranks >= cluster.num_gpus


@pytest.mark.parametrize("gpu_id", GPU_IDS)
def test_gpu_matches_hardware_facts(gpu_id: str) -> None:
    """Golden: the catalog copies data/hardware.yaml exactly (dense peaks, memory bandwidth, capacity,
    TDP), and NVLink is halved because hardware.yaml states it bidirectional while GPUSpec wants one
    direction. Fields hardware.yaml leaves null (B300/GB300 memory, bandwidth, NVLink, TDP) are sourced
    in the catalog entry instead."""
    facts = HARDWARE[gpu_id]
    gpu = load_gpu(gpu_id)
    assert gpu.peak_bf16_tflops == facts["peak_bf16_dense_tflops"]
    assert gpu.peak_fp8_tflops == facts["peak_fp8_dense_tflops"]
    assert gpu.peak_fp4_tflops == facts["peak_fp4_dense_tflops"]
    if facts["memory_bandwidth_gb_s"] is not None:
        assert gpu.memory_bandwidth_gb_per_s == facts["memory_bandwidth_gb_s"]
    if facts["memory_gb"] is not None:
        assert gpu.memory_gib == facts["memory_gb"]  # vendor "80 GB" HBM is taken as 80 GiB
    if facts["nvlink_bandwidth_gb_s"] is not None:
        assert gpu.scaleup_bandwidth_gb_per_s == facts["nvlink_bandwidth_gb_s"] / 2
    if facts["tdp_w"] is not None:
        assert gpu.tdp_w == facts["tdp_w"]


def test_gb200_keeps_the_peaks_nvidia_uses_for_mfu() -> None:
    # NVIDIA/dgxc-benchmarking README uses 2450/4900 dense for GB200; the spec sheet implies 2500/5000. The
    # published-runs comparison needs NVIDIA's own denominators, so the catalog must not "correct" them.
    gpu = load_gpu("gb200")
    assert (gpu.peak_bf16_tflops, gpu.peak_fp8_tflops) == (2450, 4900)


def test_h100_nvlink_is_one_direction() -> None:
    assert load_gpu("h100-sxm").scaleup_bandwidth_gb_per_s == 450


def test_seed_500k_is_the_flagship_size() -> None:
    # The project's target cluster (hypothetical, not a published system): 500k GPUs, 8 per node (62,500 nodes),
    # NDR 400G InfiniBand, multi-plane fat-tree.
    cluster = load_cluster("seed-500k")
    assert cluster.num_gpus == 500_000
    assert cluster.num_nodes == 62_500
    assert cluster.node.gpus_per_node == 8
    assert (cluster.node.nics_per_node, cluster.node.nic_gbit_per_s) == (8, 400)
    assert cluster.node.nic_bytes_per_s_per_gpu == 50e9
    assert cluster.planes == 8 and cluster.rail_optimized
    assert cluster.tiers[-1].ranks >= 500_000
    assert cluster.tiers[-1].oversubscription > 1


def test_llama3_cluster_has_the_published_clos() -> None:
    # Llama 3 §3.3.1: 3,072-GPU pods with full bisection, 1:7 oversubscription at the aggregation layer.
    tiers = {tier.name: tier for tier in load_cluster("llama3-16k").tiers}
    assert tiers["pod"].ranks == 3072 and tiers["pod"].oversubscription == 1
    assert tiers["cluster"].oversubscription == 7


def _yaml_resource(package: str, name: str) -> Any:
    return yaml.safe_load(resources.files(package).joinpath(name).read_text(encoding="utf-8"))


# Published runs are predicted on a reference cluster per GPU id (catalog/reference_clusters.yaml), with overrides
# for runs whose source names another machine. These tests hold that mapping to the shipped dataset.
RUNS: list[dict[str, Any]] = _yaml_resource("llmscale.data", "published_runs.yaml")
REFERENCE: dict[str, dict[str, Any]] = _yaml_resource("llmscale.catalog", "reference_clusters.yaml")


def _reference_cluster(run: dict[str, Any]) -> str | None:
    """The cluster a run is predicted on: the first by_source rule whose substring occurs in the run's source,
    else the GPU's default."""
    reference = REFERENCE[run["gpu"]]
    for rule in reference.get("by_source", []):
        if rule["source_contains"] in run["source"]:
            return str(rule["cluster"])
    return reference["cluster"]


def _runs_by_cluster() -> dict[str, list[dict[str, Any]]]:
    """Sized runs (num_gpus given) grouped by their reference cluster."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for run in RUNS:
        cluster = _reference_cluster(run)
        if cluster is not None and run["num_gpus"] is not None:
            grouped.setdefault(cluster, []).append(run)
    return grouped


RUNS_BY_CLUSTER = _runs_by_cluster()


def test_every_run_gpu_has_a_reference_entry() -> None:
    # A GPU id without an entry would leave validate with no network to predict on.
    assert {run["gpu"] for run in RUNS} <= set(REFERENCE)


def test_reference_entries_name_catalog_clusters_of_their_gpu() -> None:
    # A cluster built on another accelerator would predict the run with the wrong peaks and memory.
    for gpu_id, reference in REFERENCE.items():
        assert reference["source"].strip(), gpu_id
        targets = [reference["cluster"], *(rule["cluster"] for rule in reference.get("by_source", []))]
        for cluster in (name for name in targets if name is not None):
            assert cluster in CLUSTER_NAMES, f"{gpu_id}: {cluster!r} is not a catalog cluster"
            assert catalog_entry(Kind.CLUSTERS, cluster)["gpu"] == gpu_id, f"{gpu_id}: {cluster!r} has another GPU"


def test_no_cluster_only_where_the_catalog_has_no_gpu() -> None:
    # null is allowed only when no cluster could be built at all (no catalog GPU: v100, tpu-v3).
    for gpu_id, reference in REFERENCE.items():
        if reference["cluster"] is None:
            assert gpu_id not in GPU_IDS, f"{gpu_id} is in gpus.yaml, so it needs a reference cluster"


def test_every_by_source_rule_matches_a_run_of_its_gpu() -> None:
    # A substring that matches nothing (e.g. "Llama 3 paper", which no source field contains) silently does nothing.
    for gpu_id, reference in REFERENCE.items():
        for rule in reference.get("by_source", []):
            assert rule["why"].strip()
            assert any(run["gpu"] == gpu_id and rule["source_contains"] in run["source"] for run in RUNS), rule


def test_llama3_runs_use_metas_cluster() -> None:
    # Llama 3 §3.3.1: Meta's 24K-GPU RoCE cluster, not a DGX SuperPOD; the other H100 rows are NVIDIA benchmarks.
    llama3 = [run for run in RUNS if "arXiv:2407.21783" in run["source"]]
    assert len(llama3) == 3
    assert {_reference_cluster(run) for run in llama3} == {"llama3-16k"}
    others = [run for run in RUNS if run["gpu"] == "h100-sxm" and run not in llama3]
    assert {_reference_cluster(run) for run in others} == {"eos-h100"}


@pytest.mark.parametrize("name", sorted(RUNS_BY_CLUSTER))
def test_reference_cluster_holds_its_largest_run(name: str) -> None:
    # load_cluster rejects a num_gpus beyond the outermost tier, so validate could not place the run at all.
    largest = max(run["num_gpus"] for run in RUNS_BY_CLUSTER[name])
    cluster = load_cluster(name, num_gpus=largest)
    assert cluster.num_gpus == largest
    assert cluster.tiers[-1].ranks >= largest


@pytest.mark.parametrize("name", sorted(RUNS_BY_CLUSTER))
def test_every_run_fills_whole_nodes_of_its_cluster(name: str) -> None:
    # A run on a fraction of a node (e.g. 12 GPUs on 8-GPU nodes) has no valid ClusterSpec.
    per_node = load_cluster(name).node.gpus_per_node
    partial = [(run["name"], run["num_gpus"]) for run in RUNS_BY_CLUSTER[name] if run["num_gpus"] % per_node]
    assert not partial, f"not multiples of gpus_per_node ({per_node}): {partial}"


# A valid cluster file; each bad-input test breaks exactly one thing in it.
GOOD_CLUSTER: dict[str, Any] = {
    "name": "test-cluster",
    "gpu": "h100-sxm",
    "num_gpus": 64,
    "node": {
        "gpus_per_node": 8,
        "nics_per_node": 8,
        "nic_gbit_per_s": 400,
        "pcie_gb_per_s": 64,
        "host_memory_gib": 2048,
    },
    "tiers": [
        {"name": "nvlink", "ranks": 8, "bandwidth_gb_per_s": 450, "latency_us": 2.0},
        {"name": "leaf", "ranks": 64, "bandwidth_gb_per_s": 50, "latency_us": 3.0},
    ],
}


def _write(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(path)


def test_good_cluster_file_loads(tmp_path: Path) -> None:
    cluster = load_cluster(_write(tmp_path, GOOD_CLUSTER))
    assert cluster.num_nodes == 8


def test_unknown_key_is_rejected(tmp_path: Path) -> None:
    # A typo ("num_gpu") must not be silently ignored: the default would plan a different cluster.
    data = {**GOOD_CLUSTER, "num_gpu": 128}
    with pytest.raises(LlmscaleError) as info:
        load_cluster(_write(tmp_path, data))
    message = str(info.value)
    assert "num_gpu" in message and "128" in message and "unknown key" in message


def test_tier_ranks_not_nested_is_rejected(tmp_path: Path) -> None:
    # 12 is not a whole multiple of the 8-GPU NVLink domain: a 12-rank domain is not made of whole ones.
    data = {**GOOD_CLUSTER, "tiers": [GOOD_CLUSTER["tiers"][0], {**GOOD_CLUSTER["tiers"][1], "ranks": 12}]}
    with pytest.raises(LlmscaleError) as info:
        load_cluster(_write(tmp_path, data))
    message = str(info.value)
    assert "tiers.1.ranks = 12" in message and "tier 'leaf'" in message


def test_num_gpus_not_a_multiple_of_node_is_rejected(tmp_path: Path) -> None:
    # 60 GPUs on 8-GPU nodes would need 7.5 nodes.
    data = {**GOOD_CLUSTER, "num_gpus": 60}
    with pytest.raises(LlmscaleError) as info:
        load_cluster(_write(tmp_path, data))
    message = str(info.value)
    assert "num_gpus = 60" in message and "gpus_per_node (8)" in message


def test_unknown_gpu_name_is_rejected(tmp_path: Path) -> None:
    # "h900" is not a catalog GPU; the message must say which field and list the known names.
    data = {**GOOD_CLUSTER, "gpu": "h900"}
    with pytest.raises(LlmscaleError) as info:
        load_cluster(_write(tmp_path, data))
    message = str(info.value)
    assert "gpu" in message and "'h900'" in message and "h100-sxm" in message
