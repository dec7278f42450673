"""Scaling laws (src/llmscale/scaling/laws.py) against the numbers their papers print: Chinchilla Table 3, the
Besiroglu-constant optima, Krajewski Table 2, Muennighoff's README check value — each with its citation and
tolerance — plus the properties every law must have."""

from __future__ import annotations

import math

import pytest

from llmscale.io.catalog import load_model
from llmscale.scaling.laws import (
    ModelScale,
    ParamConvention,
    ScalingLaw,
    check_law,
    compute_optimal,
    dense_equivalent_flops,
    dense_law,
    effective_tokens,
    laws,
    moe_fit,
    moe_optimum,
    predict_loss,
    repeated_loss,
    training_flops,
)


def rel(got: float, expected: float) -> float:
    return abs(got / expected - 1.0)


# Hoffmann et al. 2022 (arXiv:2203.15556) Table 3, Approach-1 projections: params, FLOPs, tokens.
CHINCHILLA_TABLE_3 = [
    (400e6, 1.92e19, 8.0e9), (1e9, 1.21e20, 20.2e9), (10e9, 1.23e22, 205.1e9), (67e9, 5.76e23, 1.5e12),
    (175e9, 3.85e24, 3.7e12), (280e9, 9.90e24, 5.9e12), (520e9, 3.43e25, 11.0e12), (1e12, 1.27e26, 21.2e12),
    (10e12, 1.30e28, 216.2e12),
]


@pytest.mark.parametrize(("params", "flops", "tokens"), CHINCHILLA_TABLE_3)
def test_chinchilla_frontier_reproduces_table_3(params: float, flops: float, tokens: float) -> None:
    got = compute_optimal(ScalingLaw.CHINCHILLA, flops)
    assert rel(got.params, params) < 0.015
    # The 67B row prints 1.5T tokens, rounded: 6 · 67e9 · 1.5e12 = 6.03e23, not the row's 5.76e23 FLOPs.
    assert rel(got.tokens, tokens) < (0.06 if params == 67e9 else 0.01)
    assert 19.5 < got.tokens_per_param < 22.0  # "≈ 20 tokens per parameter"
    assert got.compute_flops == pytest.approx(6 * got.params * got.tokens)


def test_chinchilla_frontier_exponent_matches_approach_1() -> None:
    # Table 2: Approach 1 gives a = 0.50 (bootstrap 0.488–0.502); the frontier fitted to Table 3 must agree.
    assert 0.488 <= laws().chinchilla_frontier.exponent <= 0.502


# Hoffmann et al. 2022 Eq. 4 closed form (C = 6ND) evaluated with each fit's constants: Chinchilla's rounded
# App. D.2 Eq. 10 fit and Besiroglu et al. 2024's refit (arXiv:2404.10102; epoch-research/analyzing-chinchilla
# data_analysis.ipynb): fit → {C: (N, D)}.
PARAMETRIC_OPTIMA = {
    ScalingLaw.BESIROGLU: {5.76e23: (72.3e9, 1.33e12), 1e25: (312e9, 5.33e12), 1e26: (1.02e12, 16.4e12)},
    ScalingLaw.CHINCHILLA: {5.76e23: (32.2e9, 2.98e12), 1e25: (117e9, 14.3e12), 1e26: (331e9, 50.4e12)},
}


@pytest.mark.parametrize(("law", "flops"), [(law, c) for law, rows in PARAMETRIC_OPTIMA.items() for c in rows])
def test_parametric_optimum_matches_the_fits_worked_values(law: ScalingLaw, flops: float) -> None:
    params, tokens = PARAMETRIC_OPTIMA[law][flops]
    got = dense_law(law).optimum(flops)
    assert rel(got.params, params) < 0.02
    assert rel(got.tokens, tokens) < 0.02


