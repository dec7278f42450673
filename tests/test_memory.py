"""Golden tests of the memory model against published numbers (each cites its source)."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.cost.activations import layer_activations
from llmscale.cost.memory import memory_breakdown
from llmscale.cost.params import count_params
from llmscale.io.catalog import load_cluster, load_constants, load_model
from llmscale.layout.arrays import Layouts
from llmscale.specs.layout import Recompute, Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Fp8Cache, Precision, Routing, TrainSpec, Zero3Gather
from llmscale.units import MIB
from tests.conftest import make_cluster

CONSTANTS = load_constants()

GPT3 = load_model("gpt3-175b")
GPT3_TRAIN = TrainSpec(seq_len=2048, global_batch=1536, flash_attention=False)


# Korthikanti et al. 2022 (arXiv:2205.05198) Table 2 for GPT-3 175B (s = 2048, b = 1, h = 12288, a = 96,
# t = 8), its formulas evaluated (5as/h = 80): MiB of activations per layer.
@pytest.mark.parametrize(
    ("tp", "sp", "recompute", "expected_mib"),
    [
        (1, False, Recompute.NONE, 2736.0),  # no parallelism: sbh(34 + 5as/h)
        (8, False, Recompute.NONE, 552.0),  # TP: sbh(10 + 24/t + 5as/(ht))
        (8, True, Recompute.NONE, 342.0),  # TP + SP: sbh(34/t + 5as/(ht))
        (8, False, Recompute.SELECTIVE, 312.0),  # TP + selective: sbh(10 + 24/t)
        (8, True, Recompute.SELECTIVE, 102.0),  # TP + SP + selective: 34 sbh/t
    ],
)
def test_korthikanti_table2_per_layer(tp: int, sp: bool, recompute: Recompute, expected_mib: float) -> None:
    lay = Layouts.from_columns(tp=tp, dp=1, sp=sp, recompute=recompute.code)
    acts = layer_activations(GPT3, GPT3_TRAIN, lay)
    assert acts.dense_bytes[0] / MIB == pytest.approx(expected_mib, rel=1e-9)


def test_korthikanti_full_recompute_keeps_layer_input() -> None:
    # Table 2, full recompute: 2sbh per layer = 2 · 2048 · 12288 B = 48 MiB for GPT-3.
    lay = Layouts.from_columns(tp=8, dp=1, sp=False, recompute=Recompute.FULL.code)
    assert layer_activations(GPT3, GPT3_TRAIN, lay).input_bytes[0] / MIB == pytest.approx(48.0)


def test_first_stage_activations_match_megatron_sp_selective() -> None:
    # Megatron's compute_activation_memory (NVIDIA/Megatron-LM@00caa53 megatron/training/theoretical_memory_usage.py)
    # evaluated for SP + selective, p = 8, t = 8, no vp: [96 · 34·sbh + 8·s·b·p + s·b·h·p]/t = 9.59 GiB on the
    # first stage, of which 96 layers × 102 MiB = 9.5625 GiB are transformer layers; the remainder is the
    # embedding input/dropout, which llmscale leaves out (module docstring). Interleaving with vp = 4 multiplies
    # by 1 + (p − 1)/(p·v) = 1.21875 (11.68 GiB).
    cluster = make_cluster(num_gpus=1536)
    for vpp, factor in ((1, 1.0), (4, 1.21875)):
        schedule = Schedule.INTERLEAVED if vpp > 1 else Schedule.ONE_F_ONE_B
        lay = Layouts.from_columns(tp=8, pp=8, dp=24, vpp=vpp, schedule=schedule.code,
                                   recompute=Recompute.SELECTIVE.code, sp=True)
        result = memory_breakdown(GPT3, cluster, GPT3_TRAIN, lay, CONSTANTS)
        assert int(result.pipeline_rank[0]) == 0
        assert result.activations_bytes[0] / MIB == pytest.approx(96 * 102 * factor, rel=1e-9)


def _megatron_weight_and_optimizer_bytes(model: ModelSpec, tp: int, pp: int, dp: int, distributed: bool) -> float:
    """Megatron-LM megatron/training/theoretical_memory_usage.py @00caa53 compute_weight_and_optimizer_memory,
    transcribed for MHA/GQA dense models (no MTP): most-loaded shard = (block/PP + embedding)/TP
    (+ output embedding if untied and PP = 1), times 18 B or 6 + 12/DP B per parameter."""
    h, d = model.hidden, model.dim_per_head
    norm = 1 if model.norm.value == "rmsnorm" else 2
    gated = 1.5 if model.gated_mlp else 1.0
    attn = 2 * h * h * (1 + model.num_kv_heads / model.heads) * (d * model.heads / h)
    layer = 2 * h * (model.ffn_hidden * gated + norm) + attn
    block = layer * model.layers + norm * h
    embedding = h * model.vocab
    shard = (block / pp + embedding) / tp
    if not model.tied_embeddings and pp == 1:
        shard += embedding / tp
    return shard * (6 + 12 / dp if distributed else 18)


@pytest.mark.parametrize(
    ("name", "tp", "pp", "dp", "zero"),
    [
        ("gpt3-175b", 8, 8, 24, 1),  # Narayanan 2021's layout with the distributed optimizer
        ("gpt3-175b", 8, 8, 24, 0),
        ("llama3-70b", 8, 1, 16, 1),  # pp = 1: input and output embeddings on one shard
        ("llama3-405b", 8, 14, 8, 1),  # 126 layers = 14 stages × 9
    ],
)
def test_weights_and_optimizer_match_megatron(name: str, tp: int, pp: int, dp: int, zero: int) -> None:
    model = load_model(name)
    train = TrainSpec(seq_len=2048, global_batch=dp * 8)
    lay = Layouts.from_columns(tp=tp, pp=pp, dp=dp, zero=zero)
    result = memory_breakdown(model, make_cluster(num_gpus=16384), train, lay, CONSTANTS)
    ours = result.weights_bytes + result.gradients_bytes + result.optimizer_bytes
    # With layers divisible by pp both count the first stage (its layers + the embedding); they differ by
    # the linear biases and where the final norm sits (< 0.5 %).
    expected = _megatron_weight_and_optimizer_bytes(model, tp, pp, dp, distributed=zero >= 1)
    assert int(result.pipeline_rank[0]) == 0
    assert ours[0] == pytest.approx(expected, rel=5e-3)


def test_seed_state_arithmetic_for_500b_active_params() -> None:
    # ZeRO's accounting of mixed-precision Adam state (Rajbhandari et al. 2019, arXiv:1910.02054: 16 B/param) for
    # 500B parameters → fp32 moments 2 × 4 B × 500B = 4 TB, fp32 master 2 TB, bf16 gradients 1 TB; with the 1 TB
    # of bf16 weights ≈ 8 TB of state, 8 TB / 80 GB = 100 GPUs of 80 GB just to hold it. A dense 500B model
    # fully sharded (ZeRO-3) over N GPUs must hold exactly that in total.
    model = ModelSpec(name="dense-500b", layers=100, hidden=20480, ffn_hidden=81920, heads=160, vocab=100000,
                      gated_mlp=False)
    params = count_params(model).total
    assert params == pytest.approx(500e9, rel=0.02)
    train = TrainSpec(seq_len=4096, global_batch=1024, fp32_grads=False)
    n = 128
    lay = Layouts.from_columns(tp=1, pp=1, dp=n, zero=3, recompute=Recompute.FULL.code)
    result = memory_breakdown(model, make_cluster(num_gpus=n), train, lay, CONSTANTS)
    moments_and_master = result.optimizer_bytes[0] * n
    assert moments_and_master == pytest.approx(12 * params)  # 4 TB moments + 2 TB master at 500B
    assert result.gradients_bytes[0] * n == pytest.approx(2 * params)  # 1 TB bf16 gradients
    state_total = (result.weights_bytes[0] + result.gradients_bytes[0] + result.optimizer_bytes[0]) * n
    assert state_total == pytest.approx(16 * params)


def test_moe_experts_are_divided_by_ep() -> None:
    # The gap in Megatron's estimator named in the issue: expert weights must shrink with ep.
    model = load_model("deepseek-v3")
    train = TrainSpec(seq_len=4096, global_batch=1024)
    lay = Layouts.from_columns(tp=1, pp=16, dp=128, ep=np.array([8, 64]), zero=1, etp=1)
    result = memory_breakdown(model, make_cluster(num_gpus=2048), train, lay, CONSTANTS)
    assert result.weights_bytes[1] < result.weights_bytes[0] / 4


# NVIDIA's per-tensor DeepSeek-V3 estimator (yanring/Megatron-MoE-ModelZoo@e8650517d60d
# misc/tools/deepseek_mem_estimate.py, `calc`), evaluated at s = 4096, tp = 1, BF16, no recompute: 2236 MiB per MoE
# layer and micro-batch, of which 448 MiB is the un-permuted expert output that "probs2swiglu" (Megatron-Core's router
# weights inside the SwiGLU) removes; its savings per module: layernorm 112 MiB, mla_up_proj 512 MiB, moe_act 144 MiB.
DSV3 = load_model("deepseek-v3")
DSV3_TRAIN = TrainSpec(seq_len=4096, global_batch=1024)
ROUTER_FP32_MIB = 2.0
"""The estimator keeps the router probabilities in bf16 (2 B); Megatron-Bridge's DeepSeek-V3 recipes route in fp32
(moe_router_dtype fp32), which llmscale counts: 4 B × 256 experts × 4096 tokens = 2 MiB more."""


@pytest.mark.parametrize(
    ("flags", "expected_mib"),
    [
        ({}, 2236.0 - 448.0),
        ({"recompute_norm": True}, 2236.0 - 448.0 - 112.0),
        ({"recompute_mla_up": True}, 2236.0 - 448.0 - 512.0),
        ({"recompute_moe_act": True}, 2236.0 - 448.0 - 144.0),
    ],
)
def test_deepseek_v3_moe_layer_matches_nvidias_estimator(flags: dict[str, bool], expected_mib: float) -> None:
    lay = Layouts.from_columns(tp=1, dp=64, ep=64, etp=1, **flags)
    acts = layer_activations(DSV3, DSV3_TRAIN, lay)
    assert acts.moe_bytes[0] / MIB == pytest.approx(expected_mib + ROUTER_FP32_MIB, rel=1e-12)


@pytest.mark.parametrize("impl", ["te", "te-fused"])
def test_a_clamped_glu_keeps_its_concatenated_copy_unless_recomputed(impl: str) -> None:
    # Megatron-Core's weighted_bias_quick_geglu_impl (fused_bias_geglu.py @0d8e0714 and core_v0.17.0) hands the fused
    # activation torch.cat of the two clamped halves, a new [copies, 2·f_e] 16-bit tensor it saves for backward, while
    # the clamps keep fc1's output (already counted). Under moe_act recompute the activation runs without grad and
    # nothing is saved; the fused grouped MLP clamps in its epilogue. GPT-OSS: 4 copies per token, f_e = 2880.
    gpt_oss = load_model("gpt-oss-120b")
    train = TrainSpec(seq_len=4096, global_batch=1024, moe_grouped_gemm_impl=impl, routing=Routing.FORCED)
    unclamped = gpt_oss.model_copy(update={"glu_clamp": None})
    for keep in (False, True):
        lay = Layouts.from_columns(dp=8, ep=8, recompute_moe_act=keep)
        extra = (layer_activations(gpt_oss, train, lay).moe_bytes[0]
                 - layer_activations(unclamped, train, lay).moe_bytes[0])
        saved = 4096 * 4 * 2 * 2880 * 2 if impl == "te" and not keep else 0.0
        assert extra == pytest.approx(saved, rel=1e-9)


def test_deepseek_v3_own_layout_fits_an_h800() -> None:
    # DeepSeek-V3 (arXiv:2412.19437) trained on 2048 H800 of 80 GB with PP16 DualPipe, EP64, no TP (§3.2), recomputing
    # every RMSNorm and MLA up-projection (§3.2.3), caching SwiGLU inputs in FP8 and recomputing their outputs, Adam
    # moments in bf16 (§3.3.3). The run happened, so its layout must be predicted to fit.
    train = TrainSpec(seq_len=4096, global_batch=15360, precision=Precision.FP8, fp8_cache=Fp8Cache.FINE_GRAINED,
                      bf16_moments=True, routing=Routing.LOSS_FREE)  # auxiliary-loss-free balancing (§2.1.2)
    lay = Layouts.from_columns(num_gpus=2048, pp=16, dp=128, ep=64, etp=1, schedule=Schedule.DUALPIPE.code,
                               recompute=Recompute.SELECTIVE.code, recompute_norm=True, recompute_mla_up=True,
                               recompute_moe_act=True)
    result = memory_breakdown(DSV3, load_cluster("deepseek-v3-h800"), train, lay, CONSTANTS)
    assert bool(result.fits[0]), result.total_bytes[0] / 2**30


def _te_layer_window_map(num_layers: int, num_offload: int) -> dict[int, int]:
    """NVIDIA/TransformerEngine@1269b2e209c3 transformer_engine/pytorch/cpu_offload.py
    AsyncDoubleBufferGroupOffloadHandler.__init__, transcribed: offload group i is freed in the forward, and
    reloaded in the backward, at the commit of layer layer_window_map[i]."""
    window, constant = {}, 0
    for i in range(num_offload):
        window[i] = (num_layers // num_offload) * (i + 1) - 1
        if i < num_layers % num_offload:
            window[i] += i + 1
            constant = i + 1
        else:
            window[i] += constant
    return window


@pytest.mark.parametrize(("num_layers", "num_offload"), [(32, 8), (80, 40), (80, 20), (126, 80), (61, 7)])
def test_te_frees_the_last_offloaded_layer_at_the_last_layer(num_layers: int, num_offload: int) -> None:
    # The premise of the offload peak: the last offloaded group waits until the model's last layer, so while the
    # output layer and the loss run only the kept layers are resident, and one offloaded layer beside them before.
    assert _te_layer_window_map(num_layers, num_offload)[num_offload - 1] == num_layers - 1


def test_activation_offload_keeps_one_offloaded_layer_only_outside_the_head() -> None:
    model, train = load_model("llama3-8b"), TrainSpec(seq_len=8192, global_batch=64)
    lay = Layouts.from_columns(num_gpus=64, dp=64, offload_activations=np.array([0, 8]))
    result = memory_breakdown(model, make_cluster(num_gpus=64), train, lay, CONSTANTS)
    per_layer = layer_activations(model, train, lay).dense_bytes[0]
    logits = 4.0 * 8192 * (model.vocab + model.hidden)  # fp32 logits of the 8192-token micro-batch
    assert logits > per_layer  # so the peak is at the head, without an offloaded layer in transit
    freed = result.activations_bytes[0] - result.activations_bytes[1]
    assert freed == pytest.approx(8 * per_layer, rel=1e-9)
    assert result.activation_offload_bytes_per_microbatch[1] == pytest.approx(2 * 8 * per_layer, rel=1e-9)


def test_fused_cross_entropy_keeps_16bit_logits() -> None:
    # TE's fused cross-entropy saves the bf16 logits, overwritten by their gradient (TransformerEngine@1269b2e209c3
    # cross_entropy.py): 2 B per vocabulary entry and token instead of Megatron's fp32 copy, 4 B.
    model = load_model("llama3-8b")
    lay = Layouts.from_columns(num_gpus=8, dp=8)
    plain, fused = (memory_breakdown(model, make_cluster(num_gpus=8), TrainSpec(
        seq_len=8192, global_batch=64, fused_cross_entropy=flag), lay, CONSTANTS) for flag in (False, True))
    assert plain.activations_bytes[0] - fused.activations_bytes[0] == pytest.approx(2.0 * 8192 * 128256, rel=1e-12)


# Megatron-FSDP, Llama 3 70B (h 8192, GQA 8 × 128, f 28672, V 128256, untied): one layer holds
# 8192·(8192 + 2·1024) + 8192² + 3·8192·28672 + 2·8192 = 855,654,400 parameters, the embedding and output layer
# 2·128256·8192 and the final norm 8192 = 2,101,354,496.
LLAMA70_LAYER, LLAMA70_OUTSIDE = 855_654_400, 2_101_354_496


def test_megatron_fsdp_buffers_of_llama3_70b() -> None:
    # Megatron-LM@d95e86a25bce param_and_grad_buffer.py: with fsdp_double_buffer two pooled layers of uint8 FP8
    # weights ('fsdp_params') and two of bf16 gradients ('fsdp_grads'); the embedding and output layer (not FSDP
    # units) stay gathered in bf16 (megatron_fsdp.py); the sharded weight buffer keeps the layers in FP8.
    model = load_model("llama3-70b")
    train = TrainSpec(seq_len=8192, global_batch=128, precision=Precision.FP8, fp32_grads=False,
                      fsdp_double_buffer=True, fp8_params=True)
    lay = Layouts.from_columns(num_gpus=64, dp=64, zero=3, mbs=2)
    zero1 = memory_breakdown(model, make_cluster(num_gpus=64), train, Layouts.from_columns(
        num_gpus=64, dp=64, zero=1, mbs=2), CONSTANTS)
    result = memory_breakdown(model, make_cluster(num_gpus=64), train, lay, CONSTANTS)
    gathered = 2 * LLAMA70_LAYER * 1 + 2 * LLAMA70_LAYER * 2 + LLAMA70_OUTSIDE * 2
    assert result.comm_buffer_bytes[0] - zero1.comm_buffer_bytes[0] == pytest.approx(gathered, rel=1e-12)
    # 80 layers at 1 B (their two norms of 8192, bf16 in Megatron, counted so too: 0.002 %), the rest at 2 B.
    assert result.weights_bytes[0] == pytest.approx((80 * LLAMA70_LAYER * 1 + LLAMA70_OUTSIDE * 2) / 64, rel=1e-12)


def test_deepspeed_zero3_gathers_one_matrix_and_its_gradient() -> None:
    # DeepSpeed ZeRO-3 (microsoft/DeepSpeed@112ebff6e86a stage3.py) unshards a sub-module's own parameters; for the
    # 529.6B GPT of Narayanan et al. 2021 Table 2 (h 20480, f 81920) the largest is fc1, 20480 × 81920, with its
    # fp16 gradient: 2 · 1,677,721,600 · 2 B.
    model = ModelSpec(name="gpt-529b", layers=105, hidden=20480, heads=128, ffn_hidden=81920, vocab=51200,
                      gated_mlp=False)
    train = TrainSpec(seq_len=2048, global_batch=2560, precision=Precision.FP16, zero3_gather=Zero3Gather.MODULE)
    zero3, zero2 = (memory_breakdown(model, make_cluster(num_gpus=640), train, Layouts.from_columns(
        num_gpus=640, dp=640, zero=z, mbs=4, recompute=Recompute.FULL.code), CONSTANTS) for z in (3, 2))
    assert zero3.comm_buffer_bytes[0] - zero2.comm_buffer_bytes[0] == pytest.approx(2 * 20480 * 81920 * 2, rel=1e-12)
