"""MoE routing load: how much more than the average the busiest expert-parallel rank receives, vectorized.

I = 1 + z(ep)·√(σ²·ep/E + cv²), cv² = (1 − 1/ep)·(E − k)/(E − 1)/N the sampling spread, σ the router's from the
measured MaxVio (catalog/moe.yaml), z(n) Blom's expected maximum of n normals; a capacity factor c caps I.
Derivation, capacity and the check against Megatron's routing: docs/cost-model.md#routing."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from llmscale.layout.arrays import Layouts
from llmscale.specs.constants import MoeConstants
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec


def expected_max_normal(n: np.ndarray) -> np.ndarray:
    """z(n): the expected maximum of n independent standard normals (Blom's approximation); 0 for n ≤ 1. One
    Python call per element: give it distinct values."""
    n = np.asarray(n, dtype=float)
    z = [NormalDist().inv_cdf((x - 0.375) / (x + 0.25)) if x > 1 else 0.0 for x in n.reshape(-1)]
    return np.array(z).reshape(n.shape)


def routed_copies_per_token(model: ModelSpec, lay: Layouts) -> np.ndarray:
    """(token, expert) assignments one GPU routes per token of its micro-batch: k copies, split over the tp ranks
    that share the token and gathered again by the etp ranks that share an expert."""
    result: np.ndarray = model.top_k * lay.etp / lay.tp
    return result


def busiest_rank_load(model: ModelSpec, train: TrainSpec, lay: Layouts, tokens: np.ndarray,
                      const: MoeConstants) -> np.ndarray:
    """I: the busiest EP rank's routed load over the mean, per layout (docs/cost-model.md#routing); 1 for dense
    models."""
    if not model.is_moe:
        return np.ones(lay.size)
    experts = float(model.experts)
    k = float(model.top_k)
    ep = lay.ep.astype(float)
    assignments = tokens * routed_copies_per_token(model, lay)
    sampling = (1.0 - 1.0 / ep) * (experts - k) / max(experts - 1.0, 1.0) / assignments
    spread = const.max_violation[train.routing] / float(expected_max_normal(np.array(const.max_violation_experts)))
    rows, few = lay.distinct_view("ep")  # a search has few ep values: one z each
    z = rows.spread(expected_max_normal(few.ep))
    load = 1.0 + z * np.sqrt(spread**2 * ep / experts + sampling)
    if model.capacity_factor is not None:
        load = np.full(lay.size, model.capacity_factor) if model.pad_to_capacity else np.minimum(load,
                                                                                                  model.capacity_factor)
    result: np.ndarray = load
    return result
