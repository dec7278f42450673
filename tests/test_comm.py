"""Tests of the communication model (src/llmscale/cost/collectives.py): nccl-tests definitions, golden times derived
from published bandwidths (the formula, its inputs and their sources beside each), placement on catalog clusters,
and properties (size 1, monotonicity, oversubscription, vectorized == one at a time)."""

from __future__ import annotations

from functools import cache
from importlib import resources

import numpy as np
import pytest
import yaml

from llmscale.cost.collectives import (
    Collective,
    GroupLinks,
    bus_factor,
    collective_time_s,
    group_links,
)
from llmscale.io.catalog import load_cluster, load_constants
from llmscale.specs.cluster import ClusterSpec
from llmscale.units import GB, MB, MS

CONSTANTS = load_constants()

ONE_GB = 1 * GB  # decimal GB (1e9 B), as in the worked examples below


@cache
def catalog(name: str) -> ClusterSpec:
    return load_cluster(name)


def without_nvls(cluster: ClusterSpec) -> ClusterSpec:
    """The same cluster with NVLink SHARP switched off (NCCL_ALGO=RING / NCCL_NVLS_ENABLE=0)."""
    first = cluster.tiers[0].model_copy(update={"in_network_reduction": False})
    return cluster.model_copy(update={"tiers": (first, *cluster.tiers[1:])})


def with_tiers(cluster: ClusterSpec, **changes: float) -> ClusterSpec:
    """The same cluster with every tier's fields changed: a keyword `x_scale` multiplies field x, others set it."""
    tiers = []
    for tier in cluster.tiers:
        update = {k: v for k, v in changes.items() if not k.endswith("_scale")}
        update.update({k[:-6]: getattr(tier, k[:-6]) * v for k, v in changes.items() if k.endswith("_scale")})
        tiers.append(tier.model_copy(update=update))
    return cluster.model_copy(update={"tiers": tuple(tiers)})


def time_s(cluster: ClusterSpec, op: Collective, nbytes: float, size: int, stride: int) -> float:
    links = group_links(cluster, np.array([size]), np.array([stride]), CONSTANTS.comm)
    return float(collective_time_s(op, np.array([nbytes]), np.array([size]), links)[0])


def links_of(cluster: ClusterSpec, size: int, stride: int) -> GroupLinks:
    return group_links(cluster, np.array([size]), np.array([stride]), CONSTANTS.comm)


# ------------------------------------------- nccl-tests definitions (NVIDIA/nccl-tests@03a204a doc/PERFORMANCE.md)


@pytest.mark.parametrize("n", [2, 4, 8, 64, 1024])
def test_bus_factors_are_nccl_tests_definitions(n: int) -> None:
    # Bus-bandwidth factors of nccl-tests doc/PERFORMANCE.md: AllReduce 2(n-1)/n; ReduceScatter, AllGather,
    # AlltoAll (n-1)/n; point-to-point 1.
    assert bus_factor(Collective.ALL_REDUCE, n) == pytest.approx(2 * (n - 1) / n)
    for op in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_TO_ALL):
        assert bus_factor(op, n) == pytest.approx((n - 1) / n)
    assert bus_factor(Collective.SEND_RECV, n) == 1.0


@pytest.mark.parametrize("op", list(Collective))
@pytest.mark.parametrize("n", [2, 4, 8])
def test_time_slope_is_bus_factor_over_busbw(op: Collective, n: int) -> None:
    # Inside one NVLink domain with NVLS off: t = α-terms + S·f(n)/busbw (from nccl-tests' definitions
    # algbw = S/t, busbw = algbw·f(n)), so the time added by one more GB is f(n)/busbw exactly; busbw is the
    # achievable NVLink ring figure 0.82 × 450 (370 GB/s, NCCL maintainer in NVIDIA/nccl-tests issue #212), the
    # all-to-all figure for all-to-all.
    cluster = without_nvls(catalog("llama3-16k"))
    links = links_of(cluster, n, 1)
    busbw = links.all_to_all_bandwidth_bytes_per_s if op is Collective.ALL_TO_ALL else links.bandwidth_bytes_per_s
    if op is Collective.SEND_RECV:
        busbw = links.send_recv_bandwidth_bytes_per_s
    slope = time_s(cluster, op, 2 * ONE_GB, n, 1) - time_s(cluster, op, ONE_GB, n, 1)
    assert slope == pytest.approx(float(bus_factor(op, n) * ONE_GB / busbw[0]), rel=1e-9)
    assert links.bandwidth_bytes_per_s[0] == pytest.approx(0.82 * 450 * GB)


# ---------------------------------------------------------------- golden: S·f(n)/busbw with published busbw


