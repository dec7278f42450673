"""The Python API: `llmscale.plan`, `explain`, `memory`, `export`, `goodput`, `allocate` and `validate` take
catalog names, file paths or spec objects and return typed results (`results`) with `to_dict()` — the JSON the
matching command prints with `--json` — and `to_frame()` (pandas, the optional extra `llmscale[frame]`). The CLI
(`llmscale.cli`) is a thin layer over these functions (docs/api.md).

May import: `llmscale.report`, `llmscale.launch`, `llmscale.scaling`, `llmscale.validation`, `llmscale.io`,
`llmscale.search`, `llmscale.reliability`, `llmscale.cost`, `llmscale.layout`, `llmscale.specs`, `llmscale.errors`,
`llmscale.units`, `llmscale` (the version).
"""

from llmscale.api.allocate import allocate
from llmscale.api.jobs import explain, export, memory, plan
from llmscale.api.results import Document, Explain, LayoutScore, Plan
from llmscale.api.runs import goodput, validate

__all__ = ["Document", "Explain", "LayoutScore", "Plan", "allocate", "explain", "export", "goodput", "memory", "plan",
           "validate"]
