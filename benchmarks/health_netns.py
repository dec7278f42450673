"""The health sweep's whole loop on real network endpoints, printed: N network namespaces on one bridge
(tests/netns_cluster.py), one host's egress capped with `tc ... tbf`, `llmscale bench links --scope hostfile
--node-exec 'ip netns exec {host}' --exclude-out FILE`, the exclusion files, the relaunch's node plan
(runtime/nodes.py), then the relaunch itself: `llmscale launch RUN.yaml --hostfile FILE --node-exec 'ip netns exec
{host}' --exclude-from FILE -- train.py` of the packaged example (one process per kept host, one torchrun per host),
`llmscale journal RUN_DIR` (the excluded host and the hosts that ran) and the hosts the step records name. Root only
(creates and deletes namespaces); everything it made is deleted at the end.

    python benchmarks/health_netns.py [--hosts 3] [--slow 2] [--mbit 100] [--steps 60]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from llmscale.runtime.hosts import read_exclusions, read_hostfile  # noqa: E402
from llmscale.runtime.multinode import describe  # noqa: E402
from llmscale.runtime.nodes import parse_node_exec, plan_nodes  # noqa: E402
from tests.netns_cluster import IFNAME, leftovers, netns_available, netns_cluster, slow_link  # noqa: E402


def _example_dir() -> Path:
    from importlib import resources

    return Path(str(resources.files("llmscale.runtime.example")))


def _run_yaml(work: Path, hostfile: Path, nodes: int, steps: int) -> Path:
    """The packaged example's run.yaml, one process per host on `nodes` hosts (dp = nodes), `steps` steps."""
    import yaml

    cfg = yaml.safe_load((_example_dir() / "run.yaml").read_text())
    cfg.update(name="example-gpt-hosts", nproc_per_node=1, hosts=str(hostfile))
    cfg["layout"]["dp"] = nodes
    cfg["schedule"]["total_steps"] = steps
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def _relaunch(work: Path, hostfile: Path, args: argparse.Namespace, env: dict[str, str]) -> None:
    """`llmscale launch` of the example on the kept hosts, then `llmscale journal` and the step records' hosts."""
    config = _run_yaml(work, hostfile, args.hosts - 1, args.steps)
    train = _example_dir() / "train.py"
    run_dir = work / "run"
    cmd = [sys.executable, "-m", "llmscale.cli.main", "launch", str(config), "--run-dir", str(run_dir),
           "--hostfile", str(hostfile), "--node-exec", "ip netns exec {host}", "--exclude-from",
           str(work / "exclude.txt"), "--", str(train)]
    print("$ llmscale", shlex.join(cmd[3:]))
    started = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, start_new_session=True)
    print(done.stdout + done.stderr + f"(exit {done.returncode}, {time.monotonic() - started:.1f} s)")
    journal = [sys.executable, "-m", "llmscale.cli.main", "journal", str(run_dir)]
    print("$ llmscale journal RUN_DIR")
    print(subprocess.run(journal, env=env, capture_output=True, text=True, timeout=120).stdout)
    hosts: dict[str, int] = {}
    for rank_file in sorted((run_dir / "steps").glob("rank*.jsonl")):
        for line in rank_file.read_text().splitlines():
            host = json.loads(line)["host"]
            hosts[f"{rank_file.stem}@{host}"] = hosts.get(f"{rank_file.stem}@{host}", 0) + 1
    print("step records by rank@host:", hosts)
    pids = {h: subprocess.run(["ip", "netns", "pids", h], capture_output=True, text=True, timeout=30).stdout.split()
            for h in [line.split()[0] for line in hostfile.read_text().splitlines()]}
    print("processes left in the namespaces:", pids)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--slow", type=int, default=2, help="index of the capped host")
    ap.add_argument("--mbit", type=float, default=100.0)
    ap.add_argument("--steps", type=int, default=60, help="steps of the relaunched example")
    args = ap.parse_args()
    if (why := netns_available()) is not None:
        print(f"error: {why}", file=sys.stderr)
        return 2
    env = {**os.environ, "GLOO_SOCKET_IFNAME": IFNAME,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory() as tmp, netns_cluster(args.hosts) as cluster:
        work = Path(tmp)
        print("$", slow_link(cluster.hosts[args.slow], args.mbit))
        hostfile = cluster.write_hostfile(work / "hosts.txt")
        print("hostfile:\n" + hostfile.read_text())
        sweep = [sys.executable, "-m", "llmscale.cli.main", "bench", "links", "--scope", "hostfile", "--hostfile",
                 str(hostfile), "--node-exec", "ip netns exec {host}", "--size", "64K", "--iters", "3", "--repeats",
                 "3", "--exclude-out", str(work / "exclude.txt")]
        print("$", " ".join(sweep[1:]))
        done = subprocess.run(sweep, env=env, capture_output=True, text=True, timeout=300)
        print(done.stdout + done.stderr)
        print("exclude.txt:\n" + (work / "exclude.txt").read_text())
        print("exclude.txt.slurm: " + (work / "exclude.txt.slurm").read_text())
        plan = plan_nodes(read_hostfile(hostfile), read_exclusions(work / "exclude.txt"), args.hosts - 1,
                          parse_node_exec("ip netns exec {host}"), node_argv=lambda *_: [], nproc_per_node=1)
        print("node plan:", describe(plan))
        _relaunch(work, hostfile, args, env)
        made = cluster
    print("left after cleanup:", leftovers(made) or "nothing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
