"""Placement (llmscale.placement): group membership as Megatron-Core numbers it, spans over the tiers, aligned packing
around excluded nodes, per-tier traffic shares, and the CLI — on small clusters whose best placement is known by hand.

The small cluster: 12 nodes of 2 GPUs; a leaf holds 4 nodes (8 GPUs), a spine the 24 GPUs at 4:1 oversubscription.
A tp2 dp4 pp2 layout (16 GPUs, 8 nodes) in Megatron's order has DP groups of 4 nodes (ranks 2 apart) and PP pairs 8
ranks apart: each DP group fits one leaf and the pipeline crosses the spine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmscale.cost.collectives import collective_time_s, group_links, placed_group_links, tier_shares
from llmscale.errors import SpecError
from llmscale.io.catalog import load_constants, load_gpu, load_model
from llmscale.placement.assign import in_order, packed
from llmscale.placement.fabric import Fabric
from llmscale.placement.hostorder import HostOrder
from llmscale.placement.mesh import GroupKind, group_ids, node_axes
from llmscale.placement.search import TOLERANCE, search_placements
from llmscale.placement.spans import kind_span
from llmscale.runtime.hosts import Exclusion, Host
from llmscale.specs.cluster import ClusterSpec, NetworkTier, NodeSpec
from llmscale.specs.collective import Collective
from llmscale.specs.layout import Layout, RankOrder
from llmscale.specs.train import TrainSpec
from tests.conftest import run_cli, run_cli_json

CLUSTER_YAML = """name: small-fat-tree
gpu: h100-sxm
num_gpus: 24
node: {gpus_per_node: 2, nics_per_node: 2, nic_gbit_per_s: 400, pcie_gb_per_s: 64, host_memory_gib: 512}
tiers:
  - {name: nvlink, ranks: 2, bandwidth_gb_per_s: 450, latency_us: 2.0}
  - {name: leaf, ranks: 8, bandwidth_gb_per_s: 50, latency_us: 3.0}
  - {name: spine, ranks: 24, bandwidth_gb_per_s: 50, latency_us: 4.0, oversubscription: 4}
