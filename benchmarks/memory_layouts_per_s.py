"""Layouts per second of the vectorized memory model on one core.

Builds a large random-but-valid set of layouts for a model and evaluates `memory_breakdown` on all of
them at once, repeating to get a stable figure; also times the same model one layout at a time for the
ratio. Run:  python benchmarks/memory_layouts_per_s.py [--model seed-10t-moe] [--layouts 1000000]
Pin to one core with `taskset -c 0` (and OMP_NUM_THREADS=1) for a one-core figure.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from search_layouts_per_s import heap_settings

from llmscale.cost.memory import memory_breakdown
from llmscale.io.catalog import load_constants, load_gpu, load_model
from llmscale.layout.arrays import Layouts
from llmscale.specs.cluster import ClusterSpec, NetworkTier, NodeSpec
from llmscale.specs.train import TrainSpec

CONSTANTS = load_constants()


def _cluster(num_gpus: int) -> ClusterSpec:
    return ClusterSpec(
        name="bench",
        gpu=load_gpu("h100-sxm"),
        num_gpus=num_gpus,
        node=NodeSpec(gpus_per_node=8, nics_per_node=8, nic_gbit_per_s=400, pcie_gb_per_s=64, host_memory_gib=2048),
        tiers=(NetworkTier(name="nvlink", ranks=8, bandwidth_gb_per_s=450, latency_us=1.0),
               NetworkTier(name="fabric", ranks=num_gpus, bandwidth_gb_per_s=50, latency_us=10.0)),
    )


def random_layouts(n: int, seed: int = 0) -> Layouts:
    rng = np.random.default_rng(seed)
    pick = lambda values: rng.choice(np.asarray(values), size=n)  # noqa: E731
    tp, vpp = pick([1, 2, 4, 8]), pick([1, 2, 4])
    return Layouts.from_columns(
        tp=tp, pp=pick([1, 2, 4, 8, 16, 32]), dp=pick([8, 16, 32, 64, 128]), cp=pick([1, 2, 4]),
        ep=pick([1, 8, 32, 64]), etp=1, vpp=vpp, mbs=pick([1, 2, 4]), zero=pick([0, 1, 2, 3]),
        recompute=pick([0, 1, 2]), sp=tp > 1, schedule=np.where(vpp > 1, 1, 0),
    )



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="seed-10t-moe")
    parser.add_argument("--layouts", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--one-at-a-time", type=int, default=2000, help="layouts scored one by one for the ratio")
    args = parser.parse_args()
    print(f"# heap: {heap_settings()}")
    model, train, cluster = load_model(args.model), TrainSpec(global_batch=8192), _cluster(500_000)
    lay = random_layouts(args.layouts)
    memory_breakdown(model, cluster, train, lay.take(np.arange(10)), CONSTANTS)  # warm caches
    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        result = memory_breakdown(model, cluster, train, lay, CONSTANTS)
        _ = result.total_bytes
        best = min(best, time.perf_counter() - start)
    vectorized = args.layouts / best
    start = time.perf_counter()
    for i in range(args.one_at_a_time):
        memory_breakdown(model, cluster, train, lay.take(np.array([i])), CONSTANTS)
    single = args.one_at_a_time / (time.perf_counter() - start)
    print(f"# llmscale memory benchmark · model {args.model} · numpy {np.__version__}")
    print(f"{'mode':<22}{'layouts':>12}{'layouts/s':>16}")
    print(f"{'vectorized':<22}{args.layouts:>12,}{vectorized:>16,.0f}")
    print(f"{'one at a time':<22}{args.one_at_a_time:>12,}{single:>16,.0f}")
    print(f"ratio vectorized / one-at-a-time: {vectorized / single:,.0f}x")


if __name__ == "__main__":
    main()
