"""Which layers a pipeline rank holds, vectorized over layouts; arrays of shape (N,).

Rank r holds chunks r, r + pp, …, r + (vpp−1)·pp (Megatron interleaving), ⌈L/pp⌉ layers, the shortfall taken from
the last rank, then the first (Llama 3 §3.3.2), unless the run gives its own (TrainSpec.pipeline_splits, looped
schedules); DualPipe pairs stages r and pp−1−r (DeepSeek-V3 §3.2.1). Split, ZB-V, MoE: docs/cost-model.md#stages."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import cache

import numpy as np

from llmscale.layout.arrays import Layouts, reads
from llmscale.specs.layout import Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import PipelineSplit, split_for

Splits = tuple[PipelineSplit, ...]
"""A run's own splits (TrainSpec.pipeline_splits)."""


@dataclass(frozen=True)
class StageLayers:
    """Layers held by one pipeline rank of each layout."""

    dense: np.ndarray
    moe: np.ndarray
    first: np.ndarray
    """1 where the rank holds the input embedding."""
    last: np.ndarray
    """1 where the rank holds the output layer."""
    full_attention_excess: np.ndarray
    """Full-attention layers on the rank beyond the model's share of them (ModelSpec.windowed_layers): what
    cost.compute adds to its mean-layer attention core; 0 without sliding windows."""
    rank: np.ndarray
    """The pipeline rank (0 … pp − 1): how many micro-batches it holds in flight depends on it."""


