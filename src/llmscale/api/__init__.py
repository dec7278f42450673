"""The Python API: `llmscale.plan`, `explain`, `memory`, `export`, `goodput`, `allocate` and `validate` take
catalog names, file paths or spec objects and return typed results (`results`) with `to_dict()` — the JSON the
matching command prints with `--json` — and `to_frame()` (pandas, the optional extra `llmscale[frame]`). The CLI
(`llmscale.cli`) is a thin layer over these functions (docs/api.md).

May import: `llmscale.placement`, `llmscale.report`, `llmscale.launch`, `llmscale.scaling`, `llmscale.validation`,
`llmscale.io`, `llmscale.search`, `llmscale.reliability`, `llmscale.cost`, `llmscale.layout`, `llmscale.specs`,
`llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""

from importlib import import_module

_HOMES = {"allocate": "allocation", "explain": "jobs", "export": "jobs", "memory": "jobs", "plan": "jobs",
          "Document": "results", "Explain": "results", "LayoutScore": "results", "Plan": "results",
          "goodput": "runs", "validate": "runs"}
"""Each public name and the module that defines it, imported on first use: a command loads only what it runs."""
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module 'llmscale.api' has no attribute {name!r}")
    return getattr(import_module(f"llmscale.api.{_HOMES[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
