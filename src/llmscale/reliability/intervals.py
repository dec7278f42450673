"""Checkpoint-interval formulas: Young, Daly's higher-order interval, and the exact efficiency of a two-tier policy
under Poisson failures (the model goodput.py optimizes).

Shape legend: arguments broadcast; every result has the broadcast shape.

Notation: λ = 1/M unplanned interruptions per second; τ compute time between memory checkpoints; C blocking time per
checkpoint; k memory checkpoints per storage checkpoint (1 for one tier); q share of interruptions the memory tier
cannot recover; R_m, R_s restart from memory / storage. Failures strike in any phase — compute, checkpoint, restart
(the complete model of Daly 2006, FGCS 22(3), doi:10.1016/j.future.2004.11.016).

Two-tier expected time (derived here; with q = 1, k = 1 it is Daly's complete model,
E(τ) = τ / [M e^{R/M} (e^{(τ+C)/M} − 1)]). A storage period is k segments of length L = τ + C. An interruption in
a segment loses that segment (memory tier, probability 1 − q) or the whole period (storage tier, q); a failure of
the storage type during a memory restart escalates it, any failure during a storage restart restarts it. Solving
the renewal equations for the expected time V to complete a period gives, with e_L = e^{−λL}, e_R = e^{−λR_m},
g_s = (e^{λR_s} − 1)/λ,
    K = e_R (e_L + q (1 − e_L)) + q (1 − e_R),   c = q (1 − e_L) / K,
    V = (1/(λq) + g_s) · ((1 − c)^{−k} − 1)       (→ k (1 − e_L) / (λK) as q → 0),
and the failure-limited efficiency is kτ / V. Leaves out: a storage checkpoint's durability lag (the write must
only finish before the next one starts), non-exponential failure times.
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
