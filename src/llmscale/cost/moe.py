"""The MoE block of a layer on the GPU, part by part, vectorized over layouts: router, expert GEMMs as the run's
kernels execute them, shared experts, and the memory-bound work on the routed copies; seconds on the busiest EP rank.

A local expert gets M = s_c·b·k·etp/tp·I/(E/ep) tokens; `te` takes (E/ep)/S · t_gemm(groups = S) over S streams,
the grouped kernels t_gemm(groups = E/ep). Per kernel, routed copies, sources: docs/cost-model.md#moe."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.cost.host import TE_STREAMS
from llmscale.cost.kernels import (
    FUSED_GROUPED_MLP_TILES,
    LIBRARY_TILES,
    KernelRates,
    LinearTimes,
    TileMenu,
    linear_s,
    memory_s,
)
from llmscale.cost.routing import routed_copies_per_token
from llmscale.layout.arrays import Layouts
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import GroupedGemm


def mlp_linears(model: ModelSpec, rates: KernelRates, tokens: np.ndarray, ffn: np.ndarray | float,
                groups: np.ndarray | float = 1.0, menu: TileMenu = LIBRARY_TILES) -> LinearTimes:
    """fc1 (h → (m−1)·ffn, the gate and up projections fused) and fc2 (ffn → h) of an MLP, or of `groups` experts in
    one grouped kernel, at ffn per GPU, on `menu`'s tiles."""
    fc1 = linear_s(rates, tokens, model.hidden, (model.mlp_matrices - 1) * ffn, groups, menu)
    return fc1 + linear_s(rates, tokens, ffn, model.hidden, groups, menu)


def routed_tokens_per_expert(model: ModelSpec, lay: Layouts, tokens: np.ndarray, load: np.ndarray) -> np.ndarray:
    """Tokens each local expert of the busiest EP rank receives per micro-batch: the k·etp/tp copies of each of the
    micro-batch's tokens over the E/ep experts, times that rank's load over the mean (`cost.routing`)."""
    copies = tokens * routed_copies_per_token(model, lay) * load
    result: np.ndarray = copies / (model.experts / lay.ep)
    return result


def expert_linears(model: ModelSpec, rates: KernelRates, per_expert: np.ndarray, ffn: np.ndarray | float,
                   local: np.ndarray, impl: GroupedGemm) -> LinearTimes:
    """The local experts' GEMMs as `impl` runs them (concurrency per kernel: docs/cost-model.md#moe-experts)."""
    if impl is GroupedGemm.TE:
        streams = np.minimum(local, TE_STREAMS)
        return mlp_linears(model, rates, per_expert, ffn, streams).scaled(local / streams)
    if impl is GroupedGemm.CUBLAS_LOOP:
        return mlp_linears(model, rates, per_expert, ffn).scaled(local)
    if impl is GroupedGemm.TE_FUSED:
        return mlp_linears(model, rates, per_expert, ffn, local, FUSED_GROUPED_MLP_TILES)
    return mlp_linears(model, rates, per_expert, ffn, local)


@dataclass(frozen=True)
class MoeBlock:
    """One MoE layer's block for one micro-batch on the busiest EP rank (seconds, shape (N,)); the elementwise parts
    are forward seconds (backward moves twice the bytes, cost.compute)."""

    router: LinearTimes
    """The 16-bit router GEMM over the sequence-parallel share of the tokens."""
    experts: LinearTimes
    """The routed experts' GEMMs (docs/cost-model.md#moe-experts)."""
    shared: LinearTimes
    """The shared experts: a tensor-parallel MLP over every token."""
    permute_s: np.ndarray
    """Permute, unpermute and combine of the routed copies."""
    cast_s: np.ndarray
    """Quantizing the routed copies and the experts' fc2 inputs (0 at 16-bit; fc2's is fused under te-fused)."""
    activation_s: np.ndarray
    """The experts' activation function, with the eager clamp of its inputs where one runs (GLU_CLAMP_BYTES; 0 under
    te-fused: in the GEMM's epilogue)."""
    expert_bias_s: np.ndarray
    """The experts' fc2 bias, weighted by the routing probabilities outside the GEMM (`EXPERT_BIAS_BYTES`)."""
    tokens_per_expert: np.ndarray
    """M of each local expert's GEMMs."""

    @property
    def after_sync_s(self) -> np.ndarray:
        """Forward GPU seconds of the part that runs after the token counts reach the host (cost.host)."""
        total: np.ndarray = (self.experts.forward_s + self.permute_s + self.cast_s + self.activation_s
                             + self.expert_bias_s)
        return total

    @property
    def linears(self) -> LinearTimes:
        return self.experts + self.shared + self.router