"""


def small_cluster() -> ClusterSpec:
    return ClusterSpec(
        name="small-fat-tree", gpu=load_gpu("h100-sxm"), num_gpus=24,
        node=NodeSpec(gpus_per_node=2, nics_per_node=2, nic_gbit_per_s=400, pcie_gb_per_s=64, host_memory_gib=512),
        tiers=(NetworkTier(name="nvlink", ranks=2, bandwidth_gb_per_s=450, latency_us=2.0),
               NetworkTier(name="leaf", ranks=8, bandwidth_gb_per_s=50, latency_us=3.0),
               NetworkTier(name="spine", ranks=24, bandwidth_gb_per_s=50, latency_us=4.0, oversubscription=4)))


def dense_layout(**rest: object) -> Layout:
    return Layout(**{"tp": 2, "pp": 2, "dp": 4, "mbs": 1, "etp": 1, **rest})  # type: ignore[arg-type]


def members(rank: int, lay: Layout, kind: GroupKind, world: int) -> list[int]:
    ids = group_ids(lay, kind, np.arange(world))
    return np.flatnonzero(ids == ids[rank]).tolist()


def test_groups_are_megatrons_own_example() -> None:
    # Megatron-LM megatron/core/parallel_state.py initialize_model_parallel docstring (core_v0.15.0): 16 GPUs, tp 2,
    # pp 4 (dp 2) -> tensor groups [g0, g1] ..., data-parallel groups [g0, g2], [g1, g3] ..., pipeline groups
    # [g0, g4, g8, g12], [g1, g5, g9, g13] ...
    lay = Layout(tp=2, pp=4, dp=2, etp=1)
    assert members(0, lay, GroupKind.TP, 16) == [0, 1]
    assert members(0, lay, GroupKind.DP, 16) == [0, 2] and members(1, lay, GroupKind.DP, 16) == [1, 3]
    assert members(0, lay, GroupKind.PP, 16) == [0, 4, 8, 12] and members(1, lay, GroupKind.PP, 16) == [1, 5, 9, 13]


def test_expert_groups_and_the_pipeline_inside_data_parallel() -> None:
    # Expert generator: etp, ep, edp, pp over the same ranks (RankGenerator with tp -> etp, dp -> edp, cp -> 1).
    lay = Layout(tp=2, pp=2, dp=4, ep=4, etp=1)
    assert members(0, lay, GroupKind.EP, 16) == [0, 1, 2, 3] and members(0, lay, GroupKind.EDP, 16) == [0, 4]
    # tp-cp-ep-pp-dp (--use-tp-pp-dp-mapping): pipeline neighbours 2 ranks apart, DP 4 apart.
    inner = Layout(tp=2, pp=2, dp=4, etp=1, rank_order=RankOrder.TP_CP_EP_PP_DP)
    assert members(0, inner, GroupKind.PP, 16) == [0, 2] and members(0, inner, GroupKind.DP, 16) == [0, 4, 8, 12]


def test_node_axes_cut_at_every_group_boundary() -> None:
    axes = node_axes(dense_layout(), gpus_per_node=2)
    assert axes is not None and [(a.name, a.size, a.stride) for a in axes] == [("dp", 4, 1), ("pp", 2, 4)]
    moe = node_axes(Layout(tp=2, pp=2, dp=8, ep=4, etp=1), gpus_per_node=2)  # EP spans 2 of dp's 8 nodes
    assert moe is not None and [(a.name, a.size) for a in moe] == [("dp/ep", 2), ("dp/edp", 4), ("pp", 2)]


def test_a_hole_moves_the_data_parallel_groups_to_whole_leaves() -> None:
    cluster = small_cluster()
    fabric = Fabric.of(cluster, exclusions=[Exclusion("node00001")])
    lay = dense_layout()
    first = in_order(fabric, 8)
    assert first.node_of.tolist() == [0, 2, 3, 4, 5, 6, 7, 8]  # the free nodes in order: group 0 straddles leaves
    span = kind_span(lay, GroupKind.DP, fabric, first.node_of)
    # DP group 0 has one member per node (ranks 0, 2, 4, 6): 3 of them in leaf 0, the 4th alone in leaf 1
    assert span.members.tolist() == [1, 1, 4] and span.domains.tolist() == [4, 2, 1]
    axes = node_axes(lay, 2)
    assert axes is not None
    aligned = packed(fabric, axes, (0, 1), tuple(t.ranks // 2 for t in cluster.tiers))
    # leaf 0 has 3 free nodes, too few for a 4-node DP group: the groups take leaves 1 and 2, 3 nodes idle
    assert aligned.node_of.tolist() == [4, 5, 6, 7, 8, 9, 10, 11] and aligned.skipped == 3
    assert kind_span(lay, GroupKind.DP, fabric, aligned.node_of).members.tolist() == [1, 4, 4]


def test_the_search_prices_the_hole_and_finds_the_aligned_placement() -> None:
    cluster = small_cluster()
    model, constants = load_model("llama3-8b"), load_constants()
    train = TrainSpec(global_batch=64, seq_len=4096)
    lay = dense_layout(zero=1)
    hole = search_placements(model, cluster, train, lay, constants, Fabric.of(cluster, exclusions=[
        Exclusion("node00001")]))
    assert hole.best.placement.node_of.tolist() == [4, 5, 6, 7, 8, 9, 10, 11]
    assert hole.in_order.step_s > hole.best.step_s  # the straddling DP group pays the 4:1 spine
    assert hole.best.step_s == pytest.approx(hole.aligned_step_s, rel=1e-12)  # aligned again: as the search priced
    intact = search_placements(model, cluster, train, lay, constants, Fabric.of(cluster))
    assert intact.in_order.step_s == pytest.approx(intact.aligned_step_s, rel=1e-12)  # no hole: in order is aligned
    assert intact.best.placement.name == "in order" or intact.gain > 1 + TOLERANCE  # another only when it buys


def test_a_straddling_ring_gets_the_uplinks_its_leaf_does_not_use() -> None:
    # In order around the hole at node 1, leaf 1 (nodes 4-7) sends 2 ring edges out per DP group of its two stages'
    # straddlers (node 4 -> 0 and node 7 -> 8), each edge one rank's bytes, for both tp ranks: 4 of its 8 GPU slots.
    # over_eff = 4 (spine) x 4/8 / 1 = 2: the ring crosses at rated/2, not rated/4 (benchmarks/placement_simgrid.py
    # simulates it: SimGrid 8.6 ms, llmscale 8.2 ms).
    cluster = small_cluster()
    fabric = Fabric.of(cluster, exclusions=[Exclusion("node00001")])
    span = kind_span(dense_layout(), GroupKind.DP, fabric, in_order(fabric, 8).node_of)
    assert span.relief.tolist() == [1.0, 1.0, 2.0]


def test_pricing_placed_members_agrees_with_the_aligned_blocks() -> None:
    # A group placed as Megatron's order places it (8 members 2 apart on the small cluster: 1 per node, 4 per leaf)
    # costs the same through either entry point.
    cluster, comm = small_cluster(), load_constants().comm
    size, stride = np.array([8]), np.array([2])
    aligned = group_links(cluster, size, stride, comm)
    placed = placed_group_links(cluster, size, stride, np.array([[1.0], [4.0], [8.0]]), comm)
    for op in (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL, Collective.SEND_RECV):
        assert collective_time_s(op, np.array([1e8]), size, placed) == pytest.approx(
            collective_time_s(op, np.array([1e8]), size, aligned), rel=1e-12)


def test_tier_shares_by_hand() -> None:
    # 8 members, 2 per node, 4 per leaf. Ring: 4 edges leave a node, 2 leave a leaf -> 4/8 inside nodes,
    # (4 - 2)/8 between nodes of a leaf, 2/8 across the spine. All-to-all: of 7 peers 1 in the node, 2 more in
    # the leaf, 4 beyond.
    m = np.array([[2.0], [4.0], [8.0]])
    ring = tier_shares(Collective.REDUCE_SCATTER, np.array([8]), m)[:, 0]
    assert ring.tolist() == [0.5, 0.25, 0.25]
    assert tier_shares(Collective.ALL_TO_ALL, np.array([8]), m)[:, 0] == pytest.approx([1 / 7, 2 / 7, 4 / 7])


def test_host_order_files(tmp_path: Path) -> None:
    cluster = small_cluster()
    hosts = [Host(f"gpu-{c}") for c in "abcdefghijkl"]
    fabric = Fabric.of(cluster, hosts, [Exclusion("gpu-b"), Exclusion("not-a-host")])
    assert fabric.unknown == ("not-a-host",) and fabric.free_nodes == 11
    order = HostOrder.of(fabric, in_order(fabric, 3), ranks=5)  # the last host half used
    assert order.hostfile() == "gpu-a slots=2\ngpu-c slots=2\ngpu-d slots=1\n"
    assert order.slurm_hostfile() == "gpu-a\ngpu-a\ngpu-c\ngpu-c\ngpu-d\n"
    assert order.srun_args() == "--nodes=3 --ntasks=5 --distribution=arbitrary --nodelist=gpu-a,gpu-c,gpu-d"
    written = order.write(tmp_path / "out")
    assert [p.name for p in written] == ["hostfile", "slurm_hostfile", "srun_args.txt"]
    with pytest.raises(SpecError, match="at least one host"):
        Fabric.of(cluster, [], [])
    with pytest.raises(SpecError, match="slots = the cluster's 2 GPUs per node"):
        Fabric.of(cluster, [Host("gpu-a", slots=8)])


def test_explain_placement_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.yaml").write_text(CLUSTER_YAML, encoding="utf-8")
    (tmp_path / "x.txt").write_text("# slow\nnode00001\n", encoding="utf-8")
    args = ["explain", "-m", "llama3-8b", "-c", str(tmp_path / "c.yaml"), "--gpus", "16", "--tp", "2", "--pp", "2",
            "--mbs", "1", "--gbs", "64", "--exclude-from", str(tmp_path / "x.txt")]
    doc = run_cli_json(capsys, *args, "--placement-out", str(tmp_path / "order"))
    placed = doc["placement"]
    assert placed["fabric"]["excluded"] == ["node00001"] and placed["best"]["idle_nodes_for_alignment"] == 3
    assert placed["best"]["groups"]["dp"]["members_per_domain"] == {"nvlink": 1, "leaf": 4, "spine": 4}
    assert placed["in_order"]["groups"]["dp"]["members_per_domain"]["leaf"] == 1
    assert (tmp_path / "order" / "hostfile").read_text().splitlines()[0] == "node00004 slots=2"
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and "placement buys" in out and "host order (node rank 0, 1, …): node00004" in out


def test_placement_out_must_be_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.yaml").write_text(CLUSTER_YAML, encoding="utf-8")
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    base = ["-m", "llama3-8b", "-c", str(tmp_path / "c.yaml"), "--gbs", "64"]
    code, out, err = run_cli(capsys, "explain", *base, "--gpus", "16", "--tp", "2", "--pp", "2",
                             "--placement-out", str(tmp_path / "afile" / "sub"))
    assert code == 2 and "is a file, not a directory" in err and out == ""  # refused before any work
    code, _, err = run_cli(capsys, "plan", *base, "--placements", "0", "--placement-out", str(tmp_path / "d"))
    assert code == 2 and "needs --placements ≥ 1" in err


def test_too_few_free_nodes_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.yaml").write_text(CLUSTER_YAML, encoding="utf-8")
    (tmp_path / "x.txt").write_text("".join(f"node{i:05d}\n" for i in range(5)), encoding="utf-8")
    code, _, err = run_cli(capsys, "explain", "-m", "llama3-8b", "-c", str(tmp_path / "c.yaml"), "--gpus", "16",
                           "--tp", "2", "--pp", "2", "--gbs", "64", "--exclude-from", str(tmp_path / "x.txt"))
    assert code == 2 and "gpus = 16 is invalid: at most the 14 GPUs left on 7 free nodes (5 excluded of 12)" in err
    doc = run_cli_json(capsys, "plan", "-m", "llama3-8b", "-c", str(tmp_path / "c.yaml"), "--gbs", "64",
                       "--exclude-from", str(tmp_path / "x.txt"))
    assert doc["jobs"]["cluster_gpus"] == 14
    # 14 GPUs left: beside the powers of two, the largest multiples of 4 and 2 within them (search.leftover_sizes)
    assert {12, 14} <= {size["num_gpus"] for size in doc["job_sizes"]}
    assert all(p["nodes"] <= 7 for p in doc["placement"])


def test_plan_places_on_the_hostfile_and_checks_its_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.yaml").write_text(CLUSTER_YAML, encoding="utf-8")
    (tmp_path / "hosts").write_text("".join(f"gpu-{i:02d} slots=2\n" for i in range(8)), encoding="utf-8")
    doc = run_cli_json(capsys, "plan", "-m", "llama3-8b", "-c", str(tmp_path / "c.yaml"), "--gbs", "64",
                       "--hostfile", str(tmp_path / "hosts"), "--placements", "2")
    assert doc["jobs"]["cluster_gpus"] == 16 and len(doc["placement"]) == 2  # 8 hosts of 2 GPUs: the job's ceiling
    assert doc["placement"][0]["best"]["hosts_head"][0].startswith("gpu-")
    code, _, err = run_cli(capsys, "plan", "-m", "llama3-8b", "-c", str(tmp_path / "c.yaml"), "--placements", "-1")
    assert code == 2 and "--placements" in err


def test_placements_from_python_are_checked() -> None:
    import llmscale
    from llmscale.errors import SpecError

    with pytest.raises(SpecError, match="placements"):
        llmscale.plan("llama3-8b", small_cluster(), train={"global_batch": 64}, placements=True)  # type: ignore[arg-type]


def test_placed_links_leave_the_callers_members_alone() -> None:
    members = np.array([[1.0], [4.0], [5.0]])
    placed_group_links(small_cluster(), np.array([8]), np.array([2]), members, load_constants().comm)
    assert members[:, 0].tolist() == [1.0, 4.0, 5.0]


def test_leftover_sizes_by_hand() -> None:
    from llmscale.search.plan import leftover_sizes

    assert leftover_sizes(1984, 8) == (1536, 1792)  # 2,048 H800 less 8 nodes: 3 x 512 and 7 x 256
    assert leftover_sizes(2048, 8) == ()  # a power of two: the usual sizes already end there
    assert leftover_sizes(1100, 512) == ()  # 1,024 + nothing: no multiple of 512 or 256 ≥ 512 above it
