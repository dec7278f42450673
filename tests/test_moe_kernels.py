"""The MoE block on the GPU (cost.moe): how each kernel runs the local experts' small GEMMs, what the fused grouped MLP
removes, the EP all-to-all's overlap bound (cost.path), and explain's listing of the layer (cost.moe_layer)."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.cost.kernels import KernelRates, gemm_s
from llmscale.cost.moe import expert_linears, moe_block
from llmscale.cost.moe_layer import moe_layer_parts
from llmscale.io.catalog import load_cluster, load_model
from llmscale.io.resolve import JobRequest, resolve
from llmscale.layout.arrays import Layouts
from llmscale.specs.train import GroupedGemm, MoeDispatcher, Precision

QWEN30 = load_model("qwen3-30b-a3b")
B200 = load_cluster("b200:8")
RATES = KernelRates.of(B200.gpu, Precision.BF16)


def _experts(impl: GroupedGemm, tokens: float, local: float) -> float:
    times = expert_linears(QWEN30, RATES, np.array([tokens]), 768.0, np.array([local]), impl)
    return float(times.forward_s[0])


def test_one_local_expert_runs_the_same_on_every_kernel_that_picks_its_tile() -> None:
    # the fused grouped MLP has one tile (256 x 256 over an SM pair): never faster than a library's best pick
    times = {impl: _experts(impl, 2048, 1) for impl in GroupedGemm if impl is not GroupedGemm.TE_FUSED}
    assert max(times.values()) == pytest.approx(min(times.values()), rel=1e-12)
    assert _experts(GroupedGemm.TE_FUSED, 2048, 1) >= min(times.values())


def test_small_experts_pay_their_partial_waves_by_kernel() -> None:
    # 16 local experts of M = 512 tokens: fc1 is 512×1536 per expert, 4×6 tiles of 128×256 — a sixth of a wave of
    # 148 SMs. One grouped kernel packs all experts' tiles into shared waves; TE's 4 streams pack 4 at a time; a loop
    # pays a wave per expert. (Below ~256 tokens reading the weights bounds all three alike.)
    grouped, te, loop = (_experts(impl, 512, 16) for impl in (GroupedGemm.LEGACY, GroupedGemm.TE,
                                                              GroupedGemm.CUBLAS_LOOP))
    assert grouped < te < loop
    single = float(gemm_s(RATES, 512, 1536, QWEN30.hidden) + gemm_s(RATES, 512, QWEN30.hidden, 768))
    assert loop == pytest.approx(16 * single, rel=1e-12)


def test_the_fused_grouped_mlp_drops_the_activation_and_fc2_quantize_passes() -> None:
    lay = Layouts.from_columns(ep=8, dp=8)
    tokens = np.array([4096.0])
    fp8 = KernelRates.of(B200.gpu, Precision.FP8)
    te = moe_block(QWEN30, GroupedGemm.TE, lay, fp8, RATES, tokens, np.ones(1), cast=4.0)
    fused = moe_block(QWEN30, GroupedGemm.TE_FUSED, lay, fp8, RATES, tokens, np.ones(1), cast=4.0)
    assert te.activation_s[0] > 0 and fused.activation_s[0] == 0
    assert fused.cast_s[0] < te.cast_s[0]
    assert te.after_sync_s[0] == pytest.approx(te.experts.forward_s[0] + te.permute_s[0] + te.cast_s[0]
                                               + te.activation_s[0], rel=1e-12)


def test_expert_biases_move_the_fc2_output_through_apply_bias() -> None:
    """Megatron-Core's TEGroupedMLP adds the fc2 bias outside the GEMM, weighted by the fp32 routing probabilities,
    one expert at a time (experts.py _apply_bias @0d8e0714 and @2edffadb): b·p (write 4 B), t + b·p (read 2 + 4,
    write 4), cat (read 4, write 4), .to(bf16) (read 4, write 2) = 28 B per element of the [k·tokens, h] output."""
    gpt_oss = load_model("gpt-oss-120b")
    lay = Layouts.from_columns(ep=8, dp=8)
    tokens = np.array([16384.0])
    biased = moe_block(gpt_oss, GroupedGemm.TE, lay, RATES, RATES, tokens, np.ones(1), cast=0.0)
    hbm = B200.gpu.memory_bandwidth_bytes_per_s * B200.gpu.efficiency.hbm
    assert biased.expert_bias_s[0] == pytest.approx(16384 * 4 * 2880 * 28 / hbm, rel=1e-12)
    assert biased.after_sync_s[0] == pytest.approx(biased.experts.forward_s[0] + biased.permute_s[0]
                                                   + biased.activation_s[0] + biased.expert_bias_s[0], rel=1e-12)
    unbiased = gpt_oss.model_copy(update={"linear_bias": False})
    assert moe_block(unbiased, GroupedGemm.TE, lay, RATES, RATES, tokens, np.ones(1), cast=0.0).expert_bias_s[0] == 0
    # other kernels were not read for it: no cost is claimed there
    assert moe_block(gpt_oss, GroupedGemm.TE_FUSED, lay, RATES, RATES, tokens, np.ones(1), 0.0).expert_bias_s[0] == 0


def test_a_clamped_glu_moves_its_inputs_through_eager_clamps() -> None:
    """Megatron-Core's weighted_bias_quick_geglu_impl clamps the GLU's two halves and concatenates them eagerly, before
    the jit-fused activation (fused_bias_geglu.py @0d8e0714 and core_v0.17.0): clamp x_glu (read 2, write 2 B per
    element of f_e), clamp x_linear (2 + 2), cat (read 4, write 4) = 16 B per element of the activation's f_e output
    per routed copy, beside the activation's own 6 (read 2·f_e, write f_e, 16-bit). GPT-OSS: swiglu_limit 7.0."""
    gpt_oss = load_model("gpt-oss-120b")
    assert gpt_oss.glu_clamp == 7.0
    lay = Layouts.from_columns(ep=8, dp=8)
    tokens = np.array([16384.0])
    hbm = B200.gpu.memory_bandwidth_bytes_per_s * B200.gpu.efficiency.hbm
    clamped = moe_block(gpt_oss, GroupedGemm.TE, lay, RATES, RATES, tokens, np.ones(1), cast=0.0)
    assert clamped.activation_s[0] == pytest.approx(16384 * 4 * 2880 * (6 + 16) / hbm, rel=1e-12)
    free = gpt_oss.model_copy(update={"glu_clamp": None})
    unclamped = moe_block(free, GroupedGemm.TE, lay, RATES, RATES, tokens, np.ones(1), cast=0.0)
    assert unclamped.activation_s[0] == pytest.approx(16384 * 4 * 2880 * 6 / hbm, rel=1e-12)
    # SequentialMLP's per-expert MLP.forward calls the same function (mlp.py, core_v0.17.0 and 0d8e0714)
    loop = moe_block(gpt_oss, GroupedGemm.CUBLAS_LOOP, lay, RATES, RATES, tokens, np.ones(1), 0.0)
    assert loop.activation_s[0] == pytest.approx(clamped.activation_s[0], rel=1e-12)
    # the fused grouped MLP clamps in its epilogue (te.ops.ScaledClampedQGeGLU); Megatron's legacy GroupedMLP refuses
    # biases and quick-GELU (0d8e0714 experts.py), so GPT-OSS never runs there: no clamp is claimed for either
    assert moe_block(gpt_oss, GroupedGemm.TE_FUSED, lay, RATES, RATES, tokens, np.ones(1), 0.0).activation_s[0] == 0
    legacy = moe_block(gpt_oss, GroupedGemm.LEGACY, lay, RATES, RATES, tokens, np.ones(1), 0.0)
    assert legacy.activation_s[0] == pytest.approx(unclamped.activation_s[0], rel=1e-12)


