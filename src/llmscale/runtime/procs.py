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
