"""Where a health sweep (`bench links`, `bench collectives`) runs its ranks, and what each pair is compared with.
Scopes (`--scope`): node (default), cross-node, hostfile, tiers, job; ranks on hosts start through `--node-exec`
(runtime/nodes.py). Reference: the catalog's per-GPU bandwidth of each pair's tier with `--cluster`, else the
measured median. The scope table: docs/monitoring.md (Health sweep); details: docs/monitoring.md#cli-health-scope.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from llmscale.errors import SpecError
from llmscale.runtime.hosts import Host, read_hostfile
from llmscale.runtime.nodes import NodeExec, NodeExecKind, parse_node_exec


class Scope(str, Enum):
    NODE = "node"
    CROSS_NODE = "cross-node"
    TIERS = "tiers"
    HOSTFILE = "hostfile"
    JOB = "job"


@dataclass(frozen=True)
class Placement:
    """The sweep's ranks: on this machine (`hosts` empty, `local_ranks` of them) or `slots` per host."""

    scope: Scope
    hosts: tuple[Host, ...]
    ranks_per_host: tuple[int, ...]
    node_exec: NodeExec
    source: str
    local_ranks: int = 0

    @property
    def world_size(self) -> int:
        return sum(self.ranks_per_host) if self.hosts else self.local_ranks

    def host_of_rank(self) -> list[int]:
        """Index of each rank's host (0 for every rank on this machine)."""
        if not self.hosts:
            return [0] * self.local_ranks
        return [k for k, count in enumerate(self.ranks_per_host) for _ in range(count)]


def parse_scope(text: str) -> Scope:
    try:
        return Scope(text)
    except ValueError:
        raise SpecError("scope", text, ", ".join(s.value for s in Scope)) from None


def resolve_placement(scope_text: str, nproc: int, hostfile: Path | None, run_dir: Path | None,
                      node_exec_text: str | None, cluster: str | None = None) -> Placement:
    """The placement of a scope (module docstring); a flag the scope does not use is an error, never ignored."""
    scope = parse_scope(scope_text)
    if scope is Scope.TIERS and cluster is None:
        raise SpecError("cluster", None, "a catalog cluster (or file) for --scope tiers: its tiers label the pairs")
    uses_hostfile = scope in (Scope.CROSS_NODE, Scope.HOSTFILE, Scope.TIERS)
    if hostfile is not None and not uses_hostfile:
        raise SpecError("hostfile", str(hostfile), "only with --scope cross-node, hostfile or tiers")
    if uses_hostfile and hostfile is None:
        raise SpecError("hostfile", None, f"a hostfile: --scope {scope.value} runs its ranks on the hostfile's hosts")
    if (run_dir is not None) != (scope is Scope.JOB):
        raise SpecError("run_dir", str(run_dir), "--run-dir with --scope job (and --scope job needs --run-dir)")
    node_exec = parse_node_exec(node_exec_text or "ssh {host}")
    if scope is Scope.NODE:
        if node_exec_text is not None:
            raise SpecError("node_exec", node_exec_text, "only with hosts (--scope cross-node, hostfile, tiers, job)")
        return Placement(scope, (), (), node_exec, "this machine", nproc)
    if scope is Scope.JOB:
        assert run_dir is not None
        return _job_placement(run_dir, nproc, node_exec)
    assert hostfile is not None
    hosts = tuple(read_hostfile(hostfile))
    counts = tuple(1 if scope is Scope.CROSS_NODE else (h.slots or 1) for h in hosts)
    if sum(counts) < 2 or (scope is Scope.CROSS_NODE and len(hosts) < 2):
        raise SpecError("hostfile", str(hostfile), f"at least 2 {'hosts' if scope is Scope.CROSS_NODE else 'slots'} "
                        f"for --scope {scope.value} (it lists {len(hosts)} host(s))")
    return Placement(scope, hosts, counts, node_exec, f"hostfile {hostfile}")


