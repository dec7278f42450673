"""`llmscale launch` stopped by a signal: SIGINT (Ctrl-C), SIGTERM (a scheduler, `kill`), SIGHUP (the terminal went
away) raise `Interrupted` in the supervisor's main thread, which stops the attempt's workers (torch's agent sends
them SIGTERM on the way out; the supervisor then kills what is left by pid), journals the stop and exits 130 with
one line. torch-free.

torch's elastic agent installs its own handlers for these signals when it starts workers (torch/distributed/elastic/
multiprocessing/api.py `PContext.start`, the signals of LaunchConfig.signals_to_handle), which would raise its
SignalException and forward the signal itself (a SIGINT reaching the trainers as KeyboardInterrupt tracebacks); the
in-process agent is started with only SIGQUIT left to torch (agent.TORCH_SIGNALS).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_CODE = 130


class Interrupted(BaseException):
    """The launcher got a stop signal (a BaseException, like KeyboardInterrupt: no `except Exception` in torch's
    agent swallows it, and its `finally` blocks still stop the workers)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.name}")


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextmanager
def _handling(handler: Any) -> Iterator[None]:
    """Within: `handler` takes the stop signals, restored after. Python lets only the main thread install signal
    handlers: elsewhere (a launch run from a thread) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def interruptible() -> AbstractContextManager[None]:
    """Within: a stop signal raises Interrupted in the main thread."""
    return _handling(_raise)


def shielded() -> AbstractContextManager[None]:
    """Within: stop signals are ignored (the clean-up after the first one runs to its end)."""
    return _handling(signal.SIG_IGN)
