"""The supervisor behind `llmscale launch`: attempts of the job on torch's elastic agent (agent.py), a hang monitor
per attempt (watch.py), a journal line for everything it does (journal.py), and the restart policy:

- every attempt starts fresh workers under a fresh rendezvous; the trainer's session resumes from the newest
  complete tier (memory snapshot if newer, else the newest committed storage checkpoint);
- after a failed attempt the next starts at once if the failed one made progress (a step no earlier attempt had
  reached), else after a backoff of 0.5 s × 2^(n−1), at most 8 s, for the n-th consecutive attempt without progress;
- the job stops — `stop` journaled with the reason, exit status 1 — after `restart.max_attempts` attempts or
  `restart.max_attempts_without_progress` consecutive attempts with no new step; it completes (status 0) when one
  attempt's workers all exit 0.

Workers get LLMSCALE_RUN_DIR, LLMSCALE_ATTEMPT and LLMSCALE_CONFIG (the run dir's copy of the config) besides the
agent's own variables (RANK, WORLD_SIZE, MASTER_ADDR, ...). At the end the supervisor kills and reaps any process
left below it (by pid) and removes the run's shared-memory tier (/dev/shm/llmscale-<run_id>). After a failed attempt
(and before the first of a resumed launch) it journals the commits a killed trainer did not (reconcile.py); a fresh
run directory starts without a leftover memory tier.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from llmscale.runtime import journal as jr
from llmscale.runtime.config import RestartConfig
from llmscale.runtime.files import RunPaths, read_lines
from llmscale.runtime.multinode import NodesResult, describe, fresh_port, host_of, plan_extra, run_attempt_nodes
from llmscale.runtime.nodes import NodePlan
from llmscale.runtime.procs import become_subreaper, kill_descendants, oom_kills
from llmscale.runtime.reconcile import fresh_memory_tier, reconcile
from llmscale.runtime.rundir import changed_message, plan_hosts, prepare_run
from llmscale.runtime.watch import HangWatch, attribute

BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 8.0


@dataclass(frozen=True)
class LaunchRequest:
    config_path: Path
    run_dir: Path
    script: Path
    args: tuple[str, ...] = ()
    allow_config_change: bool = False
    exclude_from: Path | None = None
    metrics_port: int | None = None
    metrics_server: Callable[[Path, int], object] | None = None
    """Starts the Prometheus endpoint: (run_dir, port) → an object with .close()."""
    hostfile: Path | None = None
    node_exec: str = "local"
    """How a node's torchrun reaches its host (runtime/nodes.py); with one local node the in-process agent runs."""


@dataclass(frozen=True)
class LaunchOutcome:
    completed: bool
    attempts: int
    reason: str
    exit_code: int


@dataclass
class _State:
    cfg_sha: str
    attempt: int
    attempts_run: int = 0
    without_progress: int = 0
    frontier: int = -1
    """The highest step any attempt completed (-1: none)."""
    notes: list[str] = field(default_factory=list)
    nodes: NodePlan | None = None
    """Across hosts (runtime/multinode.py); None: one node, in-process."""
    checkpoints: Path = field(default_factory=Path)
    """The storage tier's directory (checkpoint.dir, else RUN_DIR/checkpoints)."""


def _event(st: _State, kind: jr.EventKind, **kw: object) -> jr.Event:
    return jr.Event(kind, st.attempt, st.cfg_sha, **kw)  # type: ignore[arg-type]


def steps_by_attempt(paths: RunPaths, world: int) -> dict[int, int]:
    """The highest step completed in each attempt, over every rank's step log."""
    best: dict[int, int] = {}
    for rank in range(world):
        for row in read_lines(paths.steps(rank)).rows:
            a, s = row.get("attempt"), row.get("step")
            if isinstance(a, int) and isinstance(s, int):
                best[a] = max(best.get(a, -1), s)
    return best


def _first_attempt(run_dir: Path) -> int:
    attempts = [e.attempt for e in jr.read(run_dir).events]
    return max(attempts) + 1 if attempts else 0


def _cleanup_memory_tier(paths: RunPaths) -> None:
    """Remove the run's shared-memory tier (memtier.remove); torch-free fallback: the directory itself."""
    try:
        from llmscale.runtime.memtier import remove
    except ImportError:
        shutil.rmtree(paths.memory_tier(), ignore_errors=True)
        return
    try:
        remove(paths.memory_tier())
    except OSError:
        shutil.rmtree(paths.memory_tier(), ignore_errors=True)


