"""Pipeline-schedule time model: busy time, bubble and exposed send/recv of a pipeline rank, vectorized.

Shape legend: every input time and every returned array has shape (N,) (scalars broadcast), one element per
layout; seconds per training step (one pipeline flush) on the critical pipeline rank.

Inputs are per micro-batch for one pipeline rank's whole share of layers (all its chunks together, as
`stages.stage_layers` counts them): T_F forward, T_B the input-gradient part of backward (the zero-bubble
paper's B), T_W the weight-gradient part (its W); a full backward is T_B + T_W (DeepSeek-V3's 𝐵). c is one
activation (or gradient) send across one chunk boundary, one direction. p = pp, v = vpp, m_b = num_micro,
x⁺ = max(x, 0). Busy time is m_b·(T_F + T_B + T_W), halved for DualPipe, whose ranks hold two stages of
which each micro-batch passes one. Bubble = idle time of the critical rank within its own span
(first to last operation), which is the step's idle time when each rank steps its optimizer as soon as it
is done (zero-bubble "optimizer post-validation"; for 1F1B and interleaved rank 0 spans the whole flush).

Bubble per schedule (sources per line; [D] = derived here, checked against list-scheduling
simulations of each schedule's operation order, exact for 1F1B, interleaved and ZB-H1):

    1F1B, interleaved   (T_F+T_B+T_W)·[(p−m_b)⁺ + (min(m_b,p)−1)/v]
                        = (p−1)(T_F+T_B+T_W)/v for m_b ≥ p (Narayanan et al. 2021 §2.2; v = 1 for 1F1B);
                        with m_b < p one wave of micro-batches never waits on itself: total
                        (m_b + v·p − 1)(T_F+T_B+T_W)/v [D]
    ZB-H1               (p−1)(T_F+T_B) − (min(m_b,p)−1)·min(T_W, T_B)
                        = (p−1)(F+B−2W) of DeepSeek-V3 Table 2 (ZB1P) when m_b ≥ p and T_W ≤ T_B;
                        (p−1)/(3m_b) of the zero-bubble README when T_F = T_B = T_W; the W passes that
                        fill the cool-down cannot outnumber the warm-up micro-batches nor outlast a B [D]
    ZB-V                t = T/2 per chunk (two chunks in a V): max of
                        fill (2p−1−m_b)⁺·(t_f + (t_b−t_w)⁺): rank 0 has only chunk-0 forwards to run until
                        micro-batch 0 comes back down the V, 2p−1 chunk passes later [D]; and
                        one micro-batch's chain (m_b−1)·t_f + 2p(t_f+t_b) + t_w − busy [D].
                        Zero (the README's "0", which assumes T_F = T_B = T_W) only when m_b ≥ 2p − 1.
                        A greedy list schedule with unbounded memory reproduces it for equal times and
                        stays within a few chunk passes of it otherwise; not checked against sail-sg's zbv.py.
    DualPipe            t = T/2 per stage: max of (p/2−1)·(t_F&B + t_b + t_w − 3t_w)⁺ (DeepSeek-V3 Table 2,
                        valid for m_b ≥ 2p as DualPipe's `step` asserts) and the chain bound
                        (⌈m_b/2⌉−1)·t_f + p(t_f+t_b) + t_w − busy for fewer micro-batches [D].
                        t_F&B = t_f + t_b + t_w − η·min(t_f, t_b + t_w): η = 0 (default) when the inputs
                        are compute that the pairing cannot shorten (it hides all-to-all, not compute);
                        η = 1 gives max(F, B) of the worked "perfect overlap" numbers.

Exposed send/recv: n·c with n the boundary crossings of one micro-batch's forward and backward chain, on
which the warm-up and cool-down wait; steady-state transfers are taken as overlapped with compute (batched
isend/irecv posted ahead, Megatron --overlap-p2p-comm). n = 2(p−1) for 1F1B, ZB-H1 and DualPipe, 2(v·p−1)
for interleaved (v× the transfers, Narayanan §2.2; the exact slope of a Megatron-order simulation with
blocking transfers), 4(p−1) for ZB-V (down and up the V; 2× the volume of 1F1B per the zero-bubble README).
p = 1: no bubble and no transfers.

Left out: unequal stages (embedding/output layers, MoE vs dense ranks) — the caller passes the critical
rank's times; ZB-H2 (no Schedule member); the pipeline flush's optimizer step and the ~8 % a pre-step
all-reduce costs zero-bubble schedules without post-validation; memory limits below 1F1B's that would force
W passes earlier; Megatron's relaxed interleaving for m_b not a multiple of p (closed form used as is);
DualPipe's compute/all-to-all overlap (belongs to the communication model) and its reference code's
blocking waits on pipeline sends before each chunk; steady-state exchanges that block (Megatron's
non-interleaved 1F1B: a simulation with blocking transfers exposes about 1.5–2 more per micro-batch beyond p);
p2p bandwidth contention with other traffic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

from llmscale.layout.arrays import Layouts, reads
from llmscale.specs.layout import Schedule

Seconds: TypeAlias = np.ndarray | float
"""A time in seconds: an array of shape (N,) or a scalar broadcast to it."""


@dataclass(frozen=True)
class PipelineTimes:
    """Step time of the critical pipeline rank, split by cause; seconds, shape (N,)."""

    busy_s: np.ndarray
    """Compute of all micro-batches on the rank's chunks: m_b·(T_F + T_B + T_W) (half for DualPipe)."""
    bubble_s: np.ndarray
    """Idle time the schedule leaves on the critical rank (warm-up, cool-down, waits)."""
    p2p_exposed_s: np.ndarray
    """Pipeline send/recv time on the critical path, not hidden under compute."""

    @property
    def total_s(self) -> np.ndarray:
        return self.busy_s + self.bubble_s + self.p2p_exposed_s


