"""The training frameworks a plan can target, and what each can run at the version llmscale checked
(catalog/frameworks.yaml: per layout field the values that framework's source supports at a cited commit).

`plan --framework megatron-core` (the default) searches only what Megatron-Core runs; `torchtitan` only what
torchtitan runs; `any` searches every layout the cost model prices and names, for each result, the frameworks
that could run it.
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field

from llmscale.specs.base import Spec


class Framework(str, Enum):
    """Which framework's features bound the layout search."""

    MEGATRON_CORE = "megatron-core"
    """NVIDIA Megatron-Core (Megatron-LM / Megatron-Bridge / NeMo run on it)."""
    TORCHTITAN = "torchtitan"
    """PyTorch torchtitan (FSDP2, DTensor TP, torch.distributed.pipelining)."""
    ANY = "any"
    """Every layout the cost model prices; the output says which framework could run each."""


class FieldSupport(Spec):
    """The values of one layout field a framework supports, and where its source says so."""

    values: list[str | int | bool] = Field(min_length=1)
    source: str = Field(min_length=1)


class FrameworkSupport(Spec):
    """What one framework runs at one commit."""

    name: Framework
    repository: str = Field(min_length=1)
    commit: str = Field(min_length=7)
    version: str = Field(min_length=1)
    fields: dict[str, FieldSupport]
    """Layout field → supported values; a field not named is supported in full."""
    searched_zero: list[int] = Field(min_length=1)
    """ZeRO stages the search tries by default (a user's `--zero` may widen it within `fields['zero']`)."""
    searched_zero_source: str = Field(min_length=1)
    zero_with_pipeline: list[int] = Field(min_length=1)
    """ZeRO stages it runs with pipeline parallelism (pp > 1), as the cost model prices them."""
    zero_without_pipeline: list[int] = Field(min_length=1)
    """ZeRO stages it runs without (pp = 1)."""
    zero_by_pipeline_source: str = Field(min_length=1)

    @property
    def label(self) -> str:
        """`megatron-core @ d98e8a6`."""
        return f"{self.name.value} @ {self.commit[:7]}"