def _start_metrics(run_dir: Path, req: LaunchRequest, say: Callable[[str], None]) -> object | None:
    """The metrics server, from the caller's factory (the CLI passes llmscale.monitor.metrics.serve: monitor sits
    above runtime, so the runtime does not import it)."""
    if req.metrics_port is None:
        return None
    if req.metrics_server is None:
        say("metrics: not served, no metrics server given (llmscale.monitor unavailable)")
        return None
    server = req.metrics_server(run_dir, req.metrics_port)
    say(f"metrics: http://127.0.0.1:{getattr(server, 'port', req.metrics_port)}/metrics")
    return server


def _restored_step(run_dir: Path, attempt: int) -> int | None:
    steps = [e.restored_step for e in jr.read(run_dir).of_kind(jr.EventKind.RESTORE)
             if e.attempt == attempt and e.restored_step is not None]
    return max(steps) if steps else None


def _checkpoint_failed(run_dir: Path, attempt: int) -> bool:
    return any(e.attempt == attempt for e in jr.read(run_dir).of_kind(jr.EventKind.CHECKPOINT_FAILED))


def _set_env(req: LaunchRequest, paths: RunPaths, attempt: int) -> None:
    os.environ["LLMSCALE_RUN_DIR"] = str(paths.root)
    os.environ["LLMSCALE_ATTEMPT"] = str(attempt)
    os.environ["LLMSCALE_CONFIG"] = str(paths.config)


def _one_attempt(req: LaunchRequest, paths: RunPaths, st: _State, nproc: int, restart: RestartConfig) -> bool:
    """Run one attempt; journal its start and, if it failed, its fault. True when it completed."""
    from llmscale.runtime.agent import run_attempt

    _set_env(req, paths, st.attempt)
    port = fresh_port() if st.nodes else None
    on = f" on {', '.join(st.nodes.hosts)}" if st.nodes else ""
    jr.append(paths.root, _event(st, jr.EventKind.ATTEMPT_START, message=f"{nproc} rank(s){on}",
                                 extra=plan_extra(st.nodes, port) if st.nodes else {}))
    oom_before = oom_kills()
    watch = HangWatch(paths, nproc, st.attempt, restart.heartbeat_timeout_s, restart.phase_timeout_s)
    watch.start()
    across: NodesResult | None = None
    try:
        log_dir = paths.root / "logs" / f"attempt_{st.attempt}"
        if st.nodes is None:
            result = run_attempt(req.script, list(req.args), nproc, st.attempt, paths.root.name or "run", log_dir)
        else:
            across = run_attempt_nodes(st.nodes, port or 0, req.script, req.args, st.attempt,
                                       paths.root.name or "run", log_dir, lambda: watch.found is not None)
            result = across.result
    finally:
        watch.stop()
        kill_descendants()  # what the workers left behind (a checkpoint writer), by pid
    st.attempts_run += 1
    if not result.ok or watch.found is not None:  # commits a killed trainer did not journal (reconcile.py)
        reconcile(paths, st.checkpoints, nproc, st.cfg_sha, st.attempt)
    reached = steps_by_attempt(paths, nproc).get(st.attempt)
    if result.ok and watch.found is None:
        st.frontier = max(st.frontier, reached if reached is not None else -1)
        return True
    oom_after = oom_kills()
    why = attribute(result, watch.found, oom_before is not None and oom_after is not None and oom_after > oom_before,
                    _checkpoint_failed(paths.root, st.attempt))
    step = reached if reached is not None else _restored_step(paths.root, st.attempt)
    beat = watch.last_beats.get(why.rank) if why.rank is not None else None
    now = time.time()
    detect_s = (watch.found.detected_unix if watch.found else now) - beat[0] if beat else None
    host = socket.gethostname() if across is None else host_of(across, paths.steps(why.rank or 0), st.attempt,
                                                                why.rank)
    jr.append(paths.root, _event(
        st, jr.EventKind.FAULT, time_unix=now, step=step, steps_lost=0 if step is None else None, rank=why.rank,
        host=host, pid=why.pid, exit_code=why.exit_code, signal=why.signal, cause=why.cause,
        detect_s=detect_s, message=why.message))
    progressed = reached is not None and reached > st.frontier
    st.frontier = max(st.frontier, reached if reached is not None else -1)
    st.without_progress = 0 if progressed else st.without_progress + 1
    return False


