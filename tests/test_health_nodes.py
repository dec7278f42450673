"""Node exec templates, the relaunch's node plan, hostfile addresses, the sweep's scopes and its catalog references:
no torch, no processes."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

from llmscale.cli.health_scope import Placement, Scope, references, resolve_placement
from llmscale.errors import SpecError
from llmscale.measure.links import find_suspects_vs
from llmscale.runtime.hosts import Exclusion, Host, parse_hostfile
from llmscale.runtime.nodes import NodeExecKind, parse_node_exec, plan_nodes
from tests.conftest import make_cluster
from tests.launch_helpers import torchrun_argv


@pytest.mark.parametrize(("text", "kind", "command"), [
    ("local", NodeExecKind.LOCAL, ["env", "A=1", "prog", "x y"]),
    ("netns", NodeExecKind.NETNS, ["ip", "netns", "exec", "h1", "env", "A=1", "prog", "x y"]),
    ("ip netns exec {host}", NodeExecKind.NETNS, ["ip", "netns", "exec", "h1", "env", "A=1", "prog", "x y"]),
    ("srun -w {host} -N1 -n1 --overlap", NodeExecKind.SRUN,
     ["srun", "-w", "h1", "-N1", "-n1", "--overlap", "env", "A=1", "prog", "x y"]),
    # ssh joins its arguments into one remote shell line: the argument with a space must arrive quoted
    ("ssh -p 2222 {host}", NodeExecKind.SSH, ["ssh", "-p", "2222", "h1", "env A=1 prog 'x y'"]),
])
def test_node_exec_templates(text: str, kind: NodeExecKind, command: list[str]) -> None:
    node_exec = parse_node_exec(text)
    assert node_exec.kind is kind
    assert node_exec.command("h1", ["prog", "x y"], {"A": "1"}) == command
    if kind is NodeExecKind.SSH:
        assert shlex.split(command[-1]) == ["env", "A=1", "prog", "x y"]


@pytest.mark.parametrize("text", ["rsh {host}", "ssh -p 22", "ssh {host} {host}", "ip netns exec", "ssh {host} {port}",
                                  "ip netns {host}", "ssh '{host}", "bash -c {host}"])
def test_bad_node_exec_is_one_error_naming_the_allowed_forms(text: str) -> None:
    with pytest.raises(SpecError, match=r"node-exec.*ip netns exec"):
        parse_node_exec(text)


HOSTS = parse_hostfile("a slots=2 addr=10.0.0.1\nb slots=2 addr=10.0.0.2\nc slots=2\n")


def test_hostfile_addr_and_default_address() -> None:
    assert [(h.name, h.slots, h.address) for h in HOSTS] == [("a", 2, "10.0.0.1"), ("b", 2, "10.0.0.2"),
                                                             ("c", 2, "c")]
    with pytest.raises(SpecError, match="addr"):
        parse_hostfile("a addr=10.0.0.1,10.0.0.2\n")


def test_node_plan_leaves_the_excluded_host_out_and_meets_at_the_first_kept() -> None:
    plan = plan_nodes(HOSTS, [Exclusion("a", "slow")], 2, parse_node_exec("ssh {host}"),
                      node_argv=torchrun_argv(["train.py", "--x"]), master_port=29600)
    assert plan.hosts == ("b", "c") and plan.master_addr == "10.0.0.2" and plan.nproc_per_node == 2
    remote = shlex.split(plan.nodes[1].argv[-1])
    assert plan.nodes[1].argv[:2] == ("ssh", "c")
    assert remote[-2:] == ["train.py", "--x"] and "--node-rank=1" in remote and "--nnodes=2" in remote
    assert "--master-addr=10.0.0.2" in remote and "--nproc-per-node=2" in remote
    assert "excluded (a)" in plan.summary()


def test_node_plan_with_too_few_hosts_left_says_what_the_exclusions_removed() -> None:
    with pytest.raises(SpecError, match=r"at most 1: the hostfile's 3 hosts less 2 excluded \(a, c\)"):
        plan_nodes(HOSTS, [Exclusion("a"), Exclusion("c")], 2, parse_node_exec("local"),
                   node_argv=torchrun_argv(["t.py"]))
    local = plan_nodes(HOSTS, [], 1, parse_node_exec("local"), node_argv=torchrun_argv(["t.py"]))
    assert local.master_addr == "127.0.0.1" and local.nodes[0].argv[0] == sys.executable  # no prefix, no env
    with pytest.raises(SpecError, match="slots"):
        plan_nodes([Host("a", 1), Host("b", 2)], [], 2, parse_node_exec("local"), node_argv=torchrun_argv(["t.py"]))


def test_scope_flags_never_ignored(tmp_path: Path) -> None:
    hostfile = tmp_path / "h.txt"
    hostfile.write_text("a slots=2\nb slots=2\n")
    with pytest.raises(SpecError, match="scope"):
        resolve_placement("rack", 2, None, None, None)
    with pytest.raises(SpecError, match="hostfile"):
        resolve_placement("node", 2, hostfile, None, None)
    with pytest.raises(SpecError, match="hostfile"):
        resolve_placement("cross-node", 2, None, None, None)
    with pytest.raises(SpecError, match="node_exec"):
        resolve_placement("node", 2, None, None, "ssh {host}")
    assert resolve_placement("cross-node", 2, hostfile, None, None).ranks_per_host == (1, 1)
    assert resolve_placement("hostfile", 2, hostfile, None, "netns").world_size == 4


def test_catalog_reference_per_pair_tier() -> None:
    # 8 GPUs per node, tiers nvlink (8 GPUs) and ib: ranks 0,1 on host a share the node -> nvlink; the rest cross
    cluster = make_cluster(num_gpus=64)
    placement = Placement(Scope.TIERS, tuple(HOSTS[:2]), (2, 1), parse_node_exec("local"), "test")
    refs = references(placement, cluster)
    assert refs.tier[0][1] == "nvlink" and refs.tier[0][2] == refs.tier[1][2] == "ib"
    assert refs.bytes_per_s[0, 1] == 300e9 and refs.bytes_per_s[1, 2] == 25e9
    assert refs.crossed == {"nvlink": 1, "ib": 2}
    # measured: the nvlink pair at 200 GB/s (0.67 x), the ib pairs at 24 GB/s (0.96 x): only the nvlink pair is slow
    bandwidth = np.array([[np.inf, 200e9, 24e9], [200e9, np.inf, 24e9], [24e9, 24e9, np.inf]])
    suspects = find_suspects_vs(bandwidth, refs.bytes_per_s, ["a", "a", "b"], 0.8)
    pair = next(s for s in suspects if s.kind == "pair")
    assert pair.ranks == (0, 1) and pair.bandwidth_bytes_per_s == pytest.approx(200e9)
    assert pair.reference_bytes_per_s == 300e9


def test_tiers_scope_needs_a_cluster(tmp_path: Path) -> None:
    hostfile = tmp_path / "h.txt"
    hostfile.write_text("a\nb\n")
    with pytest.raises(SpecError, match="cluster"):
        resolve_placement("tiers", 2, hostfile, None, "netns")
    assert resolve_placement("tiers", 2, hostfile, None, "netns", "selene").scope is Scope.TIERS


def test_job_scope_reads_the_hosts_of_the_step_records(tmp_path: Path) -> None:
    from llmscale.runtime.files import RunPaths, StepRecord, append_step

    (tmp_path / "config.yaml").write_text("name: x\n")
    paths = RunPaths(tmp_path)
    for rank, host in enumerate(["n1", "n1", "n2"]):
        append_step(paths, StepRecord(1, rank, 0, host, 0.0, 0.1, {}, 1.0, 8))
    placement = resolve_placement("job", 2, None, tmp_path, "ssh {host}")
    assert [h.name for h in placement.hosts] == ["n1", "n2"] and placement.ranks_per_host == (2, 1)
    with pytest.raises(SpecError, match="run_dir"):
        resolve_placement("job", 2, None, None, None)


def test_against_an_absolute_reference_a_healthy_rank_is_not_condemned_by_one_slow_peer() -> None:
    # measured on three namespaced hosts with host 2 capped (leaf 0-1 rated 0.2, spine 0.1 GB/s): ranks 0 and 1
    # have one good and one slow pair each; the plain median (their mean) would fall below 0.8 x their reference
    bandwidth = np.array([[np.inf, 0.27, 0.020], [0.27, np.inf, 0.019], [0.020, 0.019, np.inf]]) * 1e9
    reference = np.array([[np.inf, 0.2, 0.1], [0.2, np.inf, 0.1], [0.1, 0.1, np.inf]]) * 1e9
    found = {(s.kind, s.ranks) for s in find_suspects_vs(bandwidth, reference, ["h0", "h1", "h2"], 0.8)}
    assert found == {("rank", (2,)), ("node", (2,)), ("pair", (0, 2)), ("pair", (1, 2))}
