"""Scaling laws: predicted loss, compute-optimal allocation and data-constrained repetition. Chinchilla form
L(N, D) = E + A/N^α + B/D^β (Hoffmann et al. 2022 Eq. 2), refit by Besiroglu et al. 2024 and extended to MoE by
Krajewski et al. 2024 Eq. 9; repetition after Muennighoff et al. 2023 (arXiv:2305.16264 §3.1). Constants:
catalog/scaling_laws.yaml. Every equation, the closed forms and what is left out: docs/design-notes.md#scaling-laws.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from llmscale.cost.params import count_params
from llmscale.io.catalog import catalog_file
from llmscale.specs.model import ModelSpec


class ScalingLaw(str, Enum):
    """Which fitted law predicts loss and the compute-optimal allocation."""

    CHINCHILLA = "chinchilla"
    """Hoffmann et al. 2022 Eq. 10 loss; Approach-1 frontier (≈ 20 tokens per parameter). Dense only."""
    BESIROGLU = "besiroglu"
    """Besiroglu et al. 2024 refit of Chinchilla's data; Eq. 4 frontier (≈ 17 tokens per parameter). Dense only."""
    KRAJEWSKI = "krajewski"
    """Krajewski et al. 2024: dense Eq. 1 and fine-grained MoE Eq. 9 on the same data (C4), so both compare."""


class ParamConvention(str, Enum):
    """Which parameters a law's N counts."""

    TOTAL = "total"
    """Every parameter, embeddings included (Chinchilla's convention)."""
    NON_EMBEDDING = "non_embedding"
    """Without input embedding and output projection (Kaplan's and Krajewski's convention)."""


@dataclass(frozen=True)
class Allocation:
    """A (parameters, tokens) point and its predicted loss."""

    compute_flops: float
    params: float
    """N as the law counts it (for an MoE: total non-embedding)."""
    tokens: float
    loss: float
    active_params: float
    """Parameters a token uses (= params for a dense model)."""
    granularity: int | None = None
    """Krajewski G of an MoE optimum; None for dense."""

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.active_params


@dataclass(frozen=True)
class DenseLaw:
    """L(N, D) = E + A/N^α + B/D^β, with its own Eq. 4 frontier under C = 6·N·D."""

    e: float
    a: float
    b: float
    alpha: float
    beta: float
    params: ParamConvention
    source: str

    def loss(self, n: Any, d: Any) -> Any:
        return self.e + self.a / np.power(n, self.alpha) + self.b / np.power(d, self.beta)

    @property
    def _k(self) -> float:
        return float((self.alpha * self.a / (self.beta * self.b)) ** (1.0 / (self.alpha + self.beta)))

    def optimum(self, compute_flops: float) -> Allocation:
        """Hoffmann Eq. 4: the (N, D) minimising L on C = 6·N·D."""
        k, total = self._k, self.alpha + self.beta
        n = k * (compute_flops / 6.0) ** (self.beta / total)
        d = (compute_flops / 6.0) ** (self.alpha / total) / k
        return Allocation(compute_flops, n, d, float(self.loss(n, d)), n)

    def params_for_tokens(self, tokens: float) -> float:
        """N on the Eq. 4 frontier whose D_opt is `tokens`: N = K·(K·D)^{β/α}."""
        k = self._k
        return float(k * (k * tokens) ** (self.beta / self.alpha))

    def compute_for_loss(self, loss: float) -> float:
        """C at which the Eq. 4 frontier reaches `loss` (inf at or below the irreducible E)."""
        if loss <= self.e:
            return float("inf")
        k, total = self._k, self.alpha + self.beta
        scale = self.a * k ** (-self.alpha) + self.b * k**self.beta
        return float(6.0 * (scale / (loss - self.e)) ** (total / (self.alpha * self.beta)))


