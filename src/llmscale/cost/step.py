"""Step time, MFU and throughput of a training step, vectorized over layouts — the one cost model that
`explain`, `plan` and `validate` share.

Shape legend: every array field of `StepBreakdown` has shape (N,), one element per layout; seconds.

For each pipeline rank that can be critical (stages.RankOf) a micro-batch costs forward F and backward
B = B_in + W (compute.py) plus the communication on its critical path: TP collectives (the exposed share,
catalog/step.yaml), context-parallel KV exchange beyond what the attention core hides, and expert all-to-alls
(hidden by DualPipe up to the overlapped chunk's compute, else the exposed share). The slowest rank sets
the pipeline (pipeline.py: busy + bubble + exposed p2p). After the last micro-batch the data-parallel
gradient sync runs, overlapped with that micro-batch's backward up to dp_overlap_efficiency; the
distributed optimizer's parameter all-gather overlaps the next step's first forward the same way; ZeRO-3
gathers per micro-batch behind compute. Then the optimizer step (HBM-bound: ~30 B read or written per
local parameter shard) and a fixed overhead.

MFU = model FLOPs (PaLM: 6N-style, no recompute, no causal halving; flops.model_flops_per_token) per step /
(step time · GPUs · dense peak of the training precision) — the convention of NVIDIA's benchmark READMEs,
where an FP8 run's MFU is against the FP8 peak. HFU counts the recompute FLOPs too.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import TypeVar

import numpy as np

from llmscale.cost.compute import LayerTimes, RankCompute, layer_times, rank_compute
from llmscale.cost.derived import LayoutDerived, derive, rank_params
from llmscale.cost.flops import hardware_flops_per_token, model_flops_per_token
from llmscale.cost.memory import (
    MemoryBreakdown,
    Sharding,
    memory_breakdown,
    optimizer_step_traffic_bytes_per_param,
)
from llmscale.cost.params import count_params
from llmscale.cost.pipeline import PipelineTimes, pipeline_times
from llmscale.cost.traffic import DataParallelComm, MicrobatchComm, data_parallel_comm, microbatch_comm
from llmscale.layout.arrays import DistinctRows, Layouts, distinct_rows, take_fields
from llmscale.layout.stages import StageLayers
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import CommConstants, Constants, StepConstants
from llmscale.specs.layout import Recompute, Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec


@dataclass(frozen=True)
class StepBreakdown:
    """Where one optimizer step goes, per layout (seconds, shape (N,)); parts add up to the step time."""

    compute_s: np.ndarray
    """Forward and backward kernels of all micro-batches on the critical rank, recompute excluded."""
    recompute_s: np.ndarray
    tp_exposed_s: np.ndarray
    cp_exposed_s: np.ndarray
    ep_exposed_s: np.ndarray
    pp_exposed_s: np.ndarray
    dp_exposed_s: np.ndarray
    bubble_s: np.ndarray
    optimizer_s: np.ndarray
    overhead_s: np.ndarray
    offload_s: np.ndarray
    """Host↔device traffic of optimizer/parameter offload (memory.MemoryBreakdown.pcie_s_per_step), taken as
    exposed: the gradients go down after the last backward and the weights come back before the next forward; and
    activation offload beyond what each micro-batch's compute hides (Transformer Engine copies asynchronously)."""
    num_gpus: np.ndarray
    tokens_per_step: float
    model_flops_per_step: float
    hardware_flops_per_step: np.ndarray
    peak_flops_per_s: float
    memory: MemoryBreakdown

    @property
    def step_time_s(self) -> np.ndarray:
        """The sum of the parts (`STEP_PARTS`)."""
        total: np.ndarray = sum((getattr(self, part) for part in STEP_PARTS[1:]), self.compute_s)
        return total

    @property
    def tokens_per_s_per_gpu(self) -> np.ndarray:
        result: np.ndarray = self.tokens_per_step / self.step_time_s / self.num_gpus
        return result

    @property
    def tflops_per_gpu(self) -> np.ndarray:
        result: np.ndarray = self.model_flops_per_step / self.step_time_s / self.num_gpus / 1e12
        return result

    @property
    def mfu(self) -> np.ndarray:
        result: np.ndarray = self.model_flops_per_step / (self.step_time_s * self.num_gpus * self.peak_flops_per_s)
        return result

    @property
    def hfu(self) -> np.ndarray:
        result: np.ndarray = self.hardware_flops_per_step / (self.step_time_s * self.num_gpus * self.peak_flops_per_s)
        return result