def _one_f_one_b_bubble(p: np.ndarray, v: np.ndarray, m: np.ndarray, step_s: np.ndarray) -> np.ndarray:
    """1F1B (v = 1) and interleaved 1F1B; `step_s` = T_F + T_B + T_W. Narayanan et al. 2021 §2.2."""
    return step_s * (np.maximum(p - m, 0) + (np.minimum(m, p) - 1) / v)


def _zb_h1_bubble(p: np.ndarray, m: np.ndarray, f: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    """ZB-H1 (Qi et al., ICLR 2024, §2.1; DeepSeek-V3 Table 2 ZB1P): each W fills one slot of the cool-down."""
    return (p - 1) * (f + b) - (np.minimum(m, p) - 1) * np.minimum(w, b)


def _zb_v_bubble(p: np.ndarray, m: np.ndarray, f: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    """ZB-V with chunk times f, b, w (half a rank's share): rank 0's fill of 2p − 1 chunk passes, or the
    chain of one micro-batch down and up the V when there are very few micro-batches."""
    fill = np.maximum(2 * p - 1 - m, 0) * (f + np.maximum(b - w, 0))
    chain = (m - 1) * f + 2 * p * (f + b) + w - 2 * m * (f + b + w)
    return np.maximum(np.maximum(fill, chain), 0)


def _dualpipe_bubble(
    p: np.ndarray, m: np.ndarray, f: np.ndarray, b: np.ndarray, w: np.ndarray, overlap: Seconds
) -> np.ndarray:
    """DualPipe with stage times f, b, w (half a rank's share): DeepSeek-V3 Table 2, or the chain of one
    micro-batch through the p stages when m_b < 2p leaves the schedule unfilled."""
    full_b = b + w
    f_and_b = f + full_b - overlap * np.minimum(f, full_b)
    table = (p / 2 - 1) * np.maximum(f_and_b + full_b - 3 * w, 0)
    chain = (np.ceil(m / 2) - 1) * f + p * (f + b) + w - m * (f + full_b)
    return np.maximum(table, chain)


def p2p_crossings(lay: Layouts) -> np.ndarray:
    """Chunk-boundary transfers on the critical path of a step (module docstring): 2(p−1), 2(v·p−1) for
    interleaved, 4(p−1) for ZB-V; 0 when p = 1."""
    p, v = lay.pp, lay.vpp
    crossings = np.select(
        [lay.schedule == Schedule.INTERLEAVED.code, lay.schedule == Schedule.ZB_V.code],
        [2 * (v * p - 1), 4 * (p - 1)],
        default=2 * (p - 1),
    )
    return np.where(p > 1, crossings, 0)


@reads("pp", "vpp", "schedule")
def pipeline_times(
    lay: Layouts,
    num_micro: np.ndarray,
    fwd_s: Seconds,
    bwd_input_s: Seconds,
    bwd_weight_s: Seconds,
    p2p_s: Seconds,
    *,
    dualpipe_overlap: Seconds = 0.0,
) -> PipelineTimes:
    """Busy, bubble and exposed send/recv time of a step for each layout's schedule (module docstring for
    the equations, their sources and what is left out). Times are per micro-batch for the rank's whole
    share of layers; `dualpipe_overlap` is η ∈ [0, 1], how much of the shorter of F and B a DualPipe
    forward-backward pair hides."""
    shape = (lay.size,)
    m = np.broadcast_to(np.maximum(np.asarray(num_micro, dtype=float), 1.0), shape)
    f, b, w = (np.broadcast_to(np.asarray(t, dtype=float), shape) for t in (fwd_s, bwd_input_s, bwd_weight_s))
    p, v = lay.pp.astype(float), lay.vpp.astype(float)
    schedule = lay.schedule
    dual = schedule == Schedule.DUALPIPE.code
    bubble = np.select(
        [
            schedule == Schedule.ZB_H1.code,
            schedule == Schedule.ZB_V.code,
            dual,
        ],
        [
            _zb_h1_bubble(p, m, f, b, w),
            _zb_v_bubble(p, m, f / 2, b / 2, w / 2),
            _dualpipe_bubble(p, m, f / 2, b / 2, w / 2, dualpipe_overlap),
        ],
        default=_one_f_one_b_bubble(p, np.where(schedule == Schedule.INTERLEAVED.code, v, 1.0), m, f + b + w),
    )
    busy = m * (f + b + w) * np.where(dual, 0.5, 1.0)
    p2p = p2p_crossings(lay) * np.broadcast_to(np.asarray(p2p_s, dtype=float), shape)
    return PipelineTimes(
        busy_s=busy,
        bubble_s=np.where(lay.pp > 1, np.maximum(bubble, 0.0), 0.0),
        p2p_exposed_s=p2p,
    )
