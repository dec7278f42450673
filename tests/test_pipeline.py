"""Pipeline-schedule time model: closed forms of Narayanan et al. 2021 (arXiv:2104.04473), the zero-bubble README
(sail-sg/zero-bubble-pipeline-parallelism) and DeepSeek-V3 Table 2 (arXiv:2412.19437), worked numbers, an
independent schedule simulation, and properties over random layouts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmscale.cost.pipeline import PipelineTimes, p2p_crossings, pipeline_times
from llmscale.layout.arrays import Layouts
from llmscale.specs.layout import Schedule

SETTINGS = settings(max_examples=200, deadline=None)
P16 = 16


def _lay(schedule: Schedule, pp: int | list[int] = P16, vpp: int | list[int] = 1) -> Layouts:
    return Layouts.from_columns(tp=1, pp=pp, dp=1, vpp=vpp, schedule=schedule.code)


def bubble_fraction(lay: Layouts, num_micro: np.ndarray, *, fwd_s: float = 1.0, bwd_input_s: float = 1.0,
                    bwd_weight_s: float = 1.0) -> np.ndarray:
    """Bubble over busy time, t_pb / t_id of Narayanan et al. 2021 (arXiv:2104.04473), without send/recv. With
    T_F = T_B = T_W (the sail-sg/zero-bubble-pipeline-parallelism README's assumption) 1F1B gives (p−1)/m_b,
    interleaved (p−1)/(v·m_b) and ZB-H1 (p−1)/(3m_b)."""
    times = pipeline_times(lay, num_micro, fwd_s, bwd_input_s, bwd_weight_s, 0.0)
    return times.bubble_s / times.busy_s


def _times(schedule: Schedule, pp: int, m: int, f: float, b: float, w: float, vpp: int = 1) -> PipelineTimes:
    return pipeline_times(_lay(schedule, pp, vpp), np.array([m]), f, b, w, 0.0)


# --- bubble fractions at p = 16, the closed forms evaluated for m = 16..128: exact ------------------------


@pytest.mark.parametrize("m", [16, 32, 64, 128])
def test_one_f_one_b_fraction_is_p_minus_1_over_m(m: int) -> None:
    # Narayanan et al. 2021 (arXiv:2104.04473): 1F1B/GPipe bubble fraction (p−1)/m
    assert bubble_fraction(_lay(Schedule.ONE_F_ONE_B), np.array([m]))[0] == pytest.approx((P16 - 1) / m, rel=1e-12)


@pytest.mark.parametrize("m", [16, 32, 64, 128])
@pytest.mark.parametrize("v", [2, 4])
def test_interleaved_fraction_is_p_minus_1_over_v_m(m: int, v: int) -> None:
    # Narayanan et al. 2021: interleaved 1F1B bubble (1/v)·(p−1)/m
    frac = bubble_fraction(_lay(Schedule.INTERLEAVED, vpp=v), np.array([m]))[0]
    assert frac == pytest.approx((P16 - 1) / (v * m), rel=1e-12)


@pytest.mark.parametrize("m", [16, 32, 64, 128])
def test_zb_h1_fraction_is_p_minus_1_over_3m(m: int) -> None:
    # Qi et al. (ICLR 2024), sail-sg/zero-bubble-pipeline-parallelism README table: ZB1P (p−1)/3m assuming
    # T_F = T_B = T_W
    frac = bubble_fraction(_lay(Schedule.ZB_H1), np.array([m]), fwd_s=2.0, bwd_input_s=2.0, bwd_weight_s=2.0)
    assert frac[0] == pytest.approx((P16 - 1) / (3 * m), rel=1e-12)


@pytest.mark.parametrize("m", [32, 64, 128])
def test_zb_v_has_no_bubble_once_the_v_can_be_filled(m: int) -> None:
    # Zero-bubble README table: ZBV bubble 0 (T_F = T_B = T_W); holds here for m ≥ 2p − 1
    assert bubble_fraction(_lay(Schedule.ZB_V), np.array([m]))[0] == 0.0


@pytest.mark.parametrize("m", [16, 20, 30])
def test_zb_v_with_fewer_than_2p_minus_1_micro_batches_leaves_the_fill(m: int) -> None:
    # Deviation from the README's unconditional 0, derived in pipeline.py: rank 0 runs only chunk-0 forwards
    # until micro-batch 0 returns 2p−1 chunk passes later; (2p−1−m) idle chunk forwards of 2m·3 chunk passes.
    frac = bubble_fraction(_lay(Schedule.ZB_V), np.array([m]))[0]
    assert frac == pytest.approx((2 * P16 - 1 - m) / (6 * m), rel=1e-12)


# --- DeepSeek-V3 Table 2 formulas evaluated at PP=16, F=1, B=2 (B_in=1, W=1) -----------------------------


def test_worked_numbers_one_f_one_b_45_and_zb1p_15() -> None:
    # DeepSeek-V3 Table 2 (arXiv:2412.19437) evaluated: 1F1B (PP−1)(F+B) = 15·3 = 45 and ZB1P
    # (PP−1)(F+B−2W) = 15·1 = 15 time units
    assert _times(Schedule.ONE_F_ONE_B, P16, 64, 1.0, 1.0, 1.0).bubble_s[0] == pytest.approx(45.0)
    assert _times(Schedule.ZB_H1, P16, 64, 1.0, 1.0, 1.0).bubble_s[0] == pytest.approx(15.0)


@pytest.mark.parametrize(("overlap", "expected"), [(0.0, 14.0), (1.0, 7.0)])
def test_worked_numbers_dualpipe_14_without_and_7_with_perfect_overlap(overlap: float, expected: float) -> None:
    # DeepSeek-V3 Table 2: DualPipe (PP/2−1)(F&B+B−3W) = 7·(3+2−3) = 14 with F&B = F+B, 7·(2+2−3) = 7 with
    # F&B = max(F, B).
    # A DualPipe rank holds two stages, so its whole-share inputs are twice the per-stage F=1, B_in=1, W=1.
    times = pipeline_times(_lay(Schedule.DUALPIPE), np.array([2 * P16]), 2.0, 2.0, 2.0, 0.0,
                           dualpipe_overlap=overlap)
    assert times.bubble_s[0] == pytest.approx(expected)
    assert times.busy_s[0] == pytest.approx(2 * P16 * 3.0)  # each micro-batch passes one stage per rank


def test_dualpipe_bubble_does_not_grow_with_micro_batches() -> None:
    # DeepSeek-V3 (arXiv:2412.19437 §3.2.1): DualPipe bubbles do not grow with m once m ≥ 2p
    bubbles = pipeline_times(_lay(Schedule.DUALPIPE, [P16] * 3), np.array([32, 64, 256]), 2.0, 2.0, 2.0, 0.0).bubble_s
    np.testing.assert_allclose(bubbles, 14.0)


# --- few micro-batches (m < p): the schedule degenerates -------------------------------------------------


@pytest.mark.parametrize("m", [1, 2, 5, 15])
def test_one_f_one_b_with_few_micro_batches_takes_m_plus_p_minus_1_slots(m: int) -> None:
    # 1F1B critical path (m + p − 1)(F + B) holds for every m (Narayanan et al. 2021 §2.2)
    assert _times(Schedule.ONE_F_ONE_B, P16, m, 1.0, 1.5, 0.5).total_s[0] == pytest.approx((m + P16 - 1) * 3.0)


def test_interleaved_with_few_micro_batches_is_one_wave_through_v_p_chunks() -> None:
    # m < p: (m + v·p − 1) chunk slots of (F+B)/v each
    m, v = 5, 4
    total = _times(Schedule.INTERLEAVED, P16, m, 1.0, 1.0, 1.0, vpp=v).total_s[0]
    assert total == pytest.approx((m + v * P16 - 1) * 3.0 / v)


def test_zb_h1_with_one_micro_batch_is_its_chain() -> None:
    # one micro-batch: F and B_in through p stages, then the last W on rank 0
    assert _times(Schedule.ZB_H1, P16, 1, 1.0, 2.0, 1.5).total_s[0] == pytest.approx(P16 * 3.0 + 1.5)


def test_dualpipe_with_too_few_micro_batches_is_at_least_one_chain() -> None:
    # DualPipe's step asserts m ≥ 2p; below it the chain of one micro-batch bounds the step
    times = _times(Schedule.DUALPIPE, P16, 2, 2.0, 2.0, 2.0)
    assert times.total_s[0] >= P16 * 2.0 + 1.0 - 1e-12
    assert times.bubble_s[0] > 14.0


# --- exposed send/recv -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "vpp", "crossings"),
    [
        (Schedule.ONE_F_ONE_B, 1, 2 * (P16 - 1)),
        (Schedule.ZB_H1, 1, 2 * (P16 - 1)),
        (Schedule.INTERLEAVED, 4, 2 * (4 * P16 - 1)),  # v× the transfers (Narayanan et al. 2021)
        (Schedule.ZB_V, 1, 4 * (P16 - 1)),  # 2× 1F1B's volume (zero-bubble README table)
        (Schedule.DUALPIPE, 1, 2 * (P16 - 1)),
    ],
)
def test_exposed_p2p_counts_the_chain_crossings(schedule: Schedule, vpp: int, crossings: int) -> None:
    lay = _lay(schedule, vpp=vpp)
    assert p2p_crossings(lay)[0] == crossings
    times = pipeline_times(lay, np.array([64]), 1.0, 1.0, 1.0, 0.25)
    assert times.p2p_exposed_s[0] == pytest.approx(0.25 * crossings)


@pytest.mark.parametrize("schedule", list(Schedule))
def test_one_stage_has_no_bubble_and_no_transfers(schedule: Schedule) -> None:
    vpp = 2 if schedule is Schedule.INTERLEAVED else 1
    times = pipeline_times(_lay(schedule, pp=[1, 1], vpp=vpp), np.array([1, 8]), 1.0, 1.0, 1.0, 5.0)
    np.testing.assert_array_equal(times.bubble_s, 0.0)
    np.testing.assert_array_equal(times.p2p_exposed_s, 0.0)


# --- an independent check: list-schedule each schedule's per-rank operation order -------------------------


def _simulate(orders: list[list[tuple[str, int, int]]], num_stages: int, rank_of: list[int],
              cost: dict[str, float]) -> float:
    """Run each rank's operations in order, each as soon as the rank is free and its input is done
    (F after F of the previous stage, B after B of the next stage or the last F, W after B)."""
    done: dict[tuple[str, int, int], float] = {}
    free = [0.0] * len(orders)
    nxt = [0] * len(orders)
    progress = True
    while progress:
        progress = False
        for r, order in enumerate(orders):
            while nxt[r] < len(order):
                kind, j, s = order[nxt[r]]
                dep = {"F": ("F", j, s - 1), "B": ("B", j, s + 1) if s < num_stages - 1 else ("F", j, s),
                       "W": ("B", j, s)}[kind]
                if kind == "F" and s == 0:
                    ready = 0.0
                elif dep in done:
                    ready = done[dep]
                else:
                    break
                done[(kind, j, s)] = free[r] = max(ready, free[r]) + cost[kind]
                nxt[r] += 1
                progress = True
    assert all(n == len(o) for n, o in zip(nxt, orders, strict=True)), "schedule deadlocked"
    return max(free)


def _interleaved_orders(p: int, m: int, v: int) -> list[list[tuple[str, int, int]]]:
    """Megatron interleaved 1F1B (v = 1: PipeDream-Flush): groups of p micro-batches per chunk, warm-up of
    2(p−1−r) + (v−1)p chunk forwards on rank r; stage = chunk·p + rank."""
    def op(kind: str, k: int, r: int) -> tuple[str, int, int]:
        chunk = (k // p) % v if kind == "F" else v - 1 - (k // p) % v
        return kind, (k // (p * v)) * p + k % p, chunk * p + r

    orders = []
    for r in range(p):
        warm = min(2 * (p - 1 - r) + (v - 1) * p, m * v) if v > 1 else min(p - 1 - r, m)
        ops = [op("F", k, r) for k in range(warm)]
        for k in range(m * v):
            if warm + k < m * v:
                ops.append(op("F", warm + k, r))
            ops.append(op("B", k, r))
        orders.append(ops)
    return orders


def _zb_h1_orders(p: int, m: int) -> list[list[tuple[str, int, int]]]:
    """ZB-H1 (Qi et al. 2024 §2.1): 1F1B with p − r warm-up forwards and rank r's W delayed by r."""
    orders = []
    for r in range(p):
        warm = min(p - r, m)
        ops = [("F", j, r) for j in range(warm)]
        for j in range(m):
            ops.append(("B", j, r))
            if j >= r:
                ops.append(("W", j - r, r))
            if warm + j < m:
                ops.append(("F", warm + j, r))
        ops += [("W", j, r) for j in range(max(m - r, 0), m)]
        orders.append(ops)
    return orders


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("v", [1, 2, 4])
@pytest.mark.parametrize("m_over_p", [1, 2, 3])
def test_interleaved_closed_form_matches_simulated_megatron_order(p: int, v: int, m_over_p: int) -> None:
    m, f, b = m_over_p * p, 1.0, 2.5
    makespan = _simulate(_interleaved_orders(p, m, v), v * p, [s % p for s in range(v * p)],
                         {"F": f / v, "B": b / v, "W": 0.0})
    schedule = Schedule.INTERLEAVED if v > 1 else Schedule.ONE_F_ONE_B
    assert _times(schedule, p, m, f, b, 0.0, vpp=v).total_s[0] == pytest.approx(makespan)


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("m", [1, 3, 8, 16])
@pytest.mark.parametrize(("f", "b", "w"), [(1.0, 1.0, 1.0), (1.0, 1.5, 0.5), (2.0, 1.0, 1.0), (1.0, 1.0, 2.0)])
def test_zb_h1_closed_form_matches_simulated_schedule(p: int, m: int, f: float, b: float, w: float) -> None:
    makespan = _simulate(_zb_h1_orders(p, m), p, list(range(p)), {"F": f, "B": b, "W": w})
    assert _times(Schedule.ZB_H1, p, m, f, b, w).total_s[0] == pytest.approx(makespan)


# --- properties over random layouts ----------------------------------------------------------------------

positive_s = st.floats(0.01, 10.0)
pps = st.sampled_from([1, 2, 4, 8, 16, 32, 64])


@st.composite
def cases(draw: st.DrawFn) -> tuple[Layouts, int, float, float, float]:
    schedule = draw(st.sampled_from(list(Schedule)))
    vpp = draw(st.integers(2, 6)) if schedule is Schedule.INTERLEAVED else 1
    lay = _lay(schedule, draw(pps), vpp)
    return lay, draw(st.integers(1, 512)), draw(positive_s), draw(positive_s), draw(positive_s)


@SETTINGS
@given(cases(), st.floats(0.0, 1.0))
def test_total_covers_busy_and_nothing_is_negative(case: tuple[Layouts, int, float, float, float],
                                                   p2p: float) -> None:
    lay, m, f, b, w = case
    times = pipeline_times(lay, np.array([m]), f, b, w, p2p)
    assert times.bubble_s[0] >= 0 and times.p2p_exposed_s[0] >= 0
    assert times.total_s[0] >= times.busy_s[0]


@SETTINGS
@given(cases(), st.integers(1, 64))
def test_more_micro_batches_never_raise_the_bubble(case: tuple[Layouts, int, float, float, float],
                                                   extra: int) -> None:
    lay, m, f, b, w = case
    fewer = pipeline_times(lay, np.array([m]), f, b, w, 0.0)
    more = pipeline_times(lay, np.array([m + extra]), f, b, w, 0.0)
    assert more.bubble_s[0] <= fewer.bubble_s[0] * (1 + 1e-12) + 1e-12
    assert more.bubble_s[0] / more.busy_s[0] <= fewer.bubble_s[0] / fewer.busy_s[0] * (1 + 1e-12)


@SETTINGS
@given(pps, st.integers(1, 512), st.integers(1, 7), positive_s, positive_s, positive_s)
def test_interleaving_never_raises_the_bubble(p: int, m: int, v: int, f: float, b: float, w: float) -> None:
    one = _times(Schedule.ONE_F_ONE_B, p, m, f, b, w).bubble_s[0]
    less = _times(Schedule.INTERLEAVED, p, m, f, b, w, vpp=v).bubble_s[0]
    fewer = _times(Schedule.INTERLEAVED, p, m, f, b, w, vpp=v + 1).bubble_s[0]
    assert fewer <= less * (1 + 1e-12) and less <= one * (1 + 1e-12)


@SETTINGS
@given(pps, st.integers(1, 512), positive_s, positive_s, positive_s)
def test_splitting_the_backward_never_raises_the_bubble(p: int, m: int, f: float, b: float, w: float) -> None:
    one = _times(Schedule.ONE_F_ONE_B, p, m, f, b, w).bubble_s[0]
    zb_h1 = _times(Schedule.ZB_H1, p, m, f, b, w).bubble_s[0]
    zb_v = _times(Schedule.ZB_V, p, m, f, b, w).bubble_s[0]
    assert zb_v <= zb_h1 * (1 + 1e-12) + 1e-12 and zb_h1 <= one * (1 + 1e-12)


def test_vectorized_equals_one_at_a_time() -> None:
    rng = np.random.default_rng(0)
    n = 400
    schedule = rng.choice([s.code for s in Schedule], n)
    vpp = np.where(schedule == Schedule.INTERLEAVED.code, rng.integers(2, 5, n), 1)
    lay = Layouts.from_columns(tp=1, pp=rng.choice([1, 2, 4, 8, 16, 32], n), dp=1, vpp=vpp, schedule=schedule)
    m = rng.integers(1, 300, n)
    f, b, w, c = (rng.uniform(0.1, 3.0, n) for _ in range(4))
    together = pipeline_times(lay, m, f, b, w, c)
    for i in range(n):
        alone = pipeline_times(lay.take(np.array([i])), m[i:i + 1], f[i], b[i], w[i], c[i])
        for name in ("busy_s", "bubble_s", "p2p_exposed_s"):
            assert getattr(alone, name)[0] == getattr(together, name)[i], (name, i)
