"""Scale constants. SI inside the package; human units only at the edges (catalog files, printing).

Every bandwidth inside llmscale is bytes per second, one direction, per GPU unless a name says
otherwise. Catalog files use GB/s (1e9 B/s), Gbit/s and GiB where the vendor does; loaders convert
once with the constants below.
"""

BYTES_16BIT = 2
"""bf16 / fp16 element."""
BYTES_FP32 = 4
"""fp32 element."""

KIB = 2**10
MIB = 2**20
GIB = 2**30
TIB = 2**40

KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12

TERA = 1e12
PETA = 1e15

BITS_PER_BYTE = 8
US = 1e-6
MS = 1e-3
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0


def gbit_per_s_to_bytes_per_s(gbit_per_s: float) -> float:
    """Network rates are quoted in Gbit/s (400G NIC = 400e9 bit/s = 50e9 B/s)."""
    return gbit_per_s * GB / BITS_PER_BYTE
