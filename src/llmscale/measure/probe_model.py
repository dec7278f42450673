"""The probe's transformer, in plain torch, built from a `ModelSpec` so that llmscale's parameter and FLOP counts
describe exactly what runs: pre-norm decoder (RMSNorm, RoPE, causal GQA attention, SwiGLU, dropless top-k MoE via
probe_dispatch), fp32, no biases; `unsupported_fields` names what a spec asks for beyond that.
Architecture and supported fields: docs/design-notes.md#measure-probe-model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from llmscale.measure.probe_dispatch import EPGroup, moe_exchange
from llmscale.specs.model import ModelSpec, Norm

INIT_STD = 0.02
NORM_EPS = 1e-5
ROPE_BASE = 10000.0


def unsupported_fields(model: ModelSpec) -> list[tuple[str, object, str]]:
    """(field, value, what the probe supports) for every spec field the probe cannot build."""
    checks: list[tuple[str, object, bool, str]] = [
        ("mla", model.mla, model.mla is None, "null (the probe builds MHA/GQA attention)"),
        ("mtp_layers", model.mtp_layers, model.mtp_layers == 0, "0"),
        ("learned_position_embeddings", model.learned_position_embeddings,
         model.learned_position_embeddings == 0, "0 (the probe uses RoPE)"),
        ("norm", model.norm.value, model.norm is Norm.RMSNORM, "rmsnorm"),
        ("linear_bias", model.linear_bias, not model.linear_bias, "false"),
        ("dropout", model.dropout, not model.dropout, "false"),
        ("gated_mlp", model.gated_mlp, model.gated_mlp, "true (SwiGLU)"),
        ("capacity_factor", model.capacity_factor, model.capacity_factor is None, "null (dropless)"),
        ("head_dim", model.dim_per_head, model.dim_per_head % 2 == 0, "an even number (RoPE rotates pairs)"),
        ("sliding_window", model.sliding_window, model.sliding_window is None,
         "null (the probe builds full causal attention)"),
    ]
    return [(name, value, allowed) for name, value, ok, allowed in checks if not ok]


def is_moe_layer(model: ModelSpec, index: int) -> bool:
    """Layer `index` is MoE when at/after first_dense_layers and on the moe_layer_freq grid (params.py)."""
    offset = index - model.first_dense_layers
    return model.is_moe and offset >= 0 and offset % model.moe_layer_freq == 0


def rope_tables(seq_len: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of RoPE angles, (s, d/2) each (Su et al. 2021, rotate-half form)."""
    inv = ROPE_BASE ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (b, heads, s, d) queries or keys by position."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Attention(nn.Module):
    """Fused QKV projection, RoPE, causal SDPA (GQA), output projection."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, model: ModelSpec, seq_len: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = model.heads, model.num_kv_heads, model.dim_per_head
        width = (self.heads + 2 * self.kv_heads) * self.head_dim
        self.qkv = nn.Linear(model.hidden, width, bias=False)
        self.proj = nn.Linear(self.heads * self.head_dim, model.hidden, bias=False)
        cos, sin = rope_tables(seq_len, self.head_dim)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        d = self.head_dim
        q, k, v = self.qkv(x).split([self.heads * d, self.kv_heads * d, self.kv_heads * d], dim=-1)
        q = apply_rope(q.view(b, s, self.heads, d).transpose(1, 2), self.cos, self.sin)
        k = apply_rope(k.view(b, s, self.kv_heads, d).transpose(1, 2), self.cos, self.sin)
        v = v.view(b, s, self.kv_heads, d).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        result: torch.Tensor = self.proj(out.transpose(1, 2).reshape(b, s, self.heads * d))
        return result


class SwiGLU(nn.Module):
    """down(silu(gate(x)) · up(x)) with gate|up fused in one projection (Shazeer 2020)."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.ffn = ffn
        self.gate_up = nn.Linear(hidden, 2 * ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).split(self.ffn, dim=-1)
        result: torch.Tensor = self.down(F.silu(gate) * up)
        return result


class MoE(nn.Module):
    """Router, this rank's E / ep routed experts (SwiGLU each, weights stacked), optional shared experts."""

    def __init__(self, model: ModelSpec, ep: EPGroup) -> None:
        super().__init__()
        h, f = model.hidden, model.expert_ffn_hidden or 0
        self.num_experts, self.top_k, self.ffn, self.ep = model.experts, model.top_k, f, ep
        local = model.experts // ep.size
        self.router = nn.Linear(h, model.experts, bias=False)
        self.w_gate_up = nn.Parameter(torch.empty(local, 2 * f, h))
        self.w_down = nn.Parameter(torch.empty(local, h, f))
        for weight in (self.w_gate_up, self.w_down):
            weight.is_expert = True  # type: ignore[attr-defined]
        self.shared = SwiGLU(h, model.shared_ffn * model.shared_experts) if model.shared_experts else None

    def expert(self, e: int, rows: torch.Tensor) -> torch.Tensor:
        gate, up = F.linear(rows, self.w_gate_up[e]).split(self.ffn, dim=-1)
        return F.linear(F.silu(gate) * up, self.w_down[e])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        probs = torch.softmax(self.router(tokens), dim=-1)
        weights, index = probs.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        out = moe_exchange(tokens, index, weights, self.num_experts, self.ep, self.expert)
        if self.shared is not None:
            out = out + self.shared(tokens)
        return out.view(shape)


class Block(nn.Module):
    """One pre-norm layer: attention then a dense MLP or an MoE."""

    def __init__(self, model: ModelSpec, seq_len: int, moe: bool, ep: EPGroup) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(model.hidden, eps=NORM_EPS)
        self.attn = Attention(model, seq_len)
        self.norm2 = nn.RMSNorm(model.hidden, eps=NORM_EPS)
        self.mlp: nn.Module = MoE(model, ep) if moe else SwiGLU(model.hidden, model.ffn_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        result: torch.Tensor = x + self.mlp(self.norm2(x))
        return result


class ProbeTransformer(nn.Module):
    """Embedding, layers, final norm, output head (tied when the spec says so) and the cross-entropy loss."""

    def __init__(self, model: ModelSpec, seq_len: int, ep: EPGroup) -> None:
        super().__init__()
        self.embed = nn.Embedding(model.vocab, model.hidden)
        self.layers = nn.ModuleList(Block(model, seq_len, is_moe_layer(model, i), ep) for i in range(model.layers))
        self.norm = nn.RMSNorm(model.hidden, eps=NORM_EPS)
        self.head = None if model.tied_embeddings else nn.Linear(model.hidden, model.vocab, bias=False)
        for param in self.parameters():
            if param.dim() > 1:
                nn.init.normal_(param, std=INIT_STD)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        logits = F.linear(x, self.embed.weight) if self.head is None else self.head(x)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def split_parameters(module: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(non-expert, routed-expert) parameters: the first are all-reduced over DP, the second over EDP."""
    expert = [p for p in module.parameters() if getattr(p, "is_expert", False)]
    ids = {id(p) for p in expert}
    return [p for p in module.parameters() if id(p) not in ids], expert
