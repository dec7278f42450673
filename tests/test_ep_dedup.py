"""Deduplicating MoE dispatchers (DeepEP, HybridEP): the copies a token costs on each link, checked against a
simulation of routing, and the all-to-all they price (cost/routing.py destination_copies, cost/collectives.py
domain_all_to_all_s, cost/traffic.py)."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from llmscale.cost.collectives import collective_time_s, domain_all_to_all_s, group_links
from llmscale.cost.routing import destination_copies
from llmscale.cost.traffic import GroupStrides, microbatch_bytes, microbatch_comm
from llmscale.io.catalog import load_cluster, load_constants
from llmscale.layout.arrays import Layouts
from llmscale.specs.collective import Collective
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import MoeDispatcher, Routing, TrainSpec

CONSTANTS = load_constants()
QWEN3_30B = ModelSpec(name="qwen3-30b-a3b-like", layers=48, hidden=2048, ffn_hidden=6144, heads=32, kv_heads=4,
                      vocab=151936, experts=128, top_k=8, expert_ffn_hidden=768)
"""Qwen3-30B-A3B's routing: 128 experts, 8 per token (Qwen3 technical report, arXiv:2505.09388, Table 2)."""


def simulated_copies(experts: int, k: int, ranks: int, own_piece: int, per_domain: int, max_domains: int | None,
                     tokens: int = 20000, seed: int = 0, groups: int | None = None) -> tuple[float, float]:
    """(network, NVLink) copies per token from rank 0 by direct count, rank 0 in a piece of `own_piece` ranks of its
    domain and the other ranks in whole domains of `per_domain`: each token takes k distinct experts uniformly (among
    the experts of `max_domains` random domains first, or of `max_domains` of `groups` fixed expert groups, when
    given). One network copy per reached remote domain, to its
    first rank (the sender's in-domain index); one NVLink copy per destination rank other than the sender and than
    each reached remote domain's receiving rank (DeepSeek-V3 §3.2.2, DeepEP, Hybrid-EP)."""
    rng = np.random.default_rng(seed)
    domain_of = np.concatenate([np.zeros(own_piece, dtype=int),
                                1 + np.arange(ranks - own_piece) // per_domain])
    first_rank = {int(d): int(np.argmax(domain_of == d)) for d in np.unique(domain_of)}
    per_rank = experts // ranks
    expert_domain = np.repeat(domain_of, per_rank)
    network = nvlink = 0.0
    for _ in range(tokens):
        pool = np.arange(experts)
        if groups is not None and max_domains is not None:
            chosen = rng.choice(groups, size=max_domains, replace=False)
            pool = pool[np.isin(pool // (experts // groups), chosen)]
        elif max_domains is not None and max_domains < len(first_rank):
            chosen = rng.choice(len(first_rank), size=max_domains, replace=False)
            pool = pool[np.isin(expert_domain, chosen)]
        dest = set(int(e) // per_rank for e in rng.choice(pool, size=k, replace=False)) - {0}
        remote = {int(domain_of[r]) for r in dest} - {0}
        network += len(remote)
        nvlink += len(dest - {first_rank[d] for d in remote})
    return network / tokens, nvlink / tokens


@pytest.mark.parametrize(("ranks", "own_piece", "per_domain", "max_domains"), [
    (8, 8, 8, None),     # one 8-GPU node
    (16, 8, 8, None),    # two nodes
    (64, 8, 8, 4),       # eight nodes, DeepSeek-V3's 4-node limit
    (64, 8, 8, 8),       # a limit no smaller than the domains: no limit
    (32, 32, 72, None),  # inside one NVL72 rack
    (64, 8, 72, None),   # straddling two racks: 8 ranks in one, 56 in the next
    (16, 1, 1, None),    # a stride of at least the domain: every member in its own domain
])
def test_copies_match_a_simulation_of_uniform_routing(ranks: int, own_piece: int, per_domain: int,
                                                      max_domains: int | None) -> None:
    model = QWEN3_30B.model_copy(update={"moe_max_nodes": max_domains})
    domains = 1 + -(-(ranks - own_piece) // per_domain)
    sent = destination_copies(model, np.array([ranks]), np.array([own_piece]), np.array([domains]))
    network, nvlink = simulated_copies(128, 8, ranks, own_piece, per_domain, max_domains)
    assert float(sent.network[0]) == pytest.approx(network, abs=0.03)
    assert float(sent.scale_up[0]) == pytest.approx(nvlink, abs=0.06)


@pytest.mark.parametrize(("ranks", "per_domain"), [
    (64, 4),  # Megatron-Bridge 25.09's DeepSeek-V3 on 1,024 H100: ep 64 at stride 2, 4 EP ranks per node
    (32, 8),  # 26.04.01's on 256 B200: ep 32, a group is half a node
    (64, 8),  # DeepSeek's own: 8 nodes of 8, a group per node
    (16, 8),  # two nodes of four groups each
])
def test_fixed_router_groups_match_a_simulation(ranks: int, per_domain: int) -> None:
    # DeepSeek-V3: 256 experts, 8 routed, 4 of 8 expert groups (HF config n_group 8, topk_group 4)
    model = QWEN3_30B.model_copy(update={"experts": 256, "moe_max_nodes": 4, "moe_router_groups": 8})
    domains = ranks // per_domain
    sent = destination_copies(model, np.array([ranks]), np.array([per_domain]), np.array([domains]))
    network, nvlink = simulated_copies(256, 8, ranks, per_domain, per_domain, 4, groups=8)
    assert float(sent.network[0]) == pytest.approx(network, abs=0.04)
    assert float(sent.scale_up[0]) == pytest.approx(nvlink, abs=0.08)


def test_the_links_count_the_domains_a_group_touches() -> None:
    # 64 ranks of an NVL72 rack system at stride 1 straddle two racks (the worst group: 8 ranks in one, 56 in the
    # next); on 8-GPU nodes they fill eight; inside one rack, one.
    for cluster, size, expected in (("gb200:256", 64, 2), ("eos-h100", 64, 8), ("gb200:256", 8, 1)):
        links = group_links(load_cluster(cluster, num_gpus=256), np.array([size]), np.array([1]), CONSTANTS.comm)
        assert float(links.domains_spanned[0]) == expected, (cluster, size)


def test_one_node_sends_fewer_copies_than_experts_and_none_over_the_network() -> None:
    sent = destination_copies(QWEN3_30B, np.array([8]), np.array([8]), np.array([1]))
    assert float(sent.network[0]) == 0.0
    # 7·(1 − C(112, 8)/C(128, 8)) = 4.67 distinct other ranks, against k·(n−1)/n = 7 copies of the plain all-to-all.
    assert float(sent.scale_up[0]) == pytest.approx(4.67, abs=0.01)


def test_the_per_domain_all_to_all_reproduces_the_plain_one_for_plain_copies() -> None:
    cluster = load_cluster("eos-h100", num_gpus=256)
    for n in (8, 16, 64, 256):
        size = np.array([n])
        links = group_links(cluster, size, np.array([1]), CONSTANTS.comm)
        s = np.array([3.0e8])
        m0 = links.members_per_domain
        plain = collective_time_s(Collective.ALL_TO_ALL, s, size, links)
        split = domain_all_to_all_s(s * (m0 - 1) / n, s * (n - m0) / n, size, links, deduplicating=False)
        assert float(split[0]) == pytest.approx(float(plain[0]), rel=1e-9), n


def _ep_seconds(dispatcher: MoeDispatcher, ep: int, max_nodes: int | None = None) -> tuple[float, float]:
    """(EP seconds per layer and micro-batch, network share of the bytes) on 8-GPU H100 nodes."""
    model = QWEN3_30B.model_copy(update={"moe_max_nodes": max_nodes})
    cluster = load_cluster("eos-h100", num_gpus=ep)
    lay = Layouts.from_columns(tp=1, dp=ep, ep=ep, etp=1)
    train = TrainSpec(seq_len=4096, global_batch=ep, routing=Routing.FORCED, moe_dispatcher=dispatcher)
    links = group_links(cluster, lay.ep, GroupStrides.of(lay).ep, CONSTANTS.comm)
    sent = microbatch_bytes(model, train, lay, CONSTANTS, links.members_per_domain, links.domains_spanned)
    return float(microbatch_comm(model, cluster, train, lay, CONSTANTS).ep_s[0]), float(sent.ep_network[0])


def test_across_two_nodes_the_flex_dispatchers_send_a_quarter_of_the_network_bytes() -> None:
    plain, plain_share = _ep_seconds(MoeDispatcher.ALLTOALL, 16)
    deep, deep_share = _ep_seconds(MoeDispatcher.FLEX_DEEPEP, 16)
    hybrid, _ = _ep_seconds(MoeDispatcher.FLEX_HYBRIDEP, 16)
    assert plain_share == 0.0  # the plain all-to-all's bytes spread over its peers (collective_time_s)
    # 1.00 network copy against the plain dispatcher's 8·8/16 = 4, each at the dispatcher's measured rate instead
    # of NCCL's: the network-bound time falls 4 × dedup_network/network_all_to_all (latencies aside).
    # Closed form: the other node is reached with 1 − C(64, 8)/C(128, 8), each of the 14 ranks that are neither the
    # sender nor its peer on that node with 1 − C(120, 8)/C(128, 8).
    network = 1 - comb(64, 8) / comb(128, 8)
    nvlink = 14 * (1 - comb(120, 8) / comb(128, 8))
    assert deep_share == pytest.approx(network / (network + nvlink), rel=0.02)
    assert deep == hybrid
    comm = CONSTANTS.comm
    assert plain / deep == pytest.approx(4.0 / 0.997 * comm.dedup_network / comm.network_all_to_all, rel=0.08)


def test_the_plain_all_to_all_sends_every_expert_copy_even_with_node_limited_routing() -> None:
    # Megatron's alltoall dispatcher permutes one row per (token, expert) pair: node-limited routing bounds where
    # they go, not how many cross.
    assert _ep_seconds(MoeDispatcher.ALLTOALL, 32, max_nodes=2)[0] == _ep_seconds(MoeDispatcher.ALLTOALL, 32)[0]
    assert _ep_seconds(MoeDispatcher.FLEX_DEEPEP, 32, max_nodes=2)[0] < _ep_seconds(MoeDispatcher.FLEX_DEEPEP, 32)[0]


def test_the_placement_splits_a_deduplicating_dispatchers_bytes_by_its_own_network_share() -> None:
    from llmscale.io.catalog import load_model
    from llmscale.placement.fabric import Fabric
    from llmscale.placement.mesh import GroupKind
    from llmscale.placement.search import search_placements
    from llmscale.specs.layout import Layout
    from tests.test_placement import small_cluster

    cluster, model = small_cluster(), load_model("qwen3-30b-a3b")  # 2 GPUs per node: ep 8 spans 4 nodes
    lay = Layout(tp=1, pp=1, dp=24, ep=8, etp=1, mbs=1)
    ep_traffic = {}
    for dispatcher in (MoeDispatcher.ALLTOALL, MoeDispatcher.FLEX_DEEPEP):
        train = TrainSpec(global_batch=48, seq_len=4096, routing=Routing.FORCED, moe_dispatcher=dispatcher)
        best = search_placements(model, cluster, train, lay, CONSTANTS, Fabric.of(cluster)).best
        span = best.spans[GroupKind.EP]
        ep_traffic[dispatcher] = next(t for t in best.traffic if t.kind is GroupKind.EP)
        if dispatcher is MoeDispatcher.FLEX_DEEPEP:
            sent = destination_copies(model, np.array([8]), span.members[:1], span.domains[:1])
            share = float(sent.network[0] / (sent.network[0] + sent.scale_up[0]))
    dedup, plain = ep_traffic[MoeDispatcher.FLEX_DEEPEP], ep_traffic[MoeDispatcher.ALLTOALL]
    assert dedup.by_tier.sum() == pytest.approx(dedup.bytes_per_step)
    assert dedup.by_tier[1:].sum() / dedup.bytes_per_step == pytest.approx(share)
    # The plain all-to-all's bytes leave the node in (8 − 2)/(8 − 1) of its peers' shares; the dedup's fewer.
    assert plain.by_tier[1:].sum() / plain.bytes_per_step == pytest.approx(6 / 7)
    assert dedup.by_tier[1:].sum() < plain.by_tier[1:].sum()


def test_router_groups_are_checked_and_exported_as_the_model_defines_them() -> None:
    from llmscale.errors import LlmscaleError
    from llmscale.io.files import parse_spec
    from llmscale.io.resolve import JobRequest, resolve
    from llmscale.launch.megatron import megatron_args

    for bad in ({"moe_router_groups": 7}, {"moe_router_groups": 8, "moe_max_nodes": None},
                {"moe_router_groups": 4, "moe_max_nodes": 4}):
        with pytest.raises(LlmscaleError, match="moe_router_groups"):
            parse_spec(ModelSpec, QWEN3_30B.model_dump() | {"moe_max_nodes": 4} | bad, "test model")
    # DeepSeek-V3's 8 expert groups, 4 per token (HF config n_group 8, topk_group 4), whatever nodes EP spans
    job = resolve(JobRequest(model="deepseek-v3", cluster="deepseek-v3-h800", gpus=2048,
                             layout={"tp": 1, "pp": 16, "ep": 64, "etp": 1}))
    args = megatron_args(job)
    assert args[args.index("--moe-router-num-groups") + 1] == "8"
    assert args[args.index("--moe-router-group-topk") + 1] == "4"


def test_without_model_groups_the_export_counts_scale_up_domains_not_trays() -> None:
    from llmscale.io.resolve import JobRequest, resolve
    from llmscale.launch.megatron import megatron_args

    model = QWEN3_30B.model_copy(update={"moe_max_nodes": 2})

    def groups(cluster: str) -> str | None:
        job = resolve(JobRequest(model=model, cluster=cluster, gpus=64, train={"global_batch": 64, "seq_len": 4096},
                                 layout={"tp": 1, "pp": 1, "ep": 64, "etp": 1}))
        args = megatron_args(job)
        return args[args.index("--moe-router-num-groups") + 1] if "--moe-router-num-groups" in args else None

    # ep 64 fills one 72-GPU NVLink rack of 4-GPU trays: the 2-domain limit does not bind, as the cost model prices
    # it (one domain); on 8-GPU nodes it spans 8 and the export limits a token to 2 of 8 groups.
    assert groups("gb200:72") is None
    assert groups("eos-h100") == "8"
