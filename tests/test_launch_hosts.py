"""`llmscale launch --hostfile --node-exec 'ip netns exec {host}' --exclude-from`: a job across hosts that leaves the
excluded one out. Three network namespaces on a bridge (tests/netns_cluster.py) are the hosts; an exclusion list (the
form `bench links --exclude-out` writes: runtime.hosts.write_exclusions) names one; the stand-in trainer
(tests/fixtures/standin_trainer.py) runs 2 ranks = 2 nodes x 1 process, one torchrun per kept namespace, under the
real supervisor. Checked from outside the code under test: the kernel's view of which namespace each heartbeat's pid
lives in (`ip netns identify PID`), the step records' hosts, the journal, and `ip netns pids` empty at the end. A
rank killed by pid (SIGKILL) mid-run restarts the job on both nodes under a fresh rendezvous and it completes.

Every process is started by the launcher under test (in its own session) and killed by pid in a finally
(launch_helpers.reap_all); every namespace and the bridge are deleted afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmscale.runtime import journal as jr
from llmscale.runtime.files import RunPaths, read_lines
from llmscale.runtime.hosts import Exclusion, write_exclusions
from tests.conftest import run_cli
from tests.launch_helpers import ROOT, reap_all, start_launch, wait_beat
from tests.netns_cluster import IFNAME, NetnsCluster, leftovers, netns_available, netns_cluster

pytest.importorskip("torch")
REASON = netns_available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
TRAINER = ROOT / "tests" / "fixtures" / "standin_trainer.py"
NETNS = "ip netns exec {host}"
CONFIG = """name: standin-hosts
nproc_per_node: 1
layout: {{dp: 2}}
hosts: {hostfile}
batch: {{micro_batch_size: 1, global_batch_size: 2}}
restart: {{max_attempts: 4, max_attempts_without_progress: 2, heartbeat_timeout_s: 20, phase_timeout_s: 60}}
"""


def _pids_in(cluster: NetnsCluster) -> dict[str, list[str]]:
    return {h.name: subprocess.run(["ip", "netns", "pids", h.name], capture_output=True, text=True,
                                   timeout=30).stdout.split() for h in cluster.hosts}


@pytest.fixture
def cluster() -> Iterator[NetnsCluster]:
    with netns_cluster(3) as made:
        yield made
    assert leftovers(made) == []


@pytest.fixture
def job(cluster: NetnsCluster, tmp_path: Path) -> Iterator[tuple[Path, list[subprocess.Popen[str]]]]:
    """The hostfile, the exclusion list naming host 2, the config; the launches started, reaped by pid after."""
    # Host 1 before host 0: node ranks must follow the hostfile (a placement's host order), not the address order.
    hosts = cluster.hostfile_text().splitlines(keepends=True)
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("".join([hosts[1], hosts[0], *hosts[2:]]), encoding="utf-8")
    write_exclusions(tmp_path / "exclude.txt", [Exclusion(cluster.hosts[2].name, "rank 2: 0.05 of the median")],
                     header="written by the test, in bench links --exclude-out form")
    (tmp_path / "run.yaml").write_text(CONFIG.format(hostfile=hostfile), encoding="utf-8")
    started: list[subprocess.Popen[str]] = []
    try:
        yield tmp_path, started
    finally:
        for proc in started:
            reap_all(proc)
    assert _pids_in(cluster) == {h.name: [] for h in cluster.hosts}


def _launch(tmp_path: Path, steps: int) -> subprocess.Popen[str]:
    return start_launch(tmp_path / "run.yaml", tmp_path / "run", TRAINER, "--hostfile", str(tmp_path / "hosts.txt"),
                        "--node-exec", NETNS, "--exclude-from", str(tmp_path / "exclude.txt"),
                        env={"GLOO_SOCKET_IFNAME": IFNAME, "STANDIN_STEPS": str(steps), "STANDIN_STEP_S": "0.1",
                             "STANDIN_COMM": "gloo"},
                        log=tmp_path / "launch.log")


def _namespace_of(pid: int) -> str:
    return subprocess.run(["ip", "netns", "identify", str(pid)], capture_output=True, text=True,
                          timeout=30).stdout.strip()


def _finish(proc: subprocess.Popen[str], tmp_path: Path, timeout_s: float = 150) -> str:
    proc.wait(timeout=timeout_s)
    log = (tmp_path / "launch.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    return log


def test_launch_runs_on_the_kept_hosts_and_a_killed_rank_restarts_on_both(
        cluster: NetnsCluster, job: tuple[Path, list[subprocess.Popen[str]]],
        capsys: pytest.CaptureFixture[str]) -> None:
    tmp_path, started = job
    kept, excluded = [cluster.hosts[1].name, cluster.hosts[0].name], cluster.hosts[2].name
    started.append(proc := _launch(tmp_path, steps=20))
    run = tmp_path / "run"
    homes = {r: _namespace_of(wait_beat(run, r, 0, 3, proc, timeout_s=120).pid) for r in (0, 1)}
    assert [homes[0], homes[1]] == kept, homes  # rank i on the i-th kept host, none in the excluded one
    beat = wait_beat(run, 1, 0, 8, proc, timeout_s=120)
    os.kill(beat.pid, signal.SIGKILL)
    again = {r: wait_beat(run, r, 1, 1, proc, timeout_s=120) for r in (0, 1)}
    assert [_namespace_of(again[r].pid) for r in (0, 1)] == kept
    assert beat.pid not in {b.pid for b in again.values()}
    log = _finish(proc, tmp_path)
    assert excluded in log and "attempt 1 completed" in log
    events = jr.read(run).events
    ex = [e for e in events if e.event is jr.EventKind.EXCLUDED_HOSTS]
    assert [(e.extra["hosts"], e.extra["reasons"]) for e in ex] == [([excluded], ["rank 2: 0.05 of the median"])]
    starts = [e for e in events if e.event is jr.EventKind.ATTEMPT_START]
    assert [e.attempt for e in starts] == [0, 1] and all(e.extra["hosts"] == kept for e in starts)
    assert {e.extra["rendezvous_addr"] for e in starts} == {cluster.hosts[1].address}
    fault = next(e for e in events if e.event is jr.EventKind.FAULT)
    assert (fault.attempt, fault.rank, fault.cause, fault.signal, fault.pid) == (
        0, 1, jr.Cause.PROCESS_KILLED, "SIGKILL", beat.pid), log[-2000:]
    assert fault.host == homes[1]
    rows = [row for r in (0, 1) for row in read_lines(RunPaths(run).steps(r)).rows]
    assert {row["host"] for row in rows} == set(kept)
    assert {row["host"] for row in rows if row["attempt"] == 1} == set(kept)
    assert {row["step"] for row in rows if row["rank"] == 1} == set(range(1, 21))
    assert events[-1].event is jr.EventKind.STOP and events[-1].reason == "completed"
    code, out, _ = run_cli(capsys, "journal", str(run))
    assert code == 0 and f"# excluded hosts: {excluded} (rank 2: 0.05 of the median)" in out
    assert f"# hosts of the last attempt: {', '.join(kept)}" in out
    assert "by cause: process_killed 1" in out


def test_hostfile_flag_and_config_hosts_must_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("llh0 slots=1 addr=10.77.0.1\nllh1 slots=1 addr=10.77.0.2\n", encoding="utf-8")
    other = tmp_path / "other.txt"
    other.write_text("elsewhere slots=1\nalso-elsewhere slots=1\n", encoding="utf-8")
    (tmp_path / "run.yaml").write_text(CONFIG.format(hostfile=hostfile), encoding="utf-8")
    base = ("launch", str(tmp_path / "run.yaml"), "--run-dir", str(tmp_path / "run"))
    code, _, err = run_cli(capsys, *base, "--hostfile", str(other), "--node-exec", NETNS, "--", str(TRAINER))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: --hostfile = {str(other)!r}") and str(hostfile) in lines[0], err
    assert [e for e in jr.read(tmp_path / "run").events if e.event is jr.EventKind.ATTEMPT_START] == []
    code, _, err = run_cli(capsys, *base, "--node-exec", "rsh {host}", "--", str(TRAINER))
    assert code == 2 and err.count("\n") == 1 and "node-exec" in err and "rsh {host}" in err, err
