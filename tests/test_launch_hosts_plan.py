"""The multi-host launcher's pieces without processes (runtime/multinode.py): each node's torchrun command, the
failure report it reads back, and the plans it refuses. torch-free."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llmscale.errors import LlmscaleError
from llmscale.runtime.hosts import Exclusion, Host
from llmscale.runtime.multinode import attempt_commands, hostfile_of, parse_failures, plan_multinode

HOSTS = [Host("a", 1, "10.0.0.1"), Host("b", 1, "10.0.0.2"), Host("c", 1, "10.0.0.3")]

# torchrun's report, in torch/distributed/elastic/multiprocessing/errors/__init__.py's _FAILURE_FORMAT_TEMPLATE
# (hand-written for two failed ranks: one killed, one exited)
REPORT = """[rank1]: something the worker printed
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-01-01_00:00:01
  host      : n2
  rank      : 3 (local_rank: 1)
  exitcode  : 1 (pid: 4242)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-01-01_00:00:00
  host      : n2
  rank      : 2 (local_rank: 0)
  exitcode  : -9 (pid: 4241)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4241
============================================================
"""


def test_each_node_gets_its_own_address_name_and_its_hostfile_place_as_node_rank() -> None:
    plan = plan_multinode(HOSTS, [Exclusion("a", "slow")], 2, 2, 1, "ip netns exec {host}", lambda _: False)
    assert plan is not None and plan.hosts == ("b", "c") and plan.master_addr == "10.0.0.2"
    cmds = attempt_commands(plan, Path("train.py"), ("--x", "1"), 3, "job", 40001)
    assert [c.host for c in cmds] == ["b", "c"]
    for c, addr, node_rank in zip(cmds, ("10.0.0.2", "10.0.0.3"), (0, 1), strict=True):
        argv = list(c.argv)
        assert argv[:4] == ["ip", "netns", "exec", c.host] and f"LLMSCALE_HOST={c.host}" in argv
        tail = argv[argv.index(sys.executable, 4):]
        assert tail[:3] == [sys.executable, "-m", "torch.distributed.run"]
        assert {"--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=static", f"--node-rank={node_rank}",
                "--rdzv-endpoint=10.0.0.2:40001", "--rdzv-id=job-attempt3", "--max-restarts=0",
                f"--local-addr={addr}"} <= set(tail)
        assert tail[-3:] == ["train.py", "--x", "1"]


def test_the_failure_report_gives_every_failed_rank() -> None:
    got = parse_failures(REPORT)
    assert [(f.rank, f.pid, f.exit_code, f.signal) for f in got] == [(3, 4242, 1, None), (2, 4241, -9, "SIGKILL")]
    assert got[1].message == "Signal 9 (SIGKILL) received by PID 4241"
    assert parse_failures("torchrun: rendezvous timed out\n") == []
    no_name = REPORT.replace("  (SIGKILL)", "")  # a report without the name: the signal from the exit code
    assert [f.signal for f in parse_failures(no_name)] == [None, "SIGKILL"]


def test_plans_refused_or_left_to_the_in_process_agent(tmp_path: Path) -> None:
    assert plan_multinode(HOSTS[:1], [], 1, 2, 2, "local", lambda _: True) is None  # one local node: in-process
    with pytest.raises(LlmscaleError, match="not a multiple of nproc_per_node"):
        plan_multinode(HOSTS, [], 2, 3, 2, "ssh {host}", lambda _: False)
    with pytest.raises(LlmscaleError, match="not this machine"):
        plan_multinode(HOSTS, [], 2, 2, 1, "local", lambda _: False)
    with pytest.raises(LlmscaleError, match=r"take fewer than nproc_per_node = 2"):
        plan_multinode(HOSTS, [], 2, 4, 2, "ssh {host}", lambda _: False)
    one, same, other = tmp_path / "h1", tmp_path / "h2", tmp_path / "h3"
    one.write_text("a slots=1\n")
    same.write_text("a slots=1  # the same hosts, another file\n")
    other.write_text("b slots=1\n")
    assert hostfile_of(str(one), same) == same and hostfile_of(None, other) == other
    assert hostfile_of(str(one), None) == one
    with pytest.raises(LlmscaleError, match="names another hostfile"):
        hostfile_of(str(one), other)


def test_a_nodes_process_dies_with_the_launcher() -> None:
    # the launcher starts each node's command through DIE_WITH_LAUNCHER (multinode.run_nodes): here a stand-in
    # launcher starts `sleep` that way and is SIGKILLed; the sleep must die with it
    import os
    import signal
    import subprocess
    import time

    from llmscale.runtime.multinode import DIE_WITH_LAUNCHER
    from llmscale.runtime.procs import is_zombie

    launcher = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {DIE_WITH_LAUNCHER!r}, str(os.getpid()), 'sleep', '60'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    node: int | None = None
    try:
        assert launcher.stdout is not None
        node = int(launcher.stdout.readline())
        deadline = time.monotonic() + 10
        while "sleep" not in Path(f"/proc/{node}/cmdline").read_text(errors="replace") and time.monotonic() < deadline:
            time.sleep(0.02)  # exec'd into the node's command
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=10)
        while not is_zombie(node) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert is_zombie(node)
    finally:
        for pid in (launcher.pid, node):
            if pid is not None and not is_zombie(pid):
                os.kill(pid, signal.SIGKILL)
        launcher.wait(timeout=10)
