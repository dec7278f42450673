"""A small GPT (decoder-only transformer, pre-norm, learned positions, tied embeddings), written here after the
shape of nanoGPT (karpathy/nanoGPT model.py): a reader takes it in at one sitting. No dropout by default and
`F.scaled_dot_product_attention(is_causal=True)` for attention, which runs deterministically on CPU."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from llmscale.runtime.config import ExampleModel


class Block(nn.Module):
    def __init__(self, dims: ExampleModel) -> None:
        super().__init__()
        self.n_head = dims.n_head
        self.ln1 = nn.LayerNorm(dims.d_model)
        self.qkv = nn.Linear(dims.d_model, 3 * dims.d_model)
        self.proj = nn.Linear(dims.d_model, dims.d_model)
        self.ln2 = nn.LayerNorm(dims.d_model)
        self.mlp = nn.Sequential(nn.Linear(dims.d_model, 4 * dims.d_model), nn.GELU(),
                                 nn.Linear(4 * dims.d_model, dims.d_model))
        self.dropout = dims.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                             dropout_p=self.dropout if self.training else 0.0)
        x = x + self.proj(att.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, dims: ExampleModel, vocab_size: int) -> None:
        super().__init__()
        self.seq_len = dims.seq_len
        self.tok = nn.Embedding(vocab_size, dims.d_model)
        self.pos = nn.Embedding(dims.seq_len, dims.d_model)
        self.blocks = nn.ModuleList(Block(dims) for _ in range(dims.n_layer))
        self.ln_f = nn.LayerNorm(dims.d_model)
        self.head = nn.Linear(dims.d_model, vocab_size, bias=False)
        self.head.weight = self.tok.weight
        self.apply(_init)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean next-character cross-entropy of a (batch, seq_len) block."""
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def _init(module: nn.Module) -> None:
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
