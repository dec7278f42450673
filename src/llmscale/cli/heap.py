"""Keep freed numpy temporaries in the process heap (glibc only).

The vectorized cost model allocates many temporaries of N × 8 bytes per chunk (512 KiB for 64K layouts). glibc
serves blocks above its mmap threshold with mmap and may return freed heap memory to the OS above its trim
threshold, so depending on the process's history every chunk can fault its temporaries back in page by page
(measured: about half the layouts per second). `keep_freed_memory` raises both thresholds with mallopt, as the
MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ environment variables would (glibc mallopt(3)); elsewhere it does
nothing. The `llmscale` command and benchmarks/ call it once at start.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""mallopt parameter numbers (glibc malloc.h)."""
MMAP_THRESHOLD_BYTES = 256 * 2**20
TRIM_THRESHOLD_BYTES = 1024 * 2**20


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds; True when both calls succeeded."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mmap_ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    return mmap_ok and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
