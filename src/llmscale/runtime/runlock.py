"""One launcher per run directory: `RUN_DIR/launch.lock`, held by the live `llmscale launch`. torch-free.

The lock is an exclusive `flock(2)` on the file, taken without waiting: the kernel holds it for the launcher's open
file description and drops it when that process dies, however it dies — so a SIGKILLed launcher leaves no stale lock
(its descriptor is not inherited by the workers: Python opens files non-inheritable, PEP 446). The file names the
holder — `{"pid", "host", "started_unix", "argv"}` — for the refusal message of a second launch, and is emptied on a
clean exit. A launch that gets the lock and still finds a holder named in it knows that launcher died without
stopping its job: it ends that launcher's workers and journals the death (relaunch.py). On Linux NFS clients
(v4, or v3 with lockd) `flock` is emulated with byte-range locks, so the lock also holds across hosts sharing the run
directory; a file system without locks gets one warning line and no lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from llmscale.errors import LlmscaleError

LOCK_FILE = "launch.lock"


@dataclass(frozen=True)
class Holder:
    """The launcher a lock file names."""

    pid: int
    host: str
    started_unix: float
    argv: str = ""

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_unix))
        return f"pid {self.pid} on host {self.host}, started {when}"


def _parse(text: str) -> Holder | None:
    try:
        row = json.loads(text)
        return Holder(int(row["pid"]), str(row["host"]), float(row["started_unix"]), str(row.get("argv", "")))
    except (ValueError, KeyError, TypeError):
        return None


class RunLock:
    """The run directory's lock (module docstring). `acquire` returns the holder a dead launcher left named, if any."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self.fd: int | None = None
        self.unsupported: str | None = None
        """Why the file system refused the lock (then it is not enforced)."""

    def acquire(self) -> Holder | None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise LlmscaleError(f"run_dir = {str(self.path.parent)!r}: cannot open {LOCK_FILE} "
                                f"({exc.strerror or exc})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = _parse(_read(fd))
            os.close(fd)
            who = held.describe() if held else "a process that has not written its name yet"
            raise LlmscaleError(f"run_dir = {str(self.path.parent)!r}: another llmscale launch holds it ({who}); "
                                "one launcher per run directory — wait for it to end or stop it first") from None
        except OSError as exc:  # ENOLCK / EOPNOTSUPP: a file system without locks
            self.unsupported = exc.strerror or str(exc)
        self.fd = fd
        previous = _parse(_read(fd))
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started_unix": time.time(),
              "argv": " ".join(sys.argv)[:2000]}
        _write(fd, json.dumps(me) + "\n")
        return previous

    def release(self) -> None:
        """Empty the file (a clean exit names no holder) and drop the lock."""
        if self.fd is None:
            return
        try:
            _write(self.fd, "")
        finally:
            os.close(self.fd)
            self.fd = None


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while block := os.read(fd, 65536):
        chunks.append(block)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _write(fd: int, text: str) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, text.encode("utf-8"))
    os.fsync(fd)
