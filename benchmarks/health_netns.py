"""The health sweep's whole loop on real network endpoints, printed: N network namespaces on one bridge
(tests/netns_cluster.py), one host's egress capped with `tc ... tbf`, `llmscale bench links --scope hostfile
--node-exec 'ip netns exec {host}' --exclude-out FILE`, the exclusion files, the relaunch's node plan
(runtime/nodes.py) and that plan's torchrun commands run in the kept namespaces, each rank printing the address it
bound. Root only (creates and deletes namespaces); everything it made is deleted at the end.

    python benchmarks/health_netns.py [--hosts 3] [--slow 2] [--mbit 100]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from llmscale.runtime.hosts import read_exclusions, read_hostfile  # noqa: E402
from llmscale.runtime.nodes import parse_node_exec, plan_nodes, torchrun_argv  # noqa: E402
from tests.netns_cluster import IFNAME, leftovers, netns_available, netns_cluster, slow_link  # noqa: E402
from tests.test_health_netns import BOUND  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--slow", type=int, default=2, help="index of the capped host")
    ap.add_argument("--mbit", type=float, default=100.0)
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
        script = work / "bound.py"
        script.write_text(BOUND, encoding="utf-8")
        plan = plan_nodes(read_hostfile(hostfile), read_exclusions(work / "exclude.txt"), args.hosts - 1,
                          parse_node_exec("ip netns exec {host}"),
                          node_argv=torchrun_argv([str(script), str(work / "bound.json")]), master_port=29581)
        print("node plan:", plan.summary())
        procs = [subprocess.Popen(list(n.argv), env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE) for n in plan.nodes]
        for node, p in zip(plan.nodes, procs, strict=True):
            _, err = p.communicate(timeout=120)
            print(f"node {node.node_rank} on {node.host.name}: exit {p.returncode}"
                  + (f" {err.decode()[-300:]}" if p.returncode else ""))
        print("ranks of the relaunch:", json.loads((work / "bound.json").read_text()))
        made = cluster
    print("left after cleanup:", leftovers(made) or "nothing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
