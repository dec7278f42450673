"""Attempts across hosts: one torchrun (`python -m torch.distributed.run`, pytorch/pytorch torch/distributed/run.py)
per kept node, started through the node exec template (nodes.py), all meeting at a static rendezvous that is fresh per
attempt, node rank i on the i-th kept host (a placement's host order holds); the first non-zero exit fails the
attempt. torch-free (torch runs in the node processes). Command line, failure handling and assumptions:
docs/runtime.md#runtime-multinode.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from llmscale.errors import LlmscaleError
from llmscale.runtime.agent import AttemptResult, RankFailure, free_port
from llmscale.runtime.hosts import Exclusion, Host, read_hostfile
from llmscale.runtime.nodes import NodeExecKind, NodePlan, parse_node_exec, plan_nodes

PASS_THROUGH = ("PYTHONPATH", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "OMP_NUM_THREADS")
"""Variables of the supervisor's environment also given to every node (besides every LLMSCALE_* one): ssh and srun
do not carry the caller's environment."""
STOP_GRACE_S = 3.0
POLL_S = 0.05
DIE_WITH_LAUNCHER = """import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    os._exit(1)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.stderr.write(f"cannot start {sys.argv[2]!r}: {exc}\\n")
    os._exit(127)
"""
"""Run before each node's command, in its process (then exec'd): the kernel SIGKILLs it when the launcher dies, so a
node's torchrun — and its ranks, which die with it (session.die_with_launcher) — never trains on unsupervised. Over
ssh or srun this kills the local client; what runs remotely is left to ssh's and Slurm's own clean-up."""


@dataclass(frozen=True)
class NodeCommand:
    node_rank: int
    host: str
    argv: tuple[str, ...]


@dataclass
class NodesResult:
    """An attempt across nodes: the agent-style result, and the host of every failed rank (from its node's log)."""

    result: AttemptResult
    rank_hosts: dict[int, str] = field(default_factory=dict)
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    """Each node's process exit status by host (None: still running when stopped)."""


def hostfile_of(config_hosts: str | None, flag: Path | None) -> Path | None:
    """The job's hostfile: `--hostfile` or the config's `hosts:`; both naming different hostfiles (not the same file,
    not the same hosts) is an error — neither silently overrides the other."""
    if flag is None or config_hosts is None:
        return flag if flag is not None else (Path(config_hosts) if config_hosts else None)
    given = Path(config_hosts)
    try:
        same = given.resolve() == flag.resolve() or (given.exists() and flag.exists() and os.path.samefile(given, flag))
    except OSError:
        same = False
    if not same and read_hostfile(given) != read_hostfile(flag):
        raise LlmscaleError(f"--hostfile = {str(flag)!r}: the config's hosts = {config_hosts!r} names another "
                            "hostfile (other hosts); give one of them, or the same file")
    return flag


def plan_multinode(hosts: list[Host], exclusions: list[Exclusion], needed: int, world: int, nproc_per_node: int,
                   node_exec: str, local: Callable[[str], bool]) -> NodePlan | None:
    """The node plan of a job across hosts; None for the in-process single-node path (node exec `local` and one
    node). `local(name)` says whether a host is this machine: `local` starts every node here, so a host that is not
    is refused rather than silently run here."""
    exe = parse_node_exec(node_exec)
    if exe.kind is NodeExecKind.LOCAL and needed == 1:
        return None
    if world != needed * nproc_per_node:
        raise LlmscaleError(f"layout.dp = {world}: not a multiple of nproc_per_node = {nproc_per_node} (torchrun "
                            "starts the same number of processes on every node)")
    plan = plan_nodes(hosts, exclusions, needed, exe, node_argv=lambda *_: [], nproc_per_node=nproc_per_node)
    short = [f"{n.host.name} (slots={n.host.slots})" for n in plan.nodes
             if n.host.slots is not None and n.host.slots < nproc_per_node]
    if short:
        raise LlmscaleError(f"hosts: {', '.join(short[:4])} take fewer than nproc_per_node = {nproc_per_node} "
                            "processes")
    remote = [h for h in plan.hosts if not local(h)] if exe.kind is NodeExecKind.LOCAL else []
    if remote:
        raise LlmscaleError(f"hosts: {', '.join(remote[:4])} not this machine, and node exec 'local' runs every "
                            "node here; pass --node-exec 'ssh {host}' (or netns, srun) to start them there")
    return plan