def test_allreduce_1gb_8x_h100_ring() -> None:
    # 1 GB all-reduce, 8 ranks, H100 NVL8, ring: 1e9·2·7/8 B / 370 GB/s busbw = 4.73 ms (ring busbw 370 GB/s:
    # NCCL maintainer in NVIDIA/nccl-tests issue #212).
    got = time_s(without_nvls(catalog("llama3-16k")), Collective.ALL_REDUCE, ONE_GB, 8, 1)
    assert got == pytest.approx(4.73 * MS, rel=0.05)


def test_allreduce_1gb_8x_h100_nvls() -> None:
    # The same with NVLS: 1.75e9 B / 480 GB/s = 3.65 ms (peak NVLS busbw on 8 GPUs, NVIDIA/nccl-tests issue #212;
    # nccl-tests keeps the ring factor 2(n-1)/n for NVLS, issue #366). NVLS is the fastest algorithm here, so
    # the model picks it as NCCL's tuner does.
    got = time_s(catalog("llama3-16k"), Collective.ALL_REDUCE, ONE_GB, 8, 1)
    assert got == pytest.approx(3.65 * MS, rel=0.05)


def test_allreduce_8x_h800_nvls_busbw() -> None:
    # 8x H800 all-reduce busbw 215 GB/s with NVLS (a user's measurement, NVIDIA/nccl issue #1374);
    # busbw = S·2(n-1)/n / t.
    t = time_s(catalog("deepseek-v3-h800"), Collective.ALL_REDUCE, 4 * ONE_GB, 8, 1)
    assert 4 * ONE_GB * 2 * 7 / 8 / t == pytest.approx(215 * GB, rel=0.05)


def test_allreduce_1gb_16_ranks_two_nodes() -> None:
    # 16 ranks on 2 nodes: 1e9·2·15/16 B / 370.8 GB/s = 5.06 ms, with SimAI's multi-node ring busbw
    # min(nvlink, nic·nics) = min(20.6·18, 48.5·8) = 370.8 GB/s (aliyun/SimAI
    # astra-sim-alibabacloud/astra-sim/system/calbusbw.{h,cc}).
    # With NVLS on, the hierarchical NVLS + inter-node path is slower and the ring is kept.
    for cluster in (catalog("llama3-16k"), without_nvls(catalog("llama3-16k"))):
        assert time_s(cluster, Collective.ALL_REDUCE, ONE_GB, 16, 1) == pytest.approx(5.06 * MS, rel=0.10)


def test_allreduce_1gb_one_gpu_per_node() -> None:
    # 2 ranks, one GPU per node, one NDR NIC: 1e9·2·1/2 B / 47 GB/s = 21.28 ms (NDR 400G: 46-48 GB/s per NIC,
    # NVIDIA staff in NVIDIA/nccl-tests issue #290).
    assert time_s(catalog("llama3-16k"), Collective.ALL_REDUCE, ONE_GB, 2, 8) == pytest.approx(21.28 * MS, rel=0.05)


@pytest.mark.parametrize(("nodes", "simai_gb_per_s"), [(2, 90.9), (4, 62.6), (8, 54.6)])
def test_all_to_all_busbw_reproduces_simai(nodes: int, simai_gb_per_s: float) -> None:
    # SimAI calbusbw.cc multi-node all-to-all busbw = nic·nics/g · (n−1)/((nodes−1)·g) with CX7 at 48.5 GB/s,
    # evaluated for 8×H100 + 8×CX7 nodes: 90.9 / 62.6 / 54.6 GB/s at 2 / 4 / 8 nodes. Ours is the same model
    # (bytes that leave the node over each GPU's own NIC); with SimAI's NIC figure (0.97 of 50) it matches
    # exactly; the catalog's 0.87 (SimAI's measured large-message ratios) gives 0.87/0.97 of it.
    n = 8 * nodes
    simai_eff = CONSTANTS.comm.model_copy(update={"network_all_to_all": 48.5 / 50})
    links = group_links(catalog("llama3-16k"), np.array([n]), np.array([1]), simai_eff)
    assert links.all_to_all_bandwidth_bytes_per_s[0] == pytest.approx(simai_gb_per_s * GB, rel=1e-3)
    ours = links_of(catalog("llama3-16k"), n, 1).all_to_all_bandwidth_bytes_per_s[0]
    assert ours == pytest.approx(simai_gb_per_s * GB * 0.87 / 0.97, rel=1e-3)


# ---------------------------------------------------------------- placement on catalog clusters


