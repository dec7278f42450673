"""A run's own pipeline split (TrainSpec.pipeline_splits, Megatron's --pipeline-model-parallel-layout).

Expected splits are Megatron-Bridge's DeepSeek-V3 layouts, read in its code:
- the recipe's map, NVIDIA-NeMo/Megatron-Bridge@c810129341a8 (v0.4.2, the 26.04.01 release)
  src/megatron/bridge/recipes/deepseek/deepseek_v3.py `_get_deepseek_v3_pipeline_layout`: (pp 4, vp 4) is
  ["embedding"] + 4 decoders, 14 stages of 4, then 1 decoder + MTP + loss;
- the 25.09 H100 layout, @6725f7049504 scripts/performance/run_script.py: 'Et|(tt|)*30mL' at pp 8, vp 4.
"""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.cost.step import estimate_step
from llmscale.errors import SpecError
from llmscale.io.catalog import load_model
from llmscale.io.megatron_args import parse_megatron_args
from llmscale.io.resolve import Job, JobRequest, resolve
from llmscale.launch.document import ExportFormat, export_text
from llmscale.launch.megatron import megatron_args
from llmscale.layout.arrays import Layouts
from llmscale.layout.stages import RankOf, stage_layers
from llmscale.report.tables import profile_lines
from llmscale.specs.train import PipelineSplit, TrainSpec
from llmscale.validation.jobs import Facts, row_job
from llmscale.validation.runs import load_runs

BRIDGE_16 = (4,) * 15 + (1,)
"""Megatron-Bridge's DeepSeek-V3 layout of 16 stages: E+4 | 4 × 14 | 1+mL."""
BRIDGE_H100 = (1,) + (2,) * 30 + (0,)
"""'Et|(tt|)*30mL': the embedding and 1 layer, 30 stages of 2, the last only MTP and the loss."""


def _layers(split: tuple[PipelineSplit, ...], which: RankOf, pp: int = 4, vpp: int = 4) -> int:
    model = load_model("deepseek-v3")
    lay = Layouts.from_columns(pp=pp, vpp=vpp, dp=1)
    stage = stage_layers(model, lay, which, split)
    return int(stage.dense[0] + stage.moe[0])


def test_bridge_split_leaves_13_layers_on_the_last_rank() -> None:
    # Rank r holds stages r, r+4, r+8, r+12: ranks 0-2 hold 4 × 4 = 16, rank 3 holds 4 + 4 + 4 + 1 = 13.
    split = (PipelineSplit(pp=4, vpp=4, layers=BRIDGE_16),)
    assert [_layers(split, w) for w in (RankOf.FIRST, RankOf.SECOND, RankOf.LAST)] == [16, 16, 13]
    # llmscale's own split (the Llama 3 rule: ⌈61/4⌉ = 16, one fewer on the last, the first, then rank 2).
    assert [_layers((), w) for w in (RankOf.FIRST, RankOf.SECOND, RankOf.LAST)] == [15, 16, 15]
    # A split for another pp × vpp leaves these layouts alone.
    other = (PipelineSplit(pp=8, vpp=2, layers=BRIDGE_16),)
    assert _layers(other, RankOf.LAST) == 15


def test_a_split_with_the_wrong_stage_count_or_a_repeated_shape_names_the_field() -> None:
    with pytest.raises(ValueError, match="layers"):
        PipelineSplit(pp=4, vpp=4, layers=(16, 16, 16, 13))
    with pytest.raises(ValueError, match="pipeline_splits"):
        TrainSpec(pipeline_splits=[{"pp": 4, "vpp": 1, "layers": [16, 16, 16, 13]},
                                   {"pp": 4, "vpp": 1, "layers": [15, 16, 16, 14]}])


def test_a_split_that_does_not_place_the_models_layers_is_refused() -> None:
    train = {"pipeline_splits": [{"pp": 4, "vpp": 1, "layers": [16, 16, 16, 12]}]}
    with pytest.raises(SpecError) as info:
        resolve(JobRequest(model="deepseek-v3", cluster="gb200-nvl72", gpus=256, train=train,
                           layout={"pp": 4, "ep": 64, "tp": 1}, framework="any"))
    assert "pipeline_splits" in str(info.value) and "61" in str(info.value) and "60" in str(info.value)


def _bridge_job(model: object = "deepseek-v3", release: str = "megatron-bridge@26.04.01") -> Job:
    return resolve(JobRequest(model=model, cluster="gb200-nvl72", gpus=256, train={"precision": "fp8"},
                              layout={"tp": 1, "pp": 4, "vpp": 4, "ep": 64}, framework=release))


def test_bridge_releases_apply_their_deepseek_v3_split_and_say_so() -> None:
    job = _bridge_job()
    split = job.train.pipeline_split(4, 4)
    assert split is not None and split.layers == BRIDGE_16
    header = " ".join(profile_lines(job))
    assert "pipeline_splits [4×15,1] (bridge-v0.4.2-dsv3-recipe)" in header


def test_a_recipe_split_for_61_layers_is_not_applied_to_a_60_layer_model() -> None:
    model = load_model("deepseek-v3").model_copy(update={"layers": 60})
    job = _bridge_job(model)
    assert job.train.pipeline_splits == ()
    assert all(s.name != "pipeline_splits" for s in job.profile.applied)  # type: ignore[union-attr]


