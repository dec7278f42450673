"""Measuring real hardware with torch (an optional extra: `pip install 'llmscale[measure]'`).

Nothing in the planning core imports this package's torch modules; the CLI imports them inside the commands, after
`require_torch()` has turned a missing torch into one line and exit code 2.

  gemm.py         matmul throughput on the shapes a model × layout runs (QKV, out-projection, MLP, experts, logits)
  membw.py        device copy bandwidth
  launch.py       one worker per rank: torch.multiprocessing on one machine, or the ranks torchrun started
  collectives.py  nccl-tests-style collective bench (algbw, busbw, #wrong) beside a plain torch.distributed loop
  links.py        pairwise send/recv sweep and the sub-healthy ranks, pairs and nodes it finds
  table.py        nccl-tests-style text tables (`#` preamble, header and units rows, fixed widths)
  calibrate.py    the short suite behind `llmscale calibrate` and the fits that turn it into a profile
                  (the profile and `apply_calibration` are torch-free: specs/calibration.py, cost/calibrate.py)
  timing.py       warm up, size the blocks, keep the median block
  probe*.py       `llmscale probe`: a real training run measured beside the prediction

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
