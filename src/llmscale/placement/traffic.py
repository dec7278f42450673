"""Bytes each group kind sends per step from one GPU, split by the tier they cross, and the load this puts on each
tier's links (docs/placement.md#per-tier-traffic).

Calls per step on the busiest pipeline rank (cost.derived, RankOf.BUSIEST), from the sizes cost.traffic prices:
TP the blocks of cost.traffic.tp_blocks, each an all-gather and a reduce-scatter (sequence parallel) or an
all-reduce, and EP a dispatch and a combine per MoE layer, both in the passes cost.path prices (forward, backward, a
full recompute's forward again); CP cp − 1 ring steps per layer in its passes (cost.path.PathShares); PP one
activation forward and one gradient backward per micro-batch and model chunk; DP the gradient reduce-scatter and
the parameter all-gather per step (ZeRO-3: per micro-batch), or an all-reduce without ZeRO."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmscale.cost.collectives import tier_shares
from llmscale.cost.derived import derive
from llmscale.cost.path import PathShares
from llmscale.cost.traffic import DEDUPLICATING, microbatch_bytes, tp_blocks
from llmscale.layout.arrays import Layouts
from llmscale.layout.stages import RankOf
from llmscale.placement.mesh import GroupKind
from llmscale.placement.spans import KindSpan
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.collective import Collective, bus_factor
from llmscale.specs.constants import Constants
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec
from llmscale.units import BYTES_16BIT


@dataclass(frozen=True)
class KindTraffic:
    """One group kind's traffic per step from one GPU."""

    kind: GroupKind
    op: Collective
    bytes_per_step: float
    """Bytes one member sends per step (nccl-tests bus bytes: S·f(n) per call)."""
    by_tier: np.ndarray
    """(T,) of them, by the outermost tier they cross (tier 0: inside the scale-up domain)."""
    through: np.ndarray
    """(T,) per GPU of the busiest domain, the bytes through tier i's links: tier 0 what stays in the scale-up
    domain; tier i ≥ 1 what leaves a tier-(i−1) domain (KindSpan.leaving, else the worst rank's share)."""


@dataclass(frozen=True)
class TierLoad:
    """One tier's links over a step."""

    name: str
    bytes_per_gpu: float
    """Bytes per GPU per step that cross this tier (leave a domain of the tier inside it; tier 0: NVLink)."""
    busy_s: float
    """Seconds the tier's links need for them per step at their achievable per-GPU bandwidth."""
    load: float
    """busy_s / step seconds: the share of the step the busiest link of this tier is busy."""


def step_traffic(model: ModelSpec, train: TrainSpec, lay: Layouts, constants: Constants,
                 spans: dict[GroupKind, KindSpan]) -> list[KindTraffic]:
    """Per-kind bytes per step of layout 0 of `lay`, split by tier with `spans` (cost.collectives.tier_shares; a
    deduplicating MoE dispatcher's network share over the tiers beyond the scale-up one, `_ep_shares`)."""
    derived = derive(model, train, lay)
    stage = derived.stages.get(RankOf.BUSIEST, derived.stages[RankOf.SECOND])
    dense, moe = float(stage.layers.dense[0]), float(stage.layers.moe[0])
    ep_span = spans[GroupKind.EP]
    size = microbatch_bytes(model, train, lay, constants, ep_span.members[:1].astype(float),
                            ep_span.domains[:1].astype(float))
    dedup = train.moe_dispatcher in DEDUPLICATING
    m = float(derived.num_microbatches[0])
    shares = PathShares.of(lay, constants.step, 0.0)  # the passes the critical path prices (cost.path)
    passes, cp_passes = float(shares.tp_ep_passes[0]), float(shares.cp_passes[0])
    sp = bool(lay.sp[0])
    dense_blocks, moe_blocks = tp_blocks(lay)
    blocks = float(dense_blocks[0]) * dense + float(moe_blocks[0]) * moe
    cp = float(lay.cp[0] - 1) * (dense + moe) * cp_passes * m
    dp_bytes = _dp_bytes(train, lay, stage.params.non_expert[0], stage.params.expert[0], m)
    calls = {
        GroupKind.TP: (Collective.REDUCE_SCATTER if sp else Collective.ALL_REDUCE,
                       float(size.tp[0]) * blocks * m * passes * (2 if sp else 1)),
        GroupKind.CP: (Collective.SEND_RECV, float(size.cp[0]) * cp),
        GroupKind.EP: (Collective.ALL_TO_ALL, float(size.ep_dispatch[0] + size.ep_combine[0]) * moe * m * passes),
        GroupKind.PP: (Collective.SEND_RECV, float(size.pp[0]) * 2 * m * float(lay.vpp[0])),
        GroupKind.DP: (Collective.REDUCE_SCATTER, dp_bytes[0]),
        GroupKind.EDP: (Collective.REDUCE_SCATTER, dp_bytes[1]),
    }
    network = float(size.ep_network[0])
    return [_kind_traffic(kind, op, volume, spans[kind], network if kind is GroupKind.EP and dedup else None)
            for kind, (op, volume) in calls.items()]


