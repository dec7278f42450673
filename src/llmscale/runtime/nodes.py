"""Starting a process on a host, and the node plan of a relaunch that leaves excluded hosts out. Torch-free. Node exec
templates: `local`, `ssh {host}`, `ip netns exec {host}`, `srun -w {host} -N1 -n1` (options may be added; `{host}`
one whole token, once); the environment goes as `env K=V ... argv`.
The templates' rules and `plan_nodes`: docs/runtime.md#runtime-nodes.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from llmscale.errors import SpecError
from llmscale.runtime.hosts import Exclusion, Host, HostSelection, select_hosts


class NodeExecKind(str, Enum):
    """How a process reaches its host."""

    LOCAL = "local"
    SSH = "ssh"
    NETNS = "netns"
    SRUN = "srun"


TEMPLATES = {NodeExecKind.LOCAL: "local", NodeExecKind.SSH: "ssh {host}", NodeExecKind.NETNS: "ip netns exec {host}",
             NodeExecKind.SRUN: "srun -w {host} -N1 -n1"}
_HEADS = ((NodeExecKind.SSH, ("ssh",)), (NodeExecKind.NETNS, ("ip", "netns", "exec")), (NodeExecKind.SRUN, ("srun",)))
_ALLOWED = "local, 'ssh {host}', 'ip netns exec {host}' or 'srun -w {host} -N1 -n1' (options may be added; {host} once)"


@dataclass(frozen=True)
class NodeExec:
    """A validated node exec template (module docstring)."""

    kind: NodeExecKind
    tokens: tuple[str, ...]
    """The prefix's words with the `{host}` token; empty for local."""

    @property
    def text(self) -> str:
        return "local" if self.kind is NodeExecKind.LOCAL else " ".join(self.tokens)

    def command(self, host: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
        """The command line that runs `argv` with `env` on `host`."""
        inner = (["env", *(f"{k}={v}" for k, v in (env or {}).items())] if env else []) + list(argv)
        prefix = [host if t == "{host}" else t for t in self.tokens]
        if self.kind is NodeExecKind.SSH:
            return [*prefix, shlex.join(inner)]
        return prefix + inner


def parse_node_exec(text: str) -> NodeExec:
    """A NodeExec from a kind name (`local`, `ssh`, `netns`, `srun`) or a template (module docstring)."""
    value = text.strip()
    if value in {k.value for k in NodeExecKind}:
        value = TEMPLATES[NodeExecKind(value)]
    if value == "local":
        return NodeExec(NodeExecKind.LOCAL, ())
    try:
        tokens = tuple(shlex.split(value))
    except ValueError:
        raise SpecError("node-exec", text, _ALLOWED) from None
    braces = sum(t.count("{") + t.count("}") for t in tokens)
    kind = next((k for k, head in _HEADS if tokens[:len(head)] == head), None)
    if kind is None or tokens.count("{host}") != 1 or braces != 2:
        raise SpecError("node-exec", text, _ALLOWED)
    return NodeExec(kind, tokens)


@dataclass(frozen=True)
class NodeLaunch:
    """One node of a plan: its rank, its host and the command line that starts its processes there."""

    node_rank: int
    host: Host
    argv: tuple[str, ...]


@dataclass(frozen=True)
class NodePlan:
    """Which hosts a (re)launch uses, where the ranks meet, and each node's command line."""

    selection: HostSelection
    nodes: tuple[NodeLaunch, ...]
    spare: tuple[Host, ...]
    """Kept hosts the job does not need (in hostfile order, after the used ones)."""
    master_addr: str
    master_port: int
    nproc_per_node: int
    node_exec: NodeExec

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(n.host.name for n in self.nodes)

    def summary(self) -> str:
        return (f"{self.selection.summary()}; using {len(self.nodes)} ({', '.join(self.hosts)}), rendezvous "
                f"{self.master_addr}:{self.master_port}, {self.nproc_per_node} process(es) per node via "
                f"{self.node_exec.text}" + (f"; spare: {', '.join(h.name for h in self.spare)}" if self.spare else ""))


NodeArgv = Callable[[int, int, str, int, int], list[str]]
"""(node_rank, nnodes, master_addr, master_port, nproc_per_node) -> the command a node runs."""


def plan_nodes(hosts: list[Host], exclude: list[Exclusion], needed_nodes: int, node_exec: NodeExec, *,
               node_argv: NodeArgv, nproc_per_node: int | None = None, master_port: int = 29500,
               env: Mapping[str, str] | None = None) -> NodePlan:
    """The node plan (module docstring). `nproc_per_node` defaults to the used hosts' `slots`, which must agree."""
    if not 1 <= needed_nodes <= len(hosts):
        raise SpecError("nodes", needed_nodes, f"1..{len(hosts)} (the hostfile's hosts)")
    if not 1 <= master_port <= 65535:
        raise SpecError("master_port", master_port, "a TCP port in 1..65535")
    selection = select_hosts(hosts, exclude)
    if len(selection.kept) < needed_nodes:
        excluded = ", ".join(e.host for e in selection.excluded)
        raise SpecError("nodes", needed_nodes, f"at most {len(selection.kept)}: the hostfile's {len(hosts)} hosts less "
                        f"{len(selection.excluded)} excluded ({excluded})")
    used, spare = selection.kept[:needed_nodes], selection.kept[needed_nodes:]
    slots = {h.slots for h in used if h.slots is not None}
    if nproc_per_node is None:
        if len(slots) > 1:
            raise SpecError("slots", sorted(slots), "the same slots=N on every used host (torchrun runs one "
                            "--nproc-per-node on all nodes), or give nproc_per_node")
        nproc_per_node = slots.pop() if slots else 1
    addr = "127.0.0.1" if node_exec.kind is NodeExecKind.LOCAL else used[0].address  # local: all on this machine
    nodes = tuple(NodeLaunch(i, h, tuple(node_exec.command(
        h.name, node_argv(i, needed_nodes, addr, master_port, nproc_per_node), env))) for i, h in enumerate(used))
    return NodePlan(selection, nodes, tuple(spare), addr, master_port, nproc_per_node, node_exec)