def test_besiroglu_optimum_at_1e25_is_the_issues_figure() -> None:
    # Issue 6: "1e25 FLOPs → ≈312B params, ≈5.33T tokens within 2%" (Besiroglu et al. 2024 constants).
    got = compute_optimal(ScalingLaw.BESIROGLU, 1e25)
    assert rel(got.params, 312e9) < 0.02 and rel(got.tokens, 5.33e12) < 0.02


# Krajewski et al. 2024 (arXiv:2402.07871) Table 2: N_active (the "64×N" column), D, G, FLOPs, loss.
KRAJEWSKI_TABLE_2 = [
    (100e6, 4.37e9, 8, 2.95e18, 3.133), (1e9, 28.94e9, 16, 1.93e20, 2.491), (3e9, 72.90e9, 16, 1.41e21, 2.245),
    (7e9, 137.60e9, 32, 6.46e21, 2.076), (70e9, 941.07e9, 32, 4.16e23, 1.694), (300e9, 2.96e12, 64, 5.69e24, 1.503),
    (1e12, 7.94e12, 64, 4.97e25, 1.367),
]


@pytest.mark.parametrize(("active", "tokens", "granularity", "flops", "loss"), KRAJEWSKI_TABLE_2)
def test_krajewski_optimum_reproduces_table_2(active: float, tokens: float, granularity: int, flops: float,
                                              loss: float) -> None:
    got = moe_optimum(flops)
    assert rel(got.active_params, active) < 0.05
    assert rel(got.tokens, tokens) < 0.05
    assert got.granularity == granularity
    assert rel(got.loss, loss) < 0.05


@pytest.mark.parametrize(("active", "tokens", "granularity", "flops", "loss"), KRAJEWSKI_TABLE_2)
def test_krajewski_flops_of_table_2_configurations(active: float, tokens: float, granularity: int, flops: float,
                                                   loss: float) -> None:
    # Eq. 10/11 with h = 64·n_blocks gives the row's FLOPs from its (N_active, D, G): checks our reading of N.
    f = laws().moe_flops
    assert rel(float(f.flops_per_token(active, granularity, 64.0)) * tokens, flops) < 0.01


def test_muennighoff_readme_check_value() -> None:
    # huggingface/datablations README: L(N = 6.34e9, D = 242e9, U = 25e9) = 2.2256….
    rep = laws().muennighoff
    assert repeated_loss(rep.law, 6.34e9, 242e9, 25e9, rep) == pytest.approx(2.2256, abs=1e-4)


@pytest.mark.parametrize(("epochs", "multiplier"), [(2, 1.97), (4, 3.73), (8, 6.62), (16, 10.58), (40, 15.17)])
def test_muennighoff_effective_data_multiplier(epochs: int, multiplier: float) -> None:
    # Muennighoff et al. 2023 (arXiv:2305.16264) D′ = U + U·R_D*·(1 − e^(−R_D/R_D*)) with R_D = epochs − 1 and
    # R_D* = 15.39 (datablations README fit), evaluated: D′/U after `epochs` passes over U unique tokens.
    assert effective_tokens(epochs * 1e9, 1e9) / 1e9 == pytest.approx(multiplier, abs=0.01)


def test_no_repetition_changes_nothing() -> None:
    # One epoch or less: every token is unique, D′ = D and the loss is the plain law's.
    law = dense_law(ScalingLaw.BESIROGLU)
    assert effective_tokens(5e12, 10e12) == 5e12
    assert repeated_loss(law, 70e9, 1.4e12, 10e12) == pytest.approx(float(law.loss(70e9, 1.4e12)))


@pytest.mark.parametrize("law", list(ScalingLaw))
def test_loss_falls_with_params_and_tokens(law: ScalingLaw) -> None:
    dense = dense_law(law)
    assert dense.loss(2e9, 1e11) < dense.loss(1e9, 1e11)
    assert dense.loss(1e9, 2e11) < dense.loss(1e9, 1e11)


