"""The critical rank's path through one micro-batch: its compute, the communication left on it, and the time its GPU
waits for the host, vectorized over layouts (cost.step assembles the step from it); seconds per micro-batch.

TP and EP run forward and backward (once more under full recompute), CP hides behind the attention core, EP behind
an overlapped chunk's compute, the host's launches behind the GPU's pass: docs/cost-model.md#path."""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import TypeVar

import numpy as np

from llmscale.cost.compute import LayerTimes, RankCompute, rank_compute
from llmscale.cost.host import LayerHost, host_wait
from llmscale.cost.traffic import MicrobatchComm
from llmscale.layout.arrays import Layouts, reads
from llmscale.layout.stages import RankOf, StageLayers
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants, StepConstants
from llmscale.specs.layout import Recompute, Schedule


@dataclass(frozen=True)
class CriticalPath:
    """Per-micro-batch times of one rank, with the communication and the host wait on its critical path."""

    compute: RankCompute
    tp_s: np.ndarray
    cp_s: np.ndarray
    ep_s: np.ndarray
    comm_forward_s: np.ndarray
    """The part of tp_s + cp_s + ep_s that belongs to the forward pass."""
    host_forward_s: np.ndarray
    """The GPU's wait for the host in the forward pass (cost.host)."""
    host_backward_s: np.ndarray

    @property
    def host_s(self) -> np.ndarray:
        total: np.ndarray = self.host_forward_s + self.host_backward_s
        return total

    @property
    def per_microbatch_s(self) -> np.ndarray:
        total: np.ndarray = self.compute.total_s + self.tp_s + self.cp_s + self.ep_s + self.host_s
        return total

    @property
    def forward_s(self) -> np.ndarray:
        fwd: np.ndarray = self.compute.forward_s + self.comm_forward_s + self.host_forward_s
        return fwd


DataclassT = TypeVar("DataclassT")


def select(mask: np.ndarray, a: DataclassT, b: DataclassT) -> DataclassT:
    """Field-wise np.where over two dataclasses of arrays (nested dataclasses included)."""
    values = {}
    for f in fields(a):  # type: ignore[arg-type]
        x = getattr(a, f.name)
        y = getattr(b, f.name)
        values[f.name] = select(mask, x, y) if is_dataclass(x) else np.where(mask, x, y)
    return type(a)(**values)


@dataclass(frozen=True)
class PathShares:
    """What every rank's critical path shares (shape (N,)): recompute indicators, exposed TP and EP shares."""

    full: np.ndarray
    any_recompute: np.ndarray
    tp: np.ndarray
    ep: np.ndarray
    ep_overlap: np.ndarray
    """Megatron's 1F1B all-to-all overlap is on (ep_comm_overlap)."""
    dualpipe: np.ndarray
    sm_share: np.ndarray
    """Share of the SMs the overlapped all-to-all kernels hold (0 where nothing overlaps them)."""

    @property
    def tp_ep_passes(self) -> np.ndarray:
        """TP and EP collectives per layer and micro-batch, in forwards: forward, backward, forward again under full
        recompute."""
        return 2 + self.full

    @property
    def cp_passes(self) -> np.ndarray:
        """CP ring volume per layer and micro-batch, in forwards: forward, again under any recompute, backward at
        twice the forward's (K, V and their gradients)."""
        return 3 + self.any_recompute

    @classmethod
    def of(cls, lay: Layouts, const: StepConstants, overlap_sm_share: float) -> PathShares:
        dualpipe = lay.schedule == Schedule.DUALPIPE.code
        overlapped = (lay.ep > 1) & (lay.ep_comm_overlap | dualpipe)
        return cls(
            full=(lay.recompute == Recompute.FULL.code).astype(float),
            any_recompute=(lay.recompute != Recompute.NONE.code).astype(float),
            tp=np.where(lay.tp_comm_overlap, const.tp_comm_exposed_fraction, 1.0),
            ep=np.where(lay.ep_comm_overlap, const.ep_comm_exposed_fraction, 1.0),
            ep_overlap=np.asarray(lay.ep_comm_overlap, dtype=bool),
            dualpipe=dualpipe,
            sm_share=np.where(overlapped, overlap_sm_share, 0.0),
        )


