"""One MoE layer of one micro-batch on the busiest EP rank, part by part: GPU seconds, what each part moves or
computes, and the host calls that launch it — the listing `explain` prints, from the functions the step uses.

Parts (router, preprocess, permute, quantize, all-to-all, experts, activation, expert bias, shared), forward +
backward, from cost.moe, cost.host and cost.traffic: docs/cost-model.md#moe-layer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.cost.compute import moe_block_of
from llmscale.cost.host import LayerHost, layer_calls, moe_calls, quantize_calls
from llmscale.cost.moe import expert_bias_outside_gemm
from llmscale.cost.traffic import DEDUPLICATING, microbatch_comm
from llmscale.layout.arrays import Layouts
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec
from llmscale.units import US


@dataclass(frozen=True)
class MoePart:
    """One part of the layer (docs/cost-model.md#moe-layer) for one layout."""

    name: str
    gpu_s: float
    """GPU seconds, forward and backward (the all-to-all: before any overlap hides it)."""
    amount: float
    unit: str
    """What `amount` counts: FLOP or bytes."""
    host_calls: float
    """Host calls that launch it, forward and backward, before CUDA graphs."""


@dataclass(frozen=True)
class MoeLayerParts:
    """The listing of one layout's MoE layer."""

    parts: tuple[MoePart, ...]
    local_experts: float
    tokens_per_expert: float
    synced: bool
    """The forward waits on the host for the token counts (cost.host.host_synced)."""
    host_s: float
    """The layer's host seconds (forward + backward) after the job's CUDA graphs."""
    host_call_s: float

    @property
    def gpu_s(self) -> float:
        return sum(p.gpu_s for p in self.parts)


def moe_layer_parts(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts, constants: Constants,
                    i: int = 0) -> MoeLayerParts:
    """The parts of layout i's MoE layer (docs/cost-model.md#moe-layer); the model must be MoE."""
    assert model.is_moe, "moe_layer_parts of a dense model"
    block = moe_block_of(model, cluster, train, lay, constants)
    calls = moe_calls(model, train, lay, quantize_calls(train))
    comm = microbatch_comm(model, cluster, train, lay, constants)
    call_s = constants.step.host_call_us * US
    host = LayerHost.of(layer_calls(model, train, lay), train.cuda_graph_scope, lay.cuda_graphs, call_s)
    tokens = float(train.seq_len / lay.cp[i] * lay.mbs[i])
    sigma = float(lay.tp[i] if lay.sp[i] else 1)
    h = model.hidden
    f_e = float(model.expert_ffn_hidden or 0)
    local = float(model.experts / lay.ep[i])
    copies = float(block.tokens_per_expert[i]) * local
    sent = comm.bytes
    # Bytes that leave the GPU: a plain all-to-all's count includes the 1/n of its copies that stay
    off_gpu = 1.0 if train.moe_dispatcher in DEDUPLICATING else float((lay.ep[i] - 1) / lay.ep[i])

    def pair(name: str) -> float:
        return float(calls[name][0][i] + calls[name][1][i])

    def three(x: np.ndarray) -> float:
        return 3.0 * float(x[i])  # forward, then backward at twice the bytes

    def gemms(t: object) -> float:
        return float(t.forward_s[i] + t.input_grad_s[i] + t.weight_grad_s[i])  # type: ignore[attr-defined]

    m = model.mlp_matrices
    hbm = cluster.gpu.memory_bandwidth_bytes_per_s * cluster.gpu.efficiency.hbm
    shared_flops = 6.0 * tokens * h * m * model.shared_ffn * model.shared_experts
    memory = {name: three(getattr(block, f"{name}_s")) for name in ("permute", "cast", "activation", "expert_bias")}
    parts = (
        MoePart("router", gemms(block.router), 6.0 * tokens / sigma * h * model.experts, "FLOP", pair("router")),
        MoePart("preprocess", 0.0, 0.0, "B", pair("preprocess")),
        MoePart("permute", memory["permute"], memory["permute"] * hbm, "B", pair("permute")),
        MoePart("quantize", memory["cast"], memory["cast"] * hbm, "B", 0.0),
        MoePart("all-to-all", 2.0 * float(comm.ep_s[i]),
                2.0 * off_gpu * float(sent.ep_dispatch[i] + sent.ep_combine[i]), "B", pair("dispatch")),
        MoePart("experts", gemms(block.experts), 6.0 * copies * h * m * f_e / float(lay.etp[i]), "FLOP",
                pair("experts")),
        MoePart("activation", memory["activation"], memory["activation"] * hbm, "B", 0.0),
        # listed for models with biases; its host calls (3 per local expert each way) are the experts'
        *([MoePart("expert bias", memory["expert_bias"], memory["expert_bias"] * hbm, "B", 0.0)]
          if expert_bias_outside_gemm(model, train.moe_grouped_gemm_impl) else []),
        MoePart("shared", gemms(block.shared), shared_flops, "FLOP", pair("shared")),
    )
    layer_host = float(host.moe_forward[i] + host.moe_backward[i])
    return MoeLayerParts(parts, local, float(block.tokens_per_expert[i]), host.synced, layer_host, call_s)
