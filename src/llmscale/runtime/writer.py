"""DCP's checkpoint writer process of one trainer: starting it before the first save, its pid, stopping it for good.

`torch.distributed.checkpoint.async_save(..., async_checkpointer_type=AsyncCheckpointerType.PROCESS)` writes through
one background process per trainer, `_CHECKPOINT_PROCESS._save_process` (pytorch/pytorch v2.13.0
torch/distributed/checkpoint/_async_process_executor.py): a `multiprocessing` spawn-context daemon Process serving
every save request over a pipe. DCP creates it lazily inside its executor thread during the first save and publishes
the module global only after the child answered INIT_COMPLETE; `start_writer` creates it up front (no save pays for
the spawn: 3-6 s, > 10 s on a loaded CPU, measured; its pid is known from the first save on).

The writer dies with its trainer: it is DCP's process with one line added before DCP's own loop (`_Writer`), a
parent-death signal (prctl PR_SET_PDEATHSIG, SIGKILL) — so no writer outlives a SIGKILLed trainer or launcher to
write into the run directory later (the trainer dies with its launcher the same way: session.py).

Stopping (`stop_writer`): SIGCONT first (a stopped writer cannot act on SIGTERM), SIGTERM, then SIGKILL after a
grace period, each followed by a join. A writer left alive (stopped) would hang the trainer at exit, since
multiprocessing's exit handler joins every child without a timeout (CPython Lib/multiprocessing/util.py
`_exit_function`).
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
