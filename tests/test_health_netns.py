"""The health sweep across real network endpoints: three network namespaces on one bridge (tests/netns_cluster.py),
one of them with a real slow link (a tc token-bucket cap of 100 Mbit/s on its interface). `bench links --scope
hostfile --node-exec 'ip netns exec {host}'` starts one gloo rank in each namespace; it must name that host, write it
to the exclusion list, and the node plan of the relaunch (runtime/nodes.py) must leave it out — checked by running
the plan's torchrun commands in the remaining namespaces and reading the addresses the ranks bound.

Every process is started by the code under test or here, in its own session, and reaped; `ip netns pids` shows
none left in a namespace before it is deleted; every namespace and the bridge are gone afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmscale.runtime.hosts import read_exclusions, read_hostfile
from llmscale.runtime.nodes import parse_node_exec, plan_nodes
from tests.conftest import run_cli
from tests.launch_helpers import torchrun_argv
from tests.netns_cluster import IFNAME, NetnsCluster, leftovers, netns_available, netns_cluster, slow_link

pytest.importorskip("torch")
REASON = netns_available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
SLOW_MBIT = 100.0
"""The capped host's egress: 12.5 MB/s, against the bridge's unshaped ~0.1-1 GB/s for 64 KiB exchanges here."""

BOUND = """
import json, os, socket, sys
import torch.distributed as dist
dist.init_process_group("gloo")
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((os.environ["MASTER_ADDR"], 9))  # no packet is sent: the kernel picks the source address
mine = {"rank": dist.get_rank(), "world": dist.get_world_size(), "addr": s.getsockname()[0]}
seen = [None] * dist.get_world_size()
dist.all_gather_object(seen, mine)
if dist.get_rank() == 0:
    open(sys.argv[1], "w").write(json.dumps(seen))
dist.destroy_process_group()
"""


def _no_pids_left(cluster: NetnsCluster) -> None:
    for host in cluster.hosts:
        pids = subprocess.run(["ip", "netns", "pids", host.name], capture_output=True, text=True, timeout=30).stdout
        assert not pids.split(), f"processes left in {host.name}: {pids.split()}"


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[NetnsCluster]:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", IFNAME)  # each namespace's hostname resolves to loopback
    src = str(Path(__file__).resolve().parents[1] / "src")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    with netns_cluster(3) as made:
        slow_link(made.hosts[2], SLOW_MBIT)
        yield made
        _no_pids_left(made)
    assert leftovers(made) == []


def test_sweep_names_the_capped_host_and_the_relaunch_avoids_it(cluster: NetnsCluster, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    hostfile = cluster.write_hostfile(tmp_path / "hosts.txt")
    out_file = tmp_path / "exclude.txt"
    code, out, err = run_cli(capsys, "bench", "links", "--scope", "hostfile", "--hostfile", str(hostfile),
                             "--node-exec", "ip netns exec {host}", "--size", "64K", "--iters", "3", "--repeats", "3",
                             "--timeout-s", "120", "--exclude-out", str(out_file), "--json")
    assert code == 0, err
    doc = json.loads(out)
    slow, fast = cluster.hosts[2].name, {h.name for h in cluster.hosts[:2]}
    assert doc["hosts"] == [h.name for h in cluster.hosts] and doc["reference"]["kind"] == "median"
    named = {s["kind"]: s for s in doc["suspects"] if s["kind"] != "pair"}
    assert named["rank"]["ranks"] == [2] and named["node"]["hosts"] == [slow], doc["suspects"]
    # the capped link is far below the median (12.5 MB/s against the bridge's unshaped exchanges)
    for row in doc["rows"]:
        assert (row["ratio"] < 0.5) == (slow in (row["host_a"], row["host_b"])), row
    assert [e.host for e in read_exclusions(out_file)] == [slow]
    assert (tmp_path / "exclude.txt.slurm").read_text() == f"--exclude={slow}\n"

    plan = plan_nodes(read_hostfile(hostfile), read_exclusions(out_file), 2, parse_node_exec("ip netns exec {host}"),
                      node_argv=torchrun_argv([str(_script(tmp_path)), str(tmp_path / "bound.json")]),
                      master_port=29571)
    assert set(plan.hosts) == fast and plan.master_addr == cluster.hosts[0].address
    assert [e.host for e in plan.selection.excluded] == [slow]
    _run_plan([list(n.argv) for n in plan.nodes], timeout_s=90)
    bound = json.loads((tmp_path / "bound.json").read_text())
    assert sorted(r["addr"] for r in bound) == sorted(h.address for h in cluster.hosts[:2])
    assert cluster.hosts[2].address not in {r["addr"] for r in bound}


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "bound.py"
    path.write_text(BOUND, encoding="utf-8")
    return path


def _run_plan(commands: list[list[str]], timeout_s: float) -> None:
    """Start every node's command in its own session; wait; kill (by pid) and reap whatever is left."""
    procs = [subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for argv in commands]
    deadline = time.monotonic() + timeout_s
    try:
        for p in procs:
            p.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
            _, err = p.communicate()
            assert p.returncode == 0, err.decode()[-2000:]
    assert sys.executable in commands[0]


BRIDGE_CLUSTER = """name: netns-bridge
gpu: a100-80gb
num_gpus: 4
node: {gpus_per_node: 1, nics_per_node: 1, nic_gbit_per_s: 1, pcie_gb_per_s: 1, host_memory_gib: 1}
tiers:
  - {name: bridge, ranks: 4, bandwidth_gb_per_s: 0.05, latency_us: 50}
"""
"""A stand-in catalog entry for the namespaces: one host = one node of one "GPU", one tier (the bridge) rated
0.05 GB/s — 4x what the 100 Mbit/s cap lets through, below what the unshaped bridge moves."""


def test_collectives_across_the_namespaces_judged_against_the_catalog_tier(
        cluster: NetnsCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hostfile = cluster.write_hostfile(tmp_path / "hosts.txt")
    spec = tmp_path / "bridge.yaml"
    spec.write_text(BRIDGE_CLUSTER, encoding="utf-8")
    out_file = tmp_path / "exclude.txt"
    code, out, err = run_cli(capsys, "bench", "collectives", "--scope", "cross-node", "--hostfile", str(hostfile),
                             "--node-exec", "netns", "--ops", "all_reduce", "--sizes", "64K", "--iters", "3",
                             "--repeats", "3", "--cluster", str(spec), "--exclude-out", str(out_file), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [r["host"] for r in doc["ranks"]] == [h.name for h in cluster.hosts] and doc["scope"] == "cross-node"
    # every all-reduce ring passes the capped link: 12.5 MB/s bounds its busbw far below the tier's 0.05 GB/s
    assert doc["rows"] and all(r["tier_name"] == "bridge" and r["reference_bytes_per_s"] == 0.05e9 for r in doc["rows"])
    assert all(r["status"] == "SLOW" and r["reference_ratio"] < 0.5 for r in doc["rows"]), doc["rows"]
    # a slow collective across hosts pins no host: none excluded, the rows listed in the file's header
    assert read_exclusions(out_file) == []
    assert "slow across hosts" in out_file.read_text() and (tmp_path / "exclude.txt.slurm").read_text() == ""
