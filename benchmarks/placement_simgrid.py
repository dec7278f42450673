"""Cross-check of the placement model against SimGrid (simgrid.org, a flow-level network simulator on PyPI): the
collectives of placed groups simulated on the same fat tree, times and per-tier bytes beside llmscale's.

For each case, every group of one kind runs its collective at once, as in a training step: a ring reduce-scatter
(n − 1 steps of S/n to the next member, each step waiting for the previous one) or an all-to-all (S/n to every
peer at once). The platform has one host per GPU; a GPU reaches its node's peers over its own NVLink port, other
nodes over its own NIC to the leaf, other leaves over its leaf's uplink (the leaf's GPUs × the tier's per-GPU
bandwidth ÷ oversubscription), all split-duplex, at the bandwidths llmscale prices (rated × its ring efficiency).
SimGrid's CM02 model shares links max-min fairly with no TCP factors, but weighs each flow's share by its route
latency (TCP's RTT unfairness, which NCCL over NVLink and InfiniBand does not have): the links have no latency here,
in SimGrid and in llmscale alike, so the bandwidth parts compare directly (messages of S = 256 MB; llmscale's fixed
per-collective latency stays in its times, a few µs). Per-tier bytes: what the worst member sent that
crossed each tier, counted from the simulated messages, against cost.collectives.tier_shares.

Needs simgrid 4.1 (source build: apt-get install libboost-dev cmake; pip install pybind11==2.13.6 setuptools wheel;
pip install --no-build-isolation simgrid==4.1). Run:  python benchmarks/placement_simgrid.py
Results: benchmarks/placement.md."""

from __future__ import annotations

import multiprocessing
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmscale.cost.collectives import collective_time_s, placed_group_links, tier_shares
from llmscale.io.catalog import load_constants, load_gpu
from llmscale.placement.assign import Placement, in_order, packed
from llmscale.placement.fabric import Fabric
from llmscale.placement.mesh import GroupKind, group_ids, group_size, node_axes
from llmscale.placement.spans import kind_span
from llmscale.runtime.hosts import Exclusion
from llmscale.specs.cluster import ClusterSpec, NetworkTier, NodeSpec
from llmscale.specs.collective import Collective
from llmscale.specs.layout import Layout

BYTES = 256e6


@dataclass(frozen=True)
class Case:
    name: str
    cluster: ClusterSpec
    layout: Layout
    kind: GroupKind
    op: Collective
    excluded: tuple[str, ...]


def three_tier(name: str, gpus_per_node: int, leaf_nodes: int, nodes: int, oversubscription: float) -> ClusterSpec:
    g = gpus_per_node
    return ClusterSpec(
        name=name, gpu=load_gpu("h100-sxm"), num_gpus=g * nodes,
        node=NodeSpec(gpus_per_node=g, nics_per_node=g, nic_gbit_per_s=400, pcie_gb_per_s=64, host_memory_gib=512),
        tiers=(NetworkTier(name="nvlink", ranks=g, bandwidth_gb_per_s=450, latency_us=0.0),
               NetworkTier(name="leaf", ranks=g * leaf_nodes, bandwidth_gb_per_s=50, latency_us=0.0),
               NetworkTier(name="spine", ranks=g * nodes, bandwidth_gb_per_s=50, latency_us=0.0,
                           oversubscription=oversubscription)))


CASES = (
    Case("DP ring reduce-scatter, tp2 dp4 pp2, 12 nodes of 2 GPUs, leaf of 4 nodes, spine 4:1",
         three_tier("small-fat-tree", 2, 4, 12, 4.0), Layout(tp=2, pp=2, dp=4, etp=1), GroupKind.DP,
         Collective.REDUCE_SCATTER, ("node00001",)),
    Case("EP all-to-all, tp8 ep32 dp8, 20 nodes of 8 GPUs, leaf of 4 nodes, spine 2:1",
         three_tier("seed-like", 8, 4, 20, 2.0), Layout(tp=8, pp=1, dp=8, ep=32, etp=1), GroupKind.EP,
         Collective.ALL_TO_ALL, ("node00002",)),
    Case("EP all-to-all across leaves, tp8 ep64 dp8, 8 nodes of 8 GPUs, leaf of 4 nodes, spine 2:1",
         three_tier("seed-like-crossing", 8, 4, 8, 2.0), Layout(tp=8, pp=1, dp=8, ep=64, etp=1), GroupKind.EP,
         Collective.ALL_TO_ALL, ()),
)


