"""SHA256 of canonical inputs (docs/architecture.md principle 5: one configuration file is the single source of
truth and is hash-checked at launch, so a result traces back to exactly what produced it).

The canonical form is the resolved, validated spec — catalog names expanded, defaults filled in — as
JSON with sorted keys and no whitespace. Two inputs that resolve to the same specs hash the same, however
they were written (YAML or JSON, key order, catalog name or inline values).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from llmscale.specs.base import Spec


def canonical_json(document: dict[str, Any]) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def spec_document(**specs: Spec | None) -> dict[str, Any]:
    """The canonical mapping of named specs (None entries are left out)."""
    return {name: spec.model_dump(mode="json") for name, spec in specs.items() if spec is not None}


def sha256_of(**specs: Spec | None) -> str:
    return hashlib.sha256(canonical_json(spec_document(**specs)).encode("ascii")).hexdigest()
