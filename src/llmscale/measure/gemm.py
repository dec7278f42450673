"""GEMM throughput on the shapes a model × layout runs on one GPU (`llmscale bench gemm`): QKV, out-projection, MLP,
experts (T_e = T·k·etp/tp·ep/E tokens per local expert), shared experts and logits of one micro-batch's forward;
throughput = 2·M·N·K / time. float32 on CPU; bfloat16 and float8 on GPU (not run in this repository's CI).
The shape table: docs/design-notes.md#measure-gemm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmscale.specs.model import ModelSpec

CPU_DTYPES = ("float32", "bfloat16")
GPU_DTYPES = ("bfloat16", "float16", "float32", "float8")


@dataclass(frozen=True)
class GemmShape:
    """One matmul: (m × k) · (k × n)."""

    name: str
    m: int
    n: int
    k: int

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k


def _attention_shapes(model: ModelSpec, t: int, tp: int) -> list[GemmShape]:
    h, n = model.hidden, model.heads
    if model.mla is None:
        d = model.dim_per_head
        return [GemmShape("qkv", t, (n + 2 * model.num_kv_heads) * d // tp, h),
                GemmShape("out_proj", t, h, n * d // tp)]
    a = model.mla
    qk = model.qk_head_dim
    shapes = []
    if a.q_lora_rank is None:
        shapes.append(GemmShape("q_proj", t, n * qk // tp, h))
    else:
        shapes += [GemmShape("q_a", t, a.q_lora_rank, h), GemmShape("q_b", t, n * qk // tp, a.q_lora_rank)]
    return [*shapes, GemmShape("kv_a", t, a.kv_lora_rank + a.qk_rope_head_dim, h),
            GemmShape("kv_b", t, n * (a.qk_nope_head_dim + a.v_head_dim) // tp, a.kv_lora_rank),
            GemmShape("out_proj", t, h, n * model.value_head_dim // tp)]


def _mlp(prefix: str, model: ModelSpec, rows: int, ffn_per_gpu: int) -> list[GemmShape]:
    gate = 2 if model.gated_mlp else 1
    return [GemmShape(f"{prefix}_fc1", rows, gate * ffn_per_gpu, model.hidden),
            GemmShape(f"{prefix}_fc2", rows, model.hidden, ffn_per_gpu)]


def gemm_shapes(model: ModelSpec, *, tp: int = 1, cp: int = 1, ep: int = 1, etp: int | None = None, mbs: int = 1,
                seq_len: int = 4096) -> list[GemmShape]:
    """The forward GEMMs of one micro-batch on one GPU (module docstring)."""
    etp = tp if etp is None else etp
    t = max(mbs * seq_len // cp, 1)
    shapes = _attention_shapes(model, t, tp)
    if model.num_dense_layers:
        shapes += _mlp("mlp", model, t, model.ffn_hidden // tp)
    if model.is_moe:
        per_expert = max(round(t * model.top_k * etp / tp * ep / model.experts), 1)
        shapes += _mlp("expert", model, per_expert, (model.expert_ffn_hidden or 1) // etp)
        if model.shared_experts:
            shapes += _mlp("shared", model, t, model.shared_ffn * model.shared_experts // tp)
    return [*shapes, GemmShape("logits", t, -(-model.vocab // tp), model.hidden)]


def default_dtype(device: str) -> str:
    return "bfloat16" if device.startswith("cuda") else "float32"


def _operands(shape: GemmShape, dtype: str, device: str) -> Any:
    """A closure running the GEMM once (float8: torch._scaled_mm, K and N rounded up to multiples of 16, without fast
    accumulation: the split-accumulator rate EfficiencySpec.gemm_fp8 holds)."""
    import torch

    if dtype == "float8":
        k, n = -(-shape.k // 16) * 16, -(-shape.n // 16) * 16
        a = torch.randn(shape.m, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    torch_dtype = getattr(torch, dtype)
    a = torch.randn(shape.m, shape.k, device=device, dtype=torch_dtype)
    b = torch.randn(shape.k, shape.n, device=device, dtype=torch_dtype)
    out = torch.empty(shape.m, shape.n, device=device, dtype=torch_dtype)
    return lambda: torch.matmul(a, b, out=out)


def bench_gemm(shapes: list[GemmShape], dtype: str, device: str, target_s: float = 0.1,
               repeats: int = 3, on_shape: Callable[[int, GemmShape], None] | None = None) -> list[dict[str, Any]]:
    """One row per shape: the median seconds per call and 2·m·n·k / that; `on_shape(i, shape)` is called before
    each shape is timed (progress)."""
    from llmscale.measure.timing import time_per_call_s

    rows = []
    for i, shape in enumerate(shapes):
        if on_shape is not None:
            on_shape(i, shape)
        seconds = time_per_call_s(_operands(shape, dtype, device), device, target_s=target_s, repeats=repeats)
        rows.append({"name": shape.name, "m": shape.m, "n": shape.n, "k": shape.k, "type": dtype,
                     "time_s": seconds, "flops_per_s": shape.flops / seconds})
    return rows
