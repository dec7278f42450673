"""Checkpoint-interval formulas: Young, Daly's higher-order interval, and the exact efficiency of a two-tier policy
under Poisson failures (the model goodput.py optimizes); arguments broadcast. Efficiency = kτ / V, V the renewal
model's expected time per storage period; q = 1, k = 1 is Daly 2006's complete model (doi:10.1016/j.future.2004.11.016).
Notation, derivation and what is left out: docs/design-notes.md#reliability-intervals.
"""

from __future__ import annotations

import numpy as np

Num = np.ndarray | float
"""A number or an array of them (the formulas broadcast)."""


def young_interval_s(blocking_s: Num, mtbf_s: Num) -> np.ndarray:
    """Young (1974, CACM 17(9)): τ = √(2 C M), as in LLNL/scr scripts/common/scr_ckpt_interval.py."""
    return np.sqrt(2.0 * blocking_s * mtbf_s)


def daly_interval_s(blocking_s: Num, mtbf_s: Num) -> np.ndarray:
    """Daly (2006, FGCS 22(3), doi:10.1016/j.future.2004.11.016) eq. 37, as in LLNL/scr
    scripts/common/scr_ckpt_interval.py:
    τ = √(2CM) · [1 + ⅓ √(C/2M) + ⅑ (C/2M)] − C when C < 2M, else M."""
    x = blocking_s / (2.0 * mtbf_s)
    tau = np.sqrt(2.0 * blocking_s * mtbf_s) * (1.0 + np.sqrt(x) / 3.0 + x / 9.0) - blocking_s
    return np.where(blocking_s < 2.0 * mtbf_s, tau, mtbf_s)


def segment_efficiency(rate_per_s: Num, storage_share: Num, tau_s: Num, blocking_s: Num, k: Num,
                       restart_memory_s: Num, restart_storage_s: Num) -> np.ndarray:
    """kτ / V of the two-tier model (module docstring); broadcasts its arguments."""
    lam, q = np.asarray(rate_per_s, dtype=float), np.asarray(storage_share, dtype=float)
    length = np.asarray(tau_s, dtype=float) + blocking_s
    with np.errstate(all="ignore"):
        one_m_el = -np.expm1(-lam * length)
        e_r = np.exp(-lam * restart_memory_s)
        g_s = np.expm1(lam * restart_storage_s) / lam
        big_k = e_r * (1.0 - one_m_el + q * one_m_el) + q * (1.0 - e_r)
        c = q * one_m_el / big_k
        growth = np.expm1(-k * np.log1p(-c))
        period = np.where(q > 0, (1.0 / (lam * q) + g_s) * growth, k * one_m_el / (lam * big_k))
        period = np.where(lam > 0, period, k * length)
        return np.nan_to_num(k * tau_s / period, nan=0.0)
