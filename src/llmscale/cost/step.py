"""Step time, MFU and throughput of a training step, vectorized over layouts — the one cost model that
`explain`, `plan` and `validate` share; seconds, shape (N,).

Step = the slowest rank's pipeline (busy + bubble + exposed p2p) + exposed DP sync + optimizer + overhead + offload;
MFU = model FLOPs / (step time · GPUs · dense peak of the training precision): docs/cost-model.md#step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.cost.compute import layer_times, rank_compute
from llmscale.cost.derived import STAGE_COLUMNS, LayoutDerived, RankStages, derive, rank_params
from llmscale.cost.flops import hardware_flops_per_token, model_flops_per_token
from llmscale.cost.host import LayerHost, layer_calls
from llmscale.cost.memory import MemoryBreakdown, memory_breakdown
from llmscale.cost.model_state import Sharding, optimizer_step_traffic_bytes_per_param
from llmscale.cost.params import count_params
from llmscale.cost.path import critical_rank, select
from llmscale.cost.pipeline import pipeline_times
from llmscale.cost.traffic import DataParallelComm, PlacedLinks, data_parallel_comm, microbatch_comm, zero3_calls
from llmscale.layout.arrays import DistinctRows, Layouts, distinct_rows, distinct_within, reads, reads_of, take_fields
from llmscale.layout.stages import StageLayers, stage_layers
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import CommConstants, Constants, StepConstants
from llmscale.specs.layout import Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec
from llmscale.units import US


@dataclass(frozen=True)
class StepBreakdown:
    """Where one optimizer step goes, per layout (seconds, shape (N,)); parts add up to the step time."""

    compute_s: np.ndarray
    """Forward and backward kernels of all micro-batches on the critical rank, recompute excluded."""
    recompute_s: np.ndarray
    tp_exposed_s: np.ndarray
    cp_exposed_s: np.ndarray
    ep_exposed_s: np.ndarray
    host_wait_s: np.ndarray
    """The GPU idle, waiting for the host to launch its kernels (cost.host): launches slower than the kernels, and
    each MoE layer's wait for its token counts; on the critical rank, all micro-batches."""
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


STEP_PARTS = ("compute_s", "recompute_s", "tp_exposed_s", "cp_exposed_s", "ep_exposed_s", "host_wait_s",
              "pp_exposed_s", "dp_exposed_s", "bubble_s", "optimizer_s", "overhead_s", "offload_s")
"""The fields of StepBreakdown that add up to the step time, in the order reports list them."""


def estimate_step(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts, constants: Constants,
                  derived: LayoutDerived | None = None, placed: PlacedLinks | None = None) -> StepBreakdown:
    """The step-time breakdown of every layout (docs/cost-model.md#step), with the model constants `constants`;
    `derived` hands over the batch's derived quantities (`cost.derived.derive`) when the caller has them; `placed`
    the links of each layout's groups where a placement put them (placement.search), else the rank order's."""
    const = constants.step
    derived = derived if derived is not None else derive(model, train, lay)
    assert derived.num_microbatches.shape == (lay.size,), "derived quantities of another batch of layouts"
    num_micro = derived.num_microbatches
    rows, few_parts = _path_parts(model, cluster, train, lay, constants, derived, placed)
    parts = rows.spread_fields(few_parts)
    shard = _shard_costs(model, cluster, train, lay, derived, parts.critical_rank, constants.comm, placed)
    dp = shard.data_parallel
    window = const.dp_overlap_efficiency
    zero3_window = 0.0 if train.zero3_synchronous else min(window, 1.0)
    dp_exposed = (np.maximum(0.0, dp.grad_sync_s - window * parts.backward_s)
                  + np.maximum(0.0, dp.param_gather_s - window * parts.forward_s)
                  # ZeRO-3 gathers layer by layer behind that micro-batch's own compute, never more than all of it;
                  # behind none of it where the framework synchronizes the device around them
                  + num_micro * np.maximum(0.0, dp.per_microbatch_s - zero3_window * parts.microbatch_s))
    memory = memory_breakdown(model, cluster, train, lay, constants, derived)
    return _assemble(model, cluster, train, lay, parts, dp_exposed, shard.optimizer_s, memory, const)


LAYER_COLUMNS = reads_of(layer_times, layer_calls)
"""The key of a layer's times and host calls (compute.layer_times, host.layer_calls)."""

MICROBATCH_COLUMNS = reads_of(LAYER_COLUMNS, microbatch_comm)
"""The key of a micro-batch's layer times and communication (traffic.microbatch_comm also reads pp, dp and
rank_order, which place its groups)."""

