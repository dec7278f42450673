"""Which layers a pipeline rank holds, vectorized over layouts.

Shape legend: arrays of shape (N,), one element per layout.

The model's L layers are cut into C = pp × vpp chunks; chunk c holds layers [⌊c·L/C⌋, ⌊(c+1)·L/C⌋)
(balanced when L is not a multiple of C). Rank r holds chunks r, r + pp, …, r + (vpp−1)·pp (Megatron
interleaving); under DualPipe it holds stages r and pp−1−r (DeepSeek-V3 §3.2.1). The first chunk carries
the input embedding, the last the output layer — which ZB-V's V shape puts on rank 0. MoE layers are those
at index i ≥ first_dense_layers with (i − first_dense_layers) divisible by moe_layer_freq.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import cache

import numpy as np

from llmscale.layouts import Layouts
from llmscale.specs.layout import Schedule
from llmscale.specs.model import ModelSpec


@dataclass(frozen=True)
class StageLayers:
    """Layers held by one pipeline rank of each layout."""

    dense: np.ndarray
    moe: np.ndarray
    first: np.ndarray
    """1 where the rank holds the input embedding."""
    last: np.ndarray
    """1 where the rank holds the output layer."""


def moe_layers_before(model: ModelSpec, index: np.ndarray) -> np.ndarray:
    """MoE layers among layers [0, index)."""
    if not model.is_moe:
        return np.zeros_like(index)
    after_dense = np.maximum(index - model.first_dense_layers, 0)
    return -(-after_dense // model.moe_layer_freq)


def _chunk_layers(model: ModelSpec, chunk: np.ndarray, num_chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    start = chunk * model.layers // num_chunks
    end = (chunk + 1) * model.layers // num_chunks
    moe = moe_layers_before(model, end) - moe_layers_before(model, start)
    return (end - start) - moe, moe


def _rank_layers(model: ModelSpec, pp: np.ndarray, vpp: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, ...]:
    """(dense, moe) layers of rank `rank` for arrays of pp and vpp, summing its interleaved chunks."""
    dense = np.zeros(pp.shape, dtype=np.int64)
    moe = np.zeros(pp.shape, dtype=np.int64)
    for j in range(int(vpp.max(initial=1))):
        present = j < vpp
        d, m = _chunk_layers(model, rank + j * pp, pp * vpp)
        dense += np.where(present, d, 0)
        moe += np.where(present, m, 0)
    return dense, moe


@cache
def _layer_table(model: ModelSpec, max_pp: int, max_vpp: int, rank_of_pp: RankOf) -> np.ndarray:
    """Table [pp, vpp, field] of (dense, moe, dense of mirror, moe of mirror) for the rank `rank_of_pp`
    picks; computed once per model and grid size, then gathered for millions of layouts."""
    grid_pp, grid_vpp = np.meshgrid(np.arange(1, max_pp + 1), np.arange(1, max_vpp + 1), indexing="ij")
    pp, vpp = grid_pp.reshape(-1), grid_vpp.reshape(-1)
    rank = rank_of_pp.rank(pp)
    table = np.zeros((max_pp + 1, max_vpp + 1, 4), dtype=np.int64)
    table[pp, vpp, 0:2] = np.stack(_rank_layers(model, pp, vpp, rank), axis=-1)
    table[pp, vpp, 2:4] = np.stack(_rank_layers(model, pp, vpp, pp - 1 - rank), axis=-1)
    return table


class RankOf(IntEnum):
    """Pipeline ranks that can be the most loaded."""

    FIRST = 0
    """Rank 0: most micro-batches in flight, the input embedding."""
    SECOND = 1
    """Rank 1 (or the last when pp ≤ 2): all-MoE layers when rank 0 holds the dense ones."""
    LAST = 2
    """Rank pp − 1: the output layer and the logits."""

    def rank(self, pp: np.ndarray) -> np.ndarray:
        if self is RankOf.FIRST:
            return np.zeros_like(pp)
        if self is RankOf.SECOND:
            return np.minimum(1, pp - 1)
        return pp - 1


def stage_layers(model: ModelSpec, lay: Layouts, which: RankOf) -> StageLayers:
    """Layers on the pipeline rank `which` picks, for every layout."""
    max_vpp = int(lay.vpp.max(initial=1))
    table = _layer_table(model, int(lay.pp.max(initial=1)), max_vpp, which)
    columns = table.reshape(-1, 4).T  # one flat column per field: four 1-D gathers beat one 2-D fancy index
    row = lay.pp * (max_vpp + 1) + lay.vpp
    rank = which.rank(lay.pp)
    first, last = rank == 0, rank == lay.pp - 1
    dense, moe = columns[0].take(row), columns[1].take(row)
    dual = (lay.schedule == Schedule.DUALPIPE.code) & (lay.pp > 1)
    if dual.any():
        dense = np.where(dual, dense + columns[2].take(row), dense)
        moe = np.where(dual, moe + columns[3].take(row), moe)
        first, last = first | (dual & last), last | (dual & first)
    # ZB-V folds the model into a V: rank r holds chunks r and 2p−1−r, so rank 0 holds the last chunk and the
    # output layer (Qi et al. 2023, ZB-V). Layer counts per rank stay L/p; only where the output sits moves.
    zbv = (lay.schedule == Schedule.ZB_V.code) & (lay.pp > 1)
    last = np.where(zbv, rank == 0, last)
    return StageLayers(dense, moe, first.astype(np.int64), last.astype(np.int64))
