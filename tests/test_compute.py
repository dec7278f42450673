"""Compute time by op class (compute.py): the unfused attention core of pre-FlashAttention runs."""

from __future__ import annotations

import pytest

from llmscale.cost.compute import layer_times, rank_compute
from llmscale.cost.kernels import KernelRates, gemm_s
from llmscale.io.catalog import load_cluster, load_constants, load_model
from llmscale.layout.arrays import Layouts
from llmscale.layout.stages import RankOf, stage_layers
from llmscale.specs.layout import Recompute
from llmscale.specs.train import Precision, TrainSpec

GPT3 = load_model("gpt3-175b")
SELENE = load_cluster("selene", num_gpus=64)
CONSTANTS = load_constants()


def _train(flash: bool, seq_len: int = 2048) -> TrainSpec:
    return TrainSpec(seq_len=seq_len, global_batch=64, precision=Precision.FP16, flash_attention=flash)


def test_unfused_core_is_two_full_batched_gemms_and_the_scores_through_hbm() -> None:
    # Korthikanti et al. 2022 §4.1: without a fused attention, QKᵀ and AV are batched GEMMs over all s×s scores
    # (the causal mask is applied afterwards), and softmax + dropout move every score through HBM: read and write
    # 2 bytes each, plus dropout's 1-byte mask = 9 bytes per score forward, 11 backward; the GEMMs double.
    s, n, d, tp = 2048, GPT3.heads, GPT3.dim_per_head, 8
    lay = Layouts.from_columns(tp=tp, dp=8, sp=False)
    dense, _, _ = layer_times(GPT3, SELENE, _train(flash=False), lay, CONSTANTS)
    rates = KernelRates.of(SELENE.gpu, Precision.BF16)
    gemms = gemm_s(rates, s, s, d, n / tp) + gemm_s(rates, s, d, s, n / tp)
    scores = n / tp * s * s
    assert GPT3.dropout
    assert dense.attention_core_s[0] == pytest.approx(gemms + 9.0 * scores / rates.hbm_bytes_per_s, rel=1e-12)
    assert dense.attention_core_backward_s[0] == pytest.approx(2 * gemms + 11.0 * scores / rates.hbm_bytes_per_s,
                                                               rel=1e-12)


@pytest.mark.parametrize("seq_len", [1024, 2048, 4096])
def test_unfused_attention_costs_more_the_longer_the_sequence(seq_len: int) -> None:
    lay = Layouts.from_columns(tp=8, dp=8, sp=False)
    fused, _, _ = layer_times(GPT3, SELENE, _train(True, seq_len), lay, CONSTANTS)
    unfused, _, _ = layer_times(GPT3, SELENE, _train(False, seq_len), lay, CONSTANTS)
    share = (unfused.forward_s - fused.forward_s) / fused.forward_s
    double, _, _ = layer_times(GPT3, SELENE, _train(False, 2 * seq_len), lay, CONSTANTS)
    fused_double, _, _ = layer_times(GPT3, SELENE, _train(True, 2 * seq_len), lay, CONSTANTS)
    assert share[0] > 0
    assert ((double.forward_s - fused_double.forward_s) / fused_double.forward_s)[0] > share[0]


def test_selective_recompute_repeats_the_unfused_core() -> None:
    # Selective recompute re-runs exactly the attention core (Korthikanti et al. 2022 §5).
    lay = Layouts.from_columns(tp=8, pp=8, dp=1, sp=True, recompute=Recompute.SELECTIVE.code)
    times = layer_times(GPT3, SELENE, _train(False), lay, CONSTANTS)
    layers = stage_layers(GPT3, lay, RankOf.FIRST)
    rank = rank_compute(lay, layers, times, launch_overhead_us=0.0)
    assert rank.recompute_s[0] == pytest.approx(layers.dense[0] * times[0].attention_core_s[0], rel=1e-12)