def test_dp_group_stride_8_size_64_on_llama3_16k() -> None:
    # Megatron DP group with tp = 8: one member per node (own NIC), 2 per rack ToR (16 GPUs), all 64 inside one
    # 3,072-GPU pod: it crosses nvlink and rack-tor, spans tier 2 (pod), and its ring runs at one NIC's 47 GB/s.
    cluster = catalog("llama3-16k")
    links = links_of(cluster, 64, 8)
    assert cluster.tiers[int(links.tier[0])].name == "pod"
    assert links.members_per_domain[0] == 1
    assert links.bandwidth_bytes_per_s[0] == pytest.approx(0.94 * 50 * GB)
    assert links.latency_s[0] == pytest.approx(cluster.tiers[2].latency_us * 1e-6)


@pytest.mark.parametrize(
    ("size", "stride", "tier_name"),
    [
        (8, 1, "nvlink"),  # one HGX node
        (16, 1, "rack-tor"),  # two nodes under one ToR
        (4, 4, "rack-tor"),  # block of 16 ranks: ranks 0, 4, 8, 12 -> two nodes
        (384, 8, "pod"),  # block 3,072 = one pod exactly
        (512, 8, "cluster"),  # block 4,096 > 3,072: crosses pods
        (256, 8, "cluster"),  # block 2,048 does not divide 3,072: some groups straddle two pods
    ],
)
def test_tier_spanned_on_llama3_16k(size: int, stride: int, tier_name: str) -> None:
    cluster = catalog("llama3-16k")
    assert cluster.tiers[int(links_of(cluster, size, stride).tier[0])].name == tier_name


def test_tp16_straddles_nvl72_racks() -> None:
    # 72 is not a multiple of 16: the TP group on ranks 64..79 has 8 GPUs in each of two NVL72 racks. (The
    # catalog's gb200-nvl72 places jobs on 64-GPU segments, so this builds the whole-rack variant.)
    base = catalog("gb200-nvl72")
    whole_racks = (
        base.tiers[0].model_copy(update={"ranks": 72}),
        base.tiers[1].model_copy(update={"ranks": 576}),
        base.tiers[2].model_copy(update={"ranks": 9216}),
    )
    cluster = base.model_copy(update={"tiers": whole_racks, "num_gpus": 9216})
    assert links_of(cluster, 8, 1).tier[0] == 0
    links = links_of(cluster, 16, 1)
    assert links.tier[0] == 1
    assert links.members_per_domain[0] == 8


def test_members_share_their_nodes_nics() -> None:
    # 16 ranks at stride 2 on 8-GPU nodes: 4 members per node own 4 of its 8 NICs (the other 4 serve the
    # node's other group), so the ring's node-crossing edges get 4 × 47 GB/s; at stride 1 the group owns all 8
    # and NVLink (369) binds: SimAI calbusbw.cc's multi-node ring rule min(nvlink, nic·nics).
    cluster = catalog("llama3-16k")
    assert links_of(cluster, 16, 2).bandwidth_bytes_per_s[0] == pytest.approx(4 * 47 * GB)
    assert links_of(cluster, 16, 1).bandwidth_bytes_per_s[0] == pytest.approx(min(369, 8 * 47) * GB)


def test_ring_latency_is_a_per_hop_sum() -> None:
    # 16 ranks on 2 nodes: 14 NVLink edges at 2.0 us, 2 node-crossing edges at the ToR's 3.5 us (clusters.yaml);
    # NCCL charges intra and inter steps separately (ring latency in NVIDIA/nccl@b6475625 src/graph/tuning.cc).
    links = links_of(catalog("llama3-16k"), 16, 1)
    assert links.ring_step_latency_s[0] == pytest.approx((14 * 2.0 + 2 * 3.5) / 16 * 1e-6)
    assert links.latency_s[0] == pytest.approx(3.5e-6)


def test_small_allreduce_at_scale_uses_a_tree_across_nodes() -> None:
    # 1 MB over 8,192 ranks (1,024 nodes): a flat ring pays 2(n-1) steps of latency (~35 ms); the hierarchical
    # path (NVLS inside nodes, double binary tree across) pays log2 of the node count, as NCCL's NVLSTree
    # latency intraLat + 2·log2(nNodes)·interLat does (NVIDIA/nccl@b6475625 src/graph/tuning.cc).
    cluster = catalog("seed-500k")
    links = links_of(cluster, 8192, 1)
    flat_latency = 2 * 8191 * links.ring_step_latency_s[0]
    assert flat_latency > 30 * MS
    assert time_s(cluster, Collective.ALL_REDUCE, 1 * MB, 8192, 1) < 1 * MS


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize("op", list(Collective))
def test_size_one_costs_nothing(op: Collective) -> None:
    sizes = np.ones(3, dtype=np.int64)
    links = group_links(catalog("llama3-16k"), sizes, np.array([1, 8, 4096]), CONSTANTS.comm)
    assert np.all(collective_time_s(op, np.full(3, ONE_GB), sizes, links) == 0.0)
    assert np.all(links.tier == -1)