def node_env(host: str) -> dict[str, str]:
    """LLMSCALE_* of this process (the supervisor set the attempt's; not LLMSCALE_PARENT_PID: a node's ranks are
    torchrun's children), LLMSCALE_HOST = host, and PASS_THROUGH."""
    env = {k: v for k, v in os.environ.items() if k.startswith("LLMSCALE_") and k != "LLMSCALE_PARENT_PID"}
    env.update({k: os.environ[k] for k in PASS_THROUGH if k in os.environ})
    env["LLMSCALE_HOST"] = host
    return env


def attempt_commands(plan: NodePlan, script: Path, args: tuple[str, ...], attempt: int, run_key: str,
                     port: int) -> list[NodeCommand]:
    """Each node's command line for one attempt (module docstring)."""
    local = plan.node_exec.kind is NodeExecKind.LOCAL
    out = []
    for node in plan.nodes:
        argv = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={len(plan.nodes)}",
                f"--nproc-per-node={plan.nproc_per_node}", "--rdzv-backend=static", f"--node-rank={node.node_rank}",
                f"--rdzv-endpoint={plan.master_addr}:{port}", f"--rdzv-id={run_key}-attempt{attempt}",
                "--max-restarts=0",
                f"--local-addr={'127.0.0.1' if local else node.host.address}", "--monitor-interval=0.05",
                str(script), *args]  # torchrun runs `python -u SCRIPT ARGS` in each worker
        out.append(NodeCommand(node.node_rank, node.host.name,
                               tuple(plan.node_exec.command(node.host.name, argv, node_env(node.host.name)))))
    return out


_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)\s*(?:\((SIG\w+)\))?")
_TRACE = re.compile(r"^\s*traceback\s*:\s*(.*)")


def _signal_name(exit_code: int) -> str | None:
    """SIGKILL for -9 (the subprocess convention of a negative exit code), None otherwise."""
    try:
        return signal.Signals(-exit_code).name if exit_code < 0 else None
    except ValueError:
        return None