@dataclass(frozen=True)
class OverlapChunks:
    """One MoE layer's compute as Megatron's 1F1B A2A overlap schedules it beside the all-to-alls: the attention
    forward and backward (a dense layer's time less its MLP; backward less twice it, which overstates it a little
    where the backward GEMMs run slower than the forward's), the experts' forward, and their backward split evenly
    into data and weight gradients."""

    attention_f: np.ndarray
    attention_b: np.ndarray
    experts_f: np.ndarray
    dgrad: np.ndarray
    wgrad: np.ndarray

    @classmethod
    def of(cls, dense: LayerTimes, moe: LayerTimes) -> OverlapChunks:
        attention_f = dense.forward_s - dense.dense_mlp_s
        attention_b = dense.backward_s - 2.0 * dense.dense_mlp_s
        half = 0.5 * np.maximum(moe.backward_s - attention_b, 0.0)
        return cls(attention_f, attention_b, np.maximum(moe.forward_s - attention_f, 0.0), half, half)


def paired_all_to_all_s(one_s: np.ndarray, c: OverlapChunks) -> np.ndarray:
    """Exposed all-to-all time of one MoE layer and one pair of micro-batches under Megatron's 1F1B A2A overlap with
    delayed weight gradients (Megatron-Core @ core_v0.15.0 models/common/model_chunk_schedule_plan.py
    TransformerLayerSchedulePlan.run; Bridge sets delay_wgrad_compute with it): three segments, each waiting for both
    streams of the one before (docs/cost-model.md#path-overlap). `one_s` is one all-to-all."""
    a = one_s
    # combine_bwd | attn_fwd; dispatch_fwd then dispatch_bwd (after mlp_bwd) | mlp_bwd, mlp_bwd_dw, mlp_fwd (after
    # dispatch_fwd); combine_fwd | attn_bwd
    middle = np.maximum(np.maximum(a, c.dgrad) + a, np.maximum(c.dgrad + c.wgrad, a) + c.experts_f)
    span = np.maximum(a, c.attention_f) + middle + np.maximum(a, c.attention_b)
    exposed: np.ndarray = span - (c.attention_f + c.dgrad + c.wgrad + c.experts_f + c.attention_b)
    return exposed


def unpaired_share(lay: Layouts, num_microbatches: np.ndarray) -> np.ndarray:
    """Share u of the micro-batches whose all-to-all Megatron's 1F1B A2A overlap leaves unpaired, as the pipeline
    model counts them: chunks run alone (the first forward and last backward without pipelining; interleaved, each
    rank's warm-up forwards and cool-down backwards) lengthen the step by pp·vpp chunks each way, whatever the rank,
    so u·(nmb + (pp − 1)/vpp) = pp (docs/cost-model.md#path-overlap; tests/test_moe_kernels.py simulates the order)."""
    share: np.ndarray = np.minimum(lay.pp / (num_microbatches + (lay.pp - 1) / lay.vpp), 1.0)
    return share


def alone_backward_all_to_all_s(one_s: np.ndarray, c: OverlapChunks) -> np.ndarray:
    """Exposed all-to-all time of one MoE layer's backward run alone under Megatron's 1F1B A2A overlap with delayed
    weight gradients (Megatron-Core @ core_v0.15.0 models/common/model_chunk_schedule_plan.py; the weight gradients
    run outside the stream-event chain): the dispatch beside the experts' weight gradient, the combine beside the
    attention's (half its backward). `one_s` is one all-to-all."""
    exposed: np.ndarray = np.maximum(one_s - c.wgrad, 0.0) + np.maximum(one_s - 0.5 * c.attention_b, 0.0)
    return exposed


