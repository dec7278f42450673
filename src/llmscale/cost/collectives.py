"""Communication cost of one collective in one parallel group, on the cluster's network tiers, vectorized.

α–β per tier: t = t_0 + steps·ᾱ + S·f(n)/β, f(n) the nccl-tests bus factor (NVIDIA/nccl-tests@03a204a
doc/PERFORMANCE.md) and β the bottleneck of the tier boundaries the worst group crosses; (N,) seconds. Placement,
bandwidths, per-algorithm times, latency and what is left out: docs/cost-model.md#collectives."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from llmscale.layout.arrays import distinct_rows
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.collective import Collective, bus_factor
from llmscale.specs.constants import CommConstants
from llmscale.units import US


@dataclass(frozen=True)
class GroupLinks:
    """What one communication group sees, per layout (arrays of shape (N,)); symbols: docs/cost-model.md#collectives.
    Bandwidths are achievable, one direction, in the nccl-tests bus-bandwidth sense (time = S·f(n)/busbw);
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
    domains_spanned: np.ndarray
    """G: scale-up domains the worst group touches, 1 + ⌈(n − m_0)/min(R_0/s, n)⌉ (its smallest piece, then whole
    domains of R_0/s members at stride s); 1 inside one domain."""
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
    all_to_all_scale_up_bytes_per_s: np.ndarray
    """a_0: all-to-all bandwidth of one member inside its scale-up domain (`inf` with m_0 = 1)."""
    all_to_all_network_s_per_byte: np.ndarray
    """Seconds per byte a member sends to other scale-up domains, those bytes spread evenly over the remote members:
    max over crossed i of ((n − m_i)/(n − m_0))/a_{i+1}; 0 inside one domain."""
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
    """Bottleneck bandwidths per algorithm (docs/cost-model.md#collectives-time): every crossed boundary is a bound."""
    b = tiers.ring_bytes_per_s
    a = tiers.all_to_all_bytes_per_s
    inner = crossed[:-1]
    outer = slice(1, None)
    m0 = members[0]
    uplinks = np.where(inner, members[:-1] * b[outer], np.inf).min(axis=0, initial=np.inf)
    ring = np.minimum(np.where(m0 > 1, b[0, 0], np.inf), uplinks)
    scale_out = np.where(inner, members[:-1] / m0 * b[outer], np.inf).min(axis=0, initial=np.inf)
    leave = np.where(inner, (n - members[:-1]) / n / a[outer], 0.0).max(axis=0, initial=0.0)
    seconds_per_byte = np.maximum((m0 - 1) / n / a[0, 0], leave)
    all_to_all = _ratio((n - 1) / n, seconds_per_byte)
    remote = np.maximum(n - m0, 1.0)
    network = np.where(inner, (n - members[:-1]) / remote / a[outer], 0.0).max(axis=0, initial=0.0)
    senders = np.minimum(tiers.oversubscription[outer], np.maximum(1.0, tiers.ranks[:-1] / s))
    p2p_out = np.where(inner, b[outer] * senders, np.inf).min(axis=0, initial=np.inf)
    p2p = np.where(tier > 0, p2p_out, np.where(tier == 0, b[0, 0], np.inf))
    return {"ring": np.where(n > 1, ring, np.inf), "scale_out": scale_out, "all_to_all": all_to_all, "p2p": p2p,
            "all_to_all_up": np.where(m0 > 1, a[0, 0], np.inf), "all_to_all_network": network}


