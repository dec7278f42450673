"""Communication per micro-batch and per step, by parallel dimension, vectorized over layouts; seconds per GPU.

Groups are placed in the layout's rank order (TP → CP → (EP) → DP → PP, or PP inside DP: `GroupStrides`); TP moves
S = 2·s_c·b·h bytes per collective (Korthikanti et al. 2022 §4.2.2), CP K and V, EP the routed copies, PP one
activation, DP gradients and parameters. Volumes per dimension: docs/cost-model.md#traffic."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.cost.collectives import GroupLinks, collective_time_s, domain_all_to_all_s, group_links
from llmscale.cost.params import tensors_per_layer
from llmscale.cost.routing import busiest_rank_load, destination_copies
from llmscale.layout.arrays import Layouts, reads
from llmscale.layout.stages import StageLayers
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.collective import Collective
from llmscale.specs.constants import CommConstants, Constants
from llmscale.specs.layout import RankOrder
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import MoeDispatcher, TrainSpec
from llmscale.units import BYTES_16BIT


def kv_width(model: ModelSpec) -> int:
    """Elements of K plus V per token: 2·g·d for MHA/GQA; n·(d_nope + d_rope) + n·d_v for MLA, whose K and V
    are expanded per head before attention (DeepSeek-V2 §2.1)."""
    if model.mla is not None:
        return model.heads * (model.qk_head_dim + model.value_head_dim)
    return 2 * model.num_kv_heads * model.dim_per_head


@dataclass(frozen=True)
class GroupStrides:
    """Rank distance between neighbouring members of each group (shape (N,)). With PP inside DP a stage's
    tp·cp·dp ranks are no longer contiguous: a group that takes members both inside a tp·cp block and across
    blocks (dense DP over dp·cp, EP beyond tp·cp, EDP) is placed as if spread evenly over the same span."""

    pp: np.ndarray
    dense_dp: np.ndarray
    ep: np.ndarray
    edp: np.ndarray

    @classmethod
    def of(cls, lay: Layouts) -> GroupStrides:
        # With dp = 1 (or pp = 1) both orders number the ranks alike.
        pp_inner = (lay.rank_order == RankOrder.TP_CP_EP_PP_DP.code) & (lay.dp > 1)
        spread = np.where(pp_inner, lay.pp, 1)
        return cls(
            pp=np.where(pp_inner, lay.tp * lay.cp, lay.tp * lay.cp * lay.dp),
            dense_dp=lay.tp * spread,
            ep=np.where(lay.ep * lay.etp > lay.tp * lay.cp, lay.etp * spread, lay.etp),
            edp=lay.ep * lay.etp * spread,
        )


@dataclass(frozen=True)
class MicrobatchComm:
    """Communication time of one micro-batch, per layer kind, forward direction (backward is the same
    volume for TP and EP, twice for CP)."""

    tp_dense_s: np.ndarray
    tp_moe_s: np.ndarray
    cp_s: np.ndarray
    ep_s: np.ndarray
    pp_s: np.ndarray
    bytes: MicrobatchBytes
    """The bytes per call these times price (the explain listing reads them)."""


@dataclass(frozen=True)
class PlacedLinks:
    """The links every group of a placed layout sees (placement.search), one element per layout: they replace the
    ones the rank order's aligned blocks give (`GroupStrides`)."""

    tp: GroupLinks
    cp: GroupLinks
    ep: GroupLinks
    pp: GroupLinks
    dense_dp: GroupLinks
    edp: GroupLinks


@dataclass(frozen=True)
class MicrobatchBytes:
    """Bytes S of one call of each group's collective in one layer and micro-batch, forward
    (docs/cost-model.md#traffic-volumes)."""

    tp: np.ndarray
    """An all-gather, reduce-scatter or all-reduce of the activation."""
    cp: np.ndarray
    """One ring step of K and V."""
    ep_dispatch: np.ndarray
    """The routed copies one rank sends (all links)."""
    ep_combine: np.ndarray
    ep_network: np.ndarray
    """Share of the EP bytes sent over the network under a deduplicating dispatcher (`DEDUPLICATING`, copies from
    cost.routing.destination_copies); the plain all-to-all spreads its bytes evenly over the peers instead."""
    pp: np.ndarray
    """One activation to the next stage."""


DEDUPLICATING = (MoeDispatcher.FLEX_DEEPEP, MoeDispatcher.FLEX_HYBRIDEP)
"""Dispatchers that send a token once per destination rank and once per remote scale-up domain, fanning out there
over NVLink (DeepEP internode get_dispatch_layout is_token_in_rank and num_tokens_per_rdma_rank, deepseek-ai/DeepEP
@dd758ca csrc/kernels/legacy/layout.cu; Hybrid-EP 'first performs IB communication between peer GPUs, then each rank
distributes the received inter-node data locally', DeepEP@94a9f8f (hybrid-ep) docs/Hybrid-EP_Implementation.md §8);
Megatron's alltoall dispatcher sends one copy per (token, expert) pair."""


