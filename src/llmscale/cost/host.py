"""Host (CPU) time of a training step: the framework calls that launch each layer's kernels, vectorized over layouts.

Shape legend: arrays of shape (N,), one element per layout; calls per layer and micro-batch, per pass.

Eager PyTorch launches every kernel from the host: a Python module or op (dispatch, autograd bookkeeping), the
library call (cuBLASLt descriptors and heuristics) and the driver's launch. Measured CPU time per call: 13.5 µs for a
torch Linear forward on a Xeon 8480C and 33-37 µs on Grace, 90-100 µs for a Transformer Engine Linear on Grace
(NVIDIA/TransformerEngine issue #2053, 2025-08-11), 115-140 µs per TEColumnParallelLinear forward (PR #1191). The
host time of a pass is H = n_calls · t_h with t_h = StepConstants.host_call_us, one number fitted inside those
bounds (scripts/fit_efficiency.py). A call counts once whatever its kernel's length.

Calls counted (Megatron-Core @ core_v0.15.0 transformer_layer.py, attention.py, mlp.py, moe/moe_layer.py, router.py,
token_dispatcher.py, experts.py; Transformer Engine v2.9 grouped_linear.py, csrc/extensions/cast.cpp). A block of o
other ops and g GEMMs makes o + g·(1 + q) forward calls and o + g·(2 + q) backward (a GEMM's input quantized by q
kernels: 0 at 16-bit, 2 under FP8 current scaling, amax then cast, else 1; backward quantizes the output gradient
and runs the data- and weight-gradient GEMMs):

  attention   norm, two rotary, core, residual + QKV and projection GEMMs (MLA: +2 norms, 4 split/concat, 2 GEMMs)
  MLP         norm, activation, residual + fc1 and fc2; TP collectives: two per block and pass when tp > 1
  router      norm, router GEMM and cast, random logits, score and top-k (fused: one kernel, else six), aux loss (2)
  preprocess  alltoall: counts, splits, their all-gather, four D2H copies (10); flex: fused metadata (3); no backward
  permute     permute and unpermute (fused: two each, else four); alltoall with E/ep > 1: chunk sort and unsort
              (fused: two each, else 2 + E/ep)
  dispatch    alltoall: token, probability and combine all-to-alls and the output add (4); flex: 3
  experts     te: fp8 pad/unpad (2, FP8 only) and one activation + per local expert and linear its quantize
              (split_quantize) and GEMM; te-fused: one grouped kernel per linear, quantization and GLU inside;
              legacy: one grouped GEMM per linear; cublas-loop: a module per expert (two GEMMs, two ops). Biased
              experts add _apply_bias's split, multiply and add per expert (+1 cat)
  output      final norm, logits GEMM, fused cross-entropy: 4 forward, 5 backward

The GPU runs a pass in G (its kernels and the exposed communication). Without a host synchronisation the host runs
ahead of the GPU across layers and the pass takes max(H, G). An MoE layer whose local experts need their token
counts on the host (`host_synced`) stops the host at every forward layer until the GPU drains: the layer is a
two-stage flow shop of the part after the counts (a: host, b: GPU) and the part before the next layer's counts:

    T_layer = max(max(a_after, b_after) + b_before, a_after + a_before)

so a host-bound expert block and a GPU-bound attention block add up instead of overlapping. A CUDA graph replays
the calls it captured as one (`captured`); a graph cannot hold the synchronisation, so the part after it stays eager.
Left out: the CPU's speed per node (Grace runs TE modules ~2.7× slower than a Xeon in issue #2053: one t_h for all),
the data-parallel hooks and pipeline send/receive calls, and the backward's own thread (autograd launches on one).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from llmscale.layout.arrays import Layouts, reads
from llmscale.layout.stages import StageLayers
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import CudaGraphScope, Fp8Recipe, GroupedGemm, MoeDispatcher, Precision, Routing, TrainSpec

TE_STREAMS = 4
"""Streams TE's grouped GEMM spreads the local experts' GEMMs over (NVIDIA/TransformerEngine@70f53666 (v2.9)
transformer_engine/common/util/multi_stream.cpp get_num_compute_streams)."""


@dataclass(frozen=True)
class HostCalls:
    """Host calls of one layer and micro-batch by block and pass (shape (N,)): what each launches (module docstring).
    `router` is an MoE layer's part before its token counts reach the host (norm, router, shared experts, the
    dispatcher's preprocess), `experts` the part after (permute, dispatch, experts, combine)."""

    attention_forward: np.ndarray
    attention_backward: np.ndarray
    mlp_forward: np.ndarray
    mlp_backward: np.ndarray
    router_forward: np.ndarray
    router_backward: np.ndarray
    experts_forward: np.ndarray
    experts_backward: np.ndarray
    output_forward: np.ndarray
    output_backward: np.ndarray
    synced: bool
    """The MoE forward waits on the host for the token counts (`host_synced`)."""


