"""The storage tier's checkpoint writer (runtime/storage.py) with the real DCP process-based async_save, in this
process (a gloo group of one): the writer is DCP's spawned child, started before the first save; killing it fails
the save in flight (its directory removed, the committed one kept) and the next save starts a fresh writer and
commits; a stopped (SIGSTOP) writer fails its save at the deadline and is killed, not left to hang the trainer's exit.
The writer processes are this test's children, stopped in a finally."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from llmscale.runtime import writer as storage  # noqa: E402
from llmscale.runtime.manifests import committed  # noqa: E402
from llmscale.runtime.procs import is_zombie  # noqa: E402
from llmscale.runtime.storage import StorageTier  # noqa: E402


@pytest.fixture
def group() -> Iterator[Any]:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    g = dist.new_group(backend="gloo")
    try:
        yield g
    finally:
        storage.stop_writer()
        dist.destroy_process_group()


def _parent_and_cmdline(pid: int) -> tuple[int, str]:
    stat = Path(f"/proc/{pid}/stat").read_text()
    ppid = int(stat.rsplit(")", 1)[1].split()[1])
    return ppid, Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_the_writer_starts_before_the_first_save_and_a_killed_one_is_noticed(tmp_path: Path, group: Any) -> None:
    assert storage.writer_pid() is None
    pid = storage.start_writer(group)
    assert pid is not None and storage.writer_pid() == pid
    ppid, cmdline = _parent_and_cmdline(pid)
    assert ppid == os.getpid() and "multiprocessing.spawn" in cmdline   # DCP's spawned writer, our direct child
    tier = StorageTier(tmp_path, 0, 1, "sha", 2, 60.0, group)
    tier.save(1, {"w": torch.ones(4)})
    first = tier.poll(block=True)
    assert first is not None and first.ok
    assert storage.writer_pid() == pid                                  # the save used the started writer

    tier.save(2, {"w": torch.full((4,), 2.0)})
    os.kill(pid, signal.SIGKILL)                                        # the chaos suite's kill_writer
    failed = tier.poll(block=True)
    assert failed is not None and not failed.ok and failed.step == 2, failed
    assert tier.writer_lost
    assert [c.step for c in committed(tmp_path)] == [1]          # the committed checkpoint kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000001"]  # the failed one removed

    tier.save(3, {"w": torch.full((4,), 3.0)})                          # agrees the loss, starts a fresh writer
    fresh = storage.writer_pid()
    assert fresh is not None and fresh != pid
    third = tier.poll(block=True)
    assert third is not None and third.ok
    assert [c.step for c in committed(tmp_path)] == [3, 1]

    tier.save_timeout_s = 1.0                                           # the chaos suite's stop_writer: SIGSTOP
    tier.save(4, {"w": torch.full((4,), 4.0)})
    os.kill(fresh, signal.SIGSTOP)
    stopped = tier.poll(block=True)
    assert stopped is not None and not stopped.ok and "after 1 s" in stopped.reason, stopped
    assert is_zombie(fresh)  # killed and reaped: a stopped writer left alive hangs the trainer's exit (was the case)
    assert [c.step for c in committed(tmp_path)] == [3, 1]
