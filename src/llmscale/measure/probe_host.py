"""Micro-benchmarks the probe runs on every rank at once, in the same run as the training steps, to describe this host
to the step model (probe_predict.host_cluster turns them into a "cpu-host" ClusterSpec): the model's GEMMs, a 1024³
reference GEMM, attention, memory-bound kernels, a copy and the collectives, each the mean of `reps` calls.
What each measures and why: docs/design-notes.md#measure-probe-host.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from llmscale.measure.probe_dispatch import CommClock, EPGroup, combine, dispatch, plan_route, run_experts
from llmscale.measure.probe_model import NORM_EPS, apply_rope, is_moe_layer, rope_tables
from llmscale.specs.model import ModelSpec

COPY_BYTES = 64 * 2**20
FLUSH_BYTES = 64 * 2**20
STAGGER_S = 2e-3


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
REFERENCE_GEMM_DIM = 1024
SMALL_MESSAGE_BYTES = 4096


@dataclass(frozen=True)
class GemmShape:
    """A linear layer y = x·Wᵀ with x (tokens, inputs), W (outputs, inputs), run `count` times per micro-batch."""

    count: int
    tokens: int
    inputs: int
    outputs: int

    @property
    def flops(self) -> float:
        """Forward + input gradient + weight gradient: 3 · 2·t·i·o."""
        return 6.0 * self.tokens * self.inputs * self.outputs


@dataclass(frozen=True)
class CollectiveSample:
    """One measured collective: op ('all_reduce' | 'all_to_all'), nccl-tests buffer bytes, group size and stride."""

    op: str
    bytes_total: float
    size: int
    stride: int
    seconds: float


def mean_seconds(fn: Callable[[], object], reps: int, cold: bool = False) -> float:
    """Mean of `reps` timed calls after one warm-up — the mean, not the median: on a host shared with other
    processes the preemptions a median would drop are part of what a training step pays. `cold` rewrites a buffer
    larger than the last-level cache before each call (untimed), so the call finds its operands evicted, as a
    training step leaves them."""
    fn()
    times = []
    scratch = torch.zeros(FLUSH_BYTES // 4) if cold else None
    for _ in range(reps):
        if scratch is not None:
            scratch.add_(1.0)
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.fmean(times)


def gemm_shapes(model: ModelSpec, tokens: int, ep: int) -> list[GemmShape]:
    """Every projection of one micro-batch on one rank (tokens per expert: tokens·k·ep/E, balanced routing)."""
    h, d = model.hidden, model.dim_per_head
    moe_layers = sum(is_moe_layer(model, i) for i in range(model.layers))
    dense_layers = model.layers - moe_layers
    shapes = [
        GemmShape(model.layers, tokens, h, (model.heads + 2 * model.num_kv_heads) * d),
        GemmShape(model.layers, tokens, model.heads * d, h),
        GemmShape(dense_layers, tokens, h, 2 * model.ffn_hidden),
        GemmShape(dense_layers, tokens, model.ffn_hidden, h),
        GemmShape(1, tokens, h, model.vocab),
    ]
    if moe_layers:
        f_e = model.expert_ffn_hidden or 0
        per_expert = max(1, round(tokens * model.top_k * ep / model.experts))
        local = moe_layers * model.experts // ep
        shapes += [GemmShape(moe_layers, tokens, h, model.experts),
                   GemmShape(local, per_expert, h, 2 * f_e), GemmShape(local, per_expert, f_e, h)]
        if model.shared_experts:
            f_s = model.shared_ffn * model.shared_experts
            shapes += [GemmShape(moe_layers, tokens, h, 2 * f_s), GemmShape(moe_layers, tokens, f_s, h)]
    return [s for s in shapes if s.count > 0]


def gemm_seconds(shape: GemmShape, reps: int) -> float:
    """Forward, input-gradient and weight-gradient GEMM of one call of `shape`."""
    x = torch.randn(shape.tokens, shape.inputs)
    w = torch.randn(shape.outputs, shape.inputs)
    g = torch.randn(shape.tokens, shape.outputs)
    return (mean_seconds(lambda: F.linear(x, w), reps, cold=True) + mean_seconds(lambda: g @ w, reps, cold=True)
            + mean_seconds(lambda: g.t() @ x, reps, cold=True))


def reference_gemm_flops_per_s(reps: int) -> float:
    n = REFERENCE_GEMM_DIM
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2.0 * n**3 / mean_seconds(lambda: a @ b, reps)


def attention_seconds(model: ModelSpec, seq_len: int, mbs: int, reps: int) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's causal SDPA."""
    d, n, g = model.dim_per_head, model.heads, model.num_kv_heads
    q = torch.randn(mbs, n, seq_len, d, requires_grad=True)
    k = torch.randn(mbs, g, seq_len, d, requires_grad=True)
    v = torch.randn(mbs, g, seq_len, d, requires_grad=True)
    grad = torch.randn(mbs, n, seq_len, d)

    def forward() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=g != n)

    def both() -> None:
        forward().backward(grad)

    fwd = mean_seconds(forward, reps)
    return fwd, max(mean_seconds(both, reps) - fwd, 0.0)