def quantize_calls(train: TrainSpec, recipe: Fp8Recipe) -> int:
    """q: kernels that quantize one GEMM input: none at 16-bit, amax then cast under FP8 current scaling (TE docs
    fp8_current_scaling.rst Figure 4), one cast otherwise (delayed, MXFP8, blockwise, NVFP4)."""
    if train.precision not in (Precision.FP8, Precision.FP4):
        return 0
    return 2 if train.precision is Precision.FP8 and recipe is Fp8Recipe.TENSORWISE else 1


def _block(ops: np.ndarray | float, gemms: np.ndarray | float, q: float) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) calls of a block of `ops` other ops and `gemms` GEMMs (module docstring)."""
    ops, gemms = np.asarray(ops, dtype=float), np.asarray(gemms, dtype=float)
    return ops + gemms * (1 + q), ops + gemms * (2 + q)


def host_synced(model: ModelSpec, train: TrainSpec) -> bool:
    """Whether an MoE layer's forward stops the host for its token counts: TEGroupedMLP's tokens_per_expert.tolist(),
    the alltoall dispatcher's `cuda_sync_point`, DeepEP's host wait (experts.py, token_dispatcher.py, fused_a2a.py
    @ core_v0.15.0) — all but HybridEP with the fused grouped MLP (counts stay on the device) and padded inputs."""
    if not model.is_moe or (model.capacity_factor is not None and model.pad_to_capacity):
        return False
    return not (train.moe_grouped_gemm_impl is GroupedGemm.TE_FUSED
                and train.moe_dispatcher is MoeDispatcher.FLEX_HYBRIDEP)


def _expert_calls(model: ModelSpec, train: TrainSpec, local: np.ndarray, q: int) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) calls of the `local` experts by kernel (module docstring, experts)."""
    impl = train.moe_grouped_gemm_impl
    if impl is GroupedGemm.TE_FUSED:
        forward, backward = _block(0.0, 2.0, 0)
    elif impl is GroupedGemm.LEGACY:
        forward, backward = _block(1.0, 2.0, q)
    elif impl is GroupedGemm.CUBLAS_LOOP:
        forward, backward = _block(2.0 * local, 2.0 * local, q)
    else:
        forward, backward = _block(1.0 + (2.0 if q else 0.0), 2.0 * local, q)
    if model.linear_bias:
        forward, backward = forward + 3.0 * local + 1.0, backward + 3.0 * local
    return forward, backward


MOE_BEFORE_SYNC = ("router", "preprocess", "shared")
"""The parts of an MoE block (`moe_calls`) that run before its token counts reach the host; the others after."""


