"""The placement cases of issue 30, side by side: for each job, the recommended layout placed on the whole cluster
and after excluding 3 % of the nodes at random (numpy default_rng(SEED)), with the step in host order, placed, and
as the search priced it, the per-tier link load, and the search's wall time.

Run:  python benchmarks/placement_cases.py            (results: benchmarks/placement.md)
      python benchmarks/placement_cases.py --write-exclusions DIR   (the same lists, for plan --exclude-from)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import llmscale
from llmscale.io.catalog import load_cluster
from llmscale.placement.fabric import Fabric
from llmscale.placement.search import PlacementSearch, search_placements
from llmscale.runtime.hosts import Exclusion
from llmscale.runtime.hosts import write_exclusions as write_exclusion_list

SEED = 2026
SHARE = 0.03
JOBS = {
    "seed-10t-moe on seed-500k (plan's default)": ("seed-10t-moe", "seed-500k", None),
    "deepseek-v3 on 2,048 H800": ("deepseek-v3", "deepseek-v3-h800", 2048),
    "deepseek-v3 on 1,024 GB200 NVL72": ("deepseek-v3", "gb200-nvl72", 1024),
}


def excluded(cluster_nodes: int) -> list[Exclusion]:
    rng = np.random.default_rng(SEED)
    picked = rng.choice(cluster_nodes, round(SHARE * cluster_nodes), replace=False)
    return [Exclusion(f"node{int(i):05d}", "benchmark: 3% at random") for i in sorted(picked)]


def row(name: str, s: PlacementSearch, seconds: float) -> str:
    loads = " ".join(f"{t.name} {100 * t.load:.1f}%" for t in s.best.loads)
    return (f"| {name} | {s.nodes:,} of {s.fabric.free_nodes:,} | {s.in_order.step_s:.3f} | "
            f"{s.best.step_s:.3f} ({s.best.placement.name}, {s.best.placement.skipped} idle) | "
            f"{s.aligned_step_s:.3f} | {100 * (s.gain - 1):+.1f}% | {loads} | {1e3 * seconds:.0f} |")


def write_exclusions(directory: Path) -> None:
    for _, cluster, _ in JOBS.values():
        nodes = load_cluster(cluster).num_nodes
        path = write_exclusion_list(directory / f"exclude_{cluster}.txt", excluded(nodes),
                                    header=f"3% of {nodes} nodes at random, numpy default_rng({SEED})")[0]
        print(f"wrote {path}")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--write-exclusions":
        write_exclusions(Path(sys.argv[2]))
        return
    print("| job | nodes used of free | step in host order s | step placed s | aligned s | placement buys | "
          "link load (placed) | search ms |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (model, cluster, gpus) in JOBS.items():
        plan = llmscale.plan(model, cluster, gpus=gpus, placements=1)
        job = plan.job
        layout = plan.placements[0].layout
        for label, exclusions in (("all nodes", []), ("3% excluded", excluded(job.cluster.num_nodes))):
            fabric = Fabric.of(job.cluster, None, exclusions)
            if fabric.free_nodes * fabric.gpus_per_node < plan.placements[0].nodes * fabric.gpus_per_node:
                print(f"| {name}, {label} | the layout needs {plan.placements[0].nodes} nodes, {fabric.free_nodes} "
                      "free: re-plan on the rest (plan --exclude-from) | | | | | | |")
                continue
            start = time.perf_counter()
            search = search_placements(job.model, job.cluster, job.train, layout, job.constants, fabric)
            print(row(f"{name}, {label}", search, time.perf_counter() - start))


if __name__ == "__main__":
    main()
