"""Random `explain --placement` jobs with random exclusion lists, through the Python API: every call either returns
or raises one LlmscaleError, and every placement keeps its invariants (the recommended one no slower than the host
order, members per domain between 1 and the group size, finite steps, the holes' cost not negative placed).

Run:  python benchmarks/fuzz_placement.py [SEED] [CASES]      (prints the failures, then `bad N of CASES`)
"""

from __future__ import annotations

import random
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np

import llmscale
from llmscale.api.results import Explain
from llmscale.errors import LlmscaleError
from llmscale.io.catalog import load_cluster

CLUSTERS = ("selene", "eos-h100", "gb200-nvl72", "deepseek-v3-h800", "llama3-16k", "dgx-b200", "gb300-nvl72",
            "tpu-v4-pod", "jean-zay-a100")
MODELS = ("llama3-8b", "llama3-70b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "gpt3-175b")
CHOICES = {"tp": [1, 2, 4, 8], "pp": [1, 2, 3, 4, 8], "cp": [1, 2], "ep": [1, 2, 4, 8, 16, 64], "etp": [1, 2],
           "mbs": [1, 2], "rank_order": ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"]}


def check(result: Explain) -> None:
    placed = result.placement
    assert placed is not None
    assert placed.best.step_s <= placed.in_order.step_s * (1 + 1e-9), "the recommended placement is slower"
    for res in (placed.best, placed.in_order):
        assert np.isfinite(res.step_s)
        for kind, span in res.spans.items():
            assert np.all(span.members <= span.size + 1e-9) and np.all(span.members >= 1 - 1e-9), (kind, span)
    cost = result.to_dict()["placement"]["holes_cost"]
    assert np.isfinite(cost["in_order"]) and cost["placed"] > -1e-9, cost


def case(rng: random.Random, folder: Path) -> tuple[str, str, int, dict[str, object], Path]:
    cluster = rng.choice(CLUSTERS)
    spec = load_cluster(cluster)
    g = spec.node.gpus_per_node
    layout = {name: rng.choice(values) for name, values in CHOICES.items()}
    excluded = [f"node{rng.randrange(spec.num_nodes):05d}" for _ in range(rng.choice([0, 1, 3, 20]))]
    path = Path(tempfile.mkstemp(dir=folder)[1])
    path.write_text("".join(f"{name}\n" for name in excluded), encoding="utf-8")
    ranks = int(layout["tp"]) * int(layout["cp"]) * int(layout["pp"])  # type: ignore[call-overload]
    gpus = ranks * rng.choice([1, 2, 3, 4, 6, 8, 16, 32, 64]) if rng.random() < 0.8 else rng.choice([g, 3 * g, 96])
    return rng.choice(MODELS), cluster, gpus, layout, path


def main() -> None:
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    cases = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    rng, bad, ran = random.Random(seed), 0, 0
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(cases):
            model, cluster, gpus, layout, path = case(rng, Path(folder))
            try:
                check(llmscale.explain(model, cluster, layout=layout, gpus=gpus, placement=True, exclude_from=path))
                ran += 1
            except LlmscaleError:
                pass
            except Exception:  # a fuzzer reports every other failure
                bad += 1
                print("CASE", model, cluster, gpus, layout, path.read_text().split())
                traceback.print_exc(limit=3)
    print(f"bad {bad} of {cases} ({ran} placed, the rest refused with one clear error)")


if __name__ == "__main__":
    main()