def _job(overlap: bool):  # type: ignore[no-untyped-def]
    # Qwen3-235B on 256 H100 as the 26.04.01 table ran it (tp 2, pp 8, vp 4, ep 32): its EP all-to-all leaves the node,
    # under Megatron's alltoall dispatcher every expert copy of a token (cost.traffic.DEDUPLICATING).
    return resolve(JobRequest(model="qwen3-235b-a22b", cluster="h100-sxm:256", gpus=256,
                              train={"global_batch": 8192, "seq_len": 4096, "precision": "fp8",
                                     "moe_dispatcher": "alltoall"},
                              layout={"tp": 2, "pp": 8, "vpp": 4, "ep": 32, "etp": 1, "ep_comm_overlap": overlap}))


def test_an_overlapped_all_to_all_hides_behind_no_more_than_the_paired_compute() -> None:
    # Megatron's 1F1B EP overlap (overlap_moe_expert_parallel_comm) runs one micro-batch's all-to-alls under another's
    # compute, as DualPipe does (DeepSeek-V3 §3.2.1): what exceeds that compute stays on the critical path.
    from llmscale.cost.step import estimate_step

    off, on = (estimate_step(j.model, j.cluster, j.train, j.layouts, j.constants) for j in (_job(False), _job(True)))
    assert off.ep_exposed_s[0] > off.compute_s[0]  # inter-node all-to-all longer than the compute
    assert on.ep_exposed_s[0] >= off.ep_exposed_s[0] - on.compute_s[0] - on.recompute_s[0] - 1e-9


