"""Host time of a step (cost.host): the calls counted, CUDA graphs, the MoE layer's host synchronisation, and the
launch-bound regime that the published Qwen3-30B-A3B rows on 8 B200 show between two releases."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.cost.host import (
    LayerHost,
    captured,
    host_synced,
    host_wait,
    layer_calls,
    quantize_calls,
)
from llmscale.cost.step import estimate_step
from llmscale.io.catalog import load_model
from llmscale.io.resolve import JobRequest, resolve
from llmscale.layout.arrays import Layouts
from llmscale.layout.stages import StageLayers
from llmscale.specs.train import CudaGraphScope, Fp8Recipe, GroupedGemm, MoeDispatcher, Precision, TrainSpec

QWEN30 = load_model("qwen3-30b-a3b")
LLAMA = load_model("llama3-8b")


def _calls(train: TrainSpec, ep: int = 8, model=QWEN30):  # type: ignore[no-untyped-def]
    lay = Layouts.from_columns(ep=ep, dp=8)
    return layer_calls(model, train, lay)


def test_quantize_calls_per_recipe() -> None:
    assert quantize_calls(TrainSpec(fp8_recipe=Fp8Recipe.MXFP8)) == 0  # 16-bit: nothing to quantize
    # amax, scale and cast of current scaling come from one quantizer call (TE v2.9 csrc/quantizer.cpp quantize_impl)
    assert quantize_calls(TrainSpec(precision=Precision.FP8, fp8_recipe=Fp8Recipe.TENSORWISE)) == 1
    assert quantize_calls(TrainSpec(precision=Precision.FP8, fp8_recipe=Fp8Recipe.MXFP8)) == 1


def test_te_grouped_gemm_launches_per_local_expert() -> None:
    # TE GroupedLinear quantizes and multiplies each local expert apart: halving ep halves the experts' calls' growth,
    # while the fused grouped MLP launches the same kernels whatever the number of experts.
    fp8 = TrainSpec(precision=Precision.FP8, fp8_recipe=Fp8Recipe.MXFP8)
    q = 1
    ep8, ep16 = _calls(fp8, 8), _calls(fp8, 16)
    local8, local16 = 128 / 8, 128 / 16
    assert ep8.experts_forward[0] - ep16.experts_forward[0] == pytest.approx(2 * (1 + q) * (local8 - local16))
    assert ep8.experts_backward[0] - ep16.experts_backward[0] == pytest.approx(2 * (2 + q) * (local8 - local16))
    fused = fp8.model_copy(update={"moe_grouped_gemm_impl": GroupedGemm.TE_FUSED})
    assert _calls(fused, 8).experts_forward[0] == _calls(fused, 16).experts_forward[0]


def test_which_moe_layers_wait_on_the_host() -> None:
    assert host_synced(QWEN30, TrainSpec())  # TE GroupedLinear needs the counts on the host (m_splits)
    sync_free = TrainSpec(moe_grouped_gemm_impl=GroupedGemm.TE_FUSED, moe_dispatcher=MoeDispatcher.FLEX_HYBRIDEP)
    assert not host_synced(QWEN30, sync_free)
    # te-fused behind the alltoall dispatcher still needs the split sizes on the host
    assert host_synced(QWEN30, sync_free.model_copy(update={"moe_dispatcher": MoeDispatcher.ALLTOALL}))
    padded = QWEN30.model_copy(update={"capacity_factor": 1.0, "pad_to_capacity": True})
    assert not host_synced(padded, TrainSpec())  # sizes fixed by the capacity
    assert not host_synced(LLAMA, TrainSpec())


def test_graphs_replay_captured_blocks_and_never_the_synced_experts() -> None:
    calls = _calls(TrainSpec())
    on = np.array([True])
    attn = captured(calls, CudaGraphScope.ATTN, on)
    assert attn.attention_forward[0] == 1 and attn.router_forward[0] == calls.router_forward[0]
    layer = captured(calls, CudaGraphScope.LAYER, on)
    assert layer.router_forward[0] == 1 and layer.experts_forward[0] == calls.experts_forward[0]  # synced: eager
    assert captured(calls, CudaGraphScope.LAYER, np.array([False])).attention_forward[0] == calls.attention_forward[0]
    dense = captured(_calls(TrainSpec(), model=LLAMA), CudaGraphScope.ITERATION, on)
    assert dense.attention_backward[0] == 0 and dense.output_forward[0] == 0


def _host(after: float, before: float, synced: bool) -> LayerHost:
    a = np.array([after]), np.array([before])
    zero = np.zeros(1)
    return LayerHost(zero, zero, a[0] + a[1], zero, zero, zero, a[0], a[1], synced)


def test_a_synced_layer_is_a_two_stage_flow_shop() -> None:
    # Host-bound experts (3 s of launches for 1 s of GPU) then GPU-bound attention (2 s of GPU, 0.5 s of launches):
    # after the sync the GPU idles while the experts launch, and the attention cannot start before them: 3 + 2 = 5,
    # of which 3 are GPU work, so the GPU waits 2. Without the sync the host runs ahead: max(3.5, 3) - 3 = 0.5.
    layers = StageLayers(dense=np.zeros(1), moe=np.ones(1), first=np.zeros(1), last=np.zeros(1),
                         full_attention_excess=np.zeros(1), rank=np.zeros(1))
    gpu, moe_layer = np.array([3.0]), (np.array([3.0]), np.array([1.0]))
    synced, _ = host_wait(_host(3.0, 0.5, True), layers, True, np.zeros(1), gpu, np.zeros(1), moe_layer)
    free, _ = host_wait(_host(3.0, 0.5, False), layers, True, np.zeros(1), gpu, np.zeros(1), moe_layer)
    assert synced[0] == pytest.approx(2.0) and free[0] == pytest.approx(0.5)


def _qwen3_b200(release: str, mbs: int) -> float:
    job = resolve(JobRequest(model="qwen3-30b-a3b", cluster="b200:8", gpus=8,
                             train={"global_batch": 512, "seq_len": 4096, "precision": "fp8", "fp8_recipe": "mxfp8"},
                             layout={"ep": 8, "mbs": mbs}, framework=f"megatron-bridge@{release}"))
    step = estimate_step(job.model, job.cluster, job.train, job.layouts, job.constants)
    return float(step.host_wait_s[0] / step.step_time_s[0])


def test_the_25_11_qwen3_row_is_launch_bound_and_the_26_04_row_is_not() -> None:
    # Megatron-Bridge performance tables (docs/performance-summary-archive.md @067f987df03b): Qwen3-30B-A3B on 8 B200
    # ran 9,299 tokens/s per GPU under 25.11 (mbs 1, alltoall, graphs of the router only) and 27,136 under 26.04.01
    # (mbs 4, HybridEP, attention graphed too): at mbs 1 the host's launches of 16 local experts set the pace, at
    # mbs 4 the GPU's work does.
    assert _qwen3_b200("25.11", 1) > 0.5
    assert _qwen3_b200("26.04.01", 4) < 0.15