GROUPS = [(2, 1), (8, 1), (16, 1), (16, 2), (64, 8), (512, 8), (4, 3072), (16, 512), (2048, 1)]


@pytest.mark.parametrize("name", ["llama3-16k", "deepseek-v3-h800", "gb200-nvl72", "seed-500k", "selene"])
@pytest.mark.parametrize("op", list(Collective))
def test_bigger_message_never_faster(name: str, op: Collective) -> None:
    cluster = catalog(name)
    sizes = np.array([n for n, _ in GROUPS])
    links = group_links(cluster, sizes, np.array([s for _, s in GROUPS]), CONSTANTS.comm)
    times = [collective_time_s(op, np.full(len(GROUPS), b), sizes, links) for b in np.logspace(3, 11, 17)]
    assert np.all(np.diff(np.stack(times), axis=0) >= 0)


@pytest.mark.parametrize("name", ["llama3-16k", "deepseek-v3-h800", "gb200-nvl72", "seed-500k"])
@pytest.mark.parametrize("op", list(Collective))
def test_more_bandwidth_never_slower(name: str, op: Collective) -> None:
    base = catalog(name)
    sizes, strides = np.array([n for n, _ in GROUPS]), np.array([s for _, s in GROUPS])
    previous = None
    for scale in (0.5, 1.0, 2.0, 4.0):
        cluster = with_tiers(base, bandwidth_gb_per_s_scale=scale)
        links = group_links(cluster, sizes, strides, CONSTANTS.comm)
        t = collective_time_s(op, np.full(len(GROUPS), 256 * MB), sizes, links)
        if previous is not None:
            assert np.all(t <= previous * (1 + 1e-12))
        previous = t


def test_oversubscription_slows_only_groups_that_cross_it() -> None:
    # llama3-16k: 1:7 at the aggregation layer between 3,072-GPU pods. Groups inside a pod are unaffected;
    # an all-to-all across pods and a ring with one member per pod slow down. A DP ring with hundreds of
    # members per pod crosses the pod boundary on few edges and stays NIC-bound.
    full = with_tiers(catalog("llama3-16k"), oversubscription=1.0)
    over = catalog("llama3-16k")
    cases = [  # (op, size, stride, crosses pods and is slowed)
        (Collective.ALL_REDUCE, 64, 8, False),
        (Collective.ALL_TO_ALL, 384, 8, False),
        (Collective.ALL_TO_ALL, 512, 8, True),
        (Collective.ALL_REDUCE, 4, 3072, True),
        (Collective.SEND_RECV, 8, 3072, True),
        (Collective.ALL_REDUCE, 512, 8, False),
    ]
    for op, n, s, slowed in cases:
        t_full, t_over = time_s(full, op, ONE_GB, n, s), time_s(over, op, ONE_GB, n, s)
        assert (t_over > t_full * 1.01) == slowed, (op, n, s, t_full, t_over)
        assert t_over >= t_full


@pytest.mark.parametrize("name", ["llama3-16k", "gb200-nvl72", "seed-500k"])
@pytest.mark.parametrize("op", list(Collective))
def test_vectorized_equals_one_at_a_time(name: str, op: Collective) -> None:
    rng = np.random.default_rng(7)
    cluster = catalog(name)
    sizes = 2 ** rng.integers(0, 11, 64)
    strides = 2 ** rng.integers(0, 10, 64)
    nbytes = rng.uniform(1e3, 1e10, 64)
    together = collective_time_s(op, nbytes, sizes, group_links(cluster, sizes, strides, CONSTANTS.comm))
    alone = [time_s(cluster, op, float(b), int(n), int(s)) for b, n, s in zip(nbytes, sizes, strides, strict=True)]
    np.testing.assert_allclose(together, alone, rtol=1e-12)
    assert np.all(np.isfinite(together)) and np.all(together >= 0)


def test_comm_catalog_cites_every_constant() -> None:
    text = resources.files("llmscale.catalog").joinpath("comm.yaml").read_text(encoding="utf-8")
    entries = yaml.safe_load(text)
    assert all(entry["source"].strip() for entry in entries.values())
    eff = CONSTANTS.comm
    for fraction in (eff.scale_up_ring, eff.scale_up_in_network, eff.scale_up_all_to_all, eff.network,
                     eff.network_all_to_all):
        assert 0 < fraction <= 1
    assert set(eff.base_latency_us) == set(Collective)
