"""Optima a candidate is measured against (`allocate`): the least loss of a model's own shape at its compute, and the
unique data a run may draw on by default. The laws themselves live in `laws`."""

from __future__ import annotations

import numpy as np

from llmscale.io.catalog import catalog_file
from llmscale.scaling.laws import (
    Allocation,
    ModelScale,
    ParamConvention,
    ScalingLaw,
    dense_law,
    predict_loss,
    training_flops,
)

SHAPE_GRID_POINTS = 201
"""Points of the log-N_active grid of `shape_optimum` per pass; three passes refine around the best point."""


def shape_optimum(law: ScalingLaw, scale: ModelScale, compute_flops: float,
                  unique_tokens: float | None = None) -> Allocation:
    """The allocation of least predicted loss at C FLOPs among models of `scale`'s shape: the same kind, total over
    active parameters, granularity, and the same accounting as a candidate (C = 6·N_active·D, `training_flops`; loss
    `predict_loss`, with repetition from `unique_tokens`). `scale` itself at its tokens for C is one point of that
    family, so its loss is never below this optimum's (the law's frontier, `compute_optimal`, counts FLOPs and shapes
    its own way: Hoffmann's Approach 1, Krajewski's Eq. 10/11 and shape rule)."""
    _, active_c = scale.law_params(dense_law(law).params)
    ratio = scale.law_params(ParamConvention.NON_EMBEDDING)[0] / active_c if scale.is_moe else 1.0

    def member(n_active: float) -> ModelScale:
        return ModelScale(round(ratio * n_active), round(n_active), 0, scale.granularity, scale.expansion,
                          scale.is_moe)

    def loss_at(n_active: float) -> float:
        m = member(n_active)
        return predict_loss(law, m, compute_flops / training_flops(law, m, 1.0), unique_tokens)

    low, high = np.log(1e6), np.log(max(compute_flops / 6e6, 1e7))  # at least 1M active parameters and 1M tokens
    best = float(active_c)  # the candidate itself: the optimum is never worse than it
    for _ in range(3):
        grid = np.exp(np.linspace(low, high, SHAPE_GRID_POINTS))
        best = min([best, *grid.tolist()], key=loss_at)
        step = (high - low) / (SHAPE_GRID_POINTS - 1)
        low, high = float(np.log(best)) - 2 * step, float(np.log(best)) + 2 * step
    chosen = member(best)
    tokens = compute_flops / training_flops(law, chosen, 1.0)
    return Allocation(compute_flops, float(chosen.total_params), tokens,
                      predict_loss(law, chosen, tokens, unique_tokens), float(chosen.active_params),
                      scale.granularity if scale.is_moe else None)


def default_unique_tokens() -> tuple[float, str]:
    """The unique tokens `allocate` assumes without `--max-tokens`, and its source (catalog/scaling_laws.yaml)."""
    raw = catalog_file("scaling_laws.yaml")["unique_tokens"]
    return float(raw["default"]), str(raw["source"])
