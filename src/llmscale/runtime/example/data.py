"""The example's data: a UTF-8 text, a character-level vocabulary, and one stream of micro-batches for the whole job:
micro-batch g is drawn from a generator seeded with (seed, g), and rank r of W takes g = r, r + W, r + 2W, … So a
loader's whole state is the job's position (the micro-batches all ranks consumed, the same number on every rank at a
step's end): a resumed run draws the same batches, and a run resumed on another number of ranks continues the same
stream (runtime/restore.py)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llmscale.errors import InputFileError
from llmscale.io.strict import read_text

CORPUS = "corpus.txt"


def corpus_text(path: str | None) -> str:
    """The text at `path`, or the corpus shipped beside this module (README.md names its source)."""
    if path is None:
        return resources.files("llmscale.runtime.example").joinpath(CORPUS).read_text(encoding="utf-8")
    text = read_text(Path(path))
    if len(set(text)) < 2:
        raise InputFileError(f"{path}: a training text needs at least two distinct characters")
    return text


@dataclass(frozen=True)
class Vocab:
    chars: str

    @classmethod
    def of(cls, text: str) -> Vocab:
        return cls("".join(sorted(set(text))))

    def encode(self, text: str) -> np.ndarray:
        table = {c: i for i, c in enumerate(self.chars)}
        return np.fromiter((table[c] for c in text), dtype=np.int64, count=len(text))


class CharBatches:
    """Random (micro_batch, seq_len + 1) windows of the encoded text (module docstring): `position` is the number of
    micro-batches the whole job has drawn; this rank's next one is `position + rank`."""

    def __init__(self, tokens: np.ndarray, seq_len: int, micro_batch: int, seed: int, rank: int, world: int,
                 device: torch.device) -> None:
        if len(tokens) <= seq_len + 1:
            raise InputFileError(f"the text has {len(tokens)} characters; seq_len {seq_len} needs more")
        self.tokens, self.seq_len, self.micro_batch = tokens, seq_len, micro_batch
        self.seed, self.rank, self.world, self.device = seed, rank, world, device
        self.position = 0

    def __iter__(self) -> CharBatches:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([self.seed, self.position + self.rank])
        self.position += self.world
        starts = rng.integers(0, len(self.tokens) - self.seq_len - 1, size=self.micro_batch)
        rows = np.stack([self.tokens[s:s + self.seq_len + 1] for s in starts])
        block = torch.from_numpy(rows).to(self.device)
        return block[:, :-1], block[:, 1:]

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])