@dataclass(frozen=True)
class PowerFrontier:
    """N_opt = k·C^a with D_opt = C / (6·N_opt) (Chinchilla Approach 1)."""

    coefficient: float
    exponent: float
    source: str

    def optimum(self, law: DenseLaw, compute_flops: float) -> Allocation:
        n = self.coefficient * compute_flops**self.exponent
        d = compute_flops / (6.0 * n)
        return Allocation(compute_flops, n, d, float(law.loss(n, d)), n)


@dataclass(frozen=True)
class MoELaw:
    """Krajewski Eq. 9 at one expansion rate."""

    expansion: float
    a: float
    alpha: float
    b: float
    beta: float
    g: float
    gamma: float
    c: float
    source: str

    def loss(self, n: Any, d: Any, granularity: Any) -> Any:
        return self.c + (self.g / np.power(granularity, self.gamma) + self.a) / np.power(n, self.alpha) \
            + self.b / np.power(d, self.beta)


@dataclass(frozen=True)
class MoEFlops:
    """Krajewski Eq. 10/11 FLOPs and their compute-optimal shape rule h = 64·n_blocks."""

    c_f: float
    c_r: float
    d_model_per_block: float
    granularities: tuple[int, ...]
    source: str

    def d_model(self, active_params: Any) -> Any:
        """h from N_act = 12·h²·n_blocks with h = 64·n_blocks, i.e. N_act = 12·h³/64."""
        return np.cbrt(active_params * self.d_model_per_block / 12.0)

    def flops_per_token(self, active_params: Any, granularity: Any, expansion: float) -> Any:
        h = self.d_model(active_params)
        blocks = h / self.d_model_per_block
        return (12.0 * h * h * self.c_f + h * expansion * granularity * self.c_r) * blocks

    @staticmethod
    def total_params(active_params: Any, expansion: float) -> Any:
        """N = h²·(8X + 4)·n_blocks: attention 4h² and X dense-FFN-sized expert sets of 8h² per block."""
        return active_params * (8.0 * expansion + 4.0) / 12.0


@dataclass(frozen=True)
class Repetition:
    """Muennighoff et al. 2023 decay constants and their own Chinchilla-form fit."""

    law: DenseLaw
    r_d_star: float
    r_n_star: float


@dataclass(frozen=True)
class LawCatalog:
    chinchilla: DenseLaw
    chinchilla_frontier: PowerFrontier
    besiroglu: DenseLaw
    krajewski_dense: DenseLaw
    krajewski_moe: tuple[MoELaw, ...]
    moe_flops: MoEFlops
    muennighoff: Repetition


def _dense(raw: dict[str, Any]) -> DenseLaw:
    return DenseLaw(float(raw["E"]), float(raw["A"]), float(raw["B"]), float(raw["alpha"]), float(raw["beta"]),
                    ParamConvention(raw["params"]), str(raw["source"]))


def laws() -> LawCatalog:
    """The constants of catalog/scaling_laws.yaml."""
    raw = catalog_file("scaling_laws.yaml")
    front, flops, mu = raw["chinchilla"]["frontier"], raw["krajewski_flops"], raw["muennighoff"]
    moe = tuple(MoELaw(float(fit["expansion"]), float(fit["a"]), float(fit["alpha"]), float(fit["b"]),
                       float(fit["beta"]), float(fit["g"]), float(fit["gamma"]), float(fit["c"]), str(fit["source"]))
                for fit in raw["krajewski_moe"])
    return LawCatalog(
        chinchilla=_dense(raw["chinchilla"]),
        chinchilla_frontier=PowerFrontier(float(front["coefficient"]), float(front["exponent"]), str(front["source"])),
        besiroglu=_dense(raw["besiroglu"]),
        krajewski_dense=_dense(raw["krajewski_dense"]),
        krajewski_moe=moe,
        moe_flops=MoEFlops(float(flops["c_f"]), float(flops["c_r"]), float(flops["d_model_per_block"]),
                           tuple(int(g) for g in flops["granularities"]), str(flops["source"])),
        muennighoff=Repetition(
            DenseLaw(float(np.exp(mu["log_E"])), float(np.exp(mu["log_A"])), float(np.exp(mu["log_B"])),
                     float(mu["alpha"]), float(mu["beta"]), ParamConvention.TOTAL, str(mu["source"])),
            float(mu["R_D_star"]), float(mu["R_N_star"])),
    )