def _stop(paths: RunPaths, st: _State, reason: str, code: int, completed: bool) -> LaunchOutcome:
    jr.append(paths.root, _event(st, jr.EventKind.STOP, reason=reason, step=st.frontier if st.frontier >= 0 else None))
    return LaunchOutcome(completed, st.attempts_run, reason, code)


def _loop(req: LaunchRequest, paths: RunPaths, st: _State, nproc: int, say: Callable[[str], None]) -> LaunchOutcome:
    from llmscale.runtime.config import load_config

    restart = load_config(paths.config).restart
    while True:
        if _one_attempt(req, paths, st, nproc, restart):
            say(f"launch: attempt {st.attempt} completed")
            return _stop(paths, st, "completed", 0, True)
        last = jr.read(paths.root).of_kind(jr.EventKind.FAULT)[-1]
        say(f"launch: attempt {st.attempt} failed: {last.cause.value if last.cause else '?'} ({last.message})")
        if st.attempts_run >= restart.max_attempts:
            return _stop(paths, st, f"restart.max_attempts = {restart.max_attempts} attempts used", 1, False)
        if st.without_progress >= restart.max_attempts_without_progress:
            return _stop(paths, st, f"{st.without_progress} consecutive attempt(s) without a new step "
                                    f"(restart.max_attempts_without_progress = "
                                    f"{restart.max_attempts_without_progress})", 1, False)
        if st.without_progress:
            time.sleep(min(BACKOFF_BASE_S * 2 ** (st.without_progress - 1), BACKOFF_MAX_S))
        st.attempt += 1


def launch(req: LaunchRequest, say: Callable[[str], None] = print) -> LaunchOutcome:
    """Prepare the run directory, then run attempts until the job completes or the restart policy stops it."""
    run_dir = req.run_dir.absolute()
    prepared = prepare_run(req.config_path, run_dir, req.allow_config_change)
    nodes = plan_hosts(prepared.cfg, req.exclude_from, req.hostfile, req.node_exec)
    paths = RunPaths(run_dir)
    st = _State(prepared.sha256, _first_attempt(run_dir), nodes=nodes.nodes)
    st.checkpoints = paths.storage_tier(prepared.cfg.checkpoint.dir)
    if prepared.resumed:
        reconcile(paths, st.checkpoints, nodes.nproc, st.cfg_sha, st.attempt)
    elif fresh_memory_tier(paths):
        say(f"launch: removed a leftover memory tier of an earlier job at {paths.memory_tier()}")
    before = steps_by_attempt(paths, nodes.nproc)
    st.frontier = max(before.values(), default=-1)
    if prepared.changed:
        jr.append(run_dir, _event(st, jr.EventKind.CONFIG_CHANGED, reason=f"from {prepared.previous_sha256}",
                                  message=changed_message(prepared.changed),
                                  extra={"changed_keys": list(prepared.changed)}))
    if nodes.selection.excluded or nodes.selection.unknown:
        jr.append(run_dir, _event(st, jr.EventKind.EXCLUDED_HOSTS, message=nodes.selection.summary(),
                                  extra={"hosts": [e.host for e in nodes.selection.excluded],
                                         "reasons": [e.reason for e in nodes.selection.excluded]}))
        say(nodes.selection.summary())
    jr.append(run_dir, _event(st, jr.EventKind.LAUNCH, message=" ".join([sys.executable, str(req.script),
                                                                        *req.args]),
                              extra={"nproc": nodes.nproc, "resumed": prepared.resumed,
                                     **(plan_extra(nodes.nodes) if nodes.nodes else {})}))
    say(f"launch: {run_dir} config {prepared.sha256[:12]}… {nodes.nproc} rank(s), attempt {st.attempt}"
        + (" (resume)" if prepared.resumed else "") + (f"; {describe(nodes.nodes)}" if nodes.nodes else ""))
    become_subreaper()
    server = _start_metrics(run_dir, req, say)
    try:
        return _loop(req, paths, st, nodes.nproc, say)
    except BaseException as exc:
        _stop(paths, st, f"supervisor interrupted: {type(exc).__name__}", 130, False)
        raise
    finally:
        kill_descendants()
        close = getattr(server, "close", None)
        if callable(close):
            close()
        _cleanup_memory_tier(paths)
