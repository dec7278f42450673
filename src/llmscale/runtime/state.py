"""What a rank must save besides the model and optimizer for a resumed run to continue bit for bit: the random
number generators (Python's `random`, NumPy's global generator, torch's CPU generator and, when present, the CUDA
generator of the rank's device) and the data loader's position. As plain data — lists, ints, strings and one uint8
tensor per torch generator — so `torch.load(weights_only=True)` reads it back and DCP stores it as one object per
rank (torchtitan keeps its data-loader state per rank the same way: pytorch/torchtitan
torchtitan/components/dataloader.py, `ParallelAwareDataloader.state_dict` keyed by dp rank).
"""

from __future__ import annotations

import random
from typing import Any, Protocol

import numpy as np
import torch


class Positioned(Protocol):
    """A data loader whose position is a small dict (runtime/example/data.py's CharBatches)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def _python_state() -> list[Any]:
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]


def _numpy_state() -> list[Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return [str(name), np.asarray(keys).tolist(), int(pos), int(has_gauss), float(cached)]


def capture(loader: Positioned | None, device: torch.device | None = None) -> dict[str, Any]:
    """The rank's RNG states and data position, as plain data (module docstring)."""
    state: dict[str, Any] = {
        "python_rng": _python_state(),
        "numpy_rng": _numpy_state(),
        "torch_rng": torch.get_rng_state(),
        "loader": loader.state_dict() if loader is not None else None,
    }
    if device is not None and device.type == "cuda":
        state["cuda_rng"] = torch.cuda.get_rng_state(device)
    return state


def restore(state: dict[str, Any], loader: Positioned | None, device: torch.device | None = None) -> None:
    """Put back what `capture` took (the CUDA generator only when both the state and this rank have one)."""
    version, internal, gauss = state["python_rng"]
    random.setstate((int(version), tuple(int(x) for x in internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy_rng"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), int(pos), int(has_gauss), float(cached)))
    torch.set_rng_state(state["torch_rng"])
    if "cuda_rng" in state and device is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda_rng"], device)
    if loader is not None and state.get("loader") is not None:
        loader.load_state_dict(state["loader"])
