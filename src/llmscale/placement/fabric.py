"""The physical nodes a job may be placed on: their names, the domain of each network tier that holds each, and
which an exclusion list leaves out.

Nodes are taken in topology order, the order the hostfile lists them (Slurm's topology plugins and rack-ordered
inventories list them so) or, without a hostfile, numbered in the cluster's order; the tier-i domain of node j is
j·g // R_i (ClusterSpec.tiers, g GPUs per node). An excluded node keeps its position: it is a hole in its domains."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import numpy as np

from llmscale.errors import SpecError
from llmscale.runtime.hosts import Exclusion, Host, read_exclusions, read_hostfile
from llmscale.specs.cluster import ClusterSpec

SYNTHETIC = re.compile(r"node(\d{5,})")
"""The names of a cluster's nodes without a hostfile: node00000, node00001, …"""


@dataclass(frozen=True)
class Fabric:
    """Physical nodes in topology order."""

    hosts: tuple[str, ...] | None
    """Host names in hostfile order; None: the cluster's nodes, named node00000, node00001, … (`name`)."""
    domain: np.ndarray
    """(T, nodes): the tier-i domain each node sits in."""
    available: np.ndarray
    """(nodes,) bool: not excluded."""
    gpus_per_node: int
    tier_names: tuple[str, ...]
    tier_ranks: tuple[int, ...]
    """GPUs in one domain of each tier (ClusterSpec.tiers)."""
    oversubscription: tuple[float, ...]
    excluded: tuple[Exclusion, ...] = ()
    unknown: tuple[str, ...] = ()
    """Excluded names that are not nodes of the fabric (reported, never silently dropped)."""

    @property
    def size(self) -> int:
        return int(self.available.size)

    @property
    def free_nodes(self) -> int:
        return int(self.available.sum())

    @cached_property
    def shared_tiers(self) -> np.ndarray:
        """(T,) bool: the tier's domains hold more than one node (the node's own domain otherwise)."""
        return np.array([self.size > 1 and bool(np.any(row[1:] == row[0])) for row in self.domain])

    def whole(self) -> Fabric:
        """The same hosts with nothing excluded."""
        return replace(self, available=np.ones_like(self.available), excluded=(), unknown=())

    def name(self, node: int) -> str:
        return self.hosts[node] if self.hosts is not None else f"node{node:05d}"

    @classmethod
    def of(cls, cluster: ClusterSpec, hosts: list[Host] | None = None,
           exclusions: list[Exclusion] | None = None) -> Fabric:
        """The cluster's nodes (or `hosts`, in file order), less `exclusions`."""
        g = cluster.node.gpus_per_node
        if hosts is not None and not hosts:
            raise SpecError("hostfile", "no host", "at least one host (NAME [slots=N] per line)")
        for host in hosts or []:
            if host.slots is not None and host.slots != g:
                raise SpecError("hostfile", f"{host.name} slots={host.slots}",
                                f"slots = the cluster's {g} GPUs per node ({cluster.name}), or none")
        names = tuple(h.name for h in hosts) if hosts is not None else None
        count = len(names) if names is not None else cluster.num_nodes
        if count > cluster.num_nodes:
            raise SpecError("hostfile", f"{count} hosts", f"at most the cluster's {cluster.num_nodes} nodes "
                            f"({cluster.name})")
        position = np.arange(count, dtype=np.int64) * g
        domain = np.vstack([position // t.ranks for t in cluster.tiers])
        available = np.ones(count, dtype=bool)
        known, unknown = [], []
        index = {name: i for i, name in enumerate(names)} if names is not None and exclusions else {}
        for e in exclusions or []:
            node = index.get(e.host) if names is not None else _synthetic(e.host, count)
            if node is None:
                unknown.append(e.host)
            else:
                available[node] = False
                known.append(e)
        return cls(names, domain, available, g, tuple(t.name for t in cluster.tiers),
                   tuple(t.ranks for t in cluster.tiers), tuple(t.oversubscription for t in cluster.tiers),
                   tuple(known), tuple(unknown))


def _synthetic(name: str, count: int) -> int | None:
    match = SYNTHETIC.fullmatch(name)
    return int(match.group(1)) if match and int(match.group(1)) < count else None


def read_fabric(cluster: ClusterSpec, hostfile: Path | None, exclude_from: Path | None) -> Fabric:
    """The fabric of a hostfile (or the cluster's nodes) less an exclusion list (runtime.hosts formats)."""
    hosts = read_hostfile(hostfile) if hostfile is not None else None
    return Fabric.of(cluster, hosts, read_exclusions(exclude_from) if exclude_from is not None else None)