def group_links(
    cluster: ClusterSpec, size: np.ndarray, stride: np.ndarray, comm: CommConstants
) -> GroupLinks:
    """The links a group of `size` ranks at `stride` sees on `cluster`: its members in one scale-up domain share
    that domain's uplinks, so β = min(b_0, m_0·b_1) (SimAI calbusbw.cc for whole nodes). Placement and bandwidths:
    docs/cost-model.md#collectives-placement, #collectives-bandwidth (aliyun/SimAI
    astra-sim-alibabacloud/astra-sim/system/calbusbw.cc, NVIDIA/nccl@b6475625 src/graph/tuning.cc)."""
    n_arr, s_arr = np.broadcast_arrays(np.atleast_1d(np.asarray(size, dtype=np.int64)),
                                       np.atleast_1d(np.asarray(stride, dtype=np.int64)))
    n = n_arr.reshape(-1)
    s = s_arr.reshape(-1)
    if n.size > _DEDUPE_ABOVE:
        # Many layouts but few distinct (size, stride) groups: place each once.
        rows = distinct_rows(n, s)
        return rows.spread_fields(_group_links(cluster, n.take(rows.first), s.take(rows.first), comm))
    return _group_links(cluster, n, s, comm)


_DEDUPE_ABOVE = 512


def placed_group_links(cluster: ClusterSpec, size: np.ndarray, stride: np.ndarray, members: np.ndarray,
                       comm: CommConstants, relief: np.ndarray | None = None,
                       domains: np.ndarray | None = None) -> GroupLinks:
    """`group_links` for groups whose members per tier-i domain are given, `members` (T, N) (placement.spans: the
    fewest members the worst group has in any domain it touches, n where it fits one), instead of derived from an
    aligned `stride`; `stride` still sets how many ranks send across a boundary at once (point-to-point). `relief`
    (T, N) ≥ 1 raises the ring and all-to-all bandwidth of tier i where the busiest domain below it sends less than
    every GPU's share of its uplinks (docs/placement.md#uplink-load); `domains` (N,) the scale-up domains it touches."""
    n = np.atleast_1d(np.asarray(size, dtype=np.int64))
    s = np.atleast_1d(np.asarray(stride, dtype=np.int64))
    m = np.array(members, dtype=float).reshape(len(cluster.tiers), n.size)  # a copy: the caller's stays
    m[-1] = n  # the outermost tier spans the cluster (ClusterSpec validation)
    fits = m >= n
    tier = np.where(n > 1, np.argmax(fits, axis=0), -1)
    crossed = np.arange(m.shape[0])[:, None] < tier
    links = _links_of(cluster, comm, n, s, tier, crossed, np.where(crossed, np.clip(m, 1, n), n), relief)
    return links if domains is None else replace(links, domains_spanned=np.asarray(domains, dtype=float))


def _group_links(cluster: ClusterSpec, n: np.ndarray, s: np.ndarray, eff: CommConstants) -> GroupLinks:
    tier, crossed, members = _placement(_tiers(cluster, eff), n, s)
    return _links_of(cluster, eff, n, s, tier, crossed, members)


