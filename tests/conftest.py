"""Shared fixtures: small hand-built clusters so estimate tests do not depend on catalog numbers."""

from __future__ import annotations

import pytest

from llmscale.io.catalog import load_gpu
from llmscale.specs.cluster import ClusterSpec, NetworkTier, NodeSpec


def make_cluster(num_gpus: int = 4096, memory_gib: float = 80.0, gpus_per_node: int = 8) -> ClusterSpec:
    """An A100-like cluster (Selene's shape) large enough for every layout the tests use."""
    return ClusterSpec(
        name="test-a100",
        gpu=load_gpu("a100-80gb").model_copy(update={"memory_gib": memory_gib}),
        num_gpus=num_gpus,
        node=NodeSpec(gpus_per_node=gpus_per_node, nics_per_node=8, nic_gbit_per_s=200, pcie_gb_per_s=25,
                      host_memory_gib=1024),
        tiers=(
            NetworkTier(name="nvlink", ranks=gpus_per_node, bandwidth_gb_per_s=300, latency_us=1.0),
            NetworkTier(name="ib", ranks=max(num_gpus, 2 * gpus_per_node), bandwidth_gb_per_s=25, latency_us=5.0),
        ),
    )


@pytest.fixture
def cluster() -> ClusterSpec:
    return make_cluster()
