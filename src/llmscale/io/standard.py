"""`--cluster GPU:COUNT`: a standard cluster of COUNT catalog GPUs (catalog/standard_clusters.yaml).

The topology is a DGX SuperPOD-style one (NVIDIA DGX SuperPOD reference architectures for H100, B200, B300 and GB200,
as cited per GPU in the YAML): tier 0 is the GPU's NVLink domain (8 GPUs on an HGX/DGX board, 72 in an NVL72 rack) at
its `scaleup_bandwidth_gb_per_s`; tier 1 a scalable unit (SU) of rail-optimized leaves, one NIC per GPU at the
node's line rate; above one SU a non-blocking (1:1) spine spanning the SUs the job needs. Node, power and price come
from the catalog cluster the entry names (`node_from`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmscale.errors import CatalogError
from llmscale.specs.cluster import NodeSpec
from llmscale.units import GB, gbit_per_s_to_bytes_per_s, parse_count

LATENCY_US = (2.0, 3.0, 4.0)
"""Scale-up, leaf and spine latencies (catalog/standard_clusters.yaml header)."""


def is_standard_ref(ref: str) -> bool:
    """Whether a `--cluster` argument has the GPU:COUNT form (the caller has ruled out a file path)."""
    return ":" in ref


def standard_entry(ref: str, entries: dict[str, Any], gpu_names: list[str],
                   gpu_entry: Callable[[str], dict[str, Any]],
                   cluster_entry: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """The cluster mapping `GPU:COUNT` describes, ready for ClusterSpec. `entries`: standard_clusters.yaml;
    `gpu_names`: the catalog's GPUs; `gpu_entry`, `cluster_entry`: a catalog GPU's or cluster's mapping."""
    gpu_name, _, count_text = ref.partition(":")
    if gpu_name not in entries:
        raise CatalogError(
            f"--cluster {ref!r}: GPU:COUNT needs a GPU with a standard topology: {', '.join(entries)} "
            f"(catalog GPUs: {', '.join(gpu_names)})"
        )
    spec = entries[gpu_name]
    base = cluster_entry(spec["node_from"])
    node = NodeSpec.model_validate(base["node"])
    count = _count(ref, count_text, node.gpus_per_node)
    gpu = gpu_entry(gpu_name)
    scaleout_gb_per_s = gbit_per_s_to_bytes_per_s(node.nic_gbit_per_s) * node.nics_per_node / node.gpus_per_node / GB
    tiers: list[dict[str, Any]] = [
        {"name": "nvlink", "ranks": spec["scaleup_ranks"], "bandwidth_gb_per_s": gpu["scaleup_bandwidth_gb_per_s"],
         "latency_us": LATENCY_US[0], "in_network_reduction": bool(base["tiers"][0].get("in_network_reduction"))}]
    if count > spec["scaleup_ranks"]:
        tiers.append({"name": "su-leaf", "ranks": spec["su_ranks"], "bandwidth_gb_per_s": scaleout_gb_per_s,
                      "latency_us": LATENCY_US[1]})
    if count > spec["su_ranks"]:
        tiers.append({"name": "spine", "ranks": -(-count // spec["su_ranks"]) * spec["su_ranks"],
                      "bandwidth_gb_per_s": scaleout_gb_per_s, "latency_us": LATENCY_US[2]})
    price = {"usd_per_gpu_hour": base["usd_per_gpu_hour"]} if "usd_per_gpu_hour" in base else {}
    return {"name": f"{gpu_name}:{count}", "gpu": gpu, "num_gpus": count, "node": base["node"], "tiers": tiers,
            "rail_optimized": True, "planes": 1, "power": base.get("power", {}), **price,
            "source": f"standard topology (catalog/standard_clusters.yaml): {' '.join(str(spec['source']).split())}"}


def _count(ref: str, text: str, per_node: int) -> int:
    """COUNT of `GPU:COUNT`: a whole, positive multiple of the node's GPUs (`512`, `1K`, `16K`)."""
    try:
        value = parse_count(text)
    except ValueError:
        value = 0.0
    if value <= 0 or value != int(value) or int(value) % per_node:
        raise CatalogError(f"--cluster {ref!r}: COUNT {text!r} must be a positive whole multiple of {per_node} "
                           f"(GPUs per node), e.g. {ref.partition(':')[0]}:{per_node * 64}")
    return int(value)