def parse_failures(text: str) -> list[RankFailure]:
    """The failed ranks of torchrun's failure report (module docstring), in report order, each rank once."""
    found: dict[int, RankFailure] = {}
    rank: int | None = None
    code: tuple[int, int, str | None] | None = None
    for line in text.splitlines():
        if m := _RANK.match(line):
            rank, code = int(m.group(1)), None
        elif (m := _EXIT.match(line)) and rank is not None:
            code = (int(m.group(1)), int(m.group(2)), m.group(3))
        elif (m := _TRACE.match(line)) and rank is not None and code is not None:
            found.setdefault(rank, RankFailure(rank, code[1], code[0], code[2] or _signal_name(code[0]),
                                               m.group(1).strip()))
            rank, code = None, None
    return list(found.values())


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each running node process by pid, then SIGKILL its process group after the grace period."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        try:
            os.kill(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + STOP_GRACE_S
    while any(p.poll() is None for p in running) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for p in running:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # its own session: the group is it and its children
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


def _failure_result(commands: list[NodeCommand], logs: list[Path], order: list[int],
                    codes: dict[str, int | None]) -> NodesResult:
    failures: list[RankFailure] = []
    hosts: dict[int, str] = {}
    for i in order + [i for i in range(len(commands)) if i not in order]:
        try:
            text = logs[i].read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        for f in parse_failures(text):
            if f.rank not in hosts:
                failures.append(f)
                hosts[f.rank] = commands[i].host
    if failures:
        return NodesResult(AttemptResult(False, tuple(failures)), hosts, codes)
    first = commands[order[0]] if order else commands[0]
    tail = logs[order[0] if order else 0].read_text(errors="replace")[-400:] if logs else ""
    return NodesResult(AttemptResult(False, (), f"node {first.host} (torchrun) exited with "
                                                f"{codes.get(first.host)}: {tail.strip()}"), {}, codes)


def run_nodes(commands: list[NodeCommand], log_dir: Path, stopped: Callable[[], bool]) -> NodesResult:
    """Start every node's command, wait (module docstring); `stopped()` is true once the hang watch killed the
    attempt. The node processes are stopped and reaped before this returns."""
    log_dir.mkdir(parents=True, exist_ok=True)
    logs = [log_dir / f"node{c.node_rank}_{c.host}.log" for c in commands]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for c, log in zip(commands, logs, strict=True):
            with open(log, "wb") as handle:
                try:
                    argv = [sys.executable, "-c", DIE_WITH_LAUNCHER, str(os.getpid()), *c.argv]
                    procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=handle,
                                                  stderr=subprocess.STDOUT, start_new_session=True))
                except OSError as exc:  # the template's program is missing: this attempt fails, said so
                    return NodesResult(AttemptResult(False, (), f"node {c.host}: cannot start {c.argv[0]!r}: {exc}"))
        order: list[int] = []
        while True:
            for i, p in enumerate(procs):
                if i not in order and p.poll() is not None:
                    order.append(i)
            if any(procs[i].returncode != 0 for i in order) or stopped():
                break
            if len(order) == len(procs):
                return NodesResult(AttemptResult(True, ()), {}, {c.host: 0 for c in commands})
            time.sleep(POLL_S)
    finally:
        _stop(procs)
    codes = {c.host: p.returncode for c, p in zip(commands, procs, strict=False)}
    failed = [i for i in order if procs[i].returncode != 0]
    return _failure_result(commands, logs, failed, codes)


def fresh_port() -> int:
    """An attempt's rendezvous port: free here at this moment (a remote first host cannot be asked; a port in use
    there fails the attempt's rendezvous, and the next attempt draws another)."""
    return free_port()


def run_attempt_nodes(plan: NodePlan, port: int, script: Path, args: tuple[str, ...], attempt: int, run_key: str,
                      log_dir: Path, stopped: Callable[[], bool]) -> NodesResult:
    """One attempt across the plan's nodes under a fresh rendezvous at the first host's address and `port`."""
    return run_nodes(attempt_commands(plan, script, args, attempt, run_key, port), log_dir, stopped)


def host_of(result: NodesResult, steps_file: Path, attempt: int, rank: int | None) -> str | None:
    """The host a failed rank ran on: its node's failure report, else its step records' last `host` of this attempt
    (a hung or SIGKILLed node prints no report)."""
    if rank is None:
        return None
    if rank in result.rank_hosts:
        return result.rank_hosts[rank]
    from llmscale.runtime.files import read_lines

    rows = read_lines(steps_file).rows
    hosts = [r.get("host") for r in rows if isinstance(r.get("host"), str) and r.get("attempt") == attempt]
    return str(hosts[-1]) if hosts else None


def plan_extra(plan: NodePlan, port: int | None = None) -> dict[str, object]:
    """The journal's view of a node plan (launch; attempt_start with its rendezvous port)."""
    out: dict[str, object] = {"hosts": list(plan.hosts), "node_exec": plan.node_exec.text,
                              "nproc_per_node": plan.nproc_per_node, "rendezvous_addr": plan.master_addr}
    if port is not None:
        out["rendezvous_port"] = port
    return out


def describe(plan: NodePlan) -> str:
    """One line: the hosts used, where they meet, how they start."""
    return (f"{len(plan.nodes)} node(s) ({', '.join(plan.hosts)}) x {plan.nproc_per_node} process(es) via "
            f"{plan.node_exec.text}, rendezvous at {plan.master_addr} (a fresh port per attempt)"
            + (f"; spare: {', '.join(h.name for h in plan.spare)}" if plan.spare else ""))
