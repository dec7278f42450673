"""Every command-line flag Megatron-LM's `pretrain_gpt.py` parser defines at one commit, read from its source.

Megatron-LM builds its parser in megatron/training/arguments.py in two ways: `group.add_argument('--flag', ...)`
calls, and `ArgumentGroupFactory(SomeConfig, exclude=[...]).build_group(...)`, which adds one flag per dataclass
field of SomeConfig (megatron/training/argument_utils.py: `--` + the field name with `_` → `-`; a bool defaulting
to True becomes `--no-<name>` and `--disable-<name>`; `metadata={"argparse_meta": {"arg_names": [...]}}`
overrides the names; `init=False` fields and excluded names are skipped). This script reads both statically
(Python's `ast`, no import of Megatron or torch), so it runs on any checkout or bare clone.

    python scripts/megatron_flags.py --git /path/to/Megatron-LM[.git] [--commit SHA] [--check --flag-a --flag-b]

prints the sorted flag names (or, with --check, the given flags that are not defined, exit 1 if any).
tests/test_export.py freezes the names llmscale emits, extracted with this script at the commit it cites.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections.abc import Callable, Iterator

ARGUMENTS_PY = "megatron/training/arguments.py"
_BOOL_ANNOTATIONS = {"bool", "Optional[bool]", "bool | None"}


def git_reader(git_dir: str, commit: str) -> tuple[Callable[[str], str], Callable[[str], list[str]]]:
    """read(path) → source at commit, and find_class(name) → the files at commit defining `class name`."""

    def read(path: str) -> str:
        return subprocess.run(["git", "-C", git_dir, "show", f"{commit}:{path}"], check=True,
                              capture_output=True, text=True).stdout

    def find_class(name: str) -> list[str]:
        proc = subprocess.run(["git", "-C", git_dir, "grep", "-l", "-E", f"^class {name}\\b", commit, "--",
                               "megatron/"], capture_output=True, text=True)
        return [line.split(":", 1)[1] for line in proc.stdout.splitlines() if line]

    return read, find_class


def _literal_strings(node: ast.AST | None) -> list[str]:
    try:
        value = ast.literal_eval(node) if node is not None else []
    except ValueError:
        return []
    return [v for v in value if isinstance(v, str)] if isinstance(value, (list, tuple, set)) else []


def _calls(tree: ast.AST) -> Iterator[tuple[ast.Call, ast.AST]]:
    """Every call with the function body (or module) that encloses it."""
    for scope in ast.walk(tree):
        if isinstance(scope, (ast.FunctionDef, ast.Module)):
            for node in ast.walk(scope):
                if isinstance(node, ast.Call):
                    yield node, scope


def _assigned_list(scope: ast.AST, name: str) -> list[str]:
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return _literal_strings(node.value)
    return []


def _field_flags(stmt: ast.AnnAssign) -> list[str]:
    """The flags ArgumentGroupFactory makes of one dataclass field (argument_utils._build_argparse_kwargs)."""
    assert isinstance(stmt.target, ast.Name)
    name, default, meta_names = stmt.target.id, stmt.value, None
    if isinstance(stmt.value, ast.Call) and getattr(stmt.value.func, "id", "") == "field":
        keywords = {k.arg: k.value for k in stmt.value.keywords}
        if isinstance(keywords.get("init"), ast.Constant) and keywords["init"].value is False:
            return []
        default = keywords.get("default")
        meta = keywords.get("metadata")
        if isinstance(meta, ast.Dict):
            for key, value in zip(meta.keys, meta.values, strict=False):
                if isinstance(key, ast.Constant) and key.value == "argparse_meta" and isinstance(value, ast.Dict):
                    for k2, v2 in zip(value.keys, value.values, strict=False):
                        if isinstance(k2, ast.Constant) and k2.value == "arg_names":
                            meta_names = _literal_strings(v2)
    if meta_names:
        return meta_names
    dashed = name.replace("_", "-")
    store_false = (ast.unparse(stmt.annotation) in _BOOL_ANNOTATIONS and isinstance(default, ast.Constant)
                   and default.value is True)
    return [f"--no-{dashed}", f"--disable-{dashed}"] if store_false else [f"--{dashed}"]


def dataclass_flags(cls: str, read: Callable[[str], str], find_class: Callable[[str], list[str]],
                    exclude: set[str]) -> set[str]:
    """Flags of a config dataclass and the dataclasses it inherits from (found by name under megatron/)."""
    flags: set[str] = set()
    for path in find_class(cls)[:1]:
        tree = ast.parse(read(path))
        node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
        for base in node.bases:
            if isinstance(base, ast.Name):
                flags |= dataclass_flags(base.id, read, find_class, exclude)
        for stmt in node.body:
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and stmt.target.id not in exclude and not stmt.target.id.startswith("_")):
                flags |= set(_field_flags(stmt))
    return flags


def megatron_flags(read: Callable[[str], str], find_class: Callable[[str], list[str]]) -> set[str]:
    """Every flag arguments.py defines: add_argument names and the factory-built dataclass fields."""
    tree = ast.parse(read(ARGUMENTS_PY))
    flags: set[str] = set()
    for call, scope in _calls(tree):
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "add_argument":
            flags |= {a.value for a in call.args
                      if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")}
        elif isinstance(func, ast.Name) and func.id == "ArgumentGroupFactory" and call.args:
            cls = call.args[0]
            if not isinstance(cls, ast.Name):
                continue
            excl = next((k.value for k in call.keywords if k.arg == "exclude"), None)
            names = _assigned_list(scope, excl.id) if isinstance(excl, ast.Name) else _literal_strings(excl)
            flags |= dataclass_flags(cls.id, read, find_class, set(names))
    return flags


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git", required=True, help="a Megatron-LM clone (bare or not)")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--check", nargs="*", default=None, help="flags to look up instead of listing all")
    args, rest = parser.parse_known_args(argv)
    read, find_class = git_reader(args.git, args.commit)
    defined = megatron_flags(read, find_class)
    if args.check is None:
        print("\n".join(sorted(defined)))
        return 0
    missing = sorted(set(args.check + rest) - defined)
    print("\n".join(missing) if missing else f"all {len(args.check + rest)} flags defined")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
