"""Shared fixtures: small hand-built clusters so estimate tests do not depend on catalog numbers, and the CLI run
as a user runs it (exit code, stdout, stderr)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmscale.cli.main import main
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


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `llmscale ARGS` (main, as the console script calls it)."""
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 0), out, err


def run_cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """The JSON document of `llmscale ARGS --json`, which must exit 0."""
    code, out, err = run_cli(capsys, *args, "--json")
    assert code == 0, err
    document: dict[str, Any] = json.loads(out)
    return document
