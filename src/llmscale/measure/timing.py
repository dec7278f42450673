"""Timing one device's work: warm up, pick an iteration count that fills a time budget, time a few blocks and keep
the median block's time per iteration (the median shrugs off a block that a background process slowed)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def synchronizer(device: str) -> Callable[[], None]:
    """A function that waits for the device's queued work (a no-op on CPU, where calls return when done)."""
    if device.startswith("cuda"):
        import torch

        dev = torch.device(device)
        return lambda: torch.cuda.synchronize(dev)
    return lambda: None


def block_s(fn: Callable[[], object], iters: int, sync: Callable[[], None]) -> float:
    """Seconds per call over one block of `iters` back-to-back calls."""
    sync()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - start) / iters


def iterations_for(seconds_per_call: float, target_s: float, max_iters: int = 10_000) -> int:
    """Calls that fill `target_s` at `seconds_per_call` (at least 1)."""
    return int(min(max(target_s / max(seconds_per_call, 1e-9), 1), max_iters))


def time_per_call_s(fn: Callable[[], object], device: str, target_s: float = 0.1, repeats: int = 3,
                    warmup: int = 2) -> float:
    """Median over `repeats` blocks of the seconds per call; each block lasts about `target_s`."""
    sync = synchronizer(device)
    first = block_s(fn, max(warmup, 1), sync)
    iters = iterations_for(first, target_s)
    return statistics.median(block_s(fn, iters, sync) for _ in range(repeats))