def _links_of(cluster: ClusterSpec, eff: CommConstants, n: np.ndarray, s: np.ndarray, tier: np.ndarray,
              crossed: np.ndarray, members: np.ndarray, relief: np.ndarray | None = None) -> GroupLinks:
    tiers = _tiers(cluster, eff)
    lat = _latencies(tiers, n, crossed, members)
    bw = _bandwidths(tiers, n, s, crossed, members, tier)
    if relief is not None:  # rings and all-to-alls only: point-to-point has its own senders (_bandwidths)
        eased = replace(tiers, ring_bytes_per_s=tiers.ring_bytes_per_s * relief,
                        all_to_all_bytes_per_s=tiers.all_to_all_bytes_per_s * relief)
        bw = _bandwidths(eased, n, s, crossed, members, tier) | {"p2p": bw["p2p"]}
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
        domains_spanned=1.0 + np.ceil((n - members[0]) / np.clip(tiers.ranks[0, 0] // s, 1, n)),
        scale_up_bandwidth_bytes_per_s=np.full(n.shape, tiers.ring_bytes_per_s[0, 0]),
        scale_up_latency_s=np.full(n.shape, tiers.latency_s[0, 0]),
        scale_up_in_network_bytes_per_s=np.where(members[0] > 1, nvls, 0.0),
        scale_out_bandwidth_bytes_per_s=bw["scale_out"],
        scale_out_step_latency_s=lat["scale_out"],
        scale_out_in_network=out_reduces,
        all_to_all_bandwidth_bytes_per_s=bw["all_to_all"],
        all_to_all_step_latency_s=lat["peer"],
        all_to_all_scale_up_bytes_per_s=bw["all_to_all_up"],
        all_to_all_network_s_per_byte=bw["all_to_all_network"],
        send_recv_bandwidth_bytes_per_s=bw["p2p"],
        comm=eff,
    )


def _all_reduce_s(bytes_total: np.ndarray, n: np.ndarray, links: GroupLinks) -> np.ndarray:
    """Fastest of a flat ring and a hierarchical all-reduce, as NCCL's tuner picks (tuning.cc): base + intra + inter,
    intra = min(ring, NVLS) inside each scale-up domain, inter = min(ring, tree, SHARP) on S/m_0 across the
    k = n/m_0 domains, phases summed. Terms, the NVLS measurement and what is left out:
    docs/cost-model.md#collectives-all-reduce."""
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
    """Seconds for one `op` of S = `bytes_total` in every group of `size` ranks (docs/cost-model.md#collectives-time);
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


def domain_all_to_all_s(scale_up_bytes: np.ndarray, network_bytes: np.ndarray, size: np.ndarray,
                        links: GroupLinks, deduplicating: bool = True) -> np.ndarray:
    """Seconds for an all-to-all in every group of `size` ranks whose bytes per member are given on each side of the
    scale-up boundary (a deduplicating MoE dispatcher, cost.routing.destination_copies): t_0 + (n−1)·ᾱ_peer +
    max(B_up/a_0, B_net·s_net) (docs/cost-model.md#traffic-dedup), a_0 and s_net at the dispatcher's measured
    fractions of the line rates (CommConstants.dedup_scale_up, dedup_network) unless not `deduplicating` (then NCCL's,
    as collective_time_s); 0 where size is 1 or nothing moves."""
    n = np.atleast_1d(np.asarray(size, dtype=float)).reshape(-1)
    up = np.asarray(scale_up_bytes, dtype=float)
    out = np.asarray(network_bytes, dtype=float)
    comm = links.comm
    up_rate = links.all_to_all_scale_up_bytes_per_s
    out_s_per_byte = links.all_to_all_network_s_per_byte
    if deduplicating:
        up_rate = up_rate * (comm.dedup_scale_up / comm.scale_up_all_to_all)
        out_s_per_byte = out_s_per_byte * (comm.network_all_to_all / comm.dedup_network)
    with np.errstate(invalid="ignore"):
        wire = np.maximum(np.where(up > 0, up / up_rate, 0.0), out * out_s_per_byte)
    t = comm.base_latency_s(Collective.ALL_TO_ALL) + (n - 1) * links.all_to_all_step_latency_s + wire
    return np.where((n > 1) & (up + out > 0), t, 0.0)


def tier_shares(op: Collective, size: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Share of a member's bytes on each tier, (T, N): row 0 stays inside a scale-up domain, row i ≥ 1 leaves a
    tier-(i−1) domain but not a tier-i one. `members` (T, N) as placed_group_links takes them. A ring (all-reduce,
    reduce-scatter, all-gather, and send/recv along a pipeline) ordered by domain has c_i = n/m_i edges leaving
    tier-i domains (0 where it fits one); an all-to-all sends each peer an equal part, (m_i − m_{i−1}) of n − 1 of
    them first reached at tier i (docs/placement.md#per-tier-traffic)."""
    n = np.atleast_1d(np.asarray(size, dtype=float))
    m = np.minimum(np.asarray(members, dtype=float).reshape(-1, n.size), n)
    if Collective(op) is Collective.ALL_TO_ALL:
        reached = np.vstack([m[:1] - 1, np.diff(m, axis=0)])
        return np.where(n > 1, reached / np.maximum(n - 1, 1), 0.0)
    edges = np.where(m < n, n / np.maximum(m, 1), 0.0)
    bands = np.vstack([n - edges[:1], edges[:-1] - edges[1:]])
    return bands / n * (n > 1)
