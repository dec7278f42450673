"""Pipeline-schedule time model: busy time, bubble and exposed send/recv of a pipeline rank, vectorized.

Busy = m_b·(T_F + T_B + T_W), half for DualPipe; 1F1B/interleaved bubble (T_F+T_B+T_W)·[(p−m_b)⁺ + (min(m_b,p)−1)/v]
(Narayanan et al. 2021 §2.2); ZB-H1, ZB-V and DualPipe after Qi et al. (ICLR 2024) and DeepSeek-V3 Table 2. Inputs,
derived bounds, send/recv and what is left out: docs/cost-model.md#pipeline."""

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
    """Chunk-boundary transfers on the critical path of a step (docs/cost-model.md#pipeline-p2p): 2(p−1),
    2(v·p−1) for interleaved, 4(p−1) for ZB-V; 0 when p = 1."""
    p = lay.pp
    v = lay.vpp
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
    """Busy, bubble and exposed send/recv time of a step for each layout's schedule (equations, sources and what
    is left out: docs/cost-model.md#pipeline). Times are per micro-batch for the rank's whole
    share of layers; `dualpipe_overlap` is η ∈ [0, 1], how much of the shorter of F and B a DualPipe
    forward-backward pair hides."""
    shape = (lay.size,)
    m = np.broadcast_to(np.maximum(np.asarray(num_micro, dtype=float), 1.0), shape)
    f, b, w = (np.broadcast_to(np.asarray(t, dtype=float), shape) for t in (fwd_s, bwd_input_s, bwd_weight_s))
    p = lay.pp.astype(float)
    v = lay.vpp.astype(float)
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