PATH_VIEW = reads_of(critical_rank, rank_compute, pipeline_times)
"""The columns the critical-rank and pipeline formulas read themselves (the others reach them through the
micro-batch's times and communication): the view they run on."""

PATH_COLUMNS = reads_of(MICROBATCH_COLUMNS, PATH_VIEW, STAGE_COLUMNS)
"""The key of the critical rank's per-micro-batch path and its pipeline times: the micro-batch's, the rank's
layers (STAGE_COLUMNS) and PATH_VIEW. ZeRO and offload are not among them, so a search has a few times fewer such
rows than layouts."""


@dataclass(frozen=True)
class _PathParts:
    """The step parts of the critical rank that depend on PATH_COLUMNS alone, shape (N,) (or one per distinct row)."""

    compute_s: np.ndarray
    recompute_s: np.ndarray
    tp_exposed_s: np.ndarray
    cp_exposed_s: np.ndarray
    ep_exposed_s: np.ndarray
    host_wait_s: np.ndarray
    pp_exposed_s: np.ndarray
    bubble_s: np.ndarray
    forward_s: np.ndarray
    """One micro-batch's forward on the critical rank, its communication included (what the parameter
    all-gather overlaps)."""
    backward_s: np.ndarray
    """One micro-batch's backward (input and weight gradients), communication included (what the gradient sync
    overlaps)."""
    microbatch_s: np.ndarray
    """One micro-batch's compute on the critical rank, forward and backward (RankCompute.total_s)."""
    microbatches_per_rank: np.ndarray
    """Micro-batches a rank runs per step: half of them under DualPipe, whose ranks hold two stages."""
    critical_rank: np.ndarray
    """The layout.stages.RankOf code of the critical rank."""


def _path_parts(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts, constants: Constants,
                derived: LayoutDerived, placed: PlacedLinks | None = None) -> tuple[DistinctRows, _PathParts]:
    """_PathParts once per distinct PATH_COLUMNS row (rows keyed by the micro-batch row, whose key range is small,
    and the other columns), with the row of every layout: the critical rank, its pipeline times and the step parts
    they make."""
    micro_rows = distinct_within(lay, derived.rows, STAGE_COLUMNS, MICROBATCH_COLUMNS, *_placed_key(lay, placed))
    micro = lay.select(*MICROBATCH_COLUMNS).take(micro_rows.first)
    beyond = [name for name in PATH_COLUMNS if name not in MICROBATCH_COLUMNS]
    rows = distinct_rows(micro_rows.inverse, *(lay.column(name) for name in beyond))
    few = lay.select(*PATH_VIEW).take(rows.first)
    micro_of_row = micro_rows.inverse.take(rows.first)
    links = take_fields(placed, micro_rows.first) if placed else None
    comm = take_fields(microbatch_comm(model, cluster, train, micro, constants, links), micro_of_row)
    layer_rows = micro.distinct(*LAYER_COLUMNS)  # a few times fewer than the micro-batch rows
    layer_view = micro.select(*LAYER_COLUMNS).take(layer_rows.first)
    times = layer_times(model, cluster, train, layer_view, constants)
    layer_of_row = layer_rows.inverse.take(micro_of_row)
    stage_of_row = derived.rows.inverse.take(rows.first)
    stages = {which: take_fields(stage.layers, stage_of_row) for which, stage in derived.distinct_stages.items()}
    dense, moe, output = (take_fields(kind, layer_of_row) for kind in times)
    # Host seconds per layer row with graphs off, then on (cost.host), taken for each row's cuda_graphs.
    calls = layer_calls(model, train, layer_view)
    host = take_fields(LayerHost.both(calls, train.cuda_graph_scope, constants.step.host_call_us * US),
                       layer_of_row + layer_rows.first.size * few.cuda_graphs)
    num_micro = derived.num_microbatches.take(rows.first)
    path, critical = critical_rank(cluster, constants, few, stages, (dense, moe, output), comm, host, num_micro)
    fwd = path.forward_s
    bwd_in = path.per_microbatch_s - fwd - path.compute.backward_weight_s
    pipe = pipeline_times(few, num_micro, fwd, bwd_in, path.compute.backward_weight_s, comm.pp_s)
    # A DualPipe rank holds two stages and each micro-batch passes through one of them (pipeline.py).
    m = np.where(few.schedule == Schedule.DUALPIPE.code, num_micro / 2, num_micro)
    return rows, _PathParts(
        compute_s=m * (path.compute.total_s - path.compute.recompute_s), recompute_s=m * path.compute.recompute_s,
        tp_exposed_s=m * path.tp_s, cp_exposed_s=m * path.cp_s, ep_exposed_s=m * path.ep_s,
        host_wait_s=m * path.host_s,
        pp_exposed_s=pipe.p2p_exposed_s, bubble_s=pipe.bubble_s, forward_s=fwd,
        backward_s=bwd_in + path.compute.backward_weight_s, microbatch_s=path.compute.total_s,
        microbatches_per_rank=m, critical_rank=critical,
    )


