"""The collective operations, as nccl-tests names and sizes them, and its bus-bandwidth definition.

Shared vocabulary of the cost model (`llmscale.cost.collectives`), the measured calibration profiles
(`specs.calibration`) and the benchmarks (`llmscale.measure`): S is the buffer nccl-tests sizes, algbw = S / t, and
busbw = algbw · f(n) with the bus factor f of the operation (NVIDIA/nccl-tests@03a204a doc/PERFORMANCE.md).
"""

from __future__ import annotations

from enum import Enum

import numpy as np


class Collective(str, Enum):
    """A communication operation; bytes_total is the buffer S as nccl-tests sizes it (doc/PERFORMANCE.md)."""

    ALL_REDUCE = "all_reduce"
    """Sum S bytes held by every rank; every rank ends with the sum (bus factor 2(n−1)/n)."""
    REDUCE_SCATTER = "reduce_scatter"
    """Sum S bytes held by every rank; each rank ends with its 1/n of the sum (bus factor (n−1)/n)."""
    ALL_GATHER = "all_gather"
    """Each rank contributes S/n bytes; every rank ends with all S (bus factor (n−1)/n)."""
    ALL_TO_ALL = "all_to_all"
    """Each rank sends S/n bytes to every rank, S in all (bus factor (n−1)/n)."""
    SEND_RECV = "send_recv"
    """Each rank sends S bytes to its neighbour in the group (pipeline stage, context-parallel ring)."""


def bus_factor(op: Collective, size: np.ndarray | int) -> np.ndarray:
    """nccl-tests' bus-bandwidth factor f(n), busbw = algbw·f(n) (NVIDIA/nccl-tests@03a204a doc/PERFORMANCE.md):
    2(n−1)/n all-reduce, (n−1)/n reduce-scatter, all-gather and all-to-all, 1 send/recv. In-network all-reduce is
    reported with the ring factor too (NVIDIA/nccl-tests issue #366), so NVLS busbw is the ring-equivalent figure."""
    n = np.asarray(size, dtype=float)
    factors = {Collective.ALL_REDUCE: 2 * (n - 1) / n, Collective.SEND_RECV: np.ones_like(n)}
    return factors.get(Collective(op), (n - 1) / n)
