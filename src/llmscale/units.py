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
MINUTES_PER_DAY = 1440.0


def gbit_per_s_to_bytes_per_s(gbit_per_s: float) -> float:
    """Network rates are quoted in Gbit/s (400G NIC = 400e9 bit/s = 50e9 B/s)."""
    return gbit_per_s * GB / BITS_PER_BYTE


SI_SUFFIXES = {"K": 1e3, "M": 1e6, "G": 1e9, "B": 1e9, "T": 1e12, "P": 1e15}
"""Decimal multipliers a count or token flag accepts (`15T`, `500K`; B = G, as in "70B parameters")."""
BINARY_SUFFIXES = {"KI": 2.0**10, "MI": 2.0**20, "GI": 2.0**30, "TI": 2.0**40, "PI": 2.0**50}
"""Binary multipliers (IEC 80000-13: Ki = 1024): `16Ki` GPUs = 16,384, the count clusters are built in."""


def parse_count(text: str) -> float:
    """A number as a user types a count: `15T`, `1.5e13`, `500K`, `2M`, `1024`, `16Ki` (suffixes: SI_SUFFIXES and
    BINARY_SUFFIXES, either case). Raises ValueError for anything else (not a number, negative, infinite or NaN)."""
    value = text.strip().replace("_", "")
    binary = BINARY_SUFFIXES.get(value[-2:].upper()) if len(value) > 2 else None
    if binary is not None:
        scale, value = binary, value[:-2]
    else:
        scale = SI_SUFFIXES.get(value[-1:].upper(), 1.0) if value else 1.0
        value = value[:-1] if scale != 1.0 else value
    number = float(value)
    result = number * scale
    if not (result >= 0 and result != float("inf")):
        raise ValueError(f"{text!r} is not a non-negative finite number")
    return result


def si_count(value: float, digits: int = 1) -> str:
    """A count with a decimal SI suffix, the inverse of `parse_count`: 500000 -> '500K', 1.5e13 -> '15T',
    2048 -> '2K' and 2500 -> '2.5K' (up to `digits` decimals, trailing zeros dropped; 1000, never 1024: a count is
    not a byte size)."""
    for suffix, scale in (("P", 1e15), ("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            text = f"{value / scale:,.{digits}f}"
            return (text.rstrip("0").rstrip(".") if "." in text else text) + suffix
    return f"{value:,.0f}"