@dataclass(frozen=True)
class _ShardCosts:
    """What the parameters on the critical rank's GPU cost per step: data-parallel traffic and optimizer step."""

    data_parallel: DataParallelComm
    optimizer_s: np.ndarray
    """The optimizer step: HBM-bound, optimizer_step_traffic_bytes_per_param per local parameter shard."""


@reads("tp", "cp", "dp", "ep", "etp", "zero", "pp", "rank_order")
def _shard_costs(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts, derived: LayoutDerived,
                 critical: np.ndarray, comm: CommConstants, placed: PlacedLinks | None = None) -> _ShardCosts:
    """Data-parallel traffic and optimizer step of the critical rank (RankOf code `critical`, whose layers follow
    from pp, vpp and schedule), computed once per distinct row of the columns it and stage_layers read and of
    `critical`: a search has few."""
    rows = distinct_within(lay, derived.rows, STAGE_COLUMNS, reads_of(_shard_costs, stage_layers), critical,
                           *_placed_key(lay, placed))
    layers = _layers_of(derived.distinct_stages, critical.take(rows.first), derived.rows.inverse.take(rows.first))
    lay = lay.select(*reads_of(_shard_costs)).take(rows.first)
    # The critical rank's parameters on its few distinct rows: cheaper than carrying every rank's through the
    # element-wise selection of the critical one (derived.stages holds them per representative rank).
    params = rank_params(model, count_params(model), lay, layers)
    grad_bytes = 4.0 if train.fp32_grads else 2.0
    dp = data_parallel_comm(cluster, lay, params.non_expert, params.expert, grad_bytes,
                            zero3_calls(model, train, lay, layers), comm, list_form=train.zero3_synchronous,
                            placed=take_fields(placed, rows.first) if placed else None)
    hbm = cluster.gpu.memory_bandwidth_bytes_per_s * cluster.gpu.efficiency.hbm
    sharding = Sharding.of(lay)
    shard = params.non_expert * sharding.optim_ne + params.expert * sharding.optim_ex
    return rows.spread_fields(_ShardCosts(dp, shard * optimizer_step_traffic_bytes_per_param(train) / hbm))


def _placed_key(lay: Layouts, placed: PlacedLinks | None) -> tuple[np.ndarray, ...]:
    """An extra de-duplication key that keeps every placed layout its own row (its links are its own)."""
    return (np.arange(lay.size),) if placed is not None else ()


def _layers_of(stages: RankStages, which: np.ndarray, index: np.ndarray) -> StageLayers:
    """The layers of rank `which[i]` (a RankOf code) at `index[i]` of `stages`."""
    chosen: StageLayers | None = None
    for rank, stage in stages.items():
        layers = take_fields(stage.layers, index)
        chosen = layers if chosen is None else select(which == int(rank), layers, chosen)
    assert chosen is not None
    return chosen


def _assemble(
    model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts, parts: _PathParts,
    dp_exposed: np.ndarray, optimizer_s: np.ndarray, memory: MemoryBreakdown, const: StepConstants,
) -> StepBreakdown:
    """The named breakdown: the critical path's parts (per-micro-batch parts times the micro-batches a rank runs),
    plus the rest."""
    tokens = float(train.tokens_per_step)
    return StepBreakdown(
        compute_s=parts.compute_s,
        recompute_s=parts.recompute_s,
        tp_exposed_s=parts.tp_exposed_s,
        cp_exposed_s=parts.cp_exposed_s,
        ep_exposed_s=parts.ep_exposed_s,
        host_wait_s=parts.host_wait_s,
        pp_exposed_s=parts.pp_exposed_s,
        dp_exposed_s=dp_exposed,
        bubble_s=parts.bubble_s,
        optimizer_s=optimizer_s,
        overhead_s=np.full(lay.size, const.step_overhead_s),
        num_gpus=lay.num_gpus,
        tokens_per_step=tokens,
        model_flops_per_step=model_flops_per_token(model, train.seq_len) * tokens,
        hardware_flops_per_step=hardware_flops_per_token(model, train.seq_len, lay.recompute) * tokens,
        peak_flops_per_s=cluster.gpu.peak_flops_per_s(train.precision),
        offload_s=memory.pcie_s_per_step + parts.microbatches_per_rank * np.maximum(
            0.0, memory.activation_offload_bytes_per_microbatch / cluster.node.pcie_bytes_per_s - parts.microbatch_s),
        memory=memory,
    )
