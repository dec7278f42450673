"""Shared fixtures: small hand-built clusters so estimate tests do not depend on catalog numbers, and the CLI run
as a user runs it (exit code, stdout, stderr). Under pytest-xdist (the README's command runs `-n auto`), the tests
that start processes — torch.distributed ranks, torchrun's agent, network namespaces on one fixed subnet, the chaos
and resume runs — go to one worker, one at a time (`SERIAL_FILES`, xdist group "serial"); the rest spread over the
other workers."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

# The terminal tables are as wide as COLUMNS says when piped (report.tables); xdist's workers export COLUMNS=80 and a
# developer's shell its own width. The tests read them at the piped default (150) either way, so drop it before the
# report console is first imported below.
os.environ.pop("COLUMNS", None)

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


SERIAL_FILES = frozenset({
    "test_chaos.py", "test_runtime_resume.py", "test_launch.py", "test_launch_watch.py", "test_launch_hosts.py",
    "test_launch_hosts_plan.py", "test_launch_journal.py", "test_launch_reconcile.py", "test_health_netns.py",
    "test_health_nodes.py", "test_health_sweep.py", "test_measure.py", "test_probe.py", "test_storage.py",
})
"""Test files whose tests start ranks, agents or namespaces: their heartbeat and hang timeouts assume a core to
themselves, the namespaces share one subnet (tests/netns_cluster.py), so they run one after another."""


TOGETHER_FILES = frozenset({"test_fuzz.py", "test_report.py"})
"""Test files with an expensive module-scoped fixture (the fuzz run, a plan): one worker runs the file, so the
fixture is built once."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the SERIAL_FILES tests in xdist group "serial" and each TOGETHER_FILES file in a group of its own
    (`--dist loadgroup`: one worker runs a group's tests in turn)."""
    for item in items:
        if item.path.name in SERIAL_FILES:
            item.add_marker(pytest.mark.xdist_group("serial"))
        elif item.path.name in TOGETHER_FILES:
            item.add_marker(pytest.mark.xdist_group(item.path.name))


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