def dense_law(law: ScalingLaw) -> DenseLaw:
    """The parametric dense law of `law` (Krajewski: their Eq. 1)."""
    catalog = laws()
    return {ScalingLaw.CHINCHILLA: catalog.chinchilla, ScalingLaw.BESIROGLU: catalog.besiroglu,
            ScalingLaw.KRAJEWSKI: catalog.krajewski_dense}[law]


def moe_fit(expansion: float) -> MoELaw:
    """The Krajewski fit whose expansion rate is nearest (in log) to `expansion`."""
    return min(laws().krajewski_moe, key=lambda fit: abs(np.log(expansion / fit.expansion)))


# --------------------------------------------------------------------------------------------------
# Compute-optimal allocation
# --------------------------------------------------------------------------------------------------

MOE_GRID_POINTS = 801
"""Points of the log-N_active grid per granularity; a second grid refines around the best point."""


def moe_optimum(compute_flops: float, fit: MoELaw | None = None) -> Allocation:
    """Krajewski's compute-optimal (N, D, G) for C FLOPs of their Eq. 10/11 (numeric: module docstring)."""
    fit = fit or laws().krajewski_moe[0]
    flops = laws().moe_flops
    grans = np.asarray(flops.granularities, dtype=float)[:, None]
    low, high = np.log(1e6), np.log(compute_flops / 6e6)  # at least 1M active parameters and 1M tokens
    best: tuple[float, float, float] | None = None
    for _ in range(2):
        log_n = np.linspace(low, high, MOE_GRID_POINTS)[None, :]
        active = np.exp(log_n)
        tokens = compute_flops / flops.flops_per_token(active, grans, fit.expansion)
        loss = fit.loss(flops.total_params(active, fit.expansion), tokens, grans)
        gi, ni = np.unravel_index(int(np.argmin(loss)), loss.shape)
        best = (float(active[0, ni]), float(tokens[gi, ni]), float(grans[gi, 0]))
        step = (high - low) / (MOE_GRID_POINTS - 1)
        low, high = float(log_n[0, ni]) - 2 * step, float(log_n[0, ni]) + 2 * step
    assert best is not None
    n_active, n_tokens, gran = best
    total = float(flops.total_params(n_active, fit.expansion))
    return Allocation(compute_flops, total, n_tokens, float(fit.loss(total, n_tokens, gran)), n_active, int(gran))


def compute_optimal(law: ScalingLaw, compute_flops: float, moe: bool = False) -> Allocation:
    """The law's compute-optimal allocation for C FLOPs: Chinchilla's Approach-1 frontier, Besiroglu's and
    Krajewski-dense Eq. 4, Krajewski-MoE numeric (E = 64 fit, the one behind their Table 2)."""
    if law is ScalingLaw.KRAJEWSKI and moe:
        return moe_optimum(compute_flops)
    if law is ScalingLaw.CHINCHILLA:
        return laws().chinchilla_frontier.optimum(laws().chinchilla, compute_flops)
    return dense_law(law).optimum(compute_flops)


def frontier(law: ScalingLaw, budgets_flops: list[float], moe: bool = False) -> list[Allocation]:
    """The compute-optimal allocation at each budget."""
    return [compute_optimal(law, c, moe) for c in budgets_flops]


# --------------------------------------------------------------------------------------------------
# Data-constrained repetition (Muennighoff et al. 2023)
# --------------------------------------------------------------------------------------------------


def effective_tokens(tokens: float, unique_tokens: float, r_star: float | None = None) -> float:
    """D′ = U + U·R*·(1 − e^{−R/R*}), R = D/U − 1 repetitions beyond the first epoch (D itself if D ≤ U)."""
    r_star = laws().muennighoff.r_d_star if r_star is None else r_star
    if tokens <= unique_tokens:
        return tokens
    repeats = tokens / unique_tokens - 1.0
    return float(unique_tokens + unique_tokens * r_star * (1.0 - np.exp(-repeats / r_star)))