def test_each_all_to_all_runs_beside_the_paired_micro_batchs_chunks() -> None:
    # Megatron-Core @ core_v0.15.0 models/common/model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run, with
    # delayed weight gradients: comm combine_bwd | comp attn_fwd; comm dispatch_fwd, then dispatch_bwd once mlp_bwd is
    # done | comp mlp_bwd, mlp_bwd_dw, then mlp_fwd once dispatch_fwd is done; comm combine_fwd | comp attn_bwd. Here
    # (ms): attention 2 forward, 4 backward; experts 4 forward, 8 backward (4 data, 4 weight gradient): 18 of compute.
    from dataclasses import fields

    from llmscale.cost.compute import LayerTimes
    from llmscale.cost.path import OverlapChunks, paired_all_to_all_s

    def times(**given: float) -> LayerTimes:
        return LayerTimes(**{f.name: np.array([given.get(f.name, 0.0)]) for f in fields(LayerTimes)})

    dense = times(gemm_s=3, attention_core_s=1, dense_mlp_s=2, gemm_input_grad_s=3, gemm_weight_grad_s=3,
                  attention_core_backward_s=2)
    moe = times(gemm_s=5, attention_core_s=1, gemm_input_grad_s=5, gemm_weight_grad_s=5, attention_core_backward_s=2)
    exposed = paired_all_to_all_s(np.array([1.0, 3.0, 5.0]), OverlapChunks.of(dense, moe))
    # a = 1: every all-to-all under its chunk. a = 3: only combine_bwd outlasts attn_fwd (3 + 12 + 4 = 19).
    # a = 5: 5 + max(max(5, 4) + 5, max(8, 5) + 4) + 5 = 22; pairing each all-to-all with one chunk alone would
    # give 3 + 1 + 0 + 1 = 5, as dispatch_fwd also runs beside mlp_bwd_dw.
    assert exposed == pytest.approx([0.0, 1.0, 4.0])


