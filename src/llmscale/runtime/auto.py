"""The 'auto' checkpoint intervals: llmscale's two-tier optimum (reliability/intervals.py; one tier is Daly 2006's
complete model) fed with this run's measured step, snapshot and save times and its restart times, λ = 1 /
`restart.assumed_mtbf_s`; a grid over n_m steps × k, C = C_m + C_s / k, τ = n_m · step_s. Imports without torch.
The inputs, the grid and what is left out: docs/runtime.md#runtime-auto.
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