def _leaves(**shapes: tuple[int, ...]) -> dict[str, torch.Tensor]:
    return {name: torch.randn(*shape, requires_grad=True) for name, shape in shapes.items()}


def _forward_backward_seconds(forward: Callable[[], list[torch.Tensor]], reps: int) -> float:
    grads = [torch.ones_like(t) for t in forward()]
    return mean_seconds(lambda: torch.autograd.backward(forward(), grads), reps)


def layer_elementwise_seconds(model: ModelSpec, seq_len: int, mbs: int, moe: bool, ep: int, reps: int) -> float:
    """Forward + backward of one layer's non-GEMM kernels as the probe runs them: RMSNorm ×2, the QKV split and
    RoPE, the attention output's transpose, two residual adds, and SiLU·up of the MLP — or, in an MoE layer, the
    router softmax, top-k and renormalisation, the dispatch permutations (probe_dispatch with no peer), SiLU·up
    of the routed copies, the weighted combine, the casts to and from the wire precision when ep > 1 and the
    shared experts' SiLU·up."""
    h, d, n, g = model.hidden, model.dim_per_head, model.heads, model.num_kv_heads
    b, s, t = mbs, seq_len, mbs * seq_len
    cos, sin = rope_tables(s, d)
    p = _leaves(x=(b, s, h), w1=(h,), w2=(h,), qkv=(b, s, (n + 2 * g) * d), core=(b, n, s, d), attn=(b, s, h),
                mlp=(t, h))
    if moe:
        copies, f = t * model.top_k, model.expert_ffn_hidden or 0
        p |= _leaves(logits=(t, model.experts), gate_up=(copies, 2 * f))
        shared = model.shared_ffn * model.shared_experts
        if shared:
            p |= _leaves(shared_gate_up=(t, 2 * shared))
    else:
        f = model.ffn_hidden
        p |= _leaves(gate_up=(t, 2 * f))
    local = EPGroup(1, 0, None, (0,), CommClock())

    def mlp_side(tokens: torch.Tensor) -> list[torch.Tensor]:
        gate, up = p["gate_up"].split(f, dim=-1)
        outs = [F.silu(gate) * up]
        if moe:
            weights, index = torch.softmax(p["logits"], dim=-1).topk(model.top_k, dim=-1)
            weights = weights / weights.sum(-1, keepdim=True)
            wire = (lambda x: x.to(torch.bfloat16).to(x.dtype)) if ep > 1 else (lambda x: x)
            route = plan_route(index, model.experts, local)
            rows = wire(dispatch(tokens, route, model.top_k, local))
            outs.append(combine(wire(run_experts(rows, route, lambda e, r: r)), route, weights, local))
            if "shared_gate_up" in p:
                gate, up = p["shared_gate_up"].chunk(2, dim=-1)
                outs.append(F.silu(gate) * up)
        return outs

    def forward() -> list[torch.Tensor]:
        q, k, v = p["qkv"].split([n * d, g * d, g * d], dim=-1)
        q = apply_rope(q.view(b, s, n, d).transpose(1, 2), cos, sin)
        k = apply_rope(k.view(b, s, g, d).transpose(1, 2), cos, sin)
        v = v.view(b, s, g, d).transpose(1, 2)
        merged = p["core"].transpose(1, 2).reshape(b, s, n * d)
        x = p["x"] + p["attn"]
        normed = F.rms_norm(x, (h,), p["w2"], NORM_EPS)
        return [F.rms_norm(p["x"], (h,), p["w1"], NORM_EPS), q, k, v, merged, normed,
                x.view(t, h) + p["mlp"], *mlp_side(normed.view(t, h))]

    return _forward_backward_seconds(forward, reps)


