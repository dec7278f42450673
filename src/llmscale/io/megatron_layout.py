"""Megatron's --pipeline-model-parallel-layout as llmscale reads it: the decoder layers of each pipeline stage."""

from __future__ import annotations

import re

from llmscale.errors import SpecError

FLAG = "--pipeline-model-parallel-layout"


def layout_stages(text: str, pp: int, layers: int, where: str) -> list[int]:
    """Decoder layers of each stage of a --pipeline-model-parallel-layout (Megatron-LM@00caa53
    pipeline_parallel_layer_layout.py: stages split by "|", "x*n" = n of x, "(…)*n" = n repeats, commas cosmetic;
    E embedding, t decoder, m MTP, L loss), as its validate_layer_layout takes it and llmscale prices it: E first
    in the first stage, L last in the last, MTP after every decoder layer, every layer once."""
    limit = 8 * (layers + 8)  # longer than any layout of `layers` layers: a bigger repeat is a slip, not a run

    def unroll(match: re.Match[str]) -> str:
        if len(match[2]) > 6 or len(match[1]) * int(match[2]) > limit:
            raise SpecError(FLAG, text, f"repeat counts that spell at most {limit} characters", where=where)
        return match[1] * int(match[2])

    flat = text.replace(",", "").replace(" ", "")
    while "(" in flat:
        inner = re.sub(r"\(([^()]*)\)\*(\d+)", unroll, flat)
        if inner == flat or len(inner) > limit:
            raise SpecError(FLAG, text, "balanced '(…)*n' groups of a layout this size", where=where)
        flat = inner
    whole = re.sub(r"(\w)\*(\d+)", unroll, flat)
    problem = _problem(whole, pp, layers)
    if problem is not None:
        raise SpecError(FLAG, text, problem, where=where)
    return [stage.count("t") for stage in whole.split("|")]


def _problem(whole: str, pp: int, layers: int) -> str | None:
    """What llmscale cannot price in an unrolled layout (None: nothing)."""
    stages = whole.split("|")
    marks = whole.replace("|", "")
    if pp < 1:
        return "a positive --pipeline-model-parallel-size"
    if set(marks) - set("EtmL"):
        return "only E, t, m and L"
    if len(stages) % pp:
        return f"{len(stages)} stages over pp {pp}"
    if not (marks.count("E") == marks.count("L") == 1 and stages[0].startswith("E") and stages[-1].endswith("L")):
        return "one embedding (E) first in the first stage and one loss (L) last in the last, as llmscale prices them"
    if "m" in marks and ("t" in marks[marks.index("m"):] or "m" in "".join(stages[:-1])):
        return "the MTP modules (m) in the last stage after every decoder layer"
    if marks.count("t") != layers:
        return f"{layers} decoder layers (t) in all, as --num-layers gives"
    return None
