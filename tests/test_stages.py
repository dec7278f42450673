"""How layers are split over pipeline ranks and virtual stages (stages.py), against the published splits."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.io.catalog import load_model
from llmscale.layout.arrays import Layouts
from llmscale.layout.stages import RankOf, chunk_bounds, rank_layer_counts, stage_layers
from llmscale.specs.layout import Schedule

LLAMA3_405B_LAYERS = 126


def test_llama3_405b_on_16_stages_has_one_fewer_layer_on_the_first_and_last() -> None:
    # Llama 3 paper (arXiv:2407.21783) §3.3.2: 126 layers on 16 pipeline stages, "one fewer layer on the first and
    # the last stage" -> 7, fourteen 8s, 7.
    assert rank_layer_counts(LLAMA3_405B_LAYERS, 16).tolist() == [7] + [8] * 14 + [7]


@pytest.mark.parametrize(
    ("pp", "vpp", "per_virtual_stage"),
    [(16, 4, 2), (16, 8, 1), (8, 4, 4), (8, 8, 2)],
)
def test_llama31_405b_virtual_stages_match_megatron_embedding_and_loss_accounting(
    pp: int, vpp: int, per_virtual_stage: int
) -> None:
    # Megatron-Bridge llama31_405b_pretrain_config (recipes/llama/llama3.py@0d5f5558) sets
    # account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split; Megatron-Core's
    # get_num_layers_to_build then gives every virtual stage (L + 2) / (pp·vpp) layers and the first and the last
    # virtual stage one fewer (the embedding and the loss take their place).
    sizes = np.diff(chunk_bounds(LLAMA3_405B_LAYERS, pp, vpp))
    assert (LLAMA3_405B_LAYERS + 2) // (pp * vpp) == per_virtual_stage
    assert sizes[0] == sizes[-1] == per_virtual_stage - 1
    assert (sizes[1:-1] == per_virtual_stage).all()


@pytest.mark.parametrize(("layers", "pp"), [(96, 8), (61, 16), (5, 4), (70, 12), (7, 1), (126, 9)])
def test_counts_sum_to_the_layers_and_differ_by_at_most_one(layers: int, pp: int) -> None:
    counts = rank_layer_counts(layers, pp)
    assert counts.sum() == layers
    assert counts.max() - counts.min() <= 1
    # rank 1, one of the ranks the step model examines, always holds the most
    assert pp < 3 or counts[1] == counts.max()


def test_no_rank_collects_the_remainder_of_every_chunk() -> None:
    # 126 layers in 16 × 7 chunks: a chunk-wise floor split would put two-layer chunks only on ranks 7 and 15
    # (14 layers each against 7); the rank-wise split keeps every rank at 7 or 8.
    model = load_model("llama3-405b")
    lay = Layouts.from_columns(tp=8, pp=16, dp=64, vpp=7, schedule=Schedule.INTERLEAVED.code)
    per_rank = [int(stage_layers(model, lay, which).dense[0]) for which in RankOf]
    assert per_rank == [7, 8, 7, 8]  # FIRST, SECOND, LAST, BUSIEST


def _all_ranks(model_name: str, pp: int, vpp: int, schedule: Schedule) -> tuple[list[int], list[int]]:
    """(MoE layers, layers) of every rank, stage pairs summed under DualPipe, by the split alone."""
    model = load_model(model_name)
    bounds = chunk_bounds(model.layers, pp, vpp)
    from llmscale.layout.stages import moe_layers_before

    moe = (moe_layers_before(model, bounds[1:]) - moe_layers_before(model, bounds[:-1])).reshape(vpp, pp).sum(0)
    total = np.diff(bounds).reshape(vpp, pp).sum(0)
    if schedule is Schedule.DUALPIPE:
        moe, total = moe + moe[::-1], total + total[::-1]
    return moe.tolist(), total.tolist()


@pytest.mark.parametrize(
    ("model_name", "pp", "vpp", "schedule"),
    [("deepseek-v3", 16, 1, Schedule.DUALPIPE), ("deepseek-v3", 8, 7, Schedule.INTERLEAVED),
     ("gpt3-175b", 10, 1, Schedule.DUALPIPE), ("llama3-405b", 16, 7, Schedule.INTERLEAVED)],
)
def test_the_examined_ranks_include_the_most_loaded(model_name: str, pp: int, vpp: int, schedule: Schedule) -> None:
    # The step model takes the slowest of the ranks RankOf names; the rank with the most MoE layers (then the most
    # layers) must be among them, whatever the split does to ranks 1 … pp − 2 (a review found DeepSeek-V3 on
    # 16 DualPipe stages with 8 layers on ranks 2-13 while ranks 0, 1 and 15 held 6-7).
    model = load_model(model_name)
    lay = Layouts.from_columns(pp=pp, vpp=vpp, dp=1, schedule=schedule.code)
    moe, total = _all_ranks(model_name, pp, vpp, schedule)
    best = max(zip(moe, total, strict=True))
    examined = {(int(s.moe[0]), int(s.dense[0] + s.moe[0])) for s in (stage_layers(model, lay, w) for w in RankOf)}
    assert best in examined