def _job_placement(run_dir: Path, nproc: int, node_exec: NodeExec) -> Placement:
    """A run directory's hosts: the config's hostfile, else the hosts of its step records."""
    import yaml

    from llmscale.runtime.files import RunPaths, read_steps

    config = run_dir / "config.yaml"
    if not config.is_file():
        raise SpecError("run_dir", str(run_dir), "a run directory (it has no config.yaml)")
    data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    if isinstance(data, dict) and data.get("hosts"):
        path = Path(str(data["hosts"]))
        hosts = tuple(read_hostfile(path if path.is_absolute() else run_dir / path))
        return Placement(Scope.JOB, hosts, tuple(h.slots or 1 for h in hosts), node_exec, f"run dir {run_dir} "
                         f"(config hosts {path})")
    paths = RunPaths(run_dir)
    per_host: dict[str, int] = {}
    for rank_file in sorted(paths.steps_dir.glob("rank*.jsonl")) if paths.steps_dir.is_dir() else []:
        records, _ = read_steps(paths, int(rank_file.stem[4:]))
        if records:
            per_host[records[-1].host] = per_host.get(records[-1].host, 0) + 1
    if not per_host:
        raise SpecError("run_dir", str(run_dir), "a run directory with step records or a config `hosts` hostfile")
    if set(per_host) == {socket.gethostname()}:
        return Placement(Scope.JOB, (), (), node_exec, f"run dir {run_dir} (ranks on this machine)",
                         per_host[socket.gethostname()])
    hosts = tuple(Host(name) for name in per_host)
    return Placement(Scope.JOB, hosts, tuple(per_host.values()), node_exec, f"run dir {run_dir} (step records)")


def run_placed(placement: Placement, worker_key: str, payload: Any, backend: str, timeout_s: float,
               local: Any) -> Any:
    """Rank 0's result: `local()` for ranks on this machine, else one process per rank on its host."""
    from llmscale.measure import hostlaunch as hl
    from llmscale.measure.launch import _free_port

    if not placement.hosts:
        return local()
    port = int(os.environ.get("LLMSCALE_MASTER_PORT") or _free_port())
    # `local`: every "host" is this machine, whatever the hostfile calls it
    master = "127.0.0.1" if placement.node_exec.kind is NodeExecKind.LOCAL else placement.hosts[0].address
    host_index = placement.host_of_rank()
    commands = []
    for rank, k in enumerate(host_index):
        host = placement.hosts[k]
        local_rank = host_index[:rank].count(k)
        place = hl.RankPlace(rank, host.name, local_rank, placement.ranks_per_host[k])
        env = hl.rank_env(place, placement.world_size, master, port)
        argv = hl.worker_argv(hl.WORKERS[worker_key], backend)
        commands.append((place, placement.node_exec.command(host.name, argv, env)))
    return hl.run_ranks(commands, payload, timeout_s)


@dataclass(frozen=True)
class References:
    """Each pair's expected bandwidth (bytes/s) and tier name, from the catalog cluster."""

    cluster: str
    bytes_per_s: Any
    """(n, n) array."""
    tier: list[list[str]]
    crossed: dict[str, int]
    """Pairs per tier of the cluster (0: no pair crosses it)."""


def references(placement: Placement, cluster: Any) -> References:
    """The catalog reference of every rank pair (module docstring: tiers)."""
    import numpy as np

    g = cluster.node.gpus_per_node
    host_index = placement.host_of_rank()
    if max(host_index) + 1 > cluster.num_gpus // g:
        raise SpecError("hostfile", len(placement.hosts), f"at most the cluster's {cluster.num_gpus // g} nodes")
    gpu = [k * g + host_index[:r].count(k) for r, k in enumerate(host_index)]
    n = len(gpu)
    ref = np.full((n, n), np.inf)
    names = [[""] * n for _ in range(n)]
    crossed = {t.name: 0 for t in cluster.tiers}
    for i in range(n):
        for j in range(n):
            if i != j:
                tier = next(t for t in cluster.tiers if gpu[i] // t.ranks == gpu[j] // t.ranks)
                ref[i, j], names[i][j] = tier.bandwidth_bytes_per_s, tier.name
                crossed[tier.name] += int(i < j)
    return References(cluster.name, ref, names, crossed)