STEP_PARTS = ("compute_s", "recompute_s", "tp_exposed_s", "cp_exposed_s", "ep_exposed_s", "pp_exposed_s",
              "dp_exposed_s", "bubble_s", "optimizer_s", "overhead_s", "offload_s")
"""The fields of StepBreakdown that add up to the step time, in the order reports list them."""


@dataclass(frozen=True)
class _CriticalPath:
    """Per-micro-batch times of one rank, with the communication that sits on its critical path."""

    compute: RankCompute
    tp_s: np.ndarray
    cp_s: np.ndarray
    ep_s: np.ndarray
    comm_forward_s: np.ndarray
    """The part of tp_s + cp_s + ep_s that belongs to the forward pass."""

    @property
    def per_microbatch_s(self) -> np.ndarray:
        total: np.ndarray = self.compute.total_s + self.tp_s + self.cp_s + self.ep_s
        return total

    @property
    def forward_s(self) -> np.ndarray:
        fwd: np.ndarray = self.compute.forward_s + self.comm_forward_s
        return fwd


DataclassT = TypeVar("DataclassT")


def _select(mask: np.ndarray, a: DataclassT, b: DataclassT) -> DataclassT:
    """Field-wise np.where over two dataclasses of arrays (nested dataclasses included)."""
    values = {}
    for f in fields(a):  # type: ignore[arg-type]
        x, y = getattr(a, f.name), getattr(b, f.name)
        values[f.name] = _select(mask, x, y) if is_dataclass(x) else np.where(mask, x, y)
    return type(a)(**values)


def _critical_path(
    shares: _PathShares, layers: StageLayers, compute: RankCompute, comm: MicrobatchComm
) -> _CriticalPath:
    """Communication on one rank's critical path per micro-batch. Each of TP's collectives and EP's
    all-to-alls runs once forward and once backward, and once more when full recompute re-runs the forward;
    the CP exchange hides behind the attention core (forward: K, V; backward: K, V and their gradients) and
    is repeated by any recompute, which re-runs the attention core."""
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
    if not has_moe:
        zero = np.zeros_like(tp_pass)
        return _CriticalPath(compute, (2 + full) * tp_pass, cp, zero, comm_forward_s=tp_pass + cp_fwd + zero)
    ep_all = (2 + full) * layers.moe * comm.ep_s
    ep = np.where(shares.dualpipe, np.maximum(0.0, ep_all - compute.total_s), shares.ep * ep_all)
    # Overlapped all-to-all kernels hold a share f of the SMs while they run: compute overlapping them for time
    # A advances at (1 - f), so the rank loses f·A (DeepSeek-V3 §3.2.2: 20 SMs for dispatch and combine).
    ep = ep + shares.sm_share * (ep_all - ep)
    ep_fwd = ep / (2 + full)
    return _CriticalPath(compute, (2 + full) * tp_pass, cp, ep, comm_forward_s=tp_pass + cp_fwd + ep_fwd)


@dataclass(frozen=True)
class _PathShares:
    """What every rank's critical path shares (shape (N,)): recompute indicators, exposed TP and EP shares."""

    full: np.ndarray
    any_recompute: np.ndarray
    tp: np.ndarray
    ep: np.ndarray
    dualpipe: np.ndarray
    sm_share: np.ndarray
    """Share of the SMs the overlapped all-to-all kernels hold (0 where nothing overlaps them)."""

    @classmethod
    def of(cls, lay: Layouts, const: StepConstants, overlap_sm_share: float) -> _PathShares:
        dualpipe = lay.schedule == Schedule.DUALPIPE.code
        overlapped = (lay.ep > 1) & (lay.ep_comm_overlap | dualpipe)
        return cls(
            full=(lay.recompute == Recompute.FULL.code).astype(float),
            any_recompute=(lay.recompute != Recompute.NONE.code).astype(float),
            tp=np.where(lay.tp_comm_overlap, const.tp_comm_exposed_fraction, 1.0),
            ep=np.where(lay.ep_comm_overlap, const.ep_comm_exposed_fraction, 1.0),
            dualpipe=dualpipe,
            sm_share=np.where(overlapped, overlap_sm_share, 0.0),
        )


