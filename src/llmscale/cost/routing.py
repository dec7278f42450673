"""MoE routing, vectorized: the busiest EP rank's load I over the mean, and the ranks and domains a token reaches.

I = 1 + z(ep)·√(σ²·ep/E + cv²), cv² = (1 − 1/ep)·(E − k)/(E − 1)/N the sampling spread, σ from the measured MaxVio
(catalog/moe.yaml), z(n) Blom's expected maximum of n normals; a capacity factor caps I. Derivation and the check
against Megatron's routing: docs/cost-model.md#routing; destinations: docs/cost-model.md#traffic-dedup."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import comb
from statistics import NormalDist

import numpy as np

from llmscale.layout.arrays import Layouts
from llmscale.specs.constants import MoeConstants
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec


def expected_max_normal(n: np.ndarray) -> np.ndarray:
    """z(n): the expected maximum of n independent standard normals (Blom's approximation); 0 for n ≤ 1. One
    Python call per element: give it distinct values."""
    n = np.asarray(n, dtype=float)
    z = [NormalDist().inv_cdf((x - 0.375) / (x + 0.25)) if x > 1 else 0.0 for x in n.reshape(-1)]
    return np.array(z).reshape(n.shape)


def routed_copies_per_token(model: ModelSpec, lay: Layouts) -> np.ndarray:
    """(token, expert) assignments one GPU routes per token of its micro-batch: k copies, split over the tp ranks
    that share the token and gathered again by the etp ranks that share an expert."""
    result: np.ndarray = model.top_k * lay.etp / lay.tp
    return result


def busiest_rank_load(model: ModelSpec, train: TrainSpec, lay: Layouts, tokens: np.ndarray,
                      const: MoeConstants) -> np.ndarray:
    """I: the busiest EP rank's routed load over the mean, per layout (docs/cost-model.md#routing); 1 for dense
    models."""
    if not model.is_moe:
        return np.ones(lay.size)
    experts = float(model.experts)
    k = float(model.top_k)
    ep = lay.ep.astype(float)
    assignments = tokens * routed_copies_per_token(model, lay)
    sampling = (1.0 - 1.0 / ep) * (experts - k) / max(experts - 1.0, 1.0) / assignments
    spread = const.max_violation[train.routing] / float(expected_max_normal(np.array(const.max_violation_experts)))
    rows, few = lay.distinct_view("ep")  # a search has few ep values: one z each
    z = rows.spread(expected_max_normal(few.ep))
    load = 1.0 + z * np.sqrt(spread**2 * ep / experts + sampling)
    if model.capacity_factor is not None:
        load = np.full(lay.size, model.capacity_factor) if model.pad_to_capacity else np.minimum(load,
                                                                                                  model.capacity_factor)
    result: np.ndarray = load
    return result


def reach_probability(experts: int, k: int, blocks: np.ndarray, domains: np.ndarray,
                      max_domains: int | None) -> np.ndarray:
    """P that one given block of `blocks` equal, contiguous expert blocks holds at least one of a token's k experts,
    routing uniform over the experts (forced or balanced load). With node-limited routing the token first picks
    M' = min(max_domains, domains) of the `domains` expert blocks (the scale-up domains, each a whole number of
    blocks), then its k experts among their E' = M'·E/D: P = (M'/D)·(1 − C(E' − E/blocks, k)/C(E', k))
    (docs/cost-model.md#traffic-dedup)."""
    blocks = np.asarray(blocks, dtype=float)
    domains = np.asarray(domains, dtype=float)
    chosen = domains if max_domains is None else np.minimum(float(max_domains), domains)
    pool = chosen * experts / domains
    result: np.ndarray = chosen / domains * (1.0 - _missed(pool, experts / blocks, k))
    return result


def _missed(pool: np.ndarray, block: np.ndarray, k: int) -> np.ndarray:
    """C(pool − block, k)/C(pool, k): none of k distinct experts drawn from `pool` falls in a `block` of them."""
    missed = np.ones(np.broadcast(pool, block).shape)
    for i in range(k):  # a product of k ratios; 0 once a factor reaches 0
        missed = missed * np.clip(pool - block - i, 0.0, None) / np.maximum(pool - i, 1.0)
    return missed


def group_reach_probability(experts: int, k: int, block_experts: np.ndarray, groups: int,
                            group_topk: int) -> np.ndarray:
    """P that a block of `block_experts` contiguous experts holds one of a token's k experts under group-limited
    routing: `group_topk` of the `groups` expert groups picked, then k experts among their E' experts. A block inside
    one group: (M/g)·(1 − C(E' − E_b, k)/C(E', k)); a block of c whole groups: Σ_j Hyp(j; g, c, M)·(1 −
    C(E' − j·E/g, k)/C(E', k)). Exact for blocks aligned to the groups; a block across a boundary or of a fractional
    count (interpolated) reads 10-20 % low (docs/cost-model.md#traffic-dedup)."""
    block = np.asarray(block_experts, dtype=float)
    per_group = experts / groups
    pool = group_topk * per_group
    c = block / per_group
    inside = group_topk / groups * (1.0 - _missed(np.asarray(pool), np.minimum(block, per_group), k))
    low, high = np.floor(c), np.ceil(c)
    spans = [_whole_groups(experts, k, groups, group_topk, whole) for whole in (low, high)]
    across = spans[0] + (c - low) * (spans[1] - spans[0])
    result: np.ndarray = np.where(c <= 1.0, inside, across)
    return result


def _whole_groups(experts: int, k: int, groups: int, group_topk: int, whole: np.ndarray) -> np.ndarray:
    """`group_reach_probability` of blocks of `whole` (≥ 1, integral) groups, one sum per distinct value."""
    values, inverse = np.unique(np.clip(whole, 1, groups).astype(int), return_inverse=True)
    out = np.array([_whole_group_reach(experts, k, groups, group_topk, int(c)) for c in values])
    result: np.ndarray = out[inverse].reshape(np.shape(whole))
    return result


@lru_cache(maxsize=256)
def _whole_group_reach(experts: int, k: int, groups: int, group_topk: int, c: int) -> float:
    """Σ_j Hyp(j; g, c, M)·(1 − C(E' − j·E/g, k)/C(E', k)) for a block of c whole groups (a search asks few)."""
    picked = np.arange(1, min(c, group_topk) + 1)
    weights = np.array([comb(c, j) * comb(groups - c, group_topk - j) for j in picked]) / comb(groups, group_topk)
    hit = 1.0 - _missed(np.asarray(group_topk * experts / groups), picked * experts / groups, k)
    return float((weights * hit).sum())


@dataclass(frozen=True)
class DestinationCopies:
    """Copies of one routed token a deduplicating dispatcher sends from its rank, by link (shape (N,))."""

    scale_up: np.ndarray
    """Copies written over NVLink: to each destination rank of the own domain, and from each reached remote domain's
    receiving GPU to the destinations there other than itself."""
    network: np.ndarray
    """Copies sent over the network: one per distinct remote scale-up domain, to the GPU of the same in-domain index."""


def destination_copies(model: ModelSpec, ep: np.ndarray, members_per_domain: np.ndarray,
                       domains: np.ndarray) -> DestinationCopies:
    """Copies per token of a dispatcher that sends a token over the network once to each remote scale-up domain
    holding one of its experts (to the GPU of its own in-domain index) and over NVLink once to each destination rank
    (DeepEP, HybridEP): an EP group of n = `ep` ranks whose worst member shares its domain with m_0 − 1 others and
    whose other n − m_0 ranks fill G − 1 remote domains; network = (G − 1)·P_d, scale_up = (n − G)·P_rank
    (docs/cost-model.md#traffic-dedup)."""
    n = np.asarray(ep, dtype=float)
    m0 = np.clip(np.asarray(members_per_domain, dtype=float), 1.0, n)
    g = np.clip(np.asarray(domains, dtype=float), 1.0, n)
    remote = np.maximum(g - 1.0, 0.0)
    experts, k, limit = int(model.experts), int(model.top_k), model.moe_max_nodes
    blocks = np.where(remote > 0, remote * n / np.maximum(n - m0, 1.0), 1.0)  # a remote domain holds E/blocks
    if model.moe_router_groups is not None and limit is not None:  # fixed expert groups, not the domains
        groups = int(model.moe_router_groups)
        network = remote * group_reach_probability(experts, k, experts / blocks, groups, limit)
        scale_up = (n - g) * group_reach_probability(experts, k, experts / n, groups, limit)
        return DestinationCopies(scale_up=scale_up, network=network)
    network = remote * reach_probability(experts, k, blocks, g, limit)
    scale_up = (n - g) * reach_probability(experts, k, n, g, limit)
    return DestinationCopies(scale_up=scale_up, network=network)
