"""The document `llmscale export` prints: one layout as a training framework's own launch arguments (Megatron-LM
flags or a torchtitan recipe module) under a `#` preamble naming the inputs and the framework commit the names were
checked at.

Pure functions of a validated job (`Job`); nothing is imported from either framework. What a framework cannot
express (a schedule it does not have, a ZeRO stage it maps differently, an offload it lacks) becomes a `#` note in
the output — the export never silently drops a planned setting.

Only the model shape, the parallel layout, the batch and the precision are exported: data, tokenizer,
learning-rate and checkpoint settings are the run's own.
"""

from __future__ import annotations

from enum import Enum

from llmscale import __version__
from llmscale.io.resolve import Job
from llmscale.io.torchtitan_names import TORCHTITAN_SOURCE
from llmscale.launch.megatron import MEGATRON_SOURCE, megatron_args, megatron_notes, shell_lines
from llmscale.launch.torchtitan import torchtitan_notes, torchtitan_recipe


class ExportFormat(str, Enum):
    """Which framework's launch arguments `llmscale export` writes."""

    MEGATRON = "megatron"
    """Megatron-LM `pretrain_gpt.py` command-line flags."""
    TORCHTITAN = "torchtitan"
    """A torchtitan recipe: a Python module with one function returning `Trainer.Config` (`--module`/`--config`)."""


def export_text(job: Job, fmt: ExportFormat) -> str:
    """The text `llmscale export` prints: a `#` preamble (version, inputs, source verified), then the body."""
    preamble = [f"# llmscale {__version__} export {fmt.value} · model {job.model.name} · cluster {job.cluster.name} "
                f"· {job.num_gpus:,} GPUs · input_sha256 {job.input_sha256}",
                f"# settings resolved under framework release {job.profile.release if job.profile else 'any'} "
                "(catalog/frameworks.yaml): what the flags below do not set is the launched framework's own default"]
    if fmt is ExportFormat.MEGATRON:
        preamble.append(f"# flags verified against {MEGATRON_SOURCE}")
        preamble += [f"# note: {note}" for note in megatron_notes(job)]
        return "\n".join(preamble + shell_lines(megatron_args(job))) + "\n"
    preamble.append(f"# names verified against {TORCHTITAN_SOURCE}")
    preamble += [f"# note: {note}" for note in torchtitan_notes(job)]
    return "\n".join(preamble) + "\n" + torchtitan_recipe(job)
