"""docs/inputs.md documents every field of the model and cluster YAML schemas, and is what
scripts/inputs_doc.py generates from the specs now (a spec changed without regenerating the doc fails here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pydantic import BaseModel

from llmscale.specs.cluster import ClusterSpec, GPUSpec, NetworkTier, NodeSpec, PowerSpec, StorageSpec
from llmscale.specs.model import MLASpec, ModelSpec

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "inputs.md").read_text(encoding="utf-8")


def _sections() -> dict[str, str]:
    parts = DOC.split("\n## ")[1:]
    return {part.splitlines()[0]: part for part in parts}


def test_every_spec_field_has_a_row() -> None:
    sections = _sections()
    for spec in (ModelSpec, MLASpec, ClusterSpec, GPUSpec, NodeSpec, NetworkTier, StorageSpec, PowerSpec):
        section = next((text for text in sections.values() if (spec.__doc__ or "").strip().splitlines()[0] in text),
                       None)
        assert section is not None, f"no section for {spec.__name__}"
        model: type[BaseModel] = spec
        missing = [name for name in model.model_fields if f"| `{name}` |" not in section]
        assert not missing, f"{spec.__name__}: {missing} missing from docs/inputs.md"


def test_the_doc_is_the_generated_one() -> None:
    loader = importlib.util.spec_from_file_location("inputs_doc", ROOT / "scripts" / "inputs_doc.py")
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    assert module.inputs_markdown() == DOC, "docs/inputs.md is stale: run python scripts/inputs_doc.py"