def effective_params(params: float, unique_tokens: float, law: DenseLaw, r_star: float | None = None) -> float:
    """N′: parameters beyond N_opt(U) (the law's frontier for U tokens) decay like repeated data, with R_N*."""
    r_star = laws().muennighoff.r_n_star if r_star is None else r_star
    useful = min(params, law.params_for_tokens(unique_tokens))
    excess = params / useful - 1.0
    return float(useful + useful * r_star * (1.0 - np.exp(-excess / r_star)))


def repeated_loss(law: DenseLaw, params: float, tokens: float, unique_tokens: float,
                  repetition: Repetition | None = None) -> float:
    """L(N′, D′) of a parametric law trained on D tokens drawn from U unique ones (module docstring)."""
    rep = repetition or laws().muennighoff
    n = effective_params(params, unique_tokens, law, rep.r_n_star)
    d = effective_tokens(tokens, unique_tokens, rep.r_d_star)
    return float(law.loss(n, d))


# --------------------------------------------------------------------------------------------------
# A model under a law
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelScale:
    """What the laws need of a ModelSpec."""

    total_params: int
    active_params: int
    embedding_params: int
    """Input embedding + output projection (+ learned positions)."""
    granularity: int
    """Routed experts per token (top_k); 1 for dense."""
    expansion: float
    """Routed experts / top_k; 1 for dense."""
    is_moe: bool

    @classmethod
    def of(cls, model: ModelSpec) -> ModelScale:
        counts = count_params(model)
        routed = model.top_k if model.is_moe else 1
        return cls(counts.total, counts.active, counts.embedding + counts.output, routed,
                   model.experts / model.top_k if model.is_moe else 1.0, model.is_moe)

    def law_params(self, convention: ParamConvention) -> tuple[float, float]:
        """(N, N_active) as a law with this convention counts them."""
        drop = self.embedding_params if convention is ParamConvention.NON_EMBEDDING else 0
        return float(self.total_params - drop), float(self.active_params - drop)


def check_law(law: ScalingLaw, scale: ModelScale) -> str | None:
    """Why `law` cannot predict this model's loss, or None."""
    if scale.is_moe and law is not ScalingLaw.KRAJEWSKI:
        return f"{law.value} has no mixture-of-experts term; use --law krajewski or --family dense"
    return None


def predict_loss(law: ScalingLaw, scale: ModelScale, tokens: float, unique_tokens: float | None = None,
                 fit: MoELaw | None = None) -> float:
    """Predicted loss of the model after `tokens` tokens (repeated from `unique_tokens` if given).

    An MoE is scored with Krajewski's main fit (E = 64, the one behind their Table 2) whatever its expansion
    rate, so every MoE candidate is on one curve: N counts total parameters, so more experts lower the loss.
    Their E = 16 refit (`moe_fit(16)`) disagrees with it by ~0.1 nats at 1e26 FLOPs — pass it as `fit` to see
    how much a conclusion depends on the fit."""
    if scale.is_moe:
        fit = fit or laws().krajewski_moe[0]
        n, _ = scale.law_params(ParamConvention.NON_EMBEDDING)
        d = tokens if unique_tokens is None else effective_tokens(tokens, unique_tokens)
        return float(fit.loss(n, d, scale.granularity))
    dense = dense_law(law)
    n, _ = scale.law_params(dense.params)
    if unique_tokens is None:
        return float(dense.loss(n, tokens))
    return repeated_loss(dense, n, tokens, unique_tokens)


def training_flops(law: ScalingLaw, scale: ModelScale, tokens: float) -> float:
    """C = 6·N_active·D in the law's parameter convention."""
    _, active = scale.law_params(dense_law(law).params)
    return 6.0 * active * tokens


def dense_equivalent_flops(law: ScalingLaw, loss: float) -> float:
    """The compute a compute-optimal dense model of the law needs to reach `loss` (Eq. 4 frontier)."""
    return dense_law(law).compute_for_loss(loss)