def _kind_traffic(kind: GroupKind, op: Collective, volume: float, span: KindSpan,
                  dedup_network: float | None) -> KindTraffic:
    """One kind's bytes per step by tier. A deduplicating dispatcher's EP bytes (`dedup_network` their share that
    leaves the scale-up domain) already leave out the sender's own copies, so no bus factor, and its outer tiers
    carry its own share, not the plain all-to-all's leaving share (spans.KindSpan.leaving)."""
    factor = 1.0 if dedup_network is not None else float(bus_factor(op, np.array([span.size], dtype=float))[0])
    wire = volume * factor if span.size > 1 else 0.0
    tiers = tier_shares(op, np.array([span.size]), span.members[:, None])[:, 0]
    leaving = span.leaving
    if dedup_network is not None:
        tiers = _ep_shares(tiers, dedup_network)
        leaving = np.full(span.leaving.shape, np.nan)
    by_tier = wire * tiers
    beyond = np.cumsum(by_tier[::-1])[::-1]  # what crosses tier i or a tier outside it
    through = np.where(np.isnan(leaving), beyond, wire * np.nan_to_num(leaving))
    through[0] = by_tier[0]
    return KindTraffic(kind, op, wire, by_tier, through)


def _ep_shares(plain: np.ndarray, network: float) -> np.ndarray:
    """Tier shares of a deduplicating dispatcher's bytes: `network` of them leave the scale-up domain, spread over the
    outer tiers as the plain all-to-all's shares `plain` spread its own."""
    outer = plain[1:].sum()
    if outer <= 0:
        return plain
    return np.concatenate([[1.0 - network], plain[1:] / outer * network])


def _dp_bytes(train: TrainSpec, lay: Layouts, non_expert: float, expert: float, m: float) -> tuple[float, float]:
    """(dense, expert) bytes reduced and gathered per step: gradients at their dtype, parameters in 16 bits."""
    grad = 4.0 if train.fp32_grads else 2.0
    zero = int(lay.zero[0])
    if zero == 0:
        per_param = 2 * grad  # an all-reduce moves twice a reduce-scatter's bytes
    elif zero < 3:
        per_param = grad + BYTES_16BIT
    else:
        per_param = (2 * BYTES_16BIT + grad) * m  # forward and backward gathers, a reduce-scatter, per micro-batch
    return non_expert * per_param, expert * per_param


def tier_loads(cluster: ClusterSpec, constants: Constants, traffic: list[KindTraffic],
               step_s: float) -> list[TierLoad]:
    """Per tier: bytes per GPU through its links in the busiest domain (KindTraffic.through), seconds at its
    achievable bandwidth (rated × efficiency ÷ oversubscription, as cost.collectives prices rings), and that as a
    share of the step."""
    comm = constants.comm
    out = []
    for t, tier in enumerate(cluster.tiers):
        volume = sum(float(k.through[t]) for k in traffic)
        efficiency = comm.scale_up_ring if t == 0 else comm.network
        rate = tier.bandwidth_bytes_per_s * efficiency / tier.oversubscription
        busy = volume / rate
        out.append(TierLoad(tier.name, volume, busy, busy / step_s if step_s > 0 else 0.0))
    return out