@pytest.mark.parametrize("law", list(ScalingLaw))
def test_compute_for_loss_inverts_the_frontier(law: ScalingLaw) -> None:
    dense = dense_law(law)
    for flops in (1e21, 1e24, 1e27):
        assert dense.compute_for_loss(dense.optimum(flops).loss) == pytest.approx(flops, rel=1e-9)
    assert math.isinf(dense.compute_for_loss(dense.e))  # the irreducible loss is never reached


def test_parametric_optimum_is_the_minimum_on_its_isoflop() -> None:
    # Moving N either way along C = 6ND raises the loss.
    law, flops = dense_law(ScalingLaw.BESIROGLU), 1e25
    best = law.optimum(flops)
    for factor in (0.8, 1.25):
        n = best.params * factor
        assert law.loss(n, flops / (6 * n)) > best.loss


def test_moe_beats_dense_at_equal_compute_under_krajewski() -> None:
    # Krajewski et al.: the fine-grained MoE frontier lies below the dense one at every budget they fit.
    for flops in (1e20, 1e23, 1e25):
        moe, dense = compute_optimal(ScalingLaw.KRAJEWSKI, flops, moe=True), compute_optimal(ScalingLaw.KRAJEWSKI,
                                                                                             flops)
        assert moe.loss < dense.loss
        assert dense_equivalent_flops(ScalingLaw.KRAJEWSKI, moe.loss) > flops


def test_model_scale_of_catalog_models() -> None:
    dense = ModelScale.of(load_model("llama3-70b"))
    assert not dense.is_moe and dense.granularity == 1 and dense.expansion == 1.0
    n, active = dense.law_params(ParamConvention.NON_EMBEDDING)
    assert n == active == dense.total_params - dense.embedding_params
    mixtral = ModelScale.of(load_model("mixtral-8x7b"))
    assert mixtral.granularity == 2 and mixtral.expansion == 4.0  # 8 experts, top-2
    seed = ModelScale.of(load_model("seed-10t-moe"))
    assert seed.granularity == 10 and seed.expansion == pytest.approx(25.6)
    assert moe_fit(seed.expansion).expansion == 16  # ln(25.6/16) = 0.47 < ln(64/25.6) = 0.92
    # predict_loss uses the main E = 64 fit for every MoE unless told otherwise.
    main, refit = predict_loss(ScalingLaw.KRAJEWSKI, seed, 1e14), predict_loss(ScalingLaw.KRAJEWSKI, seed, 1e14,
                                                                                fit=moe_fit(16))
    assert main != refit


def test_dense_only_laws_refuse_moe_models() -> None:
    seed = ModelScale.of(load_model("seed-10t-moe"))
    assert check_law(ScalingLaw.KRAJEWSKI, seed) is None
    assert "no mixture-of-experts term" in (check_law(ScalingLaw.BESIROGLU, seed) or "")
    assert check_law(ScalingLaw.CHINCHILLA, ModelScale.of(load_model("llama3-8b"))) is None


def test_predicted_loss_of_llama3_405b_is_plausible() -> None:
    # 405B on 15.6T tokens (Llama 3 paper §3): Besiroglu puts it between its compute-optimal loss at that
    # compute and the irreducible E.
    scale = ModelScale.of(load_model("llama3-405b"))
    loss = predict_loss(ScalingLaw.BESIROGLU, scale, 15.6e12)
    flops = training_flops(ScalingLaw.BESIROGLU, scale, 15.6e12)
    law = dense_law(ScalingLaw.BESIROGLU)
    assert law.e < law.optimum(flops).loss <= loss < law.optimum(flops).loss + 0.01


def test_repeating_data_costs_loss() -> None:
    # 4 epochs over U cost a little (≈ 3.7 effective epochs); 40 epochs cost much more.
    scale = ModelScale.of(load_model("llama3-70b"))
    fresh = predict_loss(ScalingLaw.BESIROGLU, scale, 16e12)
    four = predict_loss(ScalingLaw.BESIROGLU, scale, 16e12, unique_tokens=4e12)
    forty = predict_loss(ScalingLaw.BESIROGLU, scale, 16e12, unique_tokens=0.4e12)
    assert fresh < four < forty
