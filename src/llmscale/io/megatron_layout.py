"""Megatron's --pipeline-model-parallel-layout as llmscale reads it: the decoder layers of each pipeline stage."""

from __future__ import annotations

import re

from llmscale.errors import SpecError


def layout_stages(text: str, pp: int, layers: int, where: str) -> list[int]:
    """Decoder layers of each stage of a --pipeline-model-parallel-layout (Megatron-LM@00caa53
    pipeline_parallel_layer_layout.py: stages split by "|", "x*n" = n of x, "(…)*n" = n repeats, commas cosmetic;
    E embedding, t decoder, m MTP, L loss), placed as llmscale prices them: E in the first stage, m and L in the
    last, every layer once."""
    flat = text.replace(",", "").replace(" ", "")
    while "(" in flat:
        inner = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m[1] * int(m[2]), flat)
        if inner == flat:
            raise SpecError("--pipeline-model-parallel-layout", text, "balanced '(…)*n' groups", where=where)
        flat = inner
    stages = re.sub(r"(\w)\*(\d+)", lambda m: m[1] * int(m[2]), flat).split("|")
    inner_marks = "".join(stages[1:]).count("E") + sum("".join(stages[:-1]).count(c) for c in "mL")
    problem = (
        "only E, t, m and L" if set("".join(stages)) - set("EtmL") else
        f"{len(stages)} stages over pp {pp}" if len(stages) % pp else
        "the embedding (E) in the first stage and the loss (L), with any MTP (m), in the last, as llmscale prices "
        "them" if inner_marks or "L" not in stages[-1] else
        f"{layers} decoder layers (t) in all, as --num-layers gives" if "".join(stages).count("t") != layers
        else None)
    if problem is not None:
        raise SpecError("--pipeline-model-parallel-layout", text, problem, where=where)
    return [stage.count("t") for stage in stages]
