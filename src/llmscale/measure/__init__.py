"""Measuring real hardware with torch (optional: `pip install 'llmscale[measure]'`), imported by the CLI only inside
its commands: benchmarks, link sweep, calibration, the training probe. Modules: docs/design-notes.md#measure-package.

May import: `llmscale.io`, `llmscale.search`, `llmscale.reliability`, `llmscale.cost`, `llmscale.layout`,
`llmscale.specs`, `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""

from __future__ import annotations

from types import ModuleType

from llmscale.errors import LlmscaleError

INSTALL_HINT = "pip install 'llmscale[measure]'"


def require_torch() -> ModuleType:
    """torch, or a one-line LlmscaleError (exit code 2 on the CLI) saying how to install it."""
    try:
        import torch
    except ImportError:
        raise LlmscaleError(f"this command needs torch, which is not installed: {INSTALL_HINT}") from None
    return torch