def test_the_published_bridge_rows_run_their_releases_split() -> None:
    runs = {run.name: run for run in load_runs()}
    from llmscale.io.catalog import load_constants

    gb200 = row_job(runs["Megatron-Bridge 26.04.01 DeepSeekV3 on 256 GB200 MXFP8"], load_constants(), None,
                    Facts.PROFILE).job
    assert gb200.train.pipeline_split(4, 4).layers == BRIDGE_16  # type: ignore[union-attr]
    h100 = row_job(runs["Megatron-Bridge 25.09 DeepSeekV3 (dropless) on 1024 H100 fp8"], load_constants(), None,
                   Facts.PROFILE).job
    assert h100.train.pipeline_split(8, 4).layers == BRIDGE_H100  # type: ignore[union-attr]
    # DeepSeek's own run (HAI-LLM, DualPipe) has no Bridge recipe: llmscale's split.
    hai = row_job(runs["DeepSeek-V3 671B pre-training on 2048 H800"], load_constants(), None, Facts.PROFILE).job
    assert hai.train.pipeline_splits == ()


def test_a_v_shaped_schedule_keeps_llmscales_split() -> None:
    # The split is Megatron's, for looped schedules; ZB-V and DualPipe fold the stages into a V (torchtitan's
    # ZBVZeroBubble), which its stage settings cannot give a Megatron split: both keep llmscale's.
    from llmscale.specs.layout import Schedule

    model = load_model("deepseek-v3")
    split = (PipelineSplit(pp=16, vpp=1, layers=BRIDGE_16),)
    for schedule in (Schedule.ZB_V, Schedule.DUALPIPE):
        lay = Layouts.from_columns(pp=16, vpp=1, dp=1, schedule=schedule.code)
        for which in RankOf:
            with_split, without = stage_layers(model, lay, which, split), stage_layers(model, lay, which)
            assert (with_split.dense + with_split.moe).tolist() == (without.dense + without.moe).tolist()
    looped = Layouts.from_columns(pp=16, vpp=1, dp=1, schedule=Schedule.ONE_F_ONE_B.code)
    last = stage_layers(model, looped, RankOf.LAST, split)
    assert int(last.dense[0] + last.moe[0]) == 1


def test_the_split_travels_through_torchtitan_export_and_back() -> None:
    from llmscale.io.torchtitan_recipe import parse_torchtitan_recipe

    job = _bridge_job()
    back = parse_torchtitan_recipe(export_text(job, ExportFormat.TORCHTITAN))
    assert back.train["pipeline_splits"] == [{"pp": 4, "vpp": 4, "layers": list(BRIDGE_16)}]


def _step(job: Job) -> float:
    return float(estimate_step(job.model, job.cluster, job.train, job.layouts, job.constants).step_time_s[0])


def test_the_split_travels_through_megatron_export_and_back() -> None:
    job = _bridge_job()
    args = megatron_args(job)
    layout = args[args.index("--pipeline-model-parallel-layout") + 1]
    stages = layout.split("|")
    assert len(stages) == 16 and stages[0] == "E,t*4" and stages[-1] == "t,m,L"
    back = resolve(parse_megatron_args(export_text(job, ExportFormat.MEGATRON)).request(cluster=job.cluster))
    # the job's split for its own pp × vpp (the release's others are for layouts it does not run)
    assert back.train.pipeline_splits == (job.train.pipeline_split(4, 4),)
    assert _step(back) == pytest.approx(_step(job), rel=1e-9)


def _flags(layout: str, pp: int = 8, layers: int = 61) -> str:
    return (f"--num-layers {layers} --hidden-size 1024 --ffn-hidden-size 4096 --num-attention-heads 8 "
            f"--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 "
            f"--vocab-size 32000 "
            f"--pipeline-model-parallel-size {pp} --pipeline-model-parallel-layout {layout!r}")


def test_megatron_layout_grammar_with_groups_reads_bridges_h100_split() -> None:
    job = parse_megatron_args(_flags("Et|(tt|)*30mL"))
    assert job.layout["vpp"] == 4  # type: ignore[index]
    (split,) = job.train["pipeline_splits"]  # type: ignore[index]
    assert split == {"pp": 8, "vpp": 4, "layers": list(BRIDGE_H100)}
    assert int(np.sum(split["layers"])) == 61


@pytest.mark.parametrize(("layout", "needle"), [
    ("Et*8|t*8|t*8|t*8|t*8|t*8|t*8|t*5", "loss (L)"),  # no loss stage
    ("t*8|Et*8|t*8|t*8|t*8|t*8|t*8|t*5mL", "embedding (E)"),  # embedding off the first stage
    ("Et*8|t*8|t*8|t*8|t*8|t*8|t*8|t*4mL", "61 decoder layers"),  # 60 placed
    ("Et*8|t*8|t*8|t*8|t*8|t*8|t*8|t*5xL", "only E, t, m and L"),
    ("Et|(tt|*30mL", "balanced"),
    ("EEt*8|t*8|t*8|t*8|t*8|t*8|t*8|t*5mL", "one embedding (E)"),  # Megatron's validate_layer_layout refuses both
    ("Et*8|t*8|t*8|t*8|t*8|t*8|t*8|mt*5L", "after every decoder layer"),
    ("E(t|)*999999999999L", "repeat counts"),  # no terabyte string is built to refuse it
    ("t*" + "9" * 5000, "repeat counts"),  # nor a 5,000-digit integer parsed
])  # fmt: skip
def test_a_layout_llmscale_cannot_price_is_one_error_naming_the_flag(layout: str, needle: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_megatron_args(_flags(layout))
    assert "--pipeline-model-parallel-layout" in str(info.value) and needle in str(info.value)