def _combined_1f1b_span(p: int, v: int, m: int, f: float, b: float, alone_f: float, alone_b: float) -> float:
    """The step of Megatron-Core's combined 1F1B order with chunk forward f, backward b, a paired step f + b, and the
    chunks run alone alone_f, alone_b longer (core_v0.15.0 schedules.py: get_schedule_table's micro-batch groups of
    pp, get_pp_rank_microbatches' warm-up (p − rank − 1)·2 + (v − 1)·p + 1 under the overlap, then forward k + W
    with backward k, then W backwards; combined_1f1b.py: one forward and one backward alone without pipelining)."""
    table = [(mb, c) for lo in range(0, m, p) for c in range(v) for mb in range(lo, min(lo + p, m))]
    total, last = m * v, p * v - 1
    warm = [min((p - r - 1) * 2 + (v - 1) * p + 1, total) if p > 1 else 1 for r in range(p)]
    todo = [[("F", k) for k in range(w)] + [("P", k) for k in range(total - w)]
            + [("B", k) for k in range(total - w, total)] for w in warm]
    fwd: dict[tuple[int, int], float] = {}
    bwd: dict[tuple[int, int], float] = {}
    clock = [0.0] * p

    def f_stage(r: int, k: int) -> tuple[int, int]:
        return table[k][0], table[k][1] * p + r

    def b_stage(r: int, k: int) -> tuple[int, int]:
        return table[k][0], (v - 1 - table[k][1]) * p + r

    def f_ready(r: int, k: int) -> float | None:
        mb, stage = f_stage(r, k)
        return 0.0 if stage == 0 else fwd.get((mb, stage - 1))

    def b_ready(r: int, k: int) -> float | None:
        mb, stage = b_stage(r, k)
        return fwd.get((mb, stage)) if stage == last else bwd.get((mb, stage + 1))

    while any(todo):
        for r in range(p):
            while todo[r]:
                kind, k = todo[r][0]
                ready = [f_ready(r, k)] if kind == "F" else [b_ready(r, k)] if kind == "B" else \
                    [f_ready(r, k + warm[r]), b_ready(r, k)]
                if None in ready:
                    break
                clock[r] = max([clock[r], *ready]) + {"F": f + alone_f, "B": b + alone_b, "P": f + b}[kind]
                if kind == "F":
                    fwd[f_stage(r, k)] = clock[r]
                elif kind == "B":
                    bwd[b_stage(r, k)] = clock[r]
                else:
                    fwd[f_stage(r, k + warm[r])] = bwd[b_stage(r, k)] = clock[r]
                todo[r].pop(0)
    return max(clock)


@pytest.mark.parametrize(("pp", "vpp", "nmb"), [(1, 1, 5), (2, 2, 8), (4, 2, 16), (8, 4, 64), (8, 4, 8)])
def test_the_chunks_that_run_alone_lengthen_the_step_by_pp_times_vpp(pp: int, vpp: int, nmb: int) -> None:
    # Whatever the rank, the chunks Megatron's combined 1F1B runs alone add pp·vpp of their extra time each way to the
    # step (an event simulation of its order, above); the pipeline model's step is (nmb + (pp − 1)/vpp) micro-batches
    # of vpp chunks, so a per-micro-batch share u with u·(nmb + (pp − 1)/vpp) = pp carries the same.
    from llmscale.cost.path import unpaired_share

    f, b, extra_f, extra_b = 1.0, 2.0, 0.25, 0.5
    paired = _combined_1f1b_span(pp, vpp, nmb, f, b, 0.0, 0.0)
    assert paired == pytest.approx((nmb + (pp - 1) / vpp) * vpp * (f + b))  # the pipeline model's interleaved step
    alone = _combined_1f1b_span(pp, vpp, nmb, f, b, extra_f, extra_b)
    assert alone - paired == pytest.approx(pp * vpp * (extra_f + extra_b))
    u = unpaired_share(Layouts.from_columns(pp=pp, vpp=vpp, dp=1), np.array([nmb]))[0]
    assert u * (nmb + (pp - 1) / vpp) * vpp * (extra_f + extra_b) == pytest.approx(alone - paired)