def placements(case: Case, fabric: Fabric) -> list[Placement]:
    g = case.cluster.node.gpus_per_node
    world = case.layout.tp * case.layout.cp * (case.layout.dp or 1) * case.layout.pp
    axes = node_axes(case.layout, g)
    assert axes is not None
    tier_nodes = tuple(max(1, t.ranks // g) for t in case.cluster.tiers)
    first = in_order(fabric, world // g)
    return [first, packed(fabric, axes, tuple(range(len(axes))), tier_nodes)]


def model_time(case: Case, fabric: Fabric, placement: Placement
               ) -> tuple[list[float], np.ndarray, np.ndarray, np.ndarray]:
    """llmscale's seconds for one collective of BYTES (with the uplink relief, then without: every GPU at its
    oversubscribed share), the members per tier of the worst group, the tier shares and the relief."""
    span = kind_span(case.layout, case.kind, fabric, placement.node_of)
    comm = load_constants().comm
    n = np.array([span.size])
    seconds = [float(collective_time_s(case.op, np.array([BYTES]), n, placed_group_links(
        case.cluster, n, np.array([1]), span.members[:, None], comm, relief))[0])
        for relief in (span.relief[:, None], None)]
    return seconds, span.members, tier_shares(case.op, n, span.members[:, None])[:, 0], span.relief


def _platform(engine: Any, case: Case, rank_node: np.ndarray, leaf_of: np.ndarray) -> list[Any]:
    """One host per rank; its NVLink port and NIC, each leaf's uplink (split-duplex), and a route per pair."""
    from simgrid import LinkInRoute

    comm = load_constants().comm
    zone, tiers, world = engine.netzone_root, case.cluster.tiers, rank_node.size
    hosts = [zone.add_host(f"r{r}", 1e9).seal() for r in range(world)]
    nv = [zone.add_split_duplex_link(f"nv{r}", tiers[0].bandwidth_bytes_per_s * comm.scale_up_ring)
          .set_latency(tiers[0].latency_us * 1e-6).seal() for r in range(world)]
    nic = [zone.add_split_duplex_link(f"nic{r}", tiers[1].bandwidth_bytes_per_s * comm.network)
           .set_latency(tiers[1].latency_us * 1e-6).seal() for r in range(world)]
    uplink = {int(d): zone.add_split_duplex_link(
        f"leaf{int(d)}", tiers[1].ranks * tiers[2].bandwidth_bytes_per_s * comm.network / tiers[2].oversubscription)
        .set_latency(tiers[2].latency_us * 1e-6).seal() for d in np.unique(leaf_of)}
    up, down = LinkInRoute.Direction.UP, LinkInRoute.Direction.DOWN
    for a in range(world):
        for b in range(world):
            if a == b:
                continue
            if rank_node[a] == rank_node[b]:
                route = [LinkInRoute(nv[a], up), LinkInRoute(nv[b], down)]
            elif leaf_of[a] == leaf_of[b]:
                route = [LinkInRoute(nic[a], up), LinkInRoute(nic[b], down)]
            else:
                route = [LinkInRoute(nic[a], up), LinkInRoute(uplink[int(leaf_of[a])], up),
                         LinkInRoute(uplink[int(leaf_of[b])], down), LinkInRoute(nic[b], down)]
            zone.add_route(hosts[a], hosts[b], route, False)
    zone.seal()
    return hosts


def simulate(case: Case, fabric: Fabric, placement: Placement) -> tuple[float, np.ndarray]:
    """SimGrid's seconds for every group's collective at once (the last member done), and the worst member's bytes
    by tier crossed."""
    import simgrid
    from simgrid import Engine, Mailbox

    g = case.cluster.node.gpus_per_node
    world = placement.node_of.size * g
    engine = Engine([sys.argv[0], "--cfg=network/model:CM02", "--log=root.thresh:critical",
                     "--log=xbt_cfg.thresh:critical"])
    rank_node = placement.node_of[np.arange(world) // g]
    leaf_of = fabric.domain[1].take(rank_node)
    hosts = _platform(engine, case, rank_node, leaf_of)
    ids = group_ids(case.layout, case.kind, np.arange(world))
    n = group_size(case.layout, case.kind)
    crossed: dict[int, np.ndarray] = {}

    def sent(rank: int, peer: int) -> None:
        tier = 0 if rank_node[rank] == rank_node[peer] else (1 if leaf_of[rank] == leaf_of[peer] else 2)
        crossed.setdefault(rank, np.zeros(3))[tier] += BYTES / n

    def ring_member(rank: int, members: list[int]) -> None:
        nxt, box = members[(members.index(rank) + 1) % n], Mailbox.by_name(f"ring{rank}")
        for _ in range(n - 1):
            send = Mailbox.by_name(f"ring{nxt}").put_async(rank, int(BYTES / n))
            sent(rank, nxt)
            box.get()
            send.wait()

    def a2a_member(rank: int, members: list[int]) -> None:
        sends, gets = simgrid.ActivitySet(), simgrid.ActivitySet()
        for peer in (p for p in members if p != rank):
            sends.push(Mailbox.by_name(f"a2a{peer}").put_async(rank, int(BYTES / n)))
            sent(rank, peer)
        for _ in range(n - 1):
            gets.push(Mailbox.by_name(f"a2a{rank}").get_async())
        gets.wait_all()
        sends.wait_all()

    member = a2a_member if case.op is Collective.ALL_TO_ALL else ring_member
    finished: list[float] = []
    for group in np.unique(ids):
        members = np.flatnonzero(ids == group).tolist()
        for rank in members:
            hosts[rank].add_actor(f"m{rank}", lambda r=rank, m=members: (member(r, m), finished.append(Engine.clock)))
    engine.run()
    return max(finished), max(crossed.values(), key=lambda v: tuple(v[::-1]))


def _simulated(case: Case, fabric: Fabric, placement: Placement) -> tuple[float, np.ndarray]:
    """`simulate` in a child process: SimGrid runs one engine per process."""
    parent, child = multiprocessing.Pipe()

    def run() -> None:
        child.send(simulate(case, fabric, placement))

    process = multiprocessing.get_context("fork").Process(target=run)
    process.start()
    result = parent.recv()
    process.join()
    return result  # type: ignore[no-any-return]


def main() -> None:
    print("| case | placement | worst group's members per tier | uplink relief per tier | llmscale s | "
          "llmscale without relief s | SimGrid s | llmscale / SimGrid | bytes by tier, llmscale (MB) | "
          "bytes by tier, SimGrid (MB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case in CASES:
        fabric = Fabric.of(case.cluster, None, [Exclusion(h) for h in case.excluded])
        for placement in placements(case, fabric):
            seconds, members, shares, relief = model_time(case, fabric, placement)
            wire = BYTES * (group_size(case.layout, case.kind) - 1) / group_size(case.layout, case.kind)
            ours = " / ".join(f"{x / 1e6:.0f}" for x in shares * wire)
            simulated, crossed = _simulated(case, fabric, placement)
            theirs = " / ".join(f"{x / 1e6:.0f}" for x in crossed)
            print(f"| {case.name} | {placement.name} ({placement.skipped} idle) | "
                  f"{' / '.join(f'{m:g}' for m in members)} | {' / '.join(f'{r:g}' for r in relief)} | "
                  f"{seconds[0]:.4f} | {seconds[1]:.4f} | {simulated:.4f} | {seconds[0] / simulated:.2f} | "
                  f"{ours} | {theirs} |")


if __name__ == "__main__":
    main()
