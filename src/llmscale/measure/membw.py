"""Device copy bandwidth (`llmscale bench memory`): `dst.copy_(src)` of S bytes moves 2·S (read S, write S), as
STREAM's Copy counts it and as an HBM datasheet's bandwidth counts traffic. On CPU it is main-memory bandwidth
with the process's torch threads (caches inflate sizes that fit in them); on GPU, HBM (not run in this CI).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DEFAULT_CPU_SIZES = tuple(2**p for p in (20, 22, 24, 26))
DEFAULT_GPU_SIZES = tuple(2**p for p in (24, 26, 28, 30))


def _copier(dst: Any, src: Any) -> Callable[[], object]:
    return lambda: dst.copy_(src)


def bench_copy(sizes: list[int], device: str, target_s: float = 0.1, repeats: int = 3) -> list[dict[str, Any]]:
    """One row per buffer size: seconds per copy and (read + write) bytes per second."""
    import torch

    from llmscale.measure.timing import time_per_call_s

    rows = []
    for size in sizes:
        count = max(size // 4, 1)
        src = torch.ones(count, dtype=torch.float32, device=device)
        dst = torch.empty_like(src)
        seconds = time_per_call_s(_copier(dst, src), device, target_s=target_s, repeats=repeats)
        moved = 2 * count * 4
        rows.append({"size_bytes": count * 4, "count": count, "type": "float32", "time_s": seconds,
                     "copy_bytes_per_s": moved / seconds})
    return rows