EXPERT_BIAS_BYTES = 28.0
"""Forward bytes per element of the experts' fc2 output that Megatron-Core's TEGroupedMLP._apply_bias moves for
experts with biases: `t + b * p` with fp32 probabilities, cat, cast back (NVIDIA/Megatron-LM@2edffadb
megatron/core/transformer/moe/experts.py); the count: docs/cost-model.md#moe-copies."""


GLU_CLAMP_BYTES = 16.0
"""Forward bytes per element of one expert's activation output (f_e per routed copy) that Megatron-Core moves to clamp
the GLU's inputs before its fused quick-GEGLU: weighted_bias_quick_geglu_impl runs `x_glu.clamp(max=c)`,
`x_linear.clamp(-c, c)` and `torch.cat` eagerly, outside the jit-fused function (NVIDIA/Megatron-LM@0d8e0714 and
core_v0.17.0 megatron/core/fusions/fused_bias_geglu.py; called by TEGroupedMLP's bias_act_func and, per expert, by
SequentialMLP's MLP.forward, mlp.py); the count: docs/cost-model.md#moe-copies."""


def expert_clamp_outside_fusion(model: ModelSpec, impl: GroupedGemm) -> bool:
    """Whether the experts' GLU inputs are clamped by eager kernels (GLU_CLAMP_BYTES): a clamped gated MLP under TE's
    grouped GEMM or the per-expert loop, the kernels it was read in (the fused grouped MLP clamps in its epilogue)."""
    return (model.glu_clamp is not None and model.gated_mlp
            and impl in (GroupedGemm.TE, GroupedGemm.CUBLAS_LOOP))


def expert_bias_outside_gemm(model: ModelSpec, impl: GroupedGemm) -> bool:
    """Whether the experts' fc2 bias runs through `_apply_bias` (EXPERT_BIAS_BYTES): experts with biases under TE's
    grouped GEMM, the kernel it was read in."""
    return model.linear_bias and impl is GroupedGemm.TE


def moe_block(model: ModelSpec, impl: GroupedGemm, lay: Layouts, rates: KernelRates, rates16: KernelRates,
              tokens: np.ndarray, load: np.ndarray, cast: float) -> MoeBlock:
    """The MoE block of one micro-batch of `tokens` per GPU (docs/cost-model.md#moe); `load` the busiest rank's
    routed load over the mean, `cast` the recipe's bytes per quantized element. Reads lay.tp, lay.sp, lay.etp,
    lay.ep."""
    tp = lay.tp.astype(float)
    sigma = np.where(lay.sp, lay.tp, 1).astype(float)
    h = model.hidden
    k = model.top_k
    f_e = float(model.expert_ffn_hidden or 0)
    local = (model.experts / lay.ep).astype(float)
    per_expert = routed_tokens_per_expert(model, lay, tokens, load)
    experts = expert_linears(model, rates, per_expert, f_e / lay.etp, local, impl)
    shared_ffn = model.shared_ffn * model.shared_experts
    zero = np.zeros(lay.size)
    shared = mlp_linears(model, rates, tokens, shared_ffn / tp) if shared_ffn else LinearTimes(zero, zero, zero)
    router = linear_s(rates16, tokens / sigma, h, model.experts)
    fused = impl is GroupedGemm.TE_FUSED
    clamp = GLU_CLAMP_BYTES if expert_clamp_outside_fusion(model, impl) else 0.0
    activation = 0.0 if fused else ((6.0 if model.gated_mlp else 4.0) + clamp) * f_e * k / tp
    bias = EXPERT_BIAS_BYTES if expert_bias_outside_gemm(model, impl) else 0.0
    return MoeBlock(
        router=router, experts=experts, shared=shared,
        permute_s=memory_s(rates, tokens * k * 10.0 * h / sigma),
        cast_s=memory_s(rates, tokens * cast * (k * h / sigma + (0.0 if fused else f_e * k / tp))),
        activation_s=memory_s(rates, tokens * activation),
        expert_bias_s=memory_s(rates, tokens * bias * k * h / sigma), tokens_per_expert=per_expert,
    )