def loss_seconds(tokens: int, vocab: int, reps: int) -> float:
    """Forward + backward of the fp32 cross-entropy over (tokens, vocab) logits."""
    logits = torch.randn(tokens, vocab, requires_grad=True)
    targets = torch.randint(vocab, (tokens,))
    return _forward_backward_seconds(lambda: [F.cross_entropy(logits, targets)], reps)


def optimizer_seconds(shapes: list[tuple[int, ...]], reps: int) -> float:
    """One AdamW step over tensors of the model's parameter shapes (gradients set)."""
    params = [torch.nn.Parameter(torch.zeros(shape)) for shape in shapes]
    for param in params:
        param.grad = torch.ones_like(param)
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    return mean_seconds(optimizer.step, reps)


def copy_bytes_per_s(reps: int) -> float:
    src = torch.ones(COPY_BYTES // 4)
    dst = torch.empty_like(src)
    return 2.0 * COPY_BYTES / mean_seconds(lambda: dst.copy_(src), reps)


def collective_sample(op: str, nbytes: float, group: Any, members: tuple[int, ...], stride: int, reps: int,
                      dtype: torch.dtype = torch.float32) -> CollectiveSample:
    """Mean transfer time of one all_reduce or all_to_all of `nbytes` in `group`: each call's exit minus the
    last member's entry (the host's one monotonic clock), as the training steps' calls are split
    (probe_predict). Before each call (untimed): caches flushed, a barrier, then one member (in turn) busy for
    STAGGER_S while the others already wait in the call — in a step the ranks reach a collective apart, and the
    waiting ones must be woken when the last arrives."""
    size = len(members)
    elements = max(size, int(nbytes) // dtype.itemsize // size * size)
    buf, out = torch.ones(elements, dtype=dtype), torch.empty(elements, dtype=dtype)
    starts, ends = torch.zeros(reps + 1, dtype=torch.float64), torch.zeros(reps + 1, dtype=torch.float64)
    scratch = torch.zeros(FLUSH_BYTES // 4)
    me = members.index(dist.get_rank())
    for i in range(reps + 1):
        scratch.add_(1.0)
        dist.barrier(group=group)
        if i % size == me:  # one member arrives late, the others wait blocked inside the call, as in a step
            _spin(STAGGER_S)
        starts[i] = time.perf_counter()
        if op == "all_reduce":
            dist.all_reduce(buf, group=group)
        else:
            dist.all_to_all_single(out, buf, group=group)
        ends[i] = time.perf_counter()
    everyone = [torch.empty_like(starts) for _ in range(size)]
    dist.all_gather(everyone, starts, group=group)
    last = torch.stack(everyone).max(0).values
    transfer = (ends - torch.maximum(last, starts))[1:]
    return CollectiveSample(op, float(elements * dtype.itemsize), size, stride, float(transfer.mean()))
