"""Communication cost of one collective in one parallel group, on the cluster's network tiers, vectorized.

Shape legend: `size`, `stride` and `bytes_total` are arrays of shape (N,), one element per layout; per-tier
intermediates have shape (T, N) with tiers innermost first (T = len(cluster.tiers)); results are (N,) seconds.

Placement. Ranks are numbered TP → CP → EP → DP → PP from the innermost (Megatron's order); a group of n = `size`
ranks at distance s = `stride` lives in an aligned block of n·s consecutive ranks. The worst group of a layout
(the one every collective waits for) leaves a domain of tier i (R_i ranks) unless n·s divides R_i, and then holds
m_i = clip(gcd(R_i, n·s) // s, 1, n) members in its smallest piece of such a domain; `tier` is the first tier whose
domains hold the whole group. Tier 0 is the scale-up (NVLink) domain; traffic that leaves tier i's domains travels
on tier i+1 ("crosses boundary i"). When n·s is a power of two and R_i too this is the span rule: the group
crosses every tier whose domain is smaller than its span (n−1)·s+1.

Bandwidth (one direction, per GPU): b_0 = B_0·η_up, b_j = B_j·η_net / o_j for j ≥ 1 (B rated, η achieved
fraction from catalog/comm.yaml, o_j the oversubscription of tier j, which throttles the traffic tier j carries
between tier j−1 domains, as clusters.yaml places it). Every group of a layout runs the collective at once, so a
tier-i domain's uplinks (R_i·b_{i+1}) are shared by the R_i/m_i groups inside it: each gets m_i·b_{i+1}.

Time, α–β (Hockney's model; ring costs of Thakur, Rabenseifner & Gropp as MPICH's source comments write them),
S the total buffer as nccl-tests defines it, f(n) its bus factor (both NVIDIA/nccl-tests@03a204a
doc/PERFORMANCE.md), t_0 the fixed cost of a call (NCCL baseLat), α_max the slowest hop's latency:

  ring (AR, RS, AG)  t = t_0 + steps·ᾱ + S·f(n)/β_ring,  f = 2(n−1)/n (AR), (n−1)/n (RS, AG), steps = 2(n−1), n−1
                     β_ring = min(b_0 [m_0 > 1], min over crossed i of m_i·b_{i+1})
  all-reduce         min(ring, hierarchical); hierarchical = t_0 + intra + inter with
                     intra = min(ring over m_0 at b_0, NVLS: α_nvls + S/(B_0·η_nvls))  (0 when m_0 = 1)
                     inter = min(ring, tree, in-network) over k = n/m_0 domains on S/m_0, sub-ring β_out =
                     min over crossed i of (m_i/m_0)·b_{i+1}: ring 2(k−1)ᾱ_out + 2(k−1)/k·(S/m_0)/β_out,
                     tree 2·log2(k)·α_max + 2·(S/m_0)/β_out (NCCL tuning.cc: tree algbw = busbw/2),
                     SHARP 2·α_max + (S/m_0)/β_out where every scale-out tier spanned reduces in network
  all-to-all         t_0 + (n−1)·ᾱ_peer + S·max((m_0−1)/n / a_0, max over crossed i of (n−m_i)/n / a_{i+1})
                     (a_j as b_j with the all-to-all efficiencies); SimAI calbusbw.cc in busbw form
  send/recv          t_0 + α_max + S/β_p2p, β_p2p = b_0 inside tier 0, else min over crossed i of
                     b_{i+1}·min(o_{i+1}, max(1, R_i/s)) (only s of R_i ranks send out when s < R_i)

Latency: per-hop sum (NCCL tuning.cc: ring latency = (nsteps − nInterSteps)·intraLat + nInterSteps·interLat):
a chunk crosses each ring edge in turn, so ᾱ is the mean α over the ring's edges, each edge costing the latency
of the outermost tier it crosses. A "max" rule (every step at the slowest hop) would charge all 16 edges of a
2-node ring the inter-node latency instead of the 2 that cross; `latency_s` (the slowest hop) is kept for
send/recv and trees.

Left out: message-size efficiency curves (small messages reach less than the asymptotic bandwidth; SimAI's
ratio tables), protocol choice (LL/LL128/Simple), NCCL's channel and per-channel caps, PAT / NVLS algorithms
for reduce-scatter and all-gather, pipelining of hierarchical phases (summed here, phase after phase),
congestion from concurrent collectives of other dimensions, adaptive routing and ECMP collisions, rail and
plane effects beyond the tier sizes (NCCL's PXN routes cross-rail traffic over NVLink first, so rail-optimized
fabrics behave as their tier sizes say), stragglers and jitter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.layout.arrays import distinct_rows
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.collective import Collective, bus_factor
from llmscale.specs.constants import CommConstants
from llmscale.units import US


@dataclass(frozen=True)
class GroupLinks:
    """What one communication group sees, per layout (arrays of shape (N,)); see the module docstring for the
    symbols. Bandwidths are achievable, one direction, in the nccl-tests bus-bandwidth sense (time = S·f(n)/busbw);
    `inf` where the group uses no link of that kind (size 1, or a group inside one domain for the scale-out ones)."""

    bandwidth_bytes_per_s: np.ndarray
    """β_ring: ring bus bandwidth of the bottleneck (NVLink, or a crossed tier's uplinks shared by the members)."""
    latency_s: np.ndarray
    """α_max: latency of the slowest hop, that of the outermost tier spanned (0 for size 1)."""
    tier: np.ndarray
    """Index of the outermost tier the group spans (−1 for size 1)."""
    in_network_reduction: np.ndarray
    """Every tier the group spans reduces in the network (NVLS / SHARP)."""
    ring_step_latency_s: np.ndarray
    """ᾱ: mean latency of one step of a ring through all members (per-hop sum / n)."""
    members_per_domain: np.ndarray
    """m_0: members in one scale-up (tier 0) domain."""
    scale_up_bandwidth_bytes_per_s: np.ndarray
    """b_0: ring bus bandwidth inside the scale-up domain."""
    scale_up_latency_s: np.ndarray
    """α_0: one hop inside the scale-up domain."""
    scale_up_in_network_bytes_per_s: np.ndarray
    """NVLS all-reduce algorithm bandwidth inside the scale-up domain; 0 without NVLS or with m_0 = 1."""
    scale_out_bandwidth_bytes_per_s: np.ndarray
    """β_out: bus bandwidth of a sub-ring through one member per scale-up domain."""
    scale_out_step_latency_s: np.ndarray
    """ᾱ_out: mean latency of one step of that sub-ring."""
    scale_out_in_network: np.ndarray
    """Every scale-out tier the group spans reduces in the network (SHARP); False inside one domain."""
    all_to_all_bandwidth_bytes_per_s: np.ndarray
    """All-to-all bus bandwidth (time = S·(n−1)/n / this)."""
    all_to_all_step_latency_s: np.ndarray
    """ᾱ_peer: mean latency to one peer."""
    send_recv_bandwidth_bytes_per_s: np.ndarray
    """β_p2p: bandwidth of the slowest neighbour-to-neighbour transfer."""
    comm: CommConstants
    """The constants the links were derived with (base latencies are read from here)."""


@dataclass(frozen=True)
class _Tiers:
    """Per-tier constants of a cluster as (T, 1) columns."""

    ranks: np.ndarray
    ring_bytes_per_s: np.ndarray
    all_to_all_bytes_per_s: np.ndarray
    latency_s: np.ndarray
    oversubscription: np.ndarray
    in_network: np.ndarray


def _tiers(cluster: ClusterSpec, eff: CommConstants) -> _Tiers:
    """Achievable per-GPU bandwidth of each tier: rated × efficiency / oversubscription (tier 0 = scale-up)."""
    up = [i == 0 for i in range(len(cluster.tiers))]
    rated = np.array([t.bandwidth_bytes_per_s for t in cluster.tiers])
    over = np.array([t.oversubscription for t in cluster.tiers])
    ring_eff = np.where(up, eff.scale_up_ring, eff.network)
    a2a_eff = np.where(up, eff.scale_up_all_to_all, eff.network_all_to_all)

    def column(values: np.ndarray) -> np.ndarray:
        return np.asarray(values)[:, None]

    return _Tiers(
        ranks=column(np.array([t.ranks for t in cluster.tiers], dtype=np.int64)),
        ring_bytes_per_s=column(rated * ring_eff / over),
        all_to_all_bytes_per_s=column(rated * a2a_eff / over),
        latency_s=column(np.array([t.latency_us * US for t in cluster.tiers])),
        oversubscription=column(over),
        in_network=column(np.array([t.in_network_reduction for t in cluster.tiers], dtype=bool)),
    )


def _placement(tiers: _Tiers, n: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Outermost tier spanned (N,), boundaries crossed (T, N) and members per domain m_i (T, N) of the worst
    group: it fits a tier-i domain iff its aligned block n·s divides R_i (blocks tile the ranks in Megatron's
    order); otherwise its smallest piece of a domain is gcd(R_i, n·s) ranks long."""
    block = n * s
    fits = tiers.ranks % block == 0
    fits[-1] = True  # the outermost tier spans the cluster (ClusterSpec validation)
    tier = np.where(n > 1, np.argmax(fits, axis=0), -1)
    crossed = np.arange(tiers.ranks.shape[0])[:, None] < tier
    members = np.where(crossed, np.clip(np.gcd(tiers.ranks, block) // s, 1, n), n).astype(float)
    return tier, crossed, members


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, inf where den is 0."""
    num, den = np.broadcast_arrays(np.asarray(num, dtype=float), np.asarray(den, dtype=float))
    return np.divide(num, den, out=np.full(num.shape, np.inf), where=den != 0)


def _latencies(tiers: _Tiers, n: np.ndarray, crossed: np.ndarray, members: np.ndarray) -> dict[str, np.ndarray]:
    """Per-hop latency sums. A ring through the group has k_i = n/m_i edges that leave tier-i domains; an edge
    costs the latency of the outermost tier it crosses (NCCL tuning.cc: intra- and inter-node steps)."""
    lat = tiers.latency_s
    cross_edges = np.where(crossed, n / members, 0.0)
    outermost = cross_edges - np.vstack([cross_edges[1:], np.zeros_like(n, dtype=float)[None, :]])
    crossing_sum = (outermost[:-1] * lat[1:]).sum(axis=0)
    peers = np.vstack([members[:1] - 1, np.diff(members, axis=0)])  # peers first reached at tier i
    return {
        "ring": (np.maximum(n - cross_edges[0], 0) * lat[0, 0] + crossing_sum) / n,
        "scale_out": np.where(crossed[0], _ratio(crossing_sum, cross_edges[0]), 0.0),
        "peer": np.where(n > 1, (peers * lat).sum(axis=0) / np.maximum(n - 1, 1), 0.0),
    }


def _bandwidths(tiers: _Tiers, n: np.ndarray, s: np.ndarray, crossed: np.ndarray, members: np.ndarray,
                tier: np.ndarray) -> dict[str, np.ndarray]:
    """Bottleneck bandwidths per algorithm (module docstring): every crossed boundary i is a bound."""
    b, a = tiers.ring_bytes_per_s, tiers.all_to_all_bytes_per_s
    inner, outer = crossed[:-1], slice(1, None)
    m0 = members[0]
    uplinks = np.where(inner, members[:-1] * b[outer], np.inf).min(axis=0, initial=np.inf)
    ring = np.minimum(np.where(m0 > 1, b[0, 0], np.inf), uplinks)
    scale_out = np.where(inner, members[:-1] / m0 * b[outer], np.inf).min(axis=0, initial=np.inf)
    leave = np.where(inner, (n - members[:-1]) / n / a[outer], 0.0).max(axis=0, initial=0.0)
    seconds_per_byte = np.maximum((m0 - 1) / n / a[0, 0], leave)
    all_to_all = _ratio((n - 1) / n, seconds_per_byte)
    senders = np.minimum(tiers.oversubscription[outer], np.maximum(1.0, tiers.ranks[:-1] / s))
    p2p_out = np.where(inner, b[outer] * senders, np.inf).min(axis=0, initial=np.inf)
    p2p = np.where(tier > 0, p2p_out, np.where(tier == 0, b[0, 0], np.inf))
    return {"ring": np.where(n > 1, ring, np.inf), "scale_out": scale_out, "all_to_all": all_to_all, "p2p": p2p}


def group_links(
    cluster: ClusterSpec, size: np.ndarray, stride: np.ndarray, comm: CommConstants
) -> GroupLinks:
    """The links a group of `size` ranks at `stride` sees on `cluster` (module docstring: placement and β).

    Members in one scale-up domain share the scale-out uplinks of that domain: the ring through a group with m_0
    members per node has one edge per channel leaving each node, carrying S·f(n) in all, over the m_0 NICs the
    group owns (the node's other NICs serve the node's other groups), so β = min(b_0, m_0·b_1): SimAI calbusbw.cc
    `min(nvlink_bw, nic_bw·nics_per_node)` for whole nodes (m_0 = g). With stride ≥ the domain size, m_0 = 1 and
    each member drives its own NIC. Sources: aliyun/SimAI astra-sim-alibabacloud/astra-sim/system/calbusbw.cc,
    NVIDIA/nccl@b6475625 src/graph/tuning.cc, NVIDIA/nccl-tests issues #212 and #290.
    """
    n_arr, s_arr = np.broadcast_arrays(np.atleast_1d(np.asarray(size, dtype=np.int64)),
                                       np.atleast_1d(np.asarray(stride, dtype=np.int64)))
    n, s = n_arr.reshape(-1), s_arr.reshape(-1)
    if n.size > _DEDUPE_ABOVE:
        # Many layouts but few distinct (size, stride) groups: place each once.
        rows = distinct_rows(n, s)
        return rows.spread_fields(_group_links(cluster, n.take(rows.first), s.take(rows.first), comm))
    return _group_links(cluster, n, s, comm)


_DEDUPE_ABOVE = 512


def _group_links(cluster: ClusterSpec, n: np.ndarray, s: np.ndarray, eff: CommConstants) -> GroupLinks:
    tiers = _tiers(cluster, eff)
    tier, crossed, members = _placement(tiers, n, s)
    lat = _latencies(tiers, n, crossed, members)
    bw = _bandwidths(tiers, n, s, crossed, members, tier)
    spanned = np.arange(tiers.ranks.shape[0])[:, None] <= tier
    reduces = np.all(tiers.in_network | ~spanned, axis=0) & (tier >= 0)
    out_reduces = np.all(tiers.in_network[1:] | ~spanned[1:], axis=0) & (tier >= 1)
    nvls = bool(tiers.in_network[0, 0]) * cluster.tiers[0].bandwidth_bytes_per_s * eff.scale_up_in_network
    return GroupLinks(
        bandwidth_bytes_per_s=bw["ring"],
        latency_s=np.where(tier >= 0, tiers.latency_s[np.maximum(tier, 0), 0], 0.0),
        tier=tier,
        in_network_reduction=reduces,
        ring_step_latency_s=np.where(n > 1, lat["ring"], 0.0),
        members_per_domain=members[0],
        scale_up_bandwidth_bytes_per_s=np.full(n.shape, tiers.ring_bytes_per_s[0, 0]),
        scale_up_latency_s=np.full(n.shape, tiers.latency_s[0, 0]),
        scale_up_in_network_bytes_per_s=np.where(members[0] > 1, nvls, 0.0),
        scale_out_bandwidth_bytes_per_s=bw["scale_out"],
        scale_out_step_latency_s=lat["scale_out"],
        scale_out_in_network=out_reduces,
        all_to_all_bandwidth_bytes_per_s=bw["all_to_all"],
        all_to_all_step_latency_s=lat["peer"],
        send_recv_bandwidth_bytes_per_s=bw["p2p"],
        comm=eff,
    )


def _all_reduce_s(bytes_total: np.ndarray, n: np.ndarray, links: GroupLinks) -> np.ndarray:
    """Fastest of a flat ring and a hierarchical all-reduce, as NCCL's tuner picks the fastest algorithm
    (tuning.cc). Hierarchical (the "2D all-reduce" of Huawei HCCL's and mscclpp's docs): reduce inside each
    scale-up domain (ring, or NVLS at the measured 480 GB/s busbw ≡ 274 GB/s algbw on 8×H100: nccl-tests#212,
    #366), all-reduce S/m_0 across the k = n/m_0 domains (ring, NCCL double binary tree, or SHARP where every
    scale-out tier has it), all-gather back inside (the intra reduce-scatter + all-gather cost one intra
    all-reduce); phases summed.
    Left out: pipelining the phases (NCCL's NVLSTree overlaps them)."""
    s = np.asarray(bytes_total, dtype=float)
    base = links.comm.base_latency_s(Collective.ALL_REDUCE)
    f = bus_factor(Collective.ALL_REDUCE, n)
    flat = base + 2 * (n - 1) * links.ring_step_latency_s + s * f / links.bandwidth_bytes_per_s
    m0 = links.members_per_domain
    f0 = bus_factor(Collective.ALL_REDUCE, m0)
    intra_ring = 2 * (m0 - 1) * links.scale_up_latency_s + s * f0 / links.scale_up_bandwidth_bytes_per_s
    nvls_bw = links.scale_up_in_network_bytes_per_s
    intra_nvls = np.where(nvls_bw > 0, links.comm.in_network_latency_s + _ratio(s, nvls_bw), np.inf)
    intra = np.where(m0 > 1, np.minimum(intra_ring, intra_nvls), 0.0)
    k = n / m0
    part = s / m0 / links.scale_out_bandwidth_bytes_per_s
    inter_ring = 2 * (k - 1) * links.scale_out_step_latency_s + bus_factor(Collective.ALL_REDUCE, k) * part
    inter_tree = 2 * np.log2(k) * links.latency_s + 2 * part
    inter_sharp = np.where(links.scale_out_in_network, 2 * links.latency_s + part, np.inf)
    inter = np.where(k > 1, np.minimum(np.minimum(inter_ring, inter_tree), inter_sharp), 0.0)
    return np.minimum(flat, base + intra + inter)


def collective_time_s(op: Collective, bytes_total: np.ndarray, size: np.ndarray, links: GroupLinks) -> np.ndarray:
    """Seconds for one `op` of S = `bytes_total` in every group of `size` ranks (module docstring: equations);
    0 where size is 1 or S is 0 (nothing to move: no call is issued, e.g. the expert gradients of a dense model).
    `links` must come from `group_links` with the same size. For SEND_RECV pass the size of the whole ring or
    pipeline (so placement sees its worst neighbour pair); the time is one transfer of S."""
    op = Collective(op)
    n = np.atleast_1d(np.asarray(size, dtype=float)).reshape(-1)
    s = np.asarray(bytes_total, dtype=float)
    base = links.comm.base_latency_s(op)
    wire = s * bus_factor(op, n)
    with np.errstate(divide="ignore", invalid="ignore"):
        if op is Collective.ALL_REDUCE:
            t = _all_reduce_s(s, n, links)
        elif op in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
            t = base + (n - 1) * links.ring_step_latency_s + wire / links.bandwidth_bytes_per_s
        elif op is Collective.ALL_TO_ALL:
            t = base + (n - 1) * links.all_to_all_step_latency_s + wire / links.all_to_all_bandwidth_bytes_per_s
        else:
            t = base + links.latency_s + wire / links.send_recv_bandwidth_bytes_per_s
    return np.where((n > 1) & (np.broadcast_to(s, t.shape) > 0), t, 0.0)
