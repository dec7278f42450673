"""Checkpoint intervals, expected goodput and the Monte Carlo: published intervals and ETTRs (each with its
source beside it), Daly's complete model, the two-tier model against its simulation, the policies on the
flagship cluster, and `llmscale goodput` / `plan` on the CLI."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from llmscale.cli.main import main
from llmscale.io.catalog import failure_profile, load_cluster, load_constants, load_model
from llmscale.reliability.estimate import job_goodput, simulate_job
from llmscale.reliability.goodput import CheckpointPolicy, GoodputEstimate, PolicyTerms, Tier, optimize_intervals
from llmscale.reliability.intervals import daly_interval_s, segment_efficiency, young_interval_s
from llmscale.reliability.montecarlo import SimulationInputs, simulate
from llmscale.reliability.rates import interruption_rates
from llmscale.specs.failures import FailureSpec, Mitigation
from llmscale.specs.train import TrainSpec
from llmscale.units import SECONDS_PER_DAY, SECONDS_PER_HOUR

CONSTANTS = load_constants()

MINUTE = 60.0
HOURS_PER_YEAR = 8760.0


def mtbf_min(afr_per_gpu_year: float, gpus: int) -> float:
    """Series system with exponential failures: M = 8760 h / (N · AFR)."""
    return HOURS_PER_YEAR * 60.0 / (gpus * afr_per_gpu_year)


def meta_mtbf_min(gpus: int, r_f_per_1000_node_days: float = 6.50) -> float:
    """Kokolis et al.: MTTF = (N_nodes · r_f)⁻¹, 8 GPUs per node."""
    return 1440.0 / (gpus / 8 * r_f_per_1000_node_days / 1000)


def one_tier(blocking_min: float, restart_min: float) -> PolicyTerms:
    """A one-tier (storage) policy with the given C and R, in minutes, for the optimizer."""
    def a(v: float) -> np.ndarray:
        return np.array([v * MINUTE])
    return PolicyTerms(CheckpointPolicy.SYNC, a(blocking_min), a(0), a(0), a(0), a(restart_min), a(restart_min),
                       np.ones(1), a(0), np.array([True]))


@pytest.mark.parametrize(("mtbf", "published"), [(1440.0, 117.0), (360.0, 57.0), (15.0, 9.1)])
def test_daly_published_intervals(mtbf: float, published: float) -> None:
    # Daly 2006 (FGCS 22(3), doi:10.1016/j.future.2004.11.016) eq. 37 with C = 5 min: the intervals printed in
    # the captions of its Figs. 3-5; issue 5 asks within 1 %.
    assert float(daly_interval_s(np.array(5.0), np.array(mtbf))) == pytest.approx(published, rel=0.01)


def test_young_interval() -> None:
    # Young (1974, CACM 17(9)): τ = √(2·C·M) with M = 3.09 h = 185.4 min, Llama 3's mean time between unexpected
    # interruptions (54 d · 24 h / 419, arXiv:2407.21783 §3.3.4), and C = 5 min -> √(2 · 5 · 185.4) = 43.1 min.
    assert float(young_interval_s(np.array(5.0), np.array(3.09 * 60))) == pytest.approx(43.1, abs=0.1)


@pytest.mark.parametrize(("interval", "published"), [(60.0, 0.70), (5.0, 0.93)])
def test_meta_ettr_at_16k_gpus(interval: float, published: float) -> None:
    # Kokolis et al. (HPCA'25, arXiv:2410.21680), 16,000 GPUs at r_f = 6.50, u0 = 5 min, non-blocking writes (w = 0):
    # E[ETTR] 0.7 at 60-minute checkpoints, 0.93 at 5-minute; issue 5 asks within 0.03.
    m = meta_mtbf_min(16_000)
    assert float(segment_efficiency(1 / m, 1.0, interval, 0.0, 1, 5.0, 5.0)) == pytest.approx(published, abs=0.03)


def test_meta_ettr_smaller_jobs() -> None:
    # Kokolis et al. (arXiv:2410.21680): 8,000 GPUs, 1-min queue + u0 5 min, 30-min interval -> 0.9; 4,096 GPUs,
    # 60-min -> > 0.9.
    assert float(segment_efficiency(1 / meta_mtbf_min(8_000), 1.0, 30.0, 0.0, 1, 6.0, 6.0)) == pytest.approx(
        0.90, abs=0.01)
    assert float(segment_efficiency(1 / meta_mtbf_min(4_096), 1.0, 60.0, 0.0, 1, 5.0, 5.0)) > 0.90


def test_meta_profile_gives_the_same_mtbf_as_the_closed_form() -> None:
    spec = FailureSpec.model_validate(failure_profile("meta-rsc1"))
    rates = interruption_rates(spec, 16_000, gpus_per_node=8)
    assert float(rates.job_mtbf_s[0]) / MINUTE == pytest.approx(meta_mtbf_min(16_000), rel=1e-3)


@pytest.mark.parametrize(("afr", "gpus", "blocking", "tau", "efficiency"), [
    (0.01, 16_384, 0.5, 56.31, 0.9794),
    (0.02, 100_000, 5.0, 47.99, 0.7869),
    (0.02, 500_000, 5.0, 19.72, 0.5165),
    (0.1729, 16_384, 0.5, 13.29, 0.8797),
    (0.1729, 500_000, 5.0, 4.88, 0.0380),
])
def test_numerical_optimum_matches_the_exact_model_table(
    afr: float, gpus: int, blocking: float, tau: float, efficiency: float
) -> None:
    # Regression values, not published figures (R = 10 min): the numerical optimum τ* and eff* of Daly's
    # complete model at these rates and sizes (0.1729 /GPU-yr = Llama 3's 419 unexpected interruptions over
    # 16,384 GPUs × 54/365 yr), including the regime where M approaches R and first-order formulas go negative.
    rate = np.array([1 / (mtbf_min(afr, gpus) * MINUTE)])
    best_tau, _, best = optimize_intervals(one_tier(blocking, 10.0), rate, np.array([1.0]))
    assert float(best_tau[0]) / MINUTE == pytest.approx(tau, rel=0.01)
    assert float(best[0]) == pytest.approx(efficiency, abs=5e-4)


def test_llama3_ettr_envelope() -> None:
    # Llama 3 (arXiv:2407.21783 §3.3.4): M = 2.78 h (54 d · 24 h / 466 interruptions); with R = 10 min and
    # C = 5 s (assumed: the paper does not publish them) the best interval gives 0.912 >= 0.90, its "higher than
    # 90 %" effective training time.
    rate = np.array([1 / (2.78 * SECONDS_PER_HOUR)])
    _, _, best = optimize_intervals(one_tier(5 / 60, 10.0), rate, np.array([1.0]))
    assert float(best[0]) == pytest.approx(0.912, abs=0.005)
    # With C = 60 s no interval reaches 0.90 even with R = 0 (max 0.8945 in Daly's complete model).
    _, _, best = optimize_intervals(one_tier(1.0, 0.0), rate, np.array([1.0]))
    assert float(best[0]) < 0.90
    assert float(best[0]) == pytest.approx(0.8945, abs=0.002)


def test_two_tier_model_reduces_to_daly() -> None:
    # q = 1, k = 1: every restart reads storage -> Daly's complete model (Daly 2006); q = 0: memory only.
    m, tau, c, r = 300.0, 40.0, 2.0, 10.0
    daly = tau / (m * np.exp(r / m) * np.expm1((tau + c) / m))
    assert float(segment_efficiency(1 / m, 1.0, tau, c, 1, 99.0, r)) == pytest.approx(daly, rel=1e-12)
    assert float(segment_efficiency(1 / m, 0.0, tau, c, 7, r, 99.0)) == pytest.approx(daly, rel=1e-12)
    # Continuous as q -> 0, and losing more to storage never helps.
    values = [float(segment_efficiency(1 / m, q, tau, c, 10, r, 3 * r)) for q in (0.0, 1e-9, 0.1, 0.5, 1.0)]
    assert values[1] == pytest.approx(values[0], rel=1e-6)
    assert values == sorted(values, reverse=True)


@pytest.mark.parametrize(("name", "inputs", "published"), [
    ("T19 2%/yr 16k C=5 R=10", SimulationInputs(1 / (mtbf_min(0.02, 16_384) * MINUTE), 1.0, 123.34 * MINUTE,
                                                300.0, 1, 600.0, 600.0, 180 * SECONDS_PER_DAY), 0.9174),
    ("T20 2%/yr 100k C=30s", SimulationInputs(1 / (mtbf_min(0.02, 100_000) * MINUTE), 1.0, 15.88 * MINUTE, 30.0,
                                              1, 600.0, 600.0, 90 * SECONDS_PER_DAY), 0.9045),
    ("T21 M=3.09h tau=60", SimulationInputs(1 / (3.093 * SECONDS_PER_HOUR), 1.0, 3600.0, 300.0, 1, 600.0, 600.0,
                                            180 * SECONDS_PER_DAY), 0.730),
    ("tiered 500k", SimulationInputs(1 / 364.0, 0.08, 2.0, 0.005, 11, 300.0, 302.3, 90 * SECONDS_PER_DAY), None),
    ("tiered q=0.3", SimulationInputs(1 / 900.0, 0.3, 30.0, 1.0, 6, 120.0, 400.0, 90 * SECONDS_PER_DAY), None),
])
def test_monte_carlo_agrees_with_the_analytic_goodput(
    name: str, inputs: SimulationInputs, published: float | None
) -> None:
    # Issue 5: within 1 % (or 3 standard errors). The expected values of the first three cases are Daly's
    # complete model at those inputs (regression values, not published figures).
    analytic = float(segment_efficiency(inputs.rate_per_s, inputs.storage_share, inputs.tau_s, inputs.blocking_s,
                                        inputs.k, inputs.restart_memory_s, inputs.restart_storage_s))
    if published is not None:
        assert analytic == pytest.approx(published, abs=0.002)
    result = simulate(inputs, trials=1000, seed=11)
    gap = abs(float(result.goodput.mean()) - analytic)
    assert gap <= max(0.01 * analytic, 3 * result.stderr), name
    assert gap <= 4 * result.stderr, name  # stricter: the simulation is the analytic model's own process
    # The count of interruptions is Poisson with mean λ·T.
    expected = inputs.rate_per_s * inputs.wall_s
    assert float(result.unplanned.mean()) == pytest.approx(expected, abs=4 * np.sqrt(expected / 1000) + 1)


def test_monte_carlo_is_seeded() -> None:
    inputs = SimulationInputs(1 / 3600.0, 0.1, 60.0, 1.0, 5, 200.0, 300.0, 30 * SECONDS_PER_DAY)
    a, b = simulate(inputs, trials=200, seed=3), simulate(inputs, trials=200, seed=3)
    assert np.array_equal(a.goodput, b.goodput)
    assert not np.array_equal(a.goodput, simulate(inputs, trials=200, seed=4).goodput)


def flagship(gpus: int | np.ndarray, hot_spares: bool = True, mitigations: tuple[Mitigation, ...] = ()
             ) -> GoodputEstimate:
    """seed-10t-moe on seed-500k for 90 days (the flagship of the README)."""
    return job_goodput(load_model("seed-10t-moe"), load_cluster("seed-500k"), TrainSpec(), gpus,
                       90 * SECONDS_PER_DAY, CONSTANTS, hot_spares=hot_spares, mitigations=mitigations)


def test_tiers_help_and_intervals_sit_near_young_and_daly() -> None:
    est = flagship(16_384)
    goodput = {p: float(r.goodput[0]) for p, r in est.policies.items()}
    assert goodput[CheckpointPolicy.TIERED] > goodput[CheckpointPolicy.ASYNC] > goodput[CheckpointPolicy.SYNC]
    for result in est.policies.values():
        for tier, interval in result.interval_s.items():
            assert float(interval[0]) == pytest.approx(float(result.daly_s[tier][0]), rel=0.1), tier


def test_goodput_falls_with_job_size_and_mitigations_and_spares_help() -> None:
    sizes = flagship(np.array([4_096, 16_384, 131_072, 500_000]))
    assert np.all(np.diff(sizes.goodput) < 0)
    base = float(flagship(500_000).goodput[0])
    mitigated = flagship(500_000, mitigations=(Mitigation.PREDICTIVE_MIGRATION, Mitigation.SUBHEALTHY_EVICTION))
    requeue = flagship(500_000, hot_spares=False)
    assert float(mitigated.goodput[0]) > base > float(requeue.goodput[0])


def test_flagship_monte_carlo_agrees_with_its_estimate() -> None:
    est = flagship(500_000)
    result = simulate_job(est, 0, 62_500, trials=500, seed=5)
    analytic = float(est.goodput[0])
    assert abs(float(result.goodput.mean()) - analytic) <= max(0.01 * analytic, 3 * result.stderr)
    assert float(result.interruptions.mean()) == pytest.approx(
        float(est.expected_unplanned[0] + est.expected_planned[0]), rel=0.01)


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), out.out, out.err


def test_goodput_json_has_the_issue_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "goodput", "--cluster", "llama3-16k", "--gpus", "16384", "--days", "54",
                           "--trials", "300", "--interval-min", "5", "--json")
    assert code == 0
    doc = json.loads(out)
    for key in ("job_mtbf_hours", "expected_interruptions", "goodput", "checkpoint_interval_min", "monte_carlo",
                "input_sha256"):
        assert key in doc
    assert set(doc["monte_carlo"]) >= {"p5", "p50", "p95"}
    assert doc["monte_carlo"]["p5"] <= doc["monte_carlo"]["p50"] <= doc["monte_carlo"]["p95"]
    assert doc["expected_interruptions_by_kind"]["unplanned"] == pytest.approx(419, rel=0.1)
    assert set(doc["checkpoint_interval_min"]) <= {t.value for t in Tier}
    assert doc["at_intervals"][0]["interval_min"] == 5


def test_goodput_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "goodput.png"
    code, _, _ = run_cli(capsys, "goodput", "--gpus", "16384", "--trials", "0", "--plot", str(path))
    assert code == 0
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 460)
    idat = data.index(b"IDAT")
    length = struct.unpack(">I", data[idat - 4:idat])[0]
    pixels = np.frombuffer(zlib.decompress(data[idat + 4:idat + 4 + length]), dtype=np.uint8)
    assert pixels.size == height * (1 + 3 * width)
    assert (pixels != 255).mean() > 0.01  # something was drawn


@pytest.mark.parametrize(("args", "needle"), [
    (["--gpus", "0"], "gpus = 0"),  # no GPUs, no job
    (["--gpus", "600000"], "gpus = 600000"),  # more GPUs than seed-500k has
    (["--days", "-1"], "days = -1"),  # a run cannot last negative time
    (["--interval-min", "0"], "--interval-min = 0"),  # an interval of 0 is a checkpoint without training
    (["--cluster", "no-such-cluster"], "no-such-cluster"),
])
def test_goodput_bad_input_is_one_line(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "goodput", "--trials", "0", *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err


def test_goodput_flags_are_frozen() -> None:
    from llmscale.cli.main import app

    command = next(c for c in app.registered_commands if c.name == "goodput")
    import typer.main

    click_command = typer.main.get_command_from_info(command, pretty_exceptions_short=True,
                                                     rich_markup_mode=None)
    flags = sorted(opt for p in click_command.params for opt in p.opts)
    assert flags == sorted([
        "--cluster", "-c", "--gpus", "--model", "-m", "--days", "--interval-min", "--trials", "--seed",
        "--hot-spares", "--mitigation", "--json", "--plot", "--step-s", "--expect-sha256", "--force",
        # Changed on purpose (issue 16): a calibration profile's measured storage rates feed the checkpoint model.
        "--calibration", "--allow-unsealed", "--force-calibration",
    ])


def test_plan_shows_goodput_and_ranks_by_effective_time(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "plan", "--cluster", "seed-500k", "--gpus", "16384", "--top", "3",
                           "--objective", "effective-time", "--json")
    assert code == 0
    doc = json.loads(out)
    top = doc["top"]
    assert top and all(0 < t["goodput"] < 1 for t in top)
    assert all("memory" in t["checkpoint_interval_min"] or "storage" in t["checkpoint_interval_min"] for t in top)
    effective = [t["effective_days"] for t in top]
    assert effective == sorted(effective)
    assert all(t["effective_days"] == pytest.approx(t["days"] / t["goodput"]) for t in top)
