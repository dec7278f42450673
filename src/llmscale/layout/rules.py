"""Divisibility and consistency rules of a parallel layout, vectorized over candidates.

`check` returns one reason code per layout (0 = valid): the search counts rejections by reason, the CLI names the
fields of one layout's reason ("tp (8) × pp (4) × dp (3) = 96 ≠ 128 GPUs"): docs/cost-model.md#rules.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import IntEnum
from typing import Any

import numpy as np

from llmscale.errors import SpecError
from llmscale.layout.arrays import Layouts
from llmscale.specs.layout import RankOrder, Recompute, Schedule
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import MoeDispatcher, TrainSpec


class Reason(IntEnum):
    """Why a layout is rejected; 0 means valid. Order is the order rules are checked; `meaning` says each rule."""

    OK = 0
    GPU_COUNT = 1
    TP_HEADS = 2
    PP_LAYERS = 3
    SCHEDULE = 4
    EP_EXPERTS = 5
    EP_FOLD = 6
    SP_TP = 7
    CP_SEQ = 8
    BATCH = 9
    MICROBATCHES = 10
    RECOMPUTE_MODULES = 11
    OFFLOAD_ACTIVATIONS = 12
    CUDA_GRAPHS = 13
    OUT_OF_MEMORY = 14
    EXCLUDED = 15
    TP_OVERLAP = 16
    EP_OVERLAP = 17
    RANK_ORDER = 18
    TIED_OUTPUT = 19

    @property
    def meaning(self) -> str:
        """The rule this reason stands for, in one sentence (reports print it beside the count)."""
        return _MEANING[self]


_MEANING: dict[Reason, str] = {
    Reason.OK: "valid",
    Reason.GPU_COUNT: "tp × cp × pp × dp must equal the job's GPUs",
    Reason.TP_HEADS: "tp must divide the attention heads and the key/value heads",
    Reason.PP_LAYERS: "pp × vpp must not exceed the layers + 2: Megatron can give the embedding and the loss a virtual "
                      "stage each (--account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split)",
    Reason.SCHEDULE: "vpp > 1 exactly when the schedule is interleaved, DualPipe needs an even pp; the search also "
                     "drops here what is no distinct runnable layout (a pipelined schedule without a pipeline, "
                     "ZeRO-2/3 with pipelining, a second rank order where pp or dp is 1, module recompute beside "
                     "full)",
    Reason.EP_EXPERTS: "ep must divide the routed experts (ep = 1 for a dense model)",
    Reason.EP_FOLD: "ep × etp must divide the tp × cp × dp ranks of a stage",
    Reason.SP_TP: "sequence parallelism needs tp > 1",
    Reason.CP_SEQ: "2 × cp must divide the sequence length (load-balanced context parallelism)",
    Reason.BATCH: "dp × mbs must divide the global batch",
    Reason.MICROBATCHES: "interleaving needs the micro-batch count to be a multiple of pp; DualPipe an even count "
                         "≥ 2·pp",
    Reason.RECOMPUTE_MODULES: "a module recompute needs its module (MLA for mla_up, experts for moe_act) and no full "
                              "recompute",
    Reason.OFFLOAD_ACTIVATIONS: "activation offload needs pp = 1, no recompute and fewer offloaded layers than layers "
                                "(Megatron-Core TransformerConfig.__post_init__ at NVIDIA/Megatron-LM@000c4ac24f61 "
                                "raises on each)",
    Reason.CUDA_GRAPHS: "CUDA graphs need no full recompute (Megatron's validate_args asserts it, "
                        "NVIDIA/Megatron-LM@000c4ac24f61 megatron/training/arguments.py)",
    Reason.TP_OVERLAP: "TP communication overlap needs tp > 1 and sequence parallelism (Megatron-Bridge drops "
                       "it otherwise: NVIDIA-NeMo/Megatron-Bridge@51885cf132b2 training/comm_overlap.py)",
    Reason.EP_OVERLAP: "EP all-to-all overlap needs ep > 1, an interleaved (or DualPipe) schedule when pp > 1, no "
                       "full recompute and the alltoall or flex dispatcher (NVIDIA/Megatron-LM@cd4afffa648 "
                       "transformer_config.py asserts each)",
    Reason.RANK_ORDER: "an MoE model with the pipeline inside data parallelism (rank order tp-cp-ep-pp-dp) and pp > 1 "
                       "needs an expert data-parallel size equal to dp, i.e. ep × etp = tp × cp, or its expert and "
                       "dense pipeline groups differ (Megatron-Core asserts it: "
                       "NVIDIA/Megatron-LM@d98e8a6 megatron/core/parallel_state.py initialize_model_parallel)",
    Reason.TIED_OUTPUT: "an MXFP8 output layer (fp8_output_proj) tied to the input embedding needs pp > 1: on the "
                        "stage that holds both, Megatron-Core's TELMHeadColumnParallelLinear refuses the embedding's "
                        "shared weight (NVIDIA/Megatron-LM@d98e8a64 megatron/core/models/gpt/gpt_model.py:289, "
                        "extensions/transformer_engine.py:1826)",
    Reason.OUT_OF_MEMORY: "the most-loaded GPU needs more memory than it has, or than --max-memory-fraction of it "
                          "(set by the memory model, not by `check`)",
    Reason.EXCLUDED: "outside what the user fixed or bounded on `plan` (--tp 8, --pp 4..16) or what the target "
                     "framework runs (set by the space, not by `check`)",
}


RULE_READS: dict[Reason, frozenset[str]] = {reason: frozenset(names.split()) for reason, names in {
    Reason.GPU_COUNT: "tp cp pp dp",
    Reason.TP_HEADS: "tp",
    Reason.PP_LAYERS: "pp vpp",
    Reason.SCHEDULE: "vpp schedule pp",
    Reason.EP_EXPERTS: "ep",
    Reason.EP_FOLD: "tp cp dp ep etp",
    Reason.SP_TP: "sp tp",
    Reason.CP_SEQ: "cp",
    Reason.BATCH: "dp mbs",
    Reason.MICROBATCHES: "schedule pp dp mbs",
    Reason.RECOMPUTE_MODULES: "recompute recompute_norm recompute_mla_up recompute_moe_act recompute_mlp",
    Reason.OFFLOAD_ACTIVATIONS: "offload_activations pp recompute recompute_norm recompute_mla_up recompute_moe_act "
                                "recompute_mlp",
    Reason.CUDA_GRAPHS: "cuda_graphs recompute",
    Reason.TP_OVERLAP: "tp_comm_overlap tp sp",
    Reason.EP_OVERLAP: "ep_comm_overlap ep pp schedule recompute",
    Reason.RANK_ORDER: "rank_order pp tp cp ep etp",
    Reason.TIED_OUTPUT: "pp",
}.items()}
"""The layout columns each rule of `check` reads, in `check`'s order (tests/test_space_pruning.py checks both): the
space applies a leading run of rules as soon as their columns are built (layout.space)."""


def decided_by(columns: frozenset[str]) -> tuple[Reason, ...]:
    """The leading rules of `check`, in order, that read only `columns`: on rows holding those columns they give the
    reason `check` would give the full layout wherever one of them fails."""
    decided: list[Reason] = []
    for reason, reads in RULE_READS.items():
        if not reads <= columns:
            break
        decided.append(reason)
    return tuple(decided)


def check(model: ModelSpec, train: TrainSpec, num_gpus: int | np.ndarray, lay: Layouts) -> np.ndarray:
    """Reason code per layout (int8 array of shape (N,)); the first failing rule wins."""
    reason = np.zeros(lay.size, dtype=np.int8)
    for code, failed in reversed(conditions(model, train, num_gpus, lay)):
        reason = np.where(failed, np.int8(code), reason)
    return reason


def conditions(model: ModelSpec, train: TrainSpec, num_gpus: int | np.ndarray,
               lay: Layouts) -> list[tuple[Reason, np.ndarray]]:
    """Each rule of `check`, in order, with where it fails (reads only the columns RULE_READS gives it)."""
    kv_heads = model.heads if model.mla is not None else model.num_kv_heads
    interleaved = lay.schedule == Schedule.INTERLEAVED.code
    dualpipe = lay.schedule == Schedule.DUALPIPE.code
    num_micro = lay.num_microbatches(train.global_batch)
    experts = max(model.experts, 1)
    view = {name: lay.column(name) for name in ("tp", "sp", "ep", "pp", "schedule", "recompute")}
    gathers = train.moe_dispatcher is MoeDispatcher.ALLGATHER  # the overlap splits the all-to-all dispatcher's work
    return [
        (Reason.GPU_COUNT, lay.num_gpus != num_gpus),
        (Reason.TP_HEADS, (model.heads % lay.tp != 0) | (kv_heads % lay.tp != 0)),
        (Reason.PP_LAYERS, lay.pp * lay.vpp > model.layers + 2),
        (Reason.SCHEDULE, ((lay.vpp > 1) != interleaved) | (dualpipe & (lay.pp % 2 == 1))),
        (Reason.EP_EXPERTS, (experts % lay.ep != 0) | ((model.experts == 0) & (lay.ep > 1))),
        (Reason.EP_FOLD, (lay.tp * lay.cp * lay.dp) % (lay.ep * lay.etp) != 0),
        (Reason.SP_TP, lay.sp & (lay.tp == 1)),
        (Reason.CP_SEQ, (lay.cp > 1) & (train.seq_len % (2 * lay.cp) != 0)),
        (Reason.BATCH, train.global_batch % (lay.dp * lay.mbs) != 0),
        (
            Reason.MICROBATCHES,
            (interleaved & (num_micro % lay.pp != 0))
            | (dualpipe & ((num_micro % 2 == 1) | (num_micro < 2 * lay.pp))),
        ),
        (Reason.RECOMPUTE_MODULES, _module_recompute_misplaced(model, lay)),
        (Reason.OFFLOAD_ACTIVATIONS, (lay.offload_activations > 0) & (
            (lay.pp > 1) | (lay.recompute != Recompute.NONE.code) | _any_module_recompute(lay)
            | (lay.offload_activations >= model.layers))),
        (Reason.CUDA_GRAPHS, lay.cuda_graphs & ~switch_runs("cuda_graphs", view)),
        (Reason.TP_OVERLAP, lay.tp_comm_overlap & ~switch_runs("tp_comm_overlap", view)),
        (Reason.EP_OVERLAP, lay.ep_comm_overlap & (~switch_runs("ep_comm_overlap", view) | gathers)),
        (Reason.RANK_ORDER, model.is_moe & (lay.rank_order == RankOrder.TP_CP_EP_PP_DP.code) & (lay.pp > 1)
         & (lay.ep * lay.etp != lay.tp * lay.cp)),
        (Reason.TIED_OUTPUT, (lay.pp == 1) & (train.fp8_output_proj and model.tied_embeddings)),
    ]


RELEASE_SWITCHES = ("tp_comm_overlap", "ep_comm_overlap", "cuda_graphs")
"""Switches a framework release turns on that a layout may not run (a release drops them there: io.releases,
layout.profile)."""


def switch_runs(name: str, cols: Mapping[str, Any]) -> np.ndarray:
    """Where a release switch can run, elementwise over layout columns (tp, sp, ep, pp, schedule, recompute as
    arrays or scalars): TP overlap needs tp > 1 and sp (Reason.TP_OVERLAP), EP overlap `ep_overlap_runs`, CUDA graphs
    no full recompute (Reason.CUDA_GRAPHS)."""
    if name == "ep_comm_overlap":
        return ep_overlap_runs(dict(cols))
    if name == "cuda_graphs":
        return np.asarray(cols["recompute"]) != Recompute.FULL.code
    tp = np.asarray(cols["tp"])
    return (tp > 1) & np.asarray(cols.get("sp", tp > 1), dtype=bool)


def ep_overlap_runs(lay: Layouts | dict[str, np.ndarray]) -> np.ndarray:
    """Where the EP all-to-all overlap can run: ep > 1, pp = 1 or interleaved (Megatron's combined 1F1B) or DualPipe
    (DeepSeek-V3 §3.2.1), no full recompute (Reason.EP_OVERLAP)."""
    get = (lambda name: lay[name]) if isinstance(lay, dict) else lay.column
    schedule = get("schedule")
    pipelined_ok = (get("pp") == 1) | (schedule == Schedule.INTERLEAVED.code) | (schedule == Schedule.DUALPIPE.code)
    result: np.ndarray = (get("ep") > 1) & pipelined_ok & (get("recompute") != Recompute.FULL.code)
    return result


def _any_module_recompute(lay: Layouts) -> np.ndarray:
    result: np.ndarray = lay.recompute_norm | lay.recompute_mla_up | lay.recompute_moe_act | lay.recompute_mlp
    return result


def _module_recompute_misplaced(model: ModelSpec, lay: Layouts) -> np.ndarray:
    """A module recompute on a model without that module, or beside full recompute (which already re-runs every
    module: Megatron takes --recompute-modules with --recompute-granularity selective only)."""
    modules = _any_module_recompute(lay)
    absent = (lay.recompute_mla_up & (model.mla is None)) | (lay.recompute_moe_act & (not model.is_moe))
    return absent | (modules & (lay.recompute == Recompute.FULL.code))


def explain_rejection(
    reason: Reason, model: ModelSpec, train: TrainSpec, num_gpus: int, lay: Layouts, i: int = 0
) -> SpecError:
    """One actionable message for layout i, naming the fields and values that broke the rule."""
    tp, pp, dp, cp = (int(getattr(lay, k)[i]) for k in ("tp", "pp", "dp", "cp"))
    ep, etp, vpp, mbs = (int(getattr(lay, k)[i]) for k in ("ep", "etp", "vpp", "mbs"))
    schedule = list(Schedule)[int(lay.schedule[i])].value
    messages: dict[Reason, tuple[str, object, str]] = {
        Reason.GPU_COUNT: _gpu_count_message(tp, cp, pp, dp, num_gpus),
        Reason.TP_HEADS: (
            "tp", tp, f"does not divide heads ({model.heads}) and kv_heads ({model.num_kv_heads}); tp values that "
            f"divide both: {_divisors(math.gcd(model.heads, model.num_kv_heads))}"
        ),
        Reason.PP_LAYERS: (
            "pp", pp,
            f"pp ({pp}) × vpp ({vpp}) = {pp * vpp} exceeds layers ({model.layers}) + 2 (embedding and loss stages)",
        ),
        Reason.SCHEDULE: (
            "schedule", schedule,
            f"vpp ({vpp}) > 1 requires schedule 'interleaved' and vice versa; 'dualpipe' needs an even pp ({pp})",
        ),
        Reason.EP_EXPERTS: ("ep", ep, f"must divide experts ({model.experts}): {_divisors(model.experts)}; "
                                      "dense models take ep = 1"),
        Reason.EP_FOLD: (
            "ep", ep, f"ep ({ep}) × etp ({etp}) = {ep * etp} must divide tp × cp × dp = {tp * cp * dp}"
        ),
        Reason.SP_TP: ("sp", True, "sequence parallelism needs tp > 1"),
        Reason.CP_SEQ: ("cp", cp, f"2 × cp = {2 * cp} does not divide seq_len ({train.seq_len}; "
                                  f"{train.seq_len} / {2 * cp} = {train.seq_len / (2 * cp):,.2f}); cp values that do: "
                                  f"{_divisors(train.seq_len // 2) if train.seq_len % 2 == 0 else '1 (odd seq_len)'}"),
        Reason.BATCH: _batch_message(dp, mbs, train.global_batch),
        Reason.MICROBATCHES: (
            "schedule", schedule,
            f"{train.global_batch // max(dp * mbs, 1)} micro-batches: interleaving needs a multiple of "
            f"pp ({pp}); dualpipe an even number ≥ 2·pp (DualPipe's reference code asserts it)",
        ),
        Reason.RECOMPUTE_MODULES: (
            "recompute", list(Recompute)[int(lay.recompute[i])].value,
            "module recompute (--recompute-norm, --recompute-mla-up, --recompute-moe-act, --recompute-mlp) goes with "
            "recompute none or selective, on a model that has the module (mla-up: MLA attention; moe-act: experts)",
        ),
        Reason.OFFLOAD_ACTIVATIONS: (
            "offload_activations", int(lay.offload_activations[i]),
            f"activation offload needs pp = 1 (pp {pp}), no recompute, and fewer layers than the model's "
            f"{model.layers} (Megatron-Core's CPU offloading)",
        ),
        Reason.CUDA_GRAPHS: ("cuda_graphs", True, "CUDA graphs cannot capture full recompute (Megatron asserts "
                                                  "recompute_granularity != full with --cuda-graph-impl)"),
        **_switch_messages(train, tp, cp, pp, ep, etp, schedule),
    }
    field, value, allowed = messages[reason]
    return SpecError(field, value, allowed, where="layout")


def _switch_messages(train: TrainSpec, tp: int, cp: int, pp: int, ep: int, etp: int,
                     schedule: str) -> dict[Reason, tuple[str, object, str]]:
    """`explain_rejection`'s messages for the overlap switches, the rank order and the tied MXFP8 output layer."""
    return {
        Reason.TP_OVERLAP: ("tp_comm_overlap", True, f"needs tp > 1 (tp {tp}) and sequence parallelism (--sp)"),
        Reason.EP_OVERLAP: ("ep_comm_overlap", True, f"needs ep > 1 (ep {ep}), the interleaved schedule when pp > 1 "
                            f"(pp {pp}, schedule {schedule}), no full recompute and the alltoall or flex dispatcher "
                            f"(the job's is {train.moe_dispatcher.value}: a --framework release whose recipe runs "
                            f"one, or --framework any)"),
        Reason.RANK_ORDER: ("rank_order", "tp-cp-ep-pp-dp", f"with pp > 1 (pp {pp}) needs ep × etp = tp × cp "
                            f"({ep} × {etp} ≠ {tp} × {cp}): Megatron-Core asserts the expert data-parallel size "
                            f"equals dp there; use rank order tp-cp-ep-dp-pp"),
        Reason.TIED_OUTPUT: ("pp", pp, "an MXFP8 output layer (--fp8-output-proj) tied to the input embedding "
                             "(the model's tied_embeddings, or its release's default) needs pp > 1: on one stage "
                             "Megatron-Core's MXFP8 output layer refuses the embedding's weight; give pp > 1, an "
                             "untied model, or --bf16-output-proj"),
    }


def _divisors(n: int, shown: int = 8) -> str:
    """The divisors of n as a short list ('1, 2, 4, 8'; the first and last few when there are many)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    found = sorted(set(small) | {n // d for d in small})
    if len(found) <= shown:
        return ", ".join(f"{d:,}" for d in found)
    return ", ".join(f"{d:,}" for d in found[:shown - 2]) + ", …, " + ", ".join(f"{d:,}" for d in found[-2:])


def _gpu_count_message(tp: int, cp: int, pp: int, dp: int, num_gpus: int) -> tuple[str, object, str]:
    """What does not divide: tp·cp·pp into the job's GPUs (dp must be whole), or a given dp that misses them."""
    model_parallel = tp * cp * pp
    if num_gpus % model_parallel:
        return ("tp × cp × pp", model_parallel,
                f"tp ({tp}) × cp ({cp}) × pp ({pp}) = {model_parallel:,} does not divide the job's {num_gpus:,} GPUs "
                f"({num_gpus:,} / {model_parallel:,} = {num_gpus / model_parallel:,.2f}: dp must be whole); "
                f"products that divide it: {_divisors(num_gpus)}")
    return ("tp × cp × pp × dp", model_parallel * dp,
            f"tp ({tp}) × cp ({cp}) × pp ({pp}) × dp ({dp}) = {model_parallel * dp:,} must equal the job's "
            f"{num_gpus:,} GPUs (dp {num_gpus // model_parallel:,} does)")


def _batch_message(dp: int, mbs: int, global_batch: int) -> tuple[str, object, str]:
    """What does not divide the global batch: dp itself, or mbs into the sequences per data-parallel rank."""
    if global_batch % dp:
        return ("dp", dp, f"dp ({dp:,}) does not divide the global batch ({global_batch:,} sequences; "
                          f"{global_batch:,} / {dp:,} = {global_batch / dp:,.2f}); choose dp or --gbs accordingly")
    per_rank = global_batch // dp
    return ("mbs", mbs, f"mbs ({mbs}) does not divide the {per_rank:,} sequences per data-parallel rank (global batch "
                        f"{global_batch:,} / dp {dp:,}); mbs values that do: {_divisors(per_rank)}")


def validate_one(model: ModelSpec, train: TrainSpec, num_gpus: int, lay: Layouts) -> None:
    """Raise a SpecError if the single layout in `lay` breaks a rule."""
    reason = Reason(int(check(model, train, num_gpus, lay)[0]))
    if reason is not Reason.OK:
        raise explain_rejection(reason, model, train, num_gpus, lay)