def estimate_step(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts, constants: Constants,
                  derived: LayoutDerived | None = None) -> StepBreakdown:
    """The step-time breakdown of every layout (see module docstring), with the model constants `constants`;
    `derived` hands over the batch's derived quantities (`cost.derived.derive`) when the caller has them."""
    const = constants.step
    derived = derived if derived is not None else derive(model, train, lay)
    assert derived.num_microbatches.shape == (lay.size,), "derived quantities of another batch of layouts"
    num_micro = derived.num_microbatches
    times, comm = _per_microbatch(model, cluster, train, lay, constants)
    best: tuple[_CriticalPath, StageLayers] | None = None
    sms = cluster.gpu.sm_count
    shares = _PathShares.of(lay, const, min(constants.moe.overlap_sms / sms, 0.5) if sms else 0.0)
    dropless = model.is_moe and model.capacity_factor is None
    for stage in derived.stages.values():
        layers = stage.layers
        compute = _rank_compute(times, lay, layers, const.launch_overhead_us, dropless)
        path = _critical_path(shares, layers, compute, comm)
        if best is None:
            best = (path, layers)
            continue
        slower = path.per_microbatch_s > best[0].per_microbatch_s
        best = (_select(slower, path, best[0]), _select(slower, layers, best[1]))
    assert best is not None
    path, layers = best
    fwd = path.forward_s
    bwd_in = path.per_microbatch_s - fwd - path.compute.backward_weight_s
    pipe = pipeline_times(lay, num_micro, fwd, bwd_in, path.compute.backward_weight_s, comm.pp_s)
    shard = _shard_costs(model, cluster, train, lay, layers, constants.comm)
    dp = shard.data_parallel
    window = const.dp_overlap_efficiency
    dp_exposed = (np.maximum(0.0, dp.grad_sync_s - window * (bwd_in + path.compute.backward_weight_s))
                  + np.maximum(0.0, dp.param_gather_s - window * fwd)
                  # ZeRO-3 gathers layer by layer behind that micro-batch's own compute, never more than all of it
                  + num_micro * np.maximum(0.0, dp.per_microbatch_s - min(window, 1.0) * path.compute.total_s))
    memory = memory_breakdown(model, cluster, train, lay, constants, derived)
    return _assemble(model, cluster, train, lay, path, pipe, num_micro, dp_exposed, shard.optimizer_s, memory,
                     const)


MICROBATCH_COLUMNS = ("tp", "cp", "mbs", "sp", "etp", "ep", "pp", "dp", "rank_order")
"""The layout columns compute.layer_times and traffic.microbatch_comm read."""


@dataclass(frozen=True)
class _FewLayerTimes:
    """Layer times (dense, MoE, output) per distinct MICROBATCH_COLUMNS row, and which row each layout has."""

    rows: DistinctRows
    times: tuple[LayerTimes, LayerTimes, LayerTimes]


def _per_microbatch(
    model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts, constants: Constants
) -> tuple[_FewLayerTimes, MicrobatchComm]:
    """Layer times and communication of one micro-batch, computed once per distinct MICROBATCH_COLUMNS row (a
    search has few); the communication is spread to every layout, the layer times stay per row (_rank_compute)."""
    rows, few = lay.distinct_view(*MICROBATCH_COLUMNS)
    times = layer_times(model, cluster, train, few, constants)
    return _FewLayerTimes(rows, times), rows.spread_fields(microbatch_comm(model, cluster, train, few, constants))


RANK_COLUMNS = ("cuda_graphs", "recompute", "recompute_norm", "recompute_mla_up", "recompute_moe_act",
                "recompute_mlp", "ep")
"""The layout columns compute.rank_compute reads besides the layer times and the rank's layers."""


