"""The rows of `llmscale catalog`: each catalog entry's key facts (the table's columns, `report.tables.CATALOG_COLUMNS`)
and its source, from the loaded specs (so a table shows what a command would use, efficiency defaults filled in)."""

from __future__ import annotations

from typing import Any

from llmscale.cost.params import count_params
from llmscale.io.catalog import Kind, entry, load_cluster, load_gpu, load_model, names
from llmscale.specs.cluster import ClusterSpec, GPUSpec
from llmscale.specs.model import ModelSpec
from llmscale.units import si_count


def catalog_rows(kinds: list[Kind]) -> dict[Kind, list[dict[str, Any]]]:
    """{kind: [{name, facts: {column: value}, source}]} in catalog order."""
    build = {Kind.CLUSTERS: lambda n: cluster_facts(load_cluster(n)), Kind.GPUS: lambda n: gpu_facts(load_gpu(n)),
             Kind.MODELS: lambda n: model_facts(load_model(n))}
    return {kind: [{"name": name, "facts": {"name": name, **build[kind](name)},
                    "source": " ".join(str(entry(kind, name).get("source", "")).split())}
                   for name in names(kind)] for kind in kinds}


def cluster_facts(cluster: ClusterSpec) -> dict[str, Any]:
    tiers = " · ".join(f"{t.name} {t.ranks:,} @ {t.bandwidth_gb_per_s:g}" for t in cluster.tiers)
    return {"GPU": cluster.gpu.name, "GPUs": cluster.num_gpus, "nodes": cluster.num_nodes,
            "GPUs/node": cluster.node.gpus_per_node, "tiers: ranks @ GB/s per GPU one way": tiers}


def gpu_facts(gpu: GPUSpec) -> dict[str, Any]:
    return {"GPU": gpu.name, "BF16 TFLOP/s": gpu.peak_bf16_tflops, "FP8 TFLOP/s": gpu.peak_fp8_tflops,
            "FP4 TFLOP/s": gpu.peak_fp4_tflops, "HBM GiB": gpu.memory_gib,
            "HBM TB/s": gpu.memory_bandwidth_gb_per_s / 1000, "NVLink GB/s": gpu.scaleup_bandwidth_gb_per_s}


def model_facts(model: ModelSpec) -> dict[str, Any]:
    counts = count_params(model).as_dict()
    return {"type": "moe" if model.is_moe else "dense", "layers": model.layers, "hidden": model.hidden,
            "total params": si_count(counts["total_params"]), "active params": si_count(counts["active_params"])}