def microbatch_bytes(model: ModelSpec, train: TrainSpec, lay: Layouts, constants: Constants,
                     ep_members: np.ndarray, ep_domains: np.ndarray) -> MicrobatchBytes:
    """S per call (MicrobatchBytes); `ep_members` and `ep_domains` the EP group's worst piece of a scale-up domain and
    the domains it touches (GroupLinks.members_per_domain, domains_spanned)."""
    tokens = train.seq_len / lay.cp * lay.mbs
    activation = BYTES_16BIT * tokens * model.hidden
    zero = np.zeros(lay.size)
    dispatch = combine = network = zero
    if model.is_moe:
        # A plain all-to-all sends k copies of each token (one per expert); a deduplicating one a copy per
        # destination rank, and per remote domain over the network (docs/cost-model.md#traffic-dedup). The
        # all-to-all ends when the busiest rank has its tokens (cost.routing); dispatch in FP8 with its scales
        # where the run does so (DeepSeek-V3 §3.3.3), combine in 16-bit.
        copies: np.ndarray = np.full(lay.size, float(model.top_k))
        if train.moe_dispatcher in DEDUPLICATING:
            sent = destination_copies(model, lay.ep, ep_members, ep_domains)
            copies = sent.scale_up + sent.network
            network = np.divide(sent.network, copies, out=np.zeros(lay.size), where=copies > 0)
        routed = tokens * copies * lay.etp / lay.tp * busiest_rank_load(model, train, lay, tokens, constants.moe)
        per_element = (1.0 + constants.moe.dispatch_scale_bytes) if train.fp8_dispatch else float(BYTES_16BIT)
        dispatch = routed * per_element * model.hidden
        combine = routed * BYTES_16BIT * model.hidden
    return MicrobatchBytes(activation + zero, BYTES_16BIT * tokens * kv_width(model) + zero, dispatch + zero,
                           combine + zero, network + zero, activation / np.where(lay.sp, lay.tp, 1) + zero)


def ep_all_to_all_s(train: TrainSpec, size: MicrobatchBytes, lay: Layouts, links: GroupLinks) -> np.ndarray:
    """Dispatch plus combine seconds of one MoE layer and micro-batch, one direction."""
    if train.moe_dispatcher in DEDUPLICATING:
        return sum((domain_all_to_all_s(s * (1.0 - size.ep_network), s * size.ep_network, lay.ep, links)
                    for s in (size.ep_dispatch, size.ep_combine)), np.zeros(lay.size))
    return (collective_time_s(Collective.ALL_TO_ALL, size.ep_dispatch, lay.ep, links)
            + collective_time_s(Collective.ALL_TO_ALL, size.ep_combine, lay.ep, links))


def tp_blocks(lay: Layouts) -> tuple[np.ndarray, np.ndarray]:
    """TP collective blocks (an all-gather and a reduce-scatter, or an all-reduce) per pass of a dense layer
    (attention and MLP) and of an MoE layer (attention; the experts too under etp > 1)."""
    return np.full(lay.size, 2.0), 1.0 + (lay.etp > 1)


@reads("tp", "cp", "mbs", "sp", "etp", "ep", "pp", "dp", "rank_order")
def microbatch_comm(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, lay: Layouts,
                    constants: Constants, placed: PlacedLinks | None = None) -> MicrobatchComm:
    """Per-layer communication time of one micro-batch in one direction (docs/cost-model.md#traffic-volumes), on the
    links of `placed` where given. Reads the layout columns it declares (`reads`) only."""
    comm = constants.comm
    strides = GroupStrides.of(lay)
    tp_links = placed.tp if placed else group_links(cluster, lay.tp, np.ones_like(lay.tp), comm)
    cp_links = placed.cp if placed else group_links(cluster, lay.cp, lay.tp, comm)
    ep_links = placed.ep if placed else group_links(cluster, lay.ep, strides.ep, comm)
    pp_links = placed.pp if placed else group_links(cluster, lay.pp, strides.pp, comm)
    size = microbatch_bytes(model, train, lay, constants, ep_links.members_per_domain, ep_links.domains_spanned)
    gather = collective_time_s(Collective.ALL_GATHER, size.tp, lay.tp, tp_links)
    scatter = collective_time_s(Collective.REDUCE_SCATTER, size.tp, lay.tp, tp_links)
    reduce = collective_time_s(Collective.ALL_REDUCE, size.tp, lay.tp, tp_links)
    block = np.where(lay.sp, gather + scatter, reduce)
    dense_blocks, moe_blocks = tp_blocks(lay)
    cp = (lay.cp - 1) * collective_time_s(Collective.SEND_RECV, size.cp, lay.cp, cp_links)
    ep = ep_all_to_all_s(train, size, lay, ep_links) if model.is_moe else np.zeros(lay.size)
    pp = collective_time_s(Collective.SEND_RECV, size.pp, lay.pp, pp_links)
    return MicrobatchComm(dense_blocks * block, moe_blocks * block, cp, ep, pp, size)


