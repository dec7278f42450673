"""The house: every package says in its `__init__` docstring what it may import, the imports keep to it, the allowed
imports only point down (no two packages may import each other, directly or round a loop), and no module or
function outgrows the sizes a reader takes in at once (400 lines, 60 lines)."""

from __future__ import annotations

import ast
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "llmscale"
BASE = {"llmscale", "errors", "units"}
"""The floor every package may stand on: the version (`llmscale`), errors and units."""
DATA_ONLY = {"catalog", "data"}
"""Packages that hold data files and no code."""
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def packages() -> list[str]:
    return sorted(p.name for p in SRC.iterdir() if (p / "__init__.py").is_file())


def allowed_imports(package: str) -> set[str]:
    """The `May import:` list of a package's docstring, as package names."""
    doc = ast.get_docstring(ast.parse((SRC / package / "__init__.py").read_text(encoding="utf-8"))) or ""
    match = re.search(r"May import:(.*)", doc, re.S)
    assert match, f"llmscale.{package}: its __init__ docstring does not say what it may import"
    named = set(re.findall(r"`llmscale(?:\.(\w+))?`", match.group(1)))
    return {name or "llmscale" for name in named}


def package_of(module: str) -> str:
    """`llmscale.cost.step` → `cost`; `llmscale.errors` → `errors`; `llmscale` → `llmscale`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "llmscale"


def imports(path: Path) -> set[str]:
    """The llmscale modules a file imports, anywhere in it (imports inside functions too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "llmscale" or name.startswith("llmscale.")}


def test_every_package_declares_its_imports_and_keeps_to_them() -> None:
    broken = []
    for package in packages():
        if package in DATA_ONLY:
            assert not [p for p in (SRC / package).glob("*.py") if p.name != "__init__.py"], package
            continue
        allowed = allowed_imports(package) | {package}
        for path in sorted((SRC / package).rglob("*.py")):
            for module in sorted(imports(path)):
                if package_of(module) not in allowed:
                    broken.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not broken, "imports outside the declared ones:\n" + "\n".join(broken)


def test_the_base_modules_import_no_package() -> None:
    for name in ("errors", "units", "__init__"):
        assert imports(SRC / f"{name}.py") <= {"llmscale"}, name


def test_the_declared_imports_point_only_down() -> None:
    graph = {package: allowed_imports(package) - BASE for package in packages() if package not in DATA_ONLY}
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as error:
        pytest.fail(f"the packages' declared imports run in a circle: {error.args[1]}")
    assert order.index("specs") < order.index("cost") < order.index("io") < order.index("cli")


def _imports_torch(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(name == "torch" or name.startswith("torch.") for name in names):
            return True
    return False


TORCH_PACKAGES = {"measure", "runtime"}
"""torch is an optional extra for measuring and running: only these packages may import it."""
TORCH_FREE_RUNTIME = {"__init__.py", "config.py", "journal.py", "incidents.py", "files.py", "hosts.py", "manifests.py",
                      "entry.py", "runlock.py", "relaunch.py", "interrupt.py", "procs.py"}
"""The run-dir formats and the journal: read by the CLI and the monitor on machines without torch."""


def test_only_measure_and_runtime_import_torch() -> None:
    # torch is an optional extra for measuring and running: every other package must import and run without it.
    found = [str(p.relative_to(ROOT)) for p in sorted(SRC.rglob("*.py"))
             if p.relative_to(SRC).parts[0] not in TORCH_PACKAGES and _imports_torch(p)]
    found += [str(p.relative_to(ROOT)) for p in sorted((SRC / "runtime").glob("*.py"))
              if p.name in TORCH_FREE_RUNTIME and _imports_torch(p)]
    assert not found, found


def test_the_planning_core_reads_no_file() -> None:
    # The models get their constants passed in: no package below io may import it, so none can read the catalog.
    for package in ("specs", "layout", "cost", "reliability", "search"):
        assert "io" not in allowed_imports(package), package


def _too_long(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    found = [f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines"] if (
        len(text.splitlines()) > MAX_FILE_LINES) else []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_module_over_400_lines_and_no_function_over_60() -> None:
    paths = [*SRC.rglob("*.py"), *(ROOT / "scripts").glob("*.py"), *(ROOT / "benchmarks").glob("*.py")]
    found = [line for path in sorted(paths) for line in _too_long(path)]
    assert not found, "\n".join(found)


def test_docstrings_cite_nothing_outside_the_repository() -> None:
    # Citations name primary sources (paper §, repository@commit path) or docs/ of this repository; the research
    # notes and seed articles the project started from are not shipped, so a reader could not follow them.
    pattern = re.compile(r"formulas\.md|reliability\.md|shared/research|shared/data|data/README|seed 00\d", re.I)
    paths = [*SRC.rglob("*.py"), *SRC.rglob("*.yaml"), *(ROOT / "scripts").glob("*.py"),
             *(ROOT / "benchmarks").glob("*.py"), *(ROOT / "tests").glob("*.py"), *(ROOT / "docs").glob("*.md")]
    found = [f"{path.relative_to(ROOT)}:{n}" for path in sorted(paths) if path.name != "test_structure.py"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not found, "citations that do not resolve:\n" + "\n".join(found)


MAX_DOCSTRING_LINES = {"cost": 5, "layout": 5}
"""Docstrings of the cost model and the layout space: what it is, the formula and a link (docs/cost-model.md holds
the derivations); elsewhere MAX_OTHER_DOCSTRING_LINES."""
MAX_OTHER_DOCSTRING_LINES = 10


def test_docstrings_are_short_and_link_their_derivations() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        limit = MAX_DOCSTRING_LINES.get(path.relative_to(SRC).parts[0], MAX_OTHER_DOCSTRING_LINES)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                lines = len((ast.get_docstring(node) or "").splitlines())
                if lines > limit:
                    found.append(f"{path.relative_to(ROOT)} {getattr(node, 'name', '(module)')}: {lines} > {limit}")
    assert not found, "\n".join(found)


def test_every_docs_link_in_the_code_names_an_anchor_that_exists() -> None:
    link = re.compile(r"docs/([\w-]+\.md)#([\w-]+)")
    anchors: dict[str, set[str]] = {}
    for doc in (ROOT / "docs").glob("*.md"):
        text = doc.read_text(encoding="utf-8")
        headings = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                    for h in re.findall(r"^#+ (.*)$", text, re.M)}
        anchors[doc.name] = set(re.findall(r'<a id="([\w-]+)"', text)) | headings
    links = [(path, name, anchor) for path in sorted(SRC.rglob("*.py"))
             for name, anchor in link.findall(path.read_text(encoding="utf-8"))]
    broken = [f"{path.relative_to(ROOT)}: docs/{name}#{anchor}" for path, name, anchor in links
              if anchor not in anchors.get(name, set())]
    assert len(links) > 100 and not broken, "links to missing anchors:\n" + "\n".join(broken)
