"""SHA256 of canonical inputs (docs/architecture.md principle 5: one configuration file is the single source of
truth and is hash-checked at launch, so a result traces back to exactly what produced it).

The canonical form is the resolved, validated spec — catalog names expanded, defaults filled in — as
JSON with sorted keys and no whitespace. Two inputs that resolve to the same specs hash the same, however
they were written (YAML or JSON, key order, catalog name or inline values). Provenance text (every spec's
`source`) is left out: it says where numbers were read, changes no estimate, and a corrected citation must not
break every `--expect-sha256` pinned to the inputs. A calibration profile changes the numbers it replaces, which
the hash sees.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from llmscale.specs.base import Spec


def canonical_json(document: dict[str, Any]) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


PROVENANCE = "source"
"""The field every spec uses for where its numbers were read: text for people, not an input of any estimate."""


def spec_document(**specs: Spec | None) -> dict[str, Any]:
    """The canonical mapping of named specs (None entries are left out), without their provenance text."""
    return {name: _without_provenance(spec.model_dump(mode="json")) for name, spec in specs.items() if spec is not None}


def _without_provenance(value: Any) -> Any:
    """`value` with every `source` text left out, at every depth: editing a citation changes no hash."""
    if isinstance(value, dict):
        return {k: _without_provenance(v) for k, v in value.items() if not (k == PROVENANCE and isinstance(v, str))}
    if isinstance(value, list):
        return [_without_provenance(v) for v in value]
    return value


def sha256_of(**specs: Spec | None) -> str:
    return hashlib.sha256(canonical_json(spec_document(**specs)).encode("ascii")).hexdigest()
