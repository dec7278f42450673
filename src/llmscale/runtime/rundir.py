"""Before the first attempt: the run config copied and hash-checked into the run directory (another hash only with
`--allow-config-change`, journaled), and the hosts the job keeps after an exclusion list, which pick the in-process
(agent.py) or multi-node (multinode.py) path. torch-free.
Details: docs/runtime.md ("Launch and restart policy") and docs/runtime.md#runtime-rundir.
"""

from __future__ import annotations

import ipaddress
import json
import math
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmscale.errors import LlmscaleError
from llmscale.runtime import nodes as nodes_mod
from llmscale.runtime.config import RunConfig, config_sha256, load_config, parse_config
from llmscale.runtime.files import RunPaths, write_atomic
from llmscale.runtime.hosts import Host, HostSelection, read_exclusions, read_hostfile, select_hosts


@dataclass(frozen=True)
class PreparedRun:
    cfg: RunConfig
    sha256: str
    resumed: bool
    previous_sha256: str | None
    changed: dict[str, tuple[Any, Any]]
    """Dotted key → (old, new) when the hash changed; empty otherwise."""


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def config_diff(old: RunConfig, new: RunConfig) -> dict[str, tuple[Any, Any]]:
    """The leaf keys whose values differ between two resolved configs, dotted, with (old, new)."""
    a, b = _flatten(old.model_dump(mode="json")), _flatten(new.model_dump(mode="json"))
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def _old_config(paths: RunPaths) -> RunConfig | None:
    from llmscale.io.files import read_document

    try:
        return parse_config(read_document(paths.config), where=str(paths.config))
    except LlmscaleError:
        return None


def prepare_run(config_path: Path, run_dir: Path, allow_config_change: bool) -> PreparedRun:
    """Validate the config, check it against a previous launch in `run_dir`, then copy it and its hash there."""
    cfg = load_config(config_path)
    sha = config_sha256(cfg)
    paths = RunPaths(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        previous = paths.config_sha256.read_text(encoding="ascii").strip() if paths.config_sha256.exists() else None
        raw = config_path.read_bytes()
    except OSError as exc:
        raise LlmscaleError(f"run_dir = {str(run_dir)!r}: {exc.strerror or exc}") from None
    changed: dict[str, tuple[Any, Any]] = {}
    if previous is not None and previous != sha:
        old = _old_config(paths)
        changed = config_diff(old, cfg) if old is not None else {"(previous config unreadable)": (None, None)}
        if not allow_config_change:
            keys = ", ".join(list(changed)[:6]) + (", …" if len(changed) > 6 else "")
            raise LlmscaleError(f"config = {str(config_path)!r}: its sha256 {sha[:12]}… differs from the run's "
                                f"{previous[:12]}… in {str(run_dir)!r} (changed: {keys}); pass "
                                "--allow-config-change to resume under it")
    write_atomic(paths.config, raw)
    write_atomic(paths.config_sha256, (sha + "\n").encode("ascii"))
    return PreparedRun(cfg, sha, previous is not None, previous, changed)


def changed_message(changed: dict[str, tuple[Any, Any]]) -> str:
    return "; ".join(f"{k}: {json.dumps(a)} -> {json.dumps(b)}" for k, (a, b) in changed.items())


def is_local(name: str) -> bool:
    """localhost, a loopback address, or this machine's host name."""
    if name in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class NodePlan:
    selection: HostSelection
    nproc: int
    """Ranks of the job: the layout's world size."""
    nodes: nodes_mod.NodePlan | None = None
    """The node plan across hosts (runtime/multinode.py); None: one node, in-process (agent.py)."""


def plan_hosts(cfg: RunConfig, exclude_from: Path | None, hostfile: Path | None = None,
               node_exec: str = "local") -> NodePlan:
    """The hosts kept after the exclusion list and how the ranks start (module docstring)."""
    from llmscale.runtime.multinode import hostfile_of, plan_multinode

    path = hostfile_of(cfg.hosts, hostfile)
    hosts = read_hostfile(path) if path else [Host(socket.gethostname())]
    exclusions = read_exclusions(exclude_from) if exclude_from is not None else []
    selection = select_hosts(hosts, exclusions)
    world = cfg.layout.dp
    needed = max(1, math.ceil(world / cfg.nproc_per_node)) if path else 1
    if len(selection.kept) < needed:
        raise LlmscaleError(f"exclude_from = {str(exclude_from)!r}: leaves {len(selection.kept)} host(s) "
                            f"({', '.join(selection.kept_names) or 'none'}) but layout.dp = {world} with "
                            f"nproc_per_node = {cfg.nproc_per_node} needs {needed}")
    plan = plan_multinode(hosts, exclusions, needed, world, cfg.nproc_per_node, node_exec, is_local)
    if plan is not None:
        return NodePlan(selection, world, plan)
    remote = [h.name for h in selection.kept if not is_local(h.name)]
    if remote:
        raise LlmscaleError(f"hosts = {str(path)!r}: {', '.join(remote[:4])} not this machine; node exec 'local' "
                            "runs here: pass --node-exec 'ssh {host}' (or netns, srun) to start the ranks there")
    return NodePlan(selection, world)