def test_a_micro_batch_run_alone_hides_its_backward_dispatch_behind_the_weight_gradients(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GPT-OSS on 64 GB200 as the 26.04.01 table ran it (pp 1, ep 64, mbs 4, GBS 1280: 5 micro-batches, the first
    # forward and the last backward alone): the step's exposed all-to-all is the paired one plus a fifth of what a
    # micro-batch run alone adds, and a micro-batch run alone exposes less than the all-to-all without the overlap (its
    # backward dispatch runs beside the experts' delayed weight gradients).
    import llmscale.cost.path as path
    from llmscale.cost.step import estimate_step

    def ep_exposed(overlap: bool) -> float:
        job = resolve(JobRequest(model="gpt-oss-120b", cluster="gb200-nvl72", gpus=64,
                                 train={"global_batch": 1280, "seq_len": 4096},
                                 layout={"ep": 64, "dp": 64, "mbs": 4, "ep_comm_overlap": overlap},
                                 framework="megatron-bridge@26.04.01"))
        return float(estimate_step(job.model, job.cluster, job.train, job.layouts, job.constants).ep_exposed_s[0])

    priced, unhidden = ep_exposed(True), ep_exposed(False)
    shared: dict[float, float] = {}
    for share in (0.0, 1.0):
        monkeypatch.setattr(path, "unpaired_share", lambda lay, nmb, share=share: np.full(lay.size, share))
        shared[share] = ep_exposed(True)
    paired, alone = shared[0.0], shared[1.0]
    assert paired < alone < unhidden
    assert priced == pytest.approx(paired + (alone - paired) / 5, rel=1e-9)


def test_explain_lists_the_moe_layer_parts() -> None:
    job = resolve(JobRequest(model="qwen3-30b-a3b", cluster="b200:8", gpus=8,
                             train={"global_batch": 512, "seq_len": 4096, "precision": "fp8", "fp8_recipe": "mxfp8"},
                             layout={"ep": 8, "mbs": 1}, framework="megatron-bridge@25.11"))
    listing = moe_layer_parts(job.model, job.cluster, job.train, job.layouts, job.constants)
    names = [p.name for p in listing.parts]
    assert names == ["router", "preprocess", "permute", "quantize", "all-to-all", "experts", "activation", "shared"]
    assert listing.local_experts == 16 and listing.synced
    # 4,096 tokens × 8 copies spread over 128 experts, 16 of them here, fed by 8 ranks: 2,048 per expert (the load
    # of the busiest rank a little above)
    assert 2048 <= listing.tokens_per_expert < 2048 * 1.1
    experts = next(p for p in listing.parts if p.name == "experts")
    assert experts.amount == pytest.approx(6 * 16 * listing.tokens_per_expert * 2048 * 3 * 768, rel=1e-9)
    assert listing.host_s > listing.gpu_s  # launch-bound (test_host)
    # Megatron's alltoall dispatcher (25.11's on B200): forward and backward, 16-bit dispatch and combine of the 8
    # copies of 4,096 tokens, 7/8 of them off the GPU, at the busiest rank's load (the same 0-10 % above)
    assert job.train.moe_dispatcher is MoeDispatcher.ALLTOALL
    a2a = next(p for p in listing.parts if p.name == "all-to-all")
    assert 1.0 <= a2a.amount / (2 * 4096 * 8 * 7 / 8 * 2048 * (2 + 2)) < 1.1


def test_the_235b_runs_megatrons_alltoall_on_b200_and_h100_where_the_30b_runs_hybridep() -> None:
    # Megatron-Bridge v0.4.2 scripts/performance/configs/qwen/qwen3_llm_pretrain.py: qwen3_235b_a22b_pretrain_config_
    # {b200,h100} set moe_token_dispatcher_type "alltoall", the 30B builders "flex" with the hybridep backend.
    def dispatcher(model: str, gpu: str, gpus: int, layout: dict[str, int]) -> MoeDispatcher:
        return resolve(JobRequest(model=model, cluster=f"{gpu}:{gpus}", gpus=gpus,
                                  train={"global_batch": 8 * gpus, "seq_len": 4096, "precision": "fp8"},
                                  layout=layout, framework="megatron-bridge@26.04.01")).train.moe_dispatcher
    big = {"tp": 2, "pp": 8, "ep": 32, "etp": 1}
    assert dispatcher("qwen3-235b-a22b", "h100-sxm", 256, big) is MoeDispatcher.ALLTOALL
    assert dispatcher("qwen3-235b-a22b", "b200", 256, {"pp": 8, "ep": 8}) is MoeDispatcher.ALLTOALL
    assert dispatcher("qwen3-235b-a22b", "b300", 256, {"pp": 8, "ep": 8}) is MoeDispatcher.FLEX_HYBRIDEP
    assert dispatcher("qwen3-30b-a3b", "h100-sxm", 16, {"ep": 16}) is MoeDispatcher.FLEX_HYBRIDEP


def test_the_fused_grouped_mlp_runs_one_256_by_256_tile_over_an_sm_pair() -> None:
    # TE v2.18 te.ops GroupedMLP calls cuDNN's CuTe-DSL grouped GEMMs with their default mma_tiler_mn (256, 256), two
    # CTAs per tile; the kernels refuse any N tile but 256 (NVIDIA/cudnn-frontend@3929da2 grouped_gemm_glu/api.py).
    # GPT-OSS's fc2 (N = 2880 = 11.25 x 256) pays 12 columns of tiles, as N = 3072 does, where a library GEMM's
    # menu (64-wide tiles among them) pays 2880's own.
    from llmscale.cost.kernels import FUSED_GROUPED_MLP_TILES, LIBRARY_TILES

    fp8 = KernelRates.of(B200.gpu, Precision.FP8)
    m, k = 4096.0 * 8, 2880.0

    def t(n: float, menu) -> float:  # type: ignore[no-untyped-def]
        return float(gemm_s(fp8, m, n, k, 4, menu=menu))

    assert t(2880, FUSED_GROUPED_MLP_TILES) == pytest.approx(t(3072, FUSED_GROUPED_MLP_TILES), rel=1e-12)
    assert t(2880, LIBRARY_TILES) < 0.96 * t(3072, LIBRARY_TILES)
    # a tile spans two SMs: 2 x 37 tiles fill B200's 148 SMs in one wave, 2 x 38 take two (compute-bound shapes)
    assert B200.gpu.sm_count == 148
    one_wave = float(gemm_s(fp8, 512, 256 * 37, 8192, menu=FUSED_GROUPED_MLP_TILES))
    two_waves = float(gemm_s(fp8, 512, 256 * 38, 8192, menu=FUSED_GROUPED_MLP_TILES))
    assert two_waves == pytest.approx(2 * one_wave, rel=1e-12)


def test_gpt_oss_experts_pay_the_fused_tile_in_every_gemm() -> None:
    # GPT-OSS's hidden and expert width are 2880 = 11.25 x 256: under the fused grouped MLP each of the forward, data-
    # and weight-gradient GEMMs pays whole 256-wide tiles, so each is slower than the same grouped GEMMs on a
    # library's menu (64-wide tiles among them)
    gpt_oss = load_model("gpt-oss-120b")
    fp8 = KernelRates.of(B200.gpu, Precision.FP8)
    args = (gpt_oss, fp8, np.array([8192.0]), 2880.0, np.array([16.0]))
    fused = expert_linears(*args, GroupedGemm.TE_FUSED)
    library = expert_linears(*args, GroupedGemm.LEGACY)
    for name in ("forward_s", "input_grad_s", "weight_grad_s"):
        assert getattr(fused, name)[0] > 1.02 * getattr(library, name)[0], name


def test_a_two_sm_tile_by_hand() -> None:
    # M = 300 rows round up to two 256-row tiles, N = 148 x 256 to 148 columns of tiles: 296 tiles x 2 SMs over 148
    # SMs take 4 waves, each a 256 x 256 x K tile over two SMs' share of the main-loop rate (one-SM 128 x 256 tiles
    # would round M to 384 and take 3)
    from llmscale.cost.kernels import FUSED_GROUPED_MLP_TILES

    fp8 = KernelRates.of(B200.gpu, Precision.FP8)
    k = 16384.0
    per_sm = fp8.gemm_fraction * fp8.peak_flops_per_s / 148
    assert float(gemm_s(fp8, 300, 256 * 148, k, menu=FUSED_GROUPED_MLP_TILES)) == pytest.approx(
        4 * 2.0 * 256 * 256 * k / (2 * per_sm), rel=1e-12)
