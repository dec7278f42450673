"""Host (CPU) time of a training step: the framework calls that launch each layer's kernels, vectorized over layouts.

A block of o ops and g GEMMs makes o + g·(1 + q) forward calls; a pass's host time is H = n_calls·t_h
(StepConstants.host_call_us) and the pass takes max(H, G), or a flow shop where an MoE layer waits for its token
counts. Calls counted (Megatron-Core @ core_v0.15.0), measurements, overlap: docs/cost-model.md#host."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from llmscale.layout.arrays import Layouts, reads
from llmscale.layout.stages import StageLayers
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import CudaGraphScope, GroupedGemm, MoeDispatcher, Precision, Routing, TrainSpec

TE_STREAMS = 4
"""Streams TE's grouped GEMM spreads the local experts' GEMMs over (NVIDIA/TransformerEngine@70f53666 (v2.9)
transformer_engine/common/util/multi_stream.cpp get_num_compute_streams)."""


@dataclass(frozen=True)
class HostCalls:
    """Host calls of one layer and micro-batch by block and pass (shape (N,)); what each launches:
    docs/cost-model.md#host-calls.
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


def quantize_calls(train: TrainSpec) -> int:
    """q: host calls that quantize one GEMM input: none at 16-bit, one under every FP8 and FP4 recipe. Current
    scaling's amax, scale and cast are three kernels of one call (NVIDIA/TransformerEngine@v2.9 pytorch/csrc/
    quantizer.cpp Float8CurrentScalingQuantizer::quantize_impl), as MXFP8's one cast is; the host pays per call
    (StepConstants.host_call_us), not per kernel (docs/cost-model.md#host-calls)."""
    return 1 if train.precision in (Precision.FP8, Precision.FP4) else 0


def _block(ops: np.ndarray | float, gemms: np.ndarray | float, q: float) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) calls of a block of `ops` other ops and `gemms` GEMMs (docs/cost-model.md#host-calls)."""
    ops = np.asarray(ops, dtype=float)
    gemms = np.asarray(gemms, dtype=float)
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
    """(forward, backward) calls of the `local` experts by kernel (docs/cost-model.md#host-calls, experts)."""
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
        forward = forward + 3.0 * local + 1.0
        backward = backward + 3.0 * local
    return forward, backward


MOE_BEFORE_SYNC = ("router", "preprocess", "shared")
"""The parts of an MoE block (`moe_calls`) that run before its token counts reach the host; the others after."""


def moe_calls(model: ModelSpec, train: TrainSpec, lay: Layouts, q: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(forward, backward) host calls of each part of one MoE block (router, preprocess, shared, permute, dispatch,
    experts: docs/cost-model.md#host-calls). Reads lay.ep and lay.tp."""
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
def layer_calls(model: ModelSpec, train: TrainSpec, lay: Layouts) -> HostCalls:
    """Host calls of a dense layer's blocks and an MoE layer's, per pass (docs/cost-model.md#host-calls); `router`
    holds an MoE layer's parts before its token counts reach the host (MOE_BEFORE_SYNC), `experts` the rest. Reads
    lay.ep, lay.tp."""
    q = quantize_calls(train)
    collectives = np.where(lay.tp > 1, 2.0, 0.0)
    attention = _block(5.0 + collectives + (6.0 if model.mla else 0.0), 4.0 if model.mla else 2.0, q)
    mlp = _block(3.0 + collectives, 2.0, q)
    zero = np.zeros(lay.size)
    router = (zero, zero)
    experts = (zero, zero)
    if model.is_moe:
        parts = moe_calls(model, train, lay, q)
        before = [parts[name] for name in MOE_BEFORE_SYNC]
        after = [value for name, value in parts.items() if name not in MOE_BEFORE_SYNC]
        router = (sum(f for f, _ in before) + zero, sum(b for _, b in before) + zero)
        experts = (sum(f for f, _ in after) + zero, sum(b for _, b in after) + zero)
    return HostCalls(attention[0] + zero, attention[1] + zero, mlp[0] + zero, mlp[1] + zero, router[0], router[1],
                     experts[0], experts[1], *_output_calls(train, zero),
                     synced=host_synced(model, train))


def _output_calls(train: TrainSpec, zero: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The output layer's calls per pass: three other ops and the logits GEMM, whose input (and output gradient) an
    MXFP8 head quantizes (TrainSpec.fp8_output_proj)."""
    forward, backward = _block(3.0, 1.0, 1.0 if train.fp8_output_proj else 0.0)
    return forward + zero, backward + zero


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
    """(forward, backward) seconds the GPU of one rank waits for its host per micro-batch
    (docs/cost-model.md#host-overlap): `gpu_*` the pass's GPU seconds (kernels and exposed communication),
    `moe_layer` = (forward GPU seconds of one MoE layer, their part after its token counts). Full recompute launches
    the forward again in backward."""
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
