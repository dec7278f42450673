"""DCP's checkpoint writer process of one trainer: starting it before the first save (no save pays for the spawn), its
pid, stopping it for good (SIGCONT, SIGTERM, SIGKILL). It dies with its trainer (PR_SET_PDEATHSIG); DCP's process is
`_CHECKPOINT_PROCESS._save_process` (pytorch/pytorch v2.13.0 torch/distributed/checkpoint/_async_process_executor.py).
Measured spawn time and why each step: docs/runtime.md#runtime-writer.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from typing import Any

from torch.distributed.checkpoint import _async_process_executor as process_executor

from llmscale.runtime.procs import set_parent_death_signal

STOP_GRACE_S = 5.0


class _Writer(process_executor._AsyncCheckpointProcess):
    """DCP's writer process, started so that it dies with the trainer that started it (module docstring)."""

    @staticmethod
    def _checkpointing_subprocess(pg_init_info: Any, parent_conn: Any) -> None:
        set_parent_death_signal()
        parent = multiprocessing.parent_process()
        if parent is not None and os.getppid() != parent.pid:  # the trainer died before the signal was set
            os._exit(1)
        process_executor._AsyncCheckpointProcess._checkpointing_subprocess(pg_init_info, parent_conn)


def _writer() -> Any:
    """The writer's multiprocessing Process, None when there is none (or a torch release drops the private names)."""
    proc = getattr(process_executor, "_CHECKPOINT_PROCESS", None)
    return getattr(proc, "_save_process", None)


def writer_alive() -> bool | None:
    """Whether the writer is alive; None when none was started."""
    inner = _writer()
    return None if inner is None else bool(inner.is_alive())


def writer_pid() -> int | None:
    """The pid of this trainer's writer (a direct child: spawn starts it from the trainer), or None."""
    inner = _writer()
    return None if inner is None else inner.pid


def start_writer(group: Any) -> int | None:
    """Start the writer now, as DCP's own first `async_save` would (`_ProcessGroupInitInfo` broadcasts the writers'
    store address over `group`; the child joins its own gloo group) — a collective: every rank calls it. No-op when
    one is running."""
    if writer_alive():
        return writer_pid()
    process_executor._CHECKPOINT_PROCESS = None
    info = process_executor._ProcessGroupInitInfo(group)
    process_executor._CHECKPOINT_PROCESS = _Writer(info)
    return writer_pid()


def stop_writer(grace_s: float = STOP_GRACE_S) -> None:
    """Stop this trainer's writer for good (module docstring), so that a fresh one can be started and the trainer
    can exit."""
    inner = _writer()
    if inner is not None and inner.is_alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(inner.pid, signal.SIGCONT)
        inner.terminate()
        inner.join(timeout=grace_s)
        if inner.is_alive():
            inner.kill()
            inner.join(timeout=grace_s)
    process_executor._CHECKPOINT_PROCESS = None
