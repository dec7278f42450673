"""The 'auto' checkpoint intervals: llmscale's own two-tier optimum (reliability/intervals.py, the renewal model of
`segment_efficiency`, which with one tier is Daly 2006's complete model) fed with what this run measured — the step
time, the blocking time of a memory snapshot and of a storage save — and the restart times it knows: from the
journal of earlier attempts (the supervisor's `restart_s`) or `restart.assumed_restart_s`. The failure rate is
1 / `restart.assumed_mtbf_s`; the share of failures the memory tier cannot recover (a lost host) is
1 − `restart.memory_share_recoverable`. Imports without torch.

The search is a grid: memory interval n_m steps (1 … total_steps, about 60 values spaced by factors of ~1.15) ×
storage multiple k (memory snapshots per storage save, 1 … 2000 on the same spacing), the blocking time per segment
C = C_m + C_s / k (a storage save blocks once per k segments), τ = n_m · step_s. Leaves out: the background write's
slow-down of training (measured here as part of step time), and that a storage save must finish before the next.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.reliability.intervals import segment_efficiency


@dataclass(frozen=True)
class AutoIntervals:
    memory_every_steps: int
    storage_every_steps: int
    efficiency: float
    """Expected share of wall time that is useful training under the model (failures, restarts, blocking)."""
    step_s: float
    memory_blocking_s: float
    storage_blocking_s: float
    restart_memory_s: float
    restart_storage_s: float
    mtbf_s: float


def _grid(upper: int) -> np.ndarray:
    return np.unique(np.round(np.geomspace(1, max(upper, 1), num=60)).astype(int))


def choose(step_s: float, memory_blocking_s: float, storage_blocking_s: float, restart_memory_s: float,
           restart_storage_s: float, mtbf_s: float, unrecoverable_share: float, total_steps: int) -> AutoIntervals:
    """The (memory, storage) intervals in steps that maximise the two-tier efficiency (module docstring)."""
    n_m = _grid(total_steps)[:, None].astype(float)
    k = _grid(2000)[None, :].astype(float)
    tau = n_m * max(step_s, 1e-9)
    blocking = memory_blocking_s + storage_blocking_s / k
    eff = segment_efficiency(1.0 / mtbf_s, unrecoverable_share, tau, blocking, k, restart_memory_s,
                             restart_storage_s)
    eff = np.where(n_m * k <= 10 * total_steps, eff, -1.0)  # no storage interval beyond ten runs' length
    i, j = np.unravel_index(int(np.argmax(eff)), eff.shape)
    memory = int(n_m[i, 0])
    return AutoIntervals(memory, memory * int(k[0, j]), float(eff[i, j]), step_s, memory_blocking_s,
                         storage_blocking_s, restart_memory_s, restart_storage_s, mtbf_s)
