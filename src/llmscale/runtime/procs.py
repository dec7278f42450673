"""Processes of an attempt, by pid, from /proc (Linux): the supervisor's descendants, killing and reaping them, the
cgroup's OOM-kill counter. torch-free.

The supervisor makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER, Linux ≥ 3.4, man 2 prctl), so a
worker's own children — DCP's background save process — stay its descendants when the worker dies, and are killed
and reaped by pid at the end of the attempt instead of running on as orphans of init.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
"""linux/prctl.h."""


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants; False where the call is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: split after the last ')'
    fields = stat[stat.rfind(")") + 2:].split()
    return int(fields[1]) if len(fields) > 1 else None


def descendants(root: int) -> list[int]:
    """Every live process below `root` (children first, then theirs), from /proc's ppid fields."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = _parent_of(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    out: list[int] = []
    frontier = [root]
    while frontier:
        nxt = [c for p in frontier for c in children.get(p, [])]
        out += nxt
        frontier = nxt
    return out


def state_of(pid: int) -> str | None:
    """The process state letter of /proc/PID/stat (R, S, D, T stopped, t traced, Z zombie), None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()[0]


def is_zombie(pid: int) -> bool:
    """Exited (a zombie, or gone)."""
    return state_of(pid) in (None, "Z", "X")


def kill_pids(pids: list[int], sig: int = signal.SIGKILL) -> list[int]:
    """Send `sig` to each pid (SIGCONT first, so a stopped one can act on a catchable signal); the pids signalled."""
    done = []
    for pid in pids:
        try:
            if sig != signal.SIGKILL:
                os.kill(pid, signal.SIGCONT)
            os.kill(pid, sig)
            done.append(pid)
        except ProcessLookupError:
            continue
    return done


def reap(pids: list[int], timeout_s: float = 5.0) -> None:
    """waitpid each pid that is our child (orphans reparented to us); others are left to their parents."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                got, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if got:
                break
            time.sleep(0.02)


def kill_descendants(root: int | None = None) -> list[int]:
    """SIGKILL every descendant of `root` (default: this process) by pid and reap our own children among them."""
    pids = [p for p in descendants(os.getpid() if root is None else root) if not is_zombie(p)]
    killed = kill_pids(pids)
    reap(killed)
    return killed


def oom_kills() -> int | None:
    """The `oom_kill` count of this process's cgroup (cgroup v2 memory.events), None where not readable."""
    try:
        line = Path("/proc/self/cgroup").read_text().splitlines()[0]
        events = Path("/sys/fs/cgroup") / line.split("::", 1)[-1].lstrip("/") / "memory.events"
        for row in events.read_text().splitlines():
            key, _, value = row.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError, IndexError):
        return None
    return None


PR_SET_PDEATHSIG = 1
"""linux/prctl.h: the signal this process gets when its parent thread exits (man 2 prctl)."""


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when the thread that forked it exits; False where the call is
    unavailable. Kept across execve (not across a set-user-ID exec), cleared in a fork's child."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def ancestors(pid: int | None = None) -> set[int]:
    """This process (or `pid`) and every process above it, from /proc's ppid fields."""
    out, current = set(), os.getpid() if pid is None else pid
    while current and current not in out:
        out.add(current)
        current = _parent_of(current) or 0
    return out


def processes_with_env(key: str, value: str) -> list[int]:
    """Live processes of this user whose initial environment has `key=value` (/proc/PID/environ), except this
    process and its ancestors; children listed before their parents where /proc says so."""
    wanted = f"{key}={value}".encode()
    mine = ancestors()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        if wanted in environ.split(b"\0") and not is_zombie(int(entry)):
            found.append(int(entry))
    return sorted(found, reverse=True)


def kill_and_wait(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """SIGKILL each pid (a stopped one too), reap our own children among them, and wait until every one is gone (an
    orphan is reaped by its new parent); the pids still there after `timeout_s` (in uninterruptible sleep)."""
    reap(kill_pids(pids), timeout_s=0.5)
    deadline = time.monotonic() + timeout_s
    left = [p for p in pids if not is_zombie(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if not is_zombie(p)]
    return left


def die_with_launcher() -> None:
    """Under `llmscale launch` (LLMSCALE_RUN_DIR set): ask the kernel to SIGKILL this rank when its parent (the
    launcher's in-process agent, or a node's torchrun) exits, so no rank trains on unsupervised; if that parent is
    already gone (LLMSCALE_PARENT_PID, set when the launcher is the parent, no longer is), exit now."""
    if "LLMSCALE_RUN_DIR" not in os.environ:
        return
    set_parent_death_signal()
    expected = os.environ.get("LLMSCALE_PARENT_PID", "")
    parent = os.getppid()
    if parent == 1 or (expected.isdigit() and int(expected) != parent):
        raise SystemExit(f"error: this rank's launcher (pid {expected or '?'}) is gone; not training unsupervised")
