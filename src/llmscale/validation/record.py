"""A prediction beside the published record: is this layout's MFU above every published run on its GPU generation
and precision, and which terms carry the difference (search.plausibility)? The record run's own layout is built
from the shipped dataset (validation.jobs.job_from_run) and predicted with the same constants as the layouts it is
compared with, so the terms compare like with like."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from llmscale.cost.step import StepBreakdown, estimate_step
from llmscale.io.catalog import load_published_mfu
from llmscale.io.resolve import Job
from llmscale.search.plausibility import KERNELS, MfuExcess, mfu_excess, mfu_record
from llmscale.specs.layout import Layout
from llmscale.specs.record import MfuRecord
from llmscale.validation.jobs import job_from_run
from llmscale.validation.runs import load_runs


@dataclass
class RecordCheck:
    """Checks layouts of one job against the best published MFU of its GPU generation and precision; the record
    run's own step is predicted once, on the first layout above the record."""

    job: Job
    record: MfuRecord | None = field(init=False)
    _reference: StepBreakdown | None = field(init=False, default=None)
    _reference_job: Job | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.record = mfu_record(load_published_mfu(), self.job.cluster.gpu, self.job.train.precision)

    def __call__(self, step: StepBreakdown, i: int = 0, layout: Layout | None = None) -> MfuExcess | None:
        """Layout i of `step` (whose layout is `layout`, default the job's) against the record; None where it is not
        above it or no run is published there."""
        if self.record is None or float(step.mfu[i]) <= self.record.mfu:
            return None
        if self._reference is None:
            run = next(r for r in load_runs() if r.name == self.record.run)  # tests/test_plausibility.py
            self._reference_job = job_from_run(run, self.job.constants)
            ref = self._reference_job
            self._reference = estimate_step(ref.model, ref.cluster, ref.train, ref.layouts, ref.constants)
        excess = mfu_excess(step, i, self.record, self._reference)
        if excess is None or self._reference_job is None:
            return excess
        mine = layout if layout is not None else self.job.resolved_layout
        ref_job = self._reference_job
        named = tuple(feature(t.term, (self.job, mine, float(step.step_time_s[i])),
                              (ref_job, ref_job.resolved_layout, float(self._reference.step_time_s[0])))
                      for t in excess.terms)
        return replace(excess, features=named)


Side = tuple[Job, Layout, float]
"""A job, its layout and its predicted step time (s)."""


def feature(term: str, mine: Side, record: Side) -> str:
    """What in this job's layout or run makes `term` smaller (or the kernels faster) than in the record run's: the
    fields behind the term on both sides (for the fixed per-step costs, the step they spread over), or '' where they
    are the same (the gain then comes from elsewhere)."""
    (job, lay, step_s), (ref, rlay, ref_step_s) = mine, record
    steps = {id(job): step_s, id(ref): ref_step_s}
    describe = {
        "bubble_s": lambda j, x: f"{x.resolved_schedule.value} v{x.vpp} over {_micro(j, x)} micro-batches, pp {x.pp}",
        "overhead_s": lambda j, x: f"{steps[id(j)]:.2f} s steps of {j.train.tokens_per_step // _gpus(x):,} tokens "
                                   "per GPU",
        KERNELS: lambda j, x: f"hidden {j.model.hidden}, {x.mbs * j.train.seq_len // x.cp:,} tokens per micro-batch, "
                              f"tp {x.tp}",
        "tp_exposed_s": lambda j, x: f"tp {x.tp}, TP overlap {'on' if x.tp_comm_overlap else 'off'}, hidden "
                                     f"{j.model.hidden}, {x.mbs * j.train.seq_len // x.cp:,} tokens per micro-batch",
        "ep_exposed_s": lambda j, x: f"ep {x.ep}, EP overlap {'on' if x.ep_comm_overlap else 'off'}",
        "dp_exposed_s": lambda j, x: f"ZeRO-{x.zero} over dp {x.dp}",
        "pp_exposed_s": lambda j, x: f"pp {x.pp}",
        "cp_exposed_s": lambda j, x: f"cp {x.cp}",
        "recompute_s": lambda j, x: f"recompute {x.recompute.value}{_modules(x)}",
        "optimizer_s": lambda j, x: f"{steps[id(j)]:.2f} s steps per optimizer pass (ZeRO-{x.zero}, dp {x.dp})",
        "offload_s": lambda j, x: f"offload: optimizer {x.offload_optimizer}, {x.offload_activations} layers",
    }.get(term)
    if describe is None:
        return ""
    mine_text, record_text = describe(job, lay), describe(ref, rlay)
    return "" if mine_text == record_text else f"{mine_text} vs the record's {record_text}"


RECOMPUTE_MODULES = {"recompute_norm": "norms", "recompute_mla_up": "MLA up-projections",
                     "recompute_moe_act": "MoE activations", "recompute_mlp": "MLPs"}
"""The layout's module recompute switches and how a feature names them (Megatron --recompute-modules)."""


def _modules(lay: Layout) -> str:
    """`, recomputed modules: norms, MoE activations` (or `, no module recompute`): the modules the layout recomputes
    beside its granularity."""
    on = [name for flag, name in RECOMPUTE_MODULES.items() if getattr(lay, flag)]
    return f", recomputed modules: {', '.join(on)}" if on else ", no module recompute"


def _gpus(lay: Layout) -> int:
    return lay.tp * lay.cp * lay.pp * (lay.dp or 1)


def _micro(job: Job, lay: Layout) -> int:
    return job.train.global_batch // max((lay.dp or 1) * lay.mbs, 1)