@dataclass(frozen=True)
class DataParallelComm:
    """Data-parallel communication of one step on one GPU."""

    grad_sync_s: np.ndarray
    """Gradient reduce-scatter (ZeRO ≥ 1) or all-reduce (ZeRO 0), after the last micro-batch's backward."""
    param_gather_s: np.ndarray
    """16-bit parameter all-gather after the optimizer step (ZeRO 1-2 distributed optimizer)."""
    per_microbatch_s: np.ndarray
    """ZeRO-3: weight gathers (forward and backward) and gradient reduce-scatter every micro-batch."""


def zero3_calls(model: ModelSpec, train: TrainSpec, lay: Layouts, layers: StageLayers
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) ZeRO-3 collectives per pass of the critical rank: one per layer (FSDP units), or one per
    parameter tensor it holds under TrainSpec.zero3_synchronous (cost.params.tensors_per_layer)."""
    if not train.zero3_synchronous:
        per_layer = layers.dense + layers.moe
        return per_layer, per_layer
    dense_ne, _ = tensors_per_layer(model, moe=False)
    moe_ne, moe_ex = tensors_per_layer(model, moe=True, ep=lay.ep) if model.is_moe else (0, 0)
    return layers.dense * dense_ne + layers.moe * moe_ne, layers.moe * np.asarray(moe_ex, dtype=float)


def data_parallel_comm(
    cluster: ClusterSpec, lay: Layouts, non_expert_params: np.ndarray, expert_params: np.ndarray,
    grad_bytes: float, zero3_calls: tuple[np.ndarray, np.ndarray], comm: CommConstants, list_form: bool = False,
    placed: PlacedLinks | None = None,
) -> DataParallelComm:
    """DP traffic for the parameters one GPU holds (before ZeRO sharding): gradients reduced at `grad_bytes` per
    element, parameters gathered in 16 bits. ZeRO-3 runs `zero3_calls` = (non-expert, expert) collectives per pass,
    each paying its latency (one per layer, or per tensor under TrainSpec.zero3_synchronous), and in `list_form`
    (DeepSpeed 2021) a view and a copy per member rank on the host (docs/cost-model.md#zero3-list-form)."""
    dense_group = lay.dp * lay.cp
    strides = GroupStrides.of(lay)
    dense_links = placed.dense_dp if placed else group_links(cluster, dense_group, strides.dense_dp, comm)
    expert_links = placed.edp if placed else group_links(cluster, lay.edp, strides.edp, comm)

    def both(op: Collective, bytes_per_param: float,
             calls: tuple[np.ndarray | int, np.ndarray | int] = (1, 1)) -> np.ndarray:
        dense_calls, expert_calls = calls
        return (dense_calls * collective_time_s(op, bytes_per_param * non_expert_params / dense_calls, dense_group,
                                                dense_links)
                + expert_calls * collective_time_s(op, bytes_per_param * expert_params / expert_calls, lay.edp,
                                                   expert_links))

    zero3 = lay.zero >= 3
    scatter = both(Collective.REDUCE_SCATTER, grad_bytes)
    reduce = both(Collective.ALL_REDUCE, grad_bytes)
    calls = (np.maximum(zero3_calls[0], 1), np.maximum(zero3_calls[1], 1))
    # In list form every call also makes one view and one copy per member rank on the host (CommConstants
    # .list_collective_rank_us): two all-gathers and a reduce-scatter per pass.
    per_rank = comm.list_collective_rank_s * (zero3_calls[0] * dense_group + zero3_calls[1] * lay.edp) if (
        list_form) else 0.0
    return DataParallelComm(
        grad_sync_s=np.where(lay.zero >= 1, scatter, reduce) * ~zero3,
        param_gather_s=np.where((lay.zero >= 1) & ~zero3, both(Collective.ALL_GATHER, BYTES_16BIT), 0.0),
        per_microbatch_s=np.where(
            zero3,
            2 * both(Collective.ALL_GATHER, BYTES_16BIT, calls)
            + both(Collective.REDUCE_SCATTER, grad_bytes, calls)
            + 3 * per_rank,
            0.0,
        ),
    )
