"""The supervisor behind `llmscale launch`: attempts of the job on torch's elastic agent (agent.py), a hang monitor
per attempt (watch.py), a journal line for everything it does (journal.py), and the restart policy: at once after
progress, else a backoff of restart.backoff_s × 2^(n−1); stop after the attempt limits.
The policy in full: docs/runtime.md ("Launch and restart policy") and docs/runtime.md#runtime-supervisor.
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

from llmscale.errors import LlmscaleError
from llmscale.runtime import journal as jr
from llmscale.runtime.agent import AttemptResult
from llmscale.runtime.config import RestartConfig
from llmscale.runtime.files import RunPaths, steps_by_attempt
from llmscale.runtime.interrupt import EXIT_CODE, Interrupted, interruptible, shielded
from llmscale.runtime.multinode import NodesResult, describe, fresh_port, host_of, plan_extra, run_attempt_nodes
from llmscale.runtime.nodes import NodePlan
from llmscale.runtime.procs import become_subreaper, kill_descendants, oom_kills
from llmscale.runtime.reconcile import fresh_memory_tier, reconcile
from llmscale.runtime.relaunch import end_orphans, journal_death
from llmscale.runtime.rundir import changed_message, plan_hosts, prepare_run
from llmscale.runtime.runlock import Holder, RunLock
from llmscale.runtime.watch import HangWatch, attribute

BACKOFF_MAX_FACTOR = 16
"""The backoff doubles up to 16 × restart.backoff_s (8 s at the default 0.5 s)."""
BAD_INPUT_EXIT = 2
"""A rank that exits 2 refused its input (entry.run: a LlmscaleError): the job stops, the next attempt would too."""
ENV_PARENT = "LLMSCALE_PARENT_PID"


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
    running: bool = False
    """An attempt's workers are up (a stop signal now cuts that attempt)."""


def _event(st: _State, kind: jr.EventKind, **kw: object) -> jr.Event:
    return jr.Event(kind, st.attempt, st.cfg_sha, **kw)  # type: ignore[arg-type]


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


def _set_env(req: LaunchRequest, paths: RunPaths, st: _State) -> None:
    os.environ["LLMSCALE_RUN_DIR"] = str(paths.root)
    os.environ["LLMSCALE_ATTEMPT"] = str(st.attempt)
    os.environ["LLMSCALE_CONFIG"] = str(paths.config)
    if st.nodes is None:  # the in-process agent: this process is every rank's parent (session.die_with_launcher)
        os.environ[ENV_PARENT] = str(os.getpid())
    else:
        os.environ.pop(ENV_PARENT, None)


def _run(req: LaunchRequest, paths: RunPaths, st: _State, nproc: int, watch: HangWatch,
         port: int | None) -> tuple[AttemptResult, NodesResult | None]:
    from llmscale.runtime.agent import run_attempt

    log_dir = paths.root / "logs" / f"attempt_{st.attempt}"
    if st.nodes is None:
        return run_attempt(req.script, list(req.args), nproc, st.attempt, paths.root.name or "run", log_dir), None
    across = run_attempt_nodes(st.nodes, port or 0, req.script, req.args, st.attempt, paths.root.name or "run",
                               log_dir, lambda: watch.found is not None)
    return across.result, across


def _one_attempt(req: LaunchRequest, paths: RunPaths, st: _State, nproc: int, restart: RestartConfig) -> bool:
    """Run one attempt; journal its start and, if it failed, its fault. True when it completed."""
    _set_env(req, paths, st)
    port = fresh_port() if st.nodes else None
    on = f" on {', '.join(st.nodes.hosts)}" if st.nodes else ""
    jr.append(paths.root, _event(st, jr.EventKind.ATTEMPT_START, message=f"{nproc} rank(s){on}",
                                 extra=plan_extra(st.nodes, port) if st.nodes else {}))
    oom_before = oom_kills()
    watch = HangWatch(paths, nproc, st.attempt, restart.heartbeat_timeout_s, restart.phase_timeout_s)
    watch.start()
    st.running = True
    try:
        result, across = _run(req, paths, st, nproc, watch, port)
    finally:
        watch.stop()
        kill_descendants()  # what the workers left behind (a checkpoint writer), by pid
    st.running = False
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


def _policy_stop(paths: RunPaths, st: _State, restart: RestartConfig, last: jr.Event) -> LaunchOutcome | None:
    """The stop the restart policy calls for after a failed attempt, or None to go on."""
    if last.cause is jr.Cause.PROCESS_EXIT and last.exit_code == BAD_INPUT_EXIT:
        return _stop(paths, st, f"rank {last.rank} refused its input (exit {BAD_INPUT_EXIT}), not retried: "
                                f"{last.message}", BAD_INPUT_EXIT, False)
    if st.attempts_run >= restart.max_attempts:
        return _stop(paths, st, f"restart.max_attempts = {restart.max_attempts} attempts used", 1, False)
    if st.without_progress >= restart.max_attempts_without_progress:
        return _stop(paths, st, f"{st.without_progress} consecutive attempt(s) without a new step "
                                f"(restart.max_attempts_without_progress = "
                                f"{restart.max_attempts_without_progress})", 1, False)
    return None


def _loop(req: LaunchRequest, paths: RunPaths, st: _State, nproc: int, say: Callable[[str], None]) -> LaunchOutcome:
    from llmscale.runtime.config import load_config

    restart = load_config(paths.config).restart
    while True:
        if _one_attempt(req, paths, st, nproc, restart):
            say(f"launch: attempt {st.attempt} completed")
            return _stop(paths, st, "completed", 0, True)
        last = jr.read(paths.root).of_kind(jr.EventKind.FAULT)[-1]
        say(f"launch: attempt {st.attempt} failed: {last.cause.value if last.cause else '?'} ({last.message})")
        stop = _policy_stop(paths, st, restart, last)
        if stop is not None:
            return stop
        if st.without_progress:
            time.sleep(restart.backoff_s * min(2 ** (st.without_progress - 1), BACKOFF_MAX_FACTOR))
        st.attempt += 1