def critical_path(shares: PathShares, layers: StageLayers, compute: RankCompute, comm: MicrobatchComm,
                  times: tuple[LayerTimes, LayerTimes], host: LayerHost, unpaired: np.ndarray) -> CriticalPath:
    """Communication and host wait on one rank's path per micro-batch (docs/cost-model.md#path-overlap); `times` the
    (dense, MoE) layer's times, `host` the host seconds per layer (cost.host), `unpaired` the share of micro-batches
    whose all-to-all no other micro-batch hides under Megatron's 1F1B overlap (`unpaired_share`)."""
    dense, moe = times
    full = shares.full
    has_moe = bool(layers.moe.any())  # else every expert term is 0: skipped, with the same sums
    tp_layers = layers.dense * comm.tp_dense_s
    if has_moe:
        tp_layers = tp_layers + layers.moe * comm.tp_moe_s
    tp_pass = shares.tp * tp_layers
    count = layers.dense + layers.moe
    cp_fwd = np.maximum(0.0, count * comm.cp_s - compute.attention_core_forward_s)
    cp_bwd = np.maximum(0.0, 2 * count * comm.cp_s - compute.attention_core_backward_s)
    cp = cp_fwd * (1 + shares.any_recompute) + cp_bwd
    total = compute.total_s
    fwd = compute.forward_s
    ep: np.ndarray | float = 0.0
    ep_layer: np.ndarray | float = 0.0
    if has_moe:
        ep_all = shares.tp_ep_passes * layers.moe * comm.ep_s
        # Overlapped: DualPipe hides it behind the paired micro-batch's compute, no more than all of it; Megatron's
        # 1F1B A2A overlap leaves what each paired chunk does not cover (dispatch and combine are half of ep_s each
        # way), no less than the fitted exposed share; a chunk run alone exposes its forward all-to-all and the part
        # of its backward one the delayed weight gradients do not cover, never less than paired (per micro-batch on
        # average: unpaired_share).
        hidden = np.maximum(0.0, ep_all - total)
        chunks = OverlapChunks.of(dense, moe)
        paired = 0.5 * shares.tp_ep_passes * layers.moe * paired_all_to_all_s(0.5 * comm.ep_s, chunks)
        overlapped = np.maximum(shares.ep * ep_all, np.maximum(hidden, paired))
        alone = ep_all - layers.moe * (comm.ep_s - alone_backward_all_to_all_s(0.5 * comm.ep_s, chunks))
        overlapped = (1.0 - unpaired) * overlapped + unpaired * np.maximum(overlapped, alone)
        ep = np.where(shares.dualpipe, hidden, np.where(shares.ep_overlap, overlapped, ep_all))
        # Overlapped all-to-all kernels hold a share f of the SMs while they run: compute overlapping them for time
        # A advances at (1 - f), so the rank loses f·A (DeepSeek-V3 §3.2.2: 20 SMs for dispatch and combine).
        ep = ep + shares.sm_share * (ep_all - ep)
        ep_layer = ep / shares.tp_ep_passes / np.maximum(layers.moe, 1)
    tp = shares.tp_ep_passes * tp_pass
    forward = tp_pass + cp_fwd + ep / shares.tp_ep_passes
    gpu_forward = fwd + forward
    moe_layer = (moe.forward_s + shares.tp * comm.tp_moe_s + ep_layer, moe.after_sync_s + ep_layer) if has_moe \
        else (tp, tp)
    wait = host_wait(host, layers, has_moe, full, gpu_forward, total + tp + cp + ep - gpu_forward, moe_layer)
    return CriticalPath(compute, tp, cp, ep + np.zeros_like(tp), forward, *wait)


@reads("pp", "vpp", "schedule", "cuda_graphs", "recompute", "recompute_norm", "recompute_mla_up",
       "recompute_moe_act", "recompute_mlp", "ep", "tp_comm_overlap", "ep_comm_overlap")
def critical_rank(cluster: ClusterSpec, constants: Constants, lay: Layouts, stages: dict[RankOf, StageLayers],
                  times: tuple[LayerTimes, LayerTimes, LayerTimes], comm: MicrobatchComm,
                  host: LayerHost, num_microbatches: np.ndarray) -> tuple[CriticalPath, np.ndarray]:
    """The critical path of the slowest of the representative ranks `stages` (the first of equals) and its RankOf
    code, for layouts `lay` (a view of cost.step.PATH_VIEW; one per distinct row, so the rank's compute is evaluated
    on them directly) with layer times `times`, host seconds `host` per layout (cost.host.LayerHost) and
    `num_microbatches` per layout (the unpaired chunks of Megatron's 1F1B A2A overlap, `unpaired_share`)."""
    const = constants.step
    sms = cluster.gpu.sm_count
    shares = PathShares.of(lay, const, min(constants.moe.overlap_sms / sms, 0.5) if sms else 0.0)
    best: tuple[CriticalPath, np.ndarray] | None = None
    unpaired = unpaired_share(lay, num_microbatches)
    for which, layers in stages.items():
        compute = rank_compute(lay, layers, times, const.launch_overhead_us)
        path = critical_path(shares, layers, compute, comm, times[:2], host, unpaired)
        if best is None:
            best = (path, np.full(lay.size, int(which)))
            continue
        slower = path.per_microbatch_s > best[0].per_microbatch_s
        best = (select(slower, path, best[0]), np.where(slower, int(which), best[1]))
    assert best is not None
    return best
