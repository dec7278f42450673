"""The torchtitan names a llmscale recipe may use, read from torchtitan's source at one commit (no import of torch).

A torchtitan run is a Python function returning `Trainer.Config` (torchtitan/config/README.md). The names such a
recipe uses are of four kinds, and this script prints each as one line:

    Class.field                  a dataclass field of a config class, inherited ones included
                                 (`TrainingConfig.steps`, `Trainer.Config.parallelism`, `FullAC.Config.debug`)
    module:Name                  a name importable from a module (`torchtitan.config:ParallelismConfig`)
    family.model_registry(arg)   a parameter of a model family's registry (`deepseek_v3.model_registry(num_mtp_layers)`)
    family[flavor]               a key of the family's flavor table (`llama3[70B]`)

    python scripts/torchtitan_fields.py --git /path/to/torchtitan[.git] [--commit SHA]

tests/test_torchtitan_export.py freezes the names llmscale writes, extracted with this script at the commit it cites.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections.abc import Callable

FILES = (
    "torchtitan/config/__init__.py", "torchtitan/config/configs.py", "torchtitan/trainer.py",
    "torchtitan/distributed/activation_checkpoint.py", "torchtitan/config/configurable.py",
    "torchtitan/components/quantization/__init__.py", "torchtitan/components/quantization/float8.py",
    "torchtitan/components/quantization/mx.py", "torchtitan/components/quantization/nvfp4.py",
    "torchtitan/components/optimizer/__init__.py", "torchtitan/components/optimizer/optimizer.py",
    "torchtitan/protocols/model.py",
)
FAMILIES = ("llama3", "deepseek_v3", "qwen3")


def module_of(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def class_fields(trees: dict[str, ast.Module]) -> dict[str, tuple[list[str], list[str]]]:
    """qualified class name → (its own annotated fields, its bases as written), over every parsed file."""
    table: dict[str, tuple[list[str], list[str]]] = {}

    def visit(node: ast.ClassDef, prefix: str) -> None:
        name = f"{prefix}{node.name}"
        own = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
        table.setdefault(name, (own, [ast.unparse(b) for b in node.bases]))
        for inner in node.body:
            if isinstance(inner, ast.ClassDef):
                visit(inner, name + ".")

    for tree in trees.values():
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                visit(node, "")
    return table


def all_fields(table: dict[str, tuple[list[str], list[str]]], name: str) -> set[str]:
    own, bases = table.get(name, ([], []))
    fields = set(own)
    for base in bases:
        if base in table and base != name:
            fields |= all_fields(table, base)
    return fields


def exports(path: str, tree: ast.Module) -> set[str]:
    """module:Name for every top-level class, function, assignment and imported name."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return {f"{module_of(path)}:{n}" for n in names}


def family_names(family: str, tree: ast.Module) -> set[str]:
    """family.model_registry(arg) for its parameters and family[flavor] for the keys of its *_configs table."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "model_registry":
            args = node.args
            names |= {f"{family}.model_registry({a.arg})" for a in args.posonlyargs + args.args + args.kwonlyargs}
        elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
              and any(isinstance(t, ast.Name) and t.id.endswith("_configs") for t in node.targets)):
            names |= {f"{family}[{k.value}]" for k in node.value.keys if isinstance(k, ast.Constant)}
    return names


def torchtitan_names(read: Callable[[str], str]) -> set[str]:
    trees = {path: ast.parse(read(path)) for path in FILES}
    table = class_fields(trees)
    names = {f"{cls}.{field}" for cls in table for field in all_fields(table, cls)}
    for path, tree in trees.items():
        names |= exports(path, tree)
    for family in FAMILIES:
        path = f"torchtitan/models/{family}/__init__.py"
        tree = ast.parse(read(path))
        names |= exports(path, tree) | family_names(family, tree)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git", required=True, help="a torchtitan clone (bare or not)")
    parser.add_argument("--commit", default="HEAD")
    args = parser.parse_args(argv)

    def read(path: str) -> str:
        return subprocess.run(["git", "-C", args.git, "show", f"{args.commit}:{path}"], check=True,
                              capture_output=True, text=True).stdout

    print("\n".join(sorted(torchtitan_names(read))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
