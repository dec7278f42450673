"""Layout: one parallel layout as the user gives it (validated, frozen), and the enums of its modes.

The vectorized form (a struct of numpy arrays, one element per candidate) is `llmscale.layouts.Layouts`.
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field, PositiveInt

from llmscale.specs.base import Spec


class Recompute(str, Enum):
    """Activation recomputation (Korthikanti et al. 2022)."""

    NONE = "none"
    """Keep every activation the backward pass needs."""
    SELECTIVE = "selective"
    """Recompute the attention core (softmax, dropout, score matrix); Korthikanti §4.2."""
    FULL = "full"
    """Keep only each layer's input; recompute the whole layer in backward."""

    @property
    def code(self) -> int:
        return _RECOMPUTE_CODES[self]


class Schedule(str, Enum):
    """Pipeline schedule (../shared/research/formulas.md B3)."""

    ONE_F_ONE_B = "1f1b"
    """PipeDream-Flush 1F1B: bubble (p−1)/m, p micro-batches in flight on stage 0."""
    INTERLEAVED = "interleaved"
    """Megatron interleaved 1F1B with vpp chunks per rank: bubble (p−1)/(v·m)."""
    ZB_H1 = "zb-h1"
    """Zero-bubble ZB-H1 (Qi et al. 2023): bubble (p−1)/(3m), 1F1B memory."""
    ZB_V = "zbv"
    """Zero-bubble V schedule: two chunks per rank in a V, ~zero bubble, 1F1B memory."""
    DUALPIPE = "dualpipe"
    """DeepSeek-V3 DualPipe: bidirectional, 2× parameters, PP+1 micro-batches of activations."""

    @property
    def code(self) -> int:
        return _SCHEDULE_CODES[self]


class RankOrder(str, Enum):
    """How global ranks map to the parallel dimensions, innermost first (Megatron-Core
    parallel_state.initialize_model_parallel `order`; Megatron-LM picks the second with --use-tp-pp-dp-mapping)."""

    TP_CP_EP_DP_PP = "tp-cp-ep-dp-pp"
    """Megatron's default: data-parallel replicas of a stage are neighbours, pipeline stages are far apart."""
    TP_CP_EP_PP_DP = "tp-cp-ep-pp-dp"
    """Pipeline inside data parallel: a replica's stages are neighbours, DP groups span the job (Llama 3
    §3.3.2 orders its groups [TP, CP, PP, DP])."""

    @property
    def code(self) -> int:
        return _RANK_ORDER_CODES[self]


_RECOMPUTE_CODES = {member: i for i, member in enumerate(Recompute)}
_SCHEDULE_CODES = {member: i for i, member in enumerate(Schedule)}
_RANK_ORDER_CODES = {member: i for i, member in enumerate(RankOrder)}


class Layout(Spec):
    """One parallel layout. Sizes multiply: tp × cp × pp × dp = GPUs of the job. Expert layers
    re-partition the tp × cp × dp ranks of a stage as etp × ep × edp (Megatron MoE parallel folding)."""

    tp: PositiveInt = Field(1, description="tensor parallel size")
    pp: PositiveInt = Field(1, description="pipeline stages")
    dp: PositiveInt | None = Field(None, description="data parallel size; None = GPUs / (tp·cp·pp)")
    cp: PositiveInt = Field(1, description="context parallel size")
    ep: PositiveInt = Field(1, description="expert parallel size")
    etp: PositiveInt | None = Field(None, description="expert tensor parallel size; None = tp (Megatron)")
    vpp: PositiveInt = Field(1, description="virtual stages per pipeline rank (interleaving)")
    mbs: PositiveInt = Field(1, description="micro-batch size in sequences")
    zero: int = Field(1, ge=0, le=3, description="0 DDP · 1 distributed optimizer · 2 +grads · 3 +params")
    recompute: Recompute = Recompute.NONE
    sp: bool | None = Field(None, description="sequence parallel; None = on when tp > 1")
    schedule: Schedule | None = Field(None, description="None = interleaved if vpp > 1 else 1f1b")
    offload_optimizer: bool = Field(False, description="optimizer state and fp32 master in host memory")
    offload_params: bool = Field(False, description="parameters in host memory, streamed per layer")
    tp_comm_overlap: bool = Field(
        False, description="TP collectives overlapped with GEMMs (Megatron --tp-comm-overlap)"
    )
    ep_comm_overlap: bool = Field(
        False, description="expert all-to-alls overlapped with compute (Megatron --overlap-moe-expert-parallel-comm)"
    )
    rank_order: RankOrder = Field(RankOrder.TP_CP_EP_DP_PP, description="rank order of the parallel groups")

    @property
    def resolved_etp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def resolved_sp(self) -> bool:
        return self.sp if self.sp is not None else self.tp > 1

    @property
    def resolved_schedule(self) -> Schedule:
        if self.schedule is not None:
            return self.schedule
        return Schedule.INTERLEAVED if self.vpp > 1 else Schedule.ONE_F_ONE_B