def moe_layers_before(model: ModelSpec, index: np.ndarray) -> np.ndarray:
    """MoE layers among layers [0, index)."""
    if not model.is_moe:
        return np.zeros_like(index)
    after_dense = np.maximum(index - model.first_dense_layers, 0)
    return -(-after_dense // model.moe_layer_freq)


def rank_layer_counts(layers: int, pp: int) -> np.ndarray:
    """Layers of each pipeline rank (docs/cost-model.md#stages-split): ⌈L/pp⌉ each, one fewer on the last, first,
    then ranks pp−2, pp−3, …, 1 until the counts sum to L."""
    counts = np.full(pp, -(-layers // pp), dtype=np.int64)
    order = [pp - 1, 0, *range(pp - 2, 0, -1)]
    counts[order[: int(counts.sum()) - layers]] -= 1
    return counts


def chunk_bounds(layers: int, pp: int, vpp: int) -> np.ndarray:
    """First layer of every chunk k = j·pp + r (shape (pp·vpp + 1,), the last entry L)."""
    per_rank = rank_layer_counts(layers, pp)
    j = np.arange(vpp)[:, None]
    sizes = (j + 1) * per_rank // vpp - j * per_rank // vpp  # [chunk j of the rank, rank]; short chunks first
    sizes[:, -1] = sizes[::-1, -1]  # except on the last rank, where the short chunk is the one with the output layer
    return np.concatenate([[0], np.cumsum(sizes.reshape(-1))])


def windowed_layers_before(model: ModelSpec, index: np.ndarray) -> np.ndarray:
    """Sliding-window layers among layers [0, index): all but each full_attention_every-th (1-based numbering)."""
    if model.sliding_window is None:
        return np.zeros_like(index)
    every = model.full_attention_every
    return index - index // every if every is not None else index


def split_bounds(layers: int, pp: int, vpp: int, splits: Splits = ()) -> np.ndarray:
    """First layer of every chunk as `chunk_bounds`, from the run's own split for this pp and vpp where it gives one
    (and it holds the model's `layers`)."""
    given = split_for(splits, pp, vpp)
    if given is None or given.total != layers:
        return chunk_bounds(layers, pp, vpp)
    return np.concatenate([[0], np.cumsum(given.layers)]).astype(np.int64)


@cache
def _rank_layers(model: ModelSpec, pp: int, vpp: int, splits: Splits) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dense, moe, windowed) layers of every rank of a pp × vpp split (arrays of shape (pp,)); cached, since every
    chunk of a search asks for the same splits."""
    bounds = split_bounds(model.layers, pp, vpp, splits)
    moe = moe_layers_before(model, bounds[1:]) - moe_layers_before(model, bounds[:-1])
    dense = np.diff(bounds) - moe
    windowed = windowed_layers_before(model, bounds[1:]) - windowed_layers_before(model, bounds[:-1])
    return dense.reshape(vpp, pp).sum(axis=0), moe.reshape(vpp, pp).sum(axis=0), windowed.reshape(vpp, pp).sum(axis=0)


@cache
def _split_row(model: ModelSpec, pp: int, vpp: int, which: RankOf, splits: Splits) -> tuple[int, ...]:
    """(rank, dense, moe, windowed) of the rank `which` picks in a looped pp × vpp split, then the same of the pair
    of stages it picks under DualPipe (rank r holds stages r and pp − 1 − r); cached: a search asks for few splits."""
    dense, moe, windowed = _rank_layers(model, pp, vpp, splits)
    pair_dense, pair_moe, pair_windowed = dense + dense[::-1], moe + moe[::-1], windowed + windowed[::-1]
    rank = which.pick(moe, dense)
    pair = which.pick(pair_moe, pair_dense)
    return (rank, int(dense[rank]), int(moe[rank]), int(windowed[rank]),
            pair, int(pair_dense[pair]), int(pair_moe[pair]), int(pair_windowed[pair]))


class RankOf(IntEnum):
    """Pipeline ranks that can be the most loaded; the step and memory models evaluate each and keep the worst."""

    FIRST = 0
    """Rank 0: most micro-batches in flight, the input embedding."""
    SECOND = 1
    """Rank 1 (or the last when pp ≤ 2): the interior rank with the most micro-batches in flight."""
    LAST = 2
    """Rank pp − 1: the output layer and the logits."""
    BUSIEST = 3
    """The interior rank with the most MoE layers, then the most layers (rank 1 when pp ≤ 2); under DualPipe the
    interior pair of stages with the most. Uneven splits and leading dense layers can make it a later rank."""

    def pick(self, moe: np.ndarray, dense: np.ndarray) -> int:
        """This rank's index among the per-rank layer counts `moe`, `dense` (shape (pp,))."""
        pp = moe.shape[0]
        if self is RankOf.FIRST:
            return 0
        if self is RankOf.LAST or pp <= 2:
            return pp - 1 if self is RankOf.LAST else min(1, pp - 1)
        if self is RankOf.SECOND:
            return 1
        interior = np.arange(1, pp - 1)
        order = np.lexsort((-(dense + moe)[interior], -moe[interior]))  # most MoE layers, then most layers
        return int(interior[order[0]])


@reads("pp", "vpp", "schedule")
def stage_layers(model: ModelSpec, lay: Layouts, which: RankOf, splits: Splits = ()) -> StageLayers:
    """Layers on the pipeline rank `which` picks, for every layout, with the run's own `splits` where given."""
    width = int(lay.vpp.max(initial=1)) + 1
    # a run's own split is Megatron's, for looped schedules: the V-shaped ones keep llmscale's (module docstring)
    v_shaped = (lay.schedule == Schedule.ZB_V.code) | (lay.schedule == Schedule.DUALPIPE.code) if splits else False
    codes, row = np.unique((lay.pp * width + lay.vpp) * 2 + v_shaped, return_inverse=True)
    table = np.array([_split_row(model, *divmod(int(code) // 2, width), which, () if code % 2 else splits)
                      for code in codes], dtype=np.int64)
    table = table.reshape(-1, 8)
    row = row.reshape(-1)
    columns = table.T  # one flat column per field: 1-D gathers beat one 2-D fancy index
    rank = columns[0].take(row)
    dense = columns[1].take(row)
    moe = columns[2].take(row)
    windowed = columns[3].take(row)
    first = rank == 0
    last = rank == lay.pp - 1
    dual = (lay.schedule == Schedule.DUALPIPE.code) & (lay.pp > 1)
    if dual.any():
        pair = columns[4].take(row)
        rank = np.where(dual, pair, rank)
        dense = np.where(dual, columns[5].take(row), dense)
        moe = np.where(dual, columns[6].take(row), moe)
        windowed = np.where(dual, columns[7].take(row), windowed)
        outer = (pair == 0) | (pair == lay.pp - 1)  # the pair holding stages 0 and pp − 1
        first = np.where(dual, outer, first)
        last = np.where(dual, outer, last)
    # ZB-V folds the model into a V: rank r holds chunks r and 2p−1−r, so rank 0 holds the last chunk and the
    # output layer (Qi et al. 2023, ZB-V). Layer counts per rank are those of the looped split (module
    # docstring); only where the output sits moves.
    zbv = (lay.schedule == Schedule.ZB_V.code) & (lay.pp > 1)
    last = np.where(zbv, rank == 0, last)
    excess = (dense + moe) * (model.windowed_layers / model.layers) - windowed
    return StageLayers(dense, moe, first.astype(np.int64), last.astype(np.int64), excess, rank)
