"""Python source of a torchtitan recipe: a small tree of calls (`Call`, `Name`) rendered as the code a recipe in
`torchtitan_recipes/` is written in — imports of the names it uses, then one function returning `Trainer.Config`.

Pure text; nothing is imported from torchtitan. The names are those of pytorch/torchtitan @ b5bcd76c (module
paths read in torchtitan/config/__init__.py, torchtitan/trainer.py, torchtitan/distributed/activation_checkpoint.py,
torchtitan/components/{quantization,optimizer}/__init__.py, torchtitan/models/<family>/__init__.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

IMPORTED_FROM = {
    "Trainer": "torchtitan.trainer",
    "TrainingConfig": "torchtitan.config", "ParallelismConfig": "torchtitan.config",
    "CompileConfig": "torchtitan.config", "DebugConfig": "torchtitan.config",
    "FullAC": "torchtitan.distributed.activation_checkpoint",
    "SelectiveAC": "torchtitan.distributed.activation_checkpoint",
    "Float8LinearConverter": "torchtitan.components.quantization",
    "Float8GroupedExpertsConverter": "torchtitan.components.quantization",
    "MXFP8LinearConverter": "torchtitan.components.quantization",
    "MXFP8GroupedExpertsConverter": "torchtitan.components.quantization",
    "NVFP4LinearConverter": "torchtitan.components.quantization",
    "default_adamw": "torchtitan.components.optimizer",
}
"""The module each name a recipe uses is imported from (model_registry: torchtitan.models.<family>)."""


@dataclass(frozen=True)
class Name:
    """A bare name in the source (a local variable)."""

    id: str


@dataclass(frozen=True)
class Call:
    """`func(*args, **kwargs)`; `func` is a name or a dotted class path (`Trainer.Config`)."""

    func: str
    args: tuple[object, ...] = ()
    kwargs: tuple[tuple[str, object], ...] = ()


def call(func: str, *args: object, **kwargs: object) -> Call:
    return Call(func, args, tuple(kwargs.items()))


def render(value: object, indent: int = 0) -> str:
    """The value as Python source; a call too long for one line puts one keyword per line."""
    if isinstance(value, Name):
        return value.id
    if isinstance(value, str):
        return json.dumps(value)  # an ASCII JSON string is a valid Python string literal
    if isinstance(value, list):
        flat = "[" + ", ".join(render(v, indent) for v in value) + "]"
        if indent + len(flat) <= 100 and "\n" not in flat:
            return flat
        inner = " " * (indent + 4)
        return "[\n" + "".join(f"{inner}{render(v, indent + 4)},\n" for v in value) + " " * indent + "]"
    if isinstance(value, Call):
        parts = [render(a, indent) for a in value.args] + [f"{k}={render(v, indent)}" for k, v in value.kwargs]
        flat = f"{value.func}({', '.join(parts)})"
        if indent + len(flat) <= 100 or not value.kwargs:
            return flat
        inner = " " * (indent + 4)
        lines = [render(a, indent + 4) for a in value.args] + [f"{k}={render(v, indent + 4)}" for k, v in value.kwargs]
        return f"{value.func}(\n" + "".join(f"{inner}{line},\n" for line in lines) + " " * indent + ")"
    return repr(value)  # int, float, bool, None


def names_used(value: object) -> set[str]:
    """The first part of every called name in the tree (what the recipe must import)."""
    if isinstance(value, list):
        return set().union(*(names_used(v) for v in value)) if value else set()
    if isinstance(value, Call):
        found = {value.func.split(".")[0]}
        for v in (*value.args, *(v for _, v in value.kwargs)):
            found |= names_used(v)
        return found
    return set()


def identifier(text: str) -> str:
    """A valid Python identifier from free text: lower case, non-word runs as one `_`, never a leading digit."""
    name = re.sub(r"\W+", "_", text.lower()).strip("_") or "recipe"
    return f"run_{name}" if name[0].isdigit() else name


def recipe_source(function: str, family: str | None, model_spec: object, config: Call,
                  after: list[tuple[str, object]], docstring: str) -> str:
    """The module: docstring, imports, and `def function() -> Trainer.Config` building `config`, then each
    (dotted attribute of `config`, value) of `after` assigned, then `return config`."""
    used = names_used(model_spec) | names_used(config)
    modules: dict[str, set[str]] = {}
    for name in used:
        module = f"torchtitan.models.{family}" if name == "model_registry" else IMPORTED_FROM.get(name)
        if module is not None:
            modules.setdefault(module, set()).add(name)
    imports = [f"from {module} import {', '.join(sorted(names))}" for module, names in sorted(modules.items())]
    body = [f"    model_spec = {render(model_spec, 4)}", f"    config = {render(config, 4)}"]
    body += [f"    config.{target} = {render(value, 4)}" for target, value in after]
    return "\n".join([f'"""{docstring}"""', "", *imports, "", "", f"def {function}() -> Trainer.Config:", *body,
                      "    return config"]) + "\n"