def _rank_compute(few: _FewLayerTimes, lay: Layouts, layers: StageLayers, launch_overhead_us: float,
                  dropless: bool) -> RankCompute:
    """compute.rank_compute once per distinct (micro-batch row, rank layers, RANK_COLUMNS) row, spread to every
    layout: a search has millions of layouts but few such rows."""
    rows = distinct_rows(few.rows.inverse, layers.dense, layers.moe, layers.first, layers.last,
                         *(lay.column(name) for name in RANK_COLUMNS))
    micro = few.rows.inverse.take(rows.first)
    times = tuple(take_fields(t, micro) for t in few.times)
    one = StageLayers(*(getattr(layers, f.name).take(rows.first) for f in fields(StageLayers)))
    compute = rank_compute(lay.select(*RANK_COLUMNS).take(rows.first), one, times,  # type: ignore[arg-type]
                           launch_overhead_us, dropless)
    return rows.spread_fields(compute)


@dataclass(frozen=True)
class _ShardCosts:
    """What the parameters on the critical rank's GPU cost per step: data-parallel traffic and optimizer step."""

    data_parallel: DataParallelComm
    optimizer_s: np.ndarray
    """The optimizer step: HBM-bound, optimizer_step_traffic_bytes_per_param per local parameter shard."""


SHARD_COLUMNS = ("tp", "cp", "dp", "ep", "etp", "zero", "pp", "rank_order")
"""The layout columns `_shard_costs` depends on, besides the critical rank's layers."""


def _shard_costs(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts,
                 layers: StageLayers, comm: CommConstants) -> _ShardCosts:
    """Data-parallel traffic and optimizer step of the critical rank (holding `layers`), computed once per
    distinct (SHARD_COLUMNS, layers) row: a search has few."""
    rows = distinct_rows(*(getattr(lay, name) for name in SHARD_COLUMNS), layers.dense, layers.moe, layers.first,
                         layers.last)
    lay = lay.select(*SHARD_COLUMNS).take(rows.first)
    layers = StageLayers(*(getattr(layers, f.name).take(rows.first) for f in fields(StageLayers)))
    # The critical rank's parameters on its few distinct rows: cheaper than carrying every rank's through the
    # element-wise selection of the critical one (derived.stages holds them per representative rank).
    params = rank_params(model, count_params(model), lay, layers)
    grad_bytes = 4.0 if train.fp32_grads else 2.0
    dp = data_parallel_comm(cluster, lay, params.non_expert, params.expert, grad_bytes, layers.dense + layers.moe,
                            comm)
    hbm = cluster.gpu.memory_bandwidth_bytes_per_s * cluster.gpu.efficiency.hbm
    sharding = Sharding.of(lay)
    shard = params.non_expert * sharding.optim_ne + params.expert * sharding.optim_ex
    return rows.spread_fields(_ShardCosts(dp, shard * optimizer_step_traffic_bytes_per_param(train) / hbm))


def _assemble(
    model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts, path: _CriticalPath,
    pipe: PipelineTimes, num_micro: np.ndarray, dp_exposed: np.ndarray, optimizer_s: np.ndarray,
    memory: MemoryBreakdown, const: StepConstants,
) -> StepBreakdown:
    """The named breakdown: per-micro-batch parts times the micro-batches a rank runs, plus the rest."""
    tokens = float(train.tokens_per_step)
    # A DualPipe rank holds two stages and each micro-batch passes through one of them (pipeline.py).
    m = np.where(lay.schedule == Schedule.DUALPIPE.code, num_micro / 2, num_micro)
    compute_only = path.compute.total_s - path.compute.recompute_s
    return StepBreakdown(
        compute_s=m * compute_only,
        recompute_s=m * path.compute.recompute_s,
        tp_exposed_s=m * path.tp_s,
        cp_exposed_s=m * path.cp_s,
        ep_exposed_s=m * path.ep_s,
        pp_exposed_s=pipe.p2p_exposed_s,
        dp_exposed_s=dp_exposed,
        bubble_s=pipe.bubble_s,
        optimizer_s=optimizer_s,
        overhead_s=np.full(lay.size, const.step_overhead_s),
        num_gpus=lay.num_gpus,
        tokens_per_step=tokens,
        model_flops_per_step=model_flops_per_token(model, train.seq_len) * tokens,
        hardware_flops_per_step=hardware_flops_per_token(model, train.seq_len, lay.recompute) * tokens,
        peak_flops_per_s=cluster.gpu.peak_flops_per_s(train.precision),
        offload_s=memory.pcie_s_per_step + m * np.maximum(
            0.0, memory.activation_offload_bytes_per_microbatch / cluster.node.pcie_bytes_per_s - path.compute.total_s),
        memory=memory,
    )
