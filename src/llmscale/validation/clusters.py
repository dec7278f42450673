"""The cluster a published run ran on: the catalog's reference cluster of its GPU (catalog/reference_clusters.yaml),
sized to the run, grown where the run used more GPUs than the catalog's machine holds."""

from __future__ import annotations

from typing import Any

from llmscale.errors import LlmscaleError
from llmscale.io.catalog import catalog_file, load_cluster
from llmscale.io.files import parse_spec
from llmscale.specs.cluster import ClusterSpec
from llmscale.validation.runs import PublishedRun


def _reference_clusters() -> dict[str, Any]:
    table: dict[str, Any] = catalog_file("reference_clusters.yaml")
    return table


def reference_cluster(run: PublishedRun) -> ClusterSpec:
    """The cluster a run ran on (catalog/reference_clusters.yaml: the GPU's entry, a matching `by_source`
    rule first), sized to the run's GPUs. A run on more GPUs than that cluster holds runs on the same cluster with
    its outermost tier grown to hold them (`grown_cluster`): same GPU, node, tiers and per-GPU bandwidths."""
    entry = _reference_clusters().get(run.gpu or "")
    if not isinstance(entry, dict) or entry.get("cluster") is None:
        raise LlmscaleError(f"gpu {run.gpu!r} has no reference cluster in the catalog")
    name = entry["cluster"]
    for rule in entry.get("by_source") or []:
        if rule["source_contains"] in run.source:
            name = rule["cluster"]
            break
    cluster = load_cluster(name)
    if run.num_gpus is not None and run.num_gpus > cluster.tiers[-1].ranks:
        return grown_cluster(cluster, run.num_gpus)
    return load_cluster(name, num_gpus=run.num_gpus)


def grown_cluster(cluster: ClusterSpec, num_gpus: int) -> ClusterSpec:
    """`cluster` with its outermost tier spanning `num_gpus` (rounded up to whole domains of the tier inside it),
    named so that the report shows the growth: a larger machine of the same design, whose bandwidth per GPU and
    oversubscription at every tier are the catalog's."""
    tiers = list(cluster.tiers)
    inner = tiers[-2].ranks if len(tiers) > 1 else 1
    tiers[-1] = tiers[-1].model_copy(update={"ranks": -(-num_gpus // inner) * inner})
    data = cluster.model_dump() | {"name": f"{cluster.name} grown to {num_gpus:,} GPUs", "num_gpus": num_gpus,
                                   "tiers": [t.model_dump() for t in tiers]}
    return parse_spec(ClusterSpec, data, where=f"cluster {cluster.name} grown to {num_gpus} GPUs")