def _interrupted(paths: RunPaths, st: _State, nproc: int, exc: Interrupted) -> LaunchOutcome:
    """Journal a stop signal: the attempt it cut (a `launcher` fault) and the stop (interrupt.py)."""
    if st.running:
        st.attempts_run += 1
        reconcile(paths, st.checkpoints, nproc, st.cfg_sha, st.attempt)  # commits the stopped trainers did not journal
        jr.append(paths.root, _event(st, jr.EventKind.FAULT, step=steps_by_attempt(paths, nproc).get(st.attempt),
                                     pid=os.getpid(), host=socket.gethostname(), signal=exc.name,
                                     cause=jr.Cause.LAUNCHER, message=f"llmscale launch got {exc.name}: the "
                                                                      "attempt's workers were stopped"))
    return _stop(paths, st, f"interrupted by {exc.name}; llmscale launch again resumes the run", EXIT_CODE, False)


def _relaunch(run_dir: Path, previous: Holder | None, say: Callable[[str], None]) -> None:
    """Before anything else: end what an earlier launcher left running, journal its death (relaunch.py)."""
    orphans = end_orphans(run_dir)
    paths = RunPaths(run_dir)
    if previous is not None and paths.config_sha256.is_file():
        from llmscale.runtime.config import load_config

        try:
            world = load_config(paths.config).layout.dp
            sha = paths.config_sha256.read_text(encoding="ascii").strip()
        except (LlmscaleError, OSError, UnicodeDecodeError):  # the dead launcher's config, unreadable: ranks unknown
            world, sha = 1, "unknown"
        event = journal_death(paths, world, sha, previous, orphans)
        say(f"launch: the previous launcher ({previous.describe()}) died without stopping its job"
            + (f" (attempt {event.attempt} journaled as a launcher fault)" if event else "")
            + f"; {orphans.describe()}")
    elif orphans.ended:
        say(f"launch: {orphans.describe()}")


def _prepare(req: LaunchRequest, run_dir: Path, say: Callable[[str], None]) -> tuple[RunPaths, _State, int]:
    """Check and copy the config, plan the hosts, journal the launch (module docstring)."""
    prepared = prepare_run(req.config_path, run_dir, req.allow_config_change)
    nodes = plan_hosts(prepared.cfg, req.exclude_from, req.hostfile, req.node_exec)
    paths = RunPaths(run_dir)
    st = _State(prepared.sha256, _first_attempt(run_dir), nodes=nodes.nodes)
    st.checkpoints = paths.storage_tier(prepared.cfg.checkpoint.dir)
    if prepared.resumed:
        reconcile(paths, st.checkpoints, nodes.nproc, st.cfg_sha, st.attempt)
    elif fresh_memory_tier(paths):
        say(f"launch: removed a leftover memory tier of an earlier job at {paths.memory_tier()}")
    st.frontier = max(steps_by_attempt(paths, nodes.nproc).values(), default=-1)
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
                              extra={"nproc": nodes.nproc, "resumed": prepared.resumed, "pid": os.getpid(),
                                     **(plan_extra(nodes.nodes) if nodes.nodes else {})}))
    say(f"launch: {run_dir} config {prepared.sha256[:12]}… {nodes.nproc} rank(s), attempt {st.attempt}"
        + (" (resume)" if prepared.resumed else "") + (f"; {describe(nodes.nodes)}" if nodes.nodes else ""))
    return paths, st, nodes.nproc


def launch(req: LaunchRequest, say: Callable[[str], None] = print) -> LaunchOutcome:
    """Take the run directory's lock, end what a dead launcher left, prepare the run directory, then run attempts
    until the job completes, the restart policy stops it or a signal does (exit 130)."""
    run_dir = req.run_dir.absolute()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LlmscaleError(f"run_dir = {str(run_dir)!r}: {exc.strerror or exc}") from None
    lock = RunLock(run_dir)
    previous = lock.acquire()
    if lock.unsupported:
        say(f"launch: warning: no lock on {lock.path} ({lock.unsupported}): one launcher per run directory is not "
            "enforced on this file system")
    try:
        with interruptible():
            become_subreaper()
            _relaunch(run_dir, previous, say)
            paths, st, nproc = _prepare(req, run_dir, say)
            return _supervise(req, paths, st, nproc, say)
    except Interrupted as exc:  # before the first attempt: nothing to journal yet
        return LaunchOutcome(False, 0, f"interrupted by {exc.name} before the run started", EXIT_CODE)
    finally:
        lock.release()


def _supervise(req: LaunchRequest, paths: RunPaths, st: _State, nproc: int,
               say: Callable[[str], None]) -> LaunchOutcome:
    server = _start_metrics(paths.root, req, say)
    try:
        return _loop(req, paths, st, nproc, say)
    except Interrupted as exc:
        with shielded():
            kill_descendants()
            return _interrupted(paths, st, nproc, exc)
    except BaseException as exc:
        with shielded():
            _stop(paths, st, f"supervisor failed: {type(exc).__name__}: {exc}", 1, False)
        raise
    finally:
        with shielded():
            kill_descendants()
            close = getattr(server, "close", None)
            if callable(close):
                close()
            _cleanup_memory_tier(paths)
