"""torchtitan's names that both the recipe export (`export.torchtitan`) and its reader (`io.torchtitan_recipe`) use:
the commit they were read at, the model flavors llmscale's catalog models map to, the pipeline schedules and the
quantization converters.

All read in pytorch/torchtitan @ b5bcd76c66d0acb1a08b176d9639425bc55e0b2a: torchtitan/models/<family>/__init__.py
(`model_registry` and the `*_configs` flavor tables), torchtitan/distributed/pipeline_parallel.py (schedules by
torch.distributed.pipelining `get_schedule_class` name; ZBVZeroBubble and DualPipeV place stages in a V),
torchtitan/components/quantization/{float8,mx,nvfp4}.py (converters).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.layout.stages import Splits, split_bounds
from llmscale.specs.layout import Schedule

TORCHTITAN_COMMIT = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
TORCHTITAN_SOURCE = f"pytorch/torchtitan @ {TORCHTITAN_COMMIT} (torchtitan/config/configs.py, torchtitan/trainer.py)"


@dataclass(frozen=True)
class Flavor:
    """A torchtitan model flavor and the llmscale catalog model it is."""

    family: str
    """torchtitan.models.<family> (its `model_registry`)."""
    flavor: str
    """The key of the family's flavor table."""
    model: str
    """The llmscale catalog model of the same shape (tests/test_torchtitan_export.py compares the dimensions)."""
    differs: str = ""
    """What the flavor sets otherwise (no effect on the step), said in a note."""


FLAVORS = (
    Flavor("llama3", "8B", "llama3-8b"),
    Flavor("llama3", "70B", "llama3-70b"),
    Flavor("llama3", "405B", "llama3-405b"),
    Flavor("deepseek_v3", "671B", "deepseek-v3"),
    # torchtitan's _235b_a22b sets CosSinRoPE theta 5000000.0; Qwen/Qwen3-235B-A22B config.json has 1000000.
    Flavor("qwen3", "235B-A22B", "qwen3-235b-a22b", "RoPE theta 5e6 (the catalog model's config.json has 1e6)"),
)
FLAVOR_OF_MODEL = {f.model: f for f in FLAVORS}
MODEL_OF_FLAVOR = {(f.family, f.flavor): f.model for f in FLAVORS}

SCHEDULE_NAMES: dict[Schedule, str] = {
    Schedule.ONE_F_ONE_B: "1F1B",
    Schedule.INTERLEAVED: "Interleaved1F1B",
    Schedule.ZB_H1: "1F1B",  # one stage per rank; torchtitan's zero-bubble schedules need two: a note
    Schedule.ZB_V: "ZBVZeroBubble",
    Schedule.DUALPIPE: "DualPipeV",  # DualPipe's V-shaped half (one weight copy): a note
}
"""The schedule a layout's pipeline runs under in torchtitan (`ParallelismConfig.pipeline_parallel_schedule`)."""

SCHEDULE_OF_NAME: dict[str, Schedule] = {"1F1B": Schedule.ONE_F_ONE_B, "Interleaved1F1B": Schedule.INTERLEAVED,
                                         "ZBVZeroBubble": Schedule.ZB_V, "DualPipeV": Schedule.ZB_V}
"""The llmscale schedule a torchtitan schedule name reads back as (DualPipeV: a V with one weight copy, as ZB-V)."""

V_SCHEDULES = ("ZBVZeroBubble", "DualPipeV")
"""Schedules whose rank r holds stages r and 2·pp − 1 − r (pipeline_parallel.py: style "v")."""

FP8_CONVERTERS = ("Float8LinearConverter", "MXFP8LinearConverter")
FP8_EXPERT_CONVERTERS = ("Float8GroupedExpertsConverter", "MXFP8GroupedExpertsConverter")
FP4_CONVERTERS = ("NVFP4LinearConverter",)
CONVERTERS = FP8_CONVERTERS + FP8_EXPERT_CONVERTERS + FP4_CONVERTERS
"""torchtitan.components.quantization converters the export writes and the reader takes."""


def stages_per_rank(schedule_name: str, vpp: int) -> int:
    """Virtual stages each rank holds under a torchtitan schedule (1F1B: one; a V: two; interleaved: vpp)."""
    return 1 if schedule_name == "1F1B" else 2 if schedule_name in V_SCHEDULES else vpp


def split_settings(layers: int, pp: int, schedule_name: str, vpp: int, splits: Splits = ()) -> dict[str, int]:
    """Layers per virtual stage and the first/last stage's shortfall with which torchtitan builds llmscale's split
    (layout.stages.split_bounds: the run's own split for this pp and vpp where `splits` gives one, else
    chunk_bounds): torchtitan/distributed/pipeline_parallel.py counts
    ceil((L + first_less + last_less) / layers_per_stage) stages and spreads L + first_less + last_less evenly, so
    equal interior stages come out exactly. Empty when the interior stages differ, and for V-shaped schedules
    unless every stage is equal: there torchtitan's first and last stage both land on rank 0, which the looped
    split llmscale costs does not."""
    per_rank = stages_per_rank(schedule_name, vpp)
    sizes = np.diff(split_bounds(layers, pp, per_rank, splits if per_rank == vpp else ()))
    per_stage = int(sizes.max())
    uneven_inside = len(sizes) > 2 and bool((sizes[1:-1] != per_stage).any())
    if uneven_inside or (schedule_name in V_SCHEDULES and bool((sizes != per_stage).any())):
        return {}
    return {"pipeline_parallel_layers_per_stage": per_stage,
            "pipeline_parallel_first_stage_less_layers": per_stage - int(sizes[0]),
            "pipeline_parallel_last_stage_less_layers": per_stage - int(sizes[-1])}
