"""A torchtitan recipe's syntax tree read as values, never executed: the one function returning `Trainer.Config`,
its calls as `Called` (the dotted name, arguments and keywords), literals as Python values.

Only what a recipe written as torchtitan_recipes/*.py is made of is taken: `from X import Y`, one function whose
body assigns names (`model_spec = ...`, `config = Trainer.Config(...)`), sets attributes of the config
(`config.optimizer.implementation = "..."`) and returns it. Anything else (a loop, a lambda, an unknown name) is one
error line naming it — an expression is read from its syntax tree, never evaluated.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Any

from llmscale.errors import SpecError

WHERE = "torchtitan recipe"


@dataclass(frozen=True)
class Called:
    """A call in the recipe: `func` dotted (`Trainer.Config`), the module its first name came from, its values."""

    func: str
    module: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RecipeTree:
    """The returned config call, the attributes set on it afterwards, and the recipe function's name."""

    function: str
    config: Called
    assigned: dict[str, Any]


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    raise SpecError("expression", ast.unparse(node), "must be a name or a dotted name", where=WHERE)


def value_of(node: ast.AST, imports: dict[str, str], local: dict[str, Any], name: str = "expression") -> Any:
    """The value of an expression: a literal (finite, if a number), a list, a local name, or a call of an imported
    name. `name` is what errors call it: the keyword or assignment it is the value of."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, float) and not math.isfinite(node.value):
            raise SpecError(name, ast.unparse(node)[:60], "must be a finite number", where=WHERE)
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [value_of(e, imports, local, name) for e in node.elts]
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
            and isinstance(node.operand.value, (int, float))):
        return -value_of(node.operand, imports, local, name)
    if isinstance(node, ast.Name) and node.id in local:
        return local[node.id]
    if isinstance(node, ast.Call):
        func = dotted(node.func)
        root = func.split(".")[0]
        if root not in imports:
            raise SpecError(func, ast.unparse(node)[:60], "is not imported by the recipe", where=WHERE)
        if any(k.arg is None for k in node.keywords):
            raise SpecError(func, ast.unparse(node)[:60], "** arguments are not read back", where=WHERE)
        return Called(func, imports[root], tuple(value_of(a, imports, local, func) for a in node.args),
                      {str(k.arg): value_of(k.value, imports, local, str(k.arg)) for k in node.keywords})
    raise SpecError(name, ast.unparse(node)[:60], "is not a literal, a local name or a call llmscale reads back",
                    where=WHERE)


def read_tree(text: str) -> RecipeTree:
    """The recipe's function, read (module docstring)."""
    try:
        module = ast.parse(text)
    except SyntaxError as err:
        raise SpecError("recipe", f"line {err.lineno}", f"is not Python ({err.msg})", where=WHERE) from None
    imports: dict[str, str] = {}
    functions = []
    for node in module.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            imports |= {(a.asname or a.name): node.module for a in node.names}
        elif isinstance(node, ast.FunctionDef):
            functions.append(node)
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):  # the docstring
            raise SpecError("recipe", ast.unparse(node)[:60], "llmscale reads imports and one function", where=WHERE)
    if len(functions) != 1:
        raise SpecError("recipe", f"{len(functions)} functions", "must define exactly one function", where=WHERE)
    return _function(functions[0], imports)


def _function(fn: ast.FunctionDef, imports: dict[str, str]) -> RecipeTree:
    local: dict[str, Any] = {}
    assigned: dict[str, Any] = {}
    returned: Any = None
    for stmt in fn.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                local[target.id] = value_of(stmt.value, imports, local, target.id)
            else:
                path = dotted(target).split(".")
                if path[0] not in local or len(path) != 3:
                    raise SpecError(".".join(path), ast.unparse(stmt.value)[:40], "llmscale reads config.<section>."
                                    "<field> assignments only", where=WHERE)
                assigned[".".join(path[1:])] = value_of(stmt.value, imports, local, ".".join(path[1:]))
        elif isinstance(stmt, ast.Return) and stmt.value is not None:
            returned = value_of(stmt.value, imports, local)
        elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            raise SpecError(fn.name, ast.unparse(stmt)[:60], "is not an assignment or the return", where=WHERE)
    if not (isinstance(returned, Called) and returned.func == "Trainer.Config"):
        raise SpecError(fn.name, None, "must return a Trainer.Config(...)", where=WHERE)
    return RecipeTree(fn.name, returned, assigned)
