"""Same moment, same load: the example GPT's forward / backward / AdamW per step, timed in 2 processes of 1 thread
each (as the run's ranks), then the profile's predicted split for that config (monitor.predict.calibrate: the probe's
host micro-benchmarks turned into a CPU cluster), then the GPT again. Separates a loaded host (both move together)
from a gap in the prediction's twin model (they differ on a quiet host). docs/monitoring.md quotes its output.

Run:  python benchmarks/profile_same_moment.py RUN_DIR/config.yaml
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from llmscale.monitor.predict import calibrate
from llmscale.runtime.config import load_config

WORKER = r'''
import json, statistics, sys, time
import torch
from pathlib import Path
from llmscale.runtime.config import load_config
from llmscale.runtime.example.model import GPT
torch.set_num_threads(1); torch.manual_seed(0)
cfg = load_config(Path(sys.argv[1])); m = GPT(cfg.example_model, 65)
opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1)
b, s = cfg.batch.micro_batch_size, cfg.example_model.seq_len
x = torch.randint(0, 65, (b, s)); y = torch.randint(0, 65, (b, s))
f, bw, o = [], [], []
for i in range(25):
    t0 = time.perf_counter(); loss = m(x, y); t1 = time.perf_counter(); loss.backward(); t2 = time.perf_counter()
    opt.step(); opt.zero_grad(set_to_none=True); t3 = time.perf_counter()
    if i >= 3: f.append(t1 - t0); bw.append(t2 - t1); o.append(t3 - t2)
print(json.dumps({k: round(statistics.median(v), 4) for k, v in (("forward_s", f), ("backward_s", bw),
                                                                ("optimizer_s", o))}))
'''


def measure(config: str) -> list[dict[str, float]]:
    """Both ranks' median forward / backward / optimizer seconds, run side by side."""
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, config], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    return [json.loads(p.communicate()[0]) for p in procs]


def main() -> None:
    config = sys.argv[1]
    print("load average:", os.getloadavg())
    print("measured GPT (2 procs):", measure(config))
    start = time.time()
    pred = calibrate(load_config(Path(config)), 2, None)
    split = pred.detail["split"]
    print("predicted:", {k: round(split[k], 4) for k in ("forward_s", "backward_s", "optimizer_s", "compute_s")},
          f"({time.time() - start:.0f} s)")
    print("measured GPT again:", measure(config))
    print("load average:", os.getloadavg())


if __name__ == "__main__":
    main()