def moe_calls(model: ModelSpec, train: TrainSpec, lay: Layouts, q: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(forward, backward) host calls of each part of one MoE block (module docstring: router, preprocess, shared,
    permute, dispatch, experts). Reads lay.ep and lay.tp."""
    local = (model.experts / lay.ep).astype(float)
    collectives = np.where(lay.tp > 1, 2.0, 0.0)
    zero = np.zeros(lay.size)
    router = 3.0 + (1.0 if train.moe_router_fusion else 6.0) + 2.0 * (train.routing is Routing.AUX_LOSS)
    alltoall = train.moe_dispatcher in (MoeDispatcher.ALLTOALL, MoeDispatcher.ALLGATHER)
    permute = 2.0 if train.moe_permute_fusion else 4.0
    chunks = np.where(local > 1, 2.0 if train.moe_permute_fusion else 2.0 + local, 0.0) if alltoall else zero
    parts = {
        "router": _block(router + zero, 0.0, q),
        "preprocess": ((10.0 if alltoall else 3.0) + zero, zero),  # metadata: no gradient
        "shared": _block(2.0 + collectives, 2.0, q) if model.shared_experts else (zero, zero),
        "permute": _block((2.0 * permute if alltoall else permute) + 2.0 * chunks, 0.0, q),
        "dispatch": _block((4.0 if alltoall else 3.0) + collectives, 0.0, q),
        "experts": _expert_calls(model, train, local, q),
    }
    return {name: (fwd + zero, bwd + zero) for name, (fwd, bwd) in parts.items()}


@reads("tp", "cp", "mbs", "sp", "etp", "ep")
def layer_calls(model: ModelSpec, train: TrainSpec, lay: Layouts, recipe: Fp8Recipe) -> HostCalls:
    """Host calls of a dense layer's blocks and an MoE layer's, per pass (module docstring); `router` holds an MoE
    layer's parts before its token counts reach the host (MOE_BEFORE_SYNC), `experts` the rest. Reads lay.ep, lay.tp."""
    q = quantize_calls(train, recipe)
    collectives = np.where(lay.tp > 1, 2.0, 0.0)
    attention = _block(5.0 + collectives + (6.0 if model.mla else 0.0), 4.0 if model.mla else 2.0, q)
    mlp = _block(3.0 + collectives, 2.0, q)
    zero = np.zeros(lay.size)
    router, experts = (zero, zero), (zero, zero)
    if model.is_moe:
        parts = moe_calls(model, train, lay, q)
        before = [parts[name] for name in MOE_BEFORE_SYNC]
        after = [value for name, value in parts.items() if name not in MOE_BEFORE_SYNC]
        router = (sum(f for f, _ in before) + zero, sum(b for _, b in before) + zero)
        experts = (sum(f for f, _ in after) + zero, sum(b for _, b in after) + zero)
    return HostCalls(attention[0] + zero, attention[1] + zero, mlp[0] + zero, mlp[1] + zero, router[0], router[1],
                     experts[0], experts[1], output_forward=4.0 + zero, output_backward=5.0 + zero,
                     synced=host_synced(model, train))


GRAPHED_BLOCKS = {
    CudaGraphScope.LAYER: ("attention", "mlp", "router", "experts"),
    CudaGraphScope.ITERATION: ("attention", "mlp", "router", "experts", "output"),
    CudaGraphScope.ATTN: ("attention",),
    CudaGraphScope.MOE_ROUTER: ("router",),
    CudaGraphScope.ATTN_MOE_ROUTER: ("attention", "router"),
}
"""The blocks each CUDA-graph scope captures (specs.train.CudaGraphScope; Megatron-Core CudaGraphModule)."""


def captured(calls: HostCalls, scope: CudaGraphScope, graphs: np.ndarray) -> HostCalls:
    """The calls left where `graphs` (lay.cuda_graphs) is on: each captured block's calls become one graph replay per
    pass (none per layer for a whole-iteration graph); a synced MoE layer's experts block stays eager (a graph
    cannot hold the host synchronisation)."""
    blocks = set(GRAPHED_BLOCKS[scope]) - ({"experts"} if calls.synced else set())
    replay = 0.0 if scope is CudaGraphScope.ITERATION else 1.0
    values: dict[str, object] = {"synced": calls.synced}
    for block in ("attention", "mlp", "router", "experts", "output"):
        for direction in ("forward", "backward"):
            name = f"{block}_{direction}"
            value = getattr(calls, name)
            values[name] = np.where(graphs, np.minimum(value, replay), value) if block in blocks else value
    return HostCalls(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class LayerHost:
    """Host seconds per layer and micro-batch by layer kind and pass, graphs applied (shape (N,)); `after_sync` and
    `before_sync` split an MoE layer's forward at its wait for the token counts."""

    dense_forward: np.ndarray
    dense_backward: np.ndarray
    moe_forward: np.ndarray
    moe_backward: np.ndarray
    output_forward: np.ndarray
    output_backward: np.ndarray
    after_sync: np.ndarray
    before_sync: np.ndarray
    synced: bool

    @classmethod
    def both(cls, calls: HostCalls, scope: CudaGraphScope, call_s: float) -> LayerHost:
        """`of` with graphs off for every layout of `calls`, then on: 2N elements."""
        doubled: dict[str, Any] = {f.name: np.concatenate([getattr(calls, f.name)] * 2) for f in fields(calls)
                                   if f.name != "synced"}
        twice = replace(calls, **doubled)
        graphs = np.repeat(np.array([False, True]), calls.attention_forward.size)
        return cls.of(twice, scope, graphs, call_s)

    @classmethod
    def of(cls, calls: HostCalls, scope: CudaGraphScope, graphs: np.ndarray, call_s: float) -> LayerHost:
        """`calls` with `scope`'s graphs where `graphs` is on, at `call_s` seconds per call."""
        c = captured(calls, scope, graphs)
        before = (c.attention_forward + c.router_forward) * call_s
        after = c.experts_forward * call_s
        return cls((c.attention_forward + c.mlp_forward) * call_s, (c.attention_backward + c.mlp_backward) * call_s,
                   before + after, (c.attention_backward + c.router_backward + c.experts_backward) * call_s,
                   c.output_forward * call_s, c.output_backward * call_s, after, before, c.synced)


def host_wait(host: LayerHost, layers: StageLayers, has_moe: bool, full: np.ndarray, gpu_forward: np.ndarray,
              gpu_backward: np.ndarray, moe_layer: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds the GPU of one rank waits for its host per micro-batch (module docstring): `gpu_*`
    the pass's GPU seconds (kernels and exposed communication), `moe_layer` = (forward GPU seconds of one MoE layer,
    their part after its token counts). Full recompute launches the forward again in backward."""
    rest_f = layers.dense * host.dense_forward + layers.last * host.output_forward
    backward = layers.dense * host.dense_backward + layers.last * host.output_backward - gpu_backward
    if not has_moe:
        return np.maximum(0.0, rest_f - gpu_forward), np.maximum(0.0, backward + full * rest_f)
    moe_f = layers.moe * host.moe_forward
    backward = np.maximum(0.0, backward + layers.moe * host.moe_backward + full * (rest_f + moe_f))
    if not host.synced:
        return np.maximum(0.0, rest_f + moe_f - gpu_forward), backward
    b_layer, b_after = moe_layer
    a_after = host.after_sync
    layer = np.maximum(np.maximum(a_after, b_after) + np.maximum(b_layer - b_after, 0.0), a_after + host.before_sync)
    others = np.maximum(0.0, rest_f - gpu_forward + layers.moe * b_layer)
    return layers.moe * (layer - b_layer) + others, backward
