"""Deduplicating MoE dispatchers (DeepEP, HybridEP): the copies a token costs on each link, checked against a
simulation of routing, and the all-to-all they price (cost/routing.py destination_copies, cost/collectives.py
domain_all_to_all_s, cost/traffic.py)."""

from __future__ import annotations

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


def simulated_copies(experts: int, k: int, ranks: int, per_domain: int, max_domains: int | None,
                     tokens: int = 40000, seed: int = 0) -> tuple[float, float]:
    """(network, scale-up) copies per token from rank 0 by direct count: each token takes k distinct experts
    uniformly (among the experts of `max_domains` random domains first, when given); one copy per distinct remote
    domain, one per distinct destination rank other than itself, less the network ones."""
    rng = np.random.default_rng(seed)
    domains = ranks // per_domain
    per_rank = experts // ranks
    network = scale_up = 0.0
    for _ in range(tokens):
        pool = np.arange(experts)
        if max_domains is not None and max_domains < domains:
            chosen = rng.choice(domains, size=max_domains, replace=False)
            pool = np.concatenate([np.arange(d * experts // domains, (d + 1) * experts // domains) for d in chosen])
        picked = rng.choice(pool, size=k, replace=False)
        dest_ranks = set(int(e) // per_rank for e in picked) - {0}
        dest_domains = set(r // per_domain for r in dest_ranks) - {0}
        network += len(dest_domains)
        scale_up += len(dest_ranks) - len(dest_domains)
    return network / tokens, scale_up / tokens


@pytest.mark.parametrize(("ranks", "per_domain", "max_domains"),
                         [(8, 8, None), (16, 8, None), (64, 8, 4), (32, 32, None)])
def test_copies_match_a_simulation_of_uniform_routing(ranks: int, per_domain: int, max_domains: int | None) -> None:
    model = QWEN3_30B.model_copy(update={"moe_max_nodes": max_domains})
    sent = destination_copies(model, np.array([ranks]), np.array([per_domain]))
    network, scale_up = simulated_copies(128, 8, ranks, per_domain, max_domains, tokens=20000)
    assert float(sent.network[0]) == pytest.approx(network, abs=0.03)
    # The formula takes the forwarded copies off the scale-up side at the mean; per token it is exact.
    assert float(sent.scale_up[0]) == pytest.approx(scale_up, abs=0.06)


def test_one_node_sends_fewer_copies_than_experts_and_none_over_the_network() -> None:
    sent = destination_copies(QWEN3_30B, np.array([8]), np.array([8]))
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
    sent = microbatch_bytes(model, train, lay, CONSTANTS, links.members_per_domain)
    return float(microbatch_comm(model, cluster, train, lay, CONSTANTS).ep_s[0]), float(sent.ep_network[0])


def test_across_two_nodes_the_flex_dispatchers_send_a_quarter_of_the_network_bytes() -> None:
    plain, plain_share = _ep_seconds(MoeDispatcher.ALLTOALL, 16)
    deep, deep_share = _ep_seconds(MoeDispatcher.FLEX_DEEPEP, 16)
    hybrid, _ = _ep_seconds(MoeDispatcher.FLEX_HYBRIDEP, 16)
    assert plain_share == 0.0  # the plain all-to-all's bytes spread over its peers (collective_time_s)
    # 1.00 network copy against the plain dispatcher's 8·8/16 = 4, each at the dispatcher's measured rate instead
    # of NCCL's: the network-bound time falls 4 × 0.69/0.87 (latencies aside).
    assert deep_share == pytest.approx(1.0 / (1.0 + 5.19), abs=0.01)
    assert deep == hybrid
    comm = CONSTANTS.comm
    assert plain / deep == pytest.approx(4.0 / 0.997 * comm.dedup_network / comm.network_all_to_all, rel=0.08)


def test_the_plain_all_to_all_sends_every_expert_copy_even_with_node_limited_routing() -> None:
    # Megatron's alltoall dispatcher permutes one row per (token, expert) pair: node-limited routing bounds where
    # they go, not how many cross.
    assert _ep_seconds(MoeDispatcher.ALLTOALL, 32, max_nodes=2)[0] == _ep_seconds(MoeDispatcher.ALLTOALL, 32)[0]
    assert _ep_seconds(MoeDispatcher.FLEX_DEEPEP, 32, max_nodes=2)[0] < _ep_seconds(MoeDispatcher.FLEX_DEEPEP, 32)[0]
