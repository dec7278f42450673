"""Constants: every fitted or assumed constant of the cost, reliability and search models, as one typed object.

The values and their sources live in the catalog (catalog/step.yaml, memory.yaml, comm.yaml, checkpoint.yaml,
plan.yaml and failures.yaml); `llmscale.io.catalog.load_constants` reads them. The models never read them
themselves: a `Constants` is passed in, so a calibration profile (`specs.calibration.CalibrationProfile.constants`)
or the fit script (scripts/fit_efficiency.py) can hand over other values without patching a module. Each field
states its physical meaning and the bounds outside which it stops making sense; the per-GPU achieved fractions of
the datasheet peaks are not here but in the GPU's own spec (`specs.cluster.EfficiencySpec`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from llmscale.specs.base import FieldProblem, Spec
from llmscale.specs.bounds import MAX_EXPERTS, MAX_GLOBAL_BATCH, MAX_LAYERS, MAX_SMS
from llmscale.specs.collective import Collective
from llmscale.specs.failures import FailureSpec, Mitigation, MitigationSpec
from llmscale.specs.train import Routing
from llmscale.units import GB, GIB, US


class StepConstants(Spec):
    """What hides behind what in a training step, and its fixed cost (catalog/step.yaml; `cost.step`)."""

    tp_comm_exposed_fraction: float = Field(
        ge=0, le=1, description="share of the TP collectives' time left on the critical path with --tp-comm-overlap"
    )
    dp_overlap_efficiency: float = Field(
        ge=0, le=50, description="backward (or forward) micro-batches the data-parallel gradient reduce-scatter and "
        "parameter all-gather can hide behind"
    )
    ep_comm_exposed_fraction: float = Field(
        ge=0, le=1, description="share of the expert all-to-alls' time left exposed with --ep-comm-overlap"
    )
    step_overhead_s: NonNegativeFloat = Field(description="fixed time per optimizer step (host work, synchronisation)")
    launch_overhead_us: float = Field(ge=0, le=200, description="idle GPU time per layer and pass between its kernels "
                                      "(launch gaps, host-side dispatch)")
    host_call_us: float = Field(
        ge=2, le=100, description="host (CPU) time of one framework call that launches a kernel in eager mode: Python "
        "module or op, dispatch, library call and driver launch (cost.host); bounds: a bare CUDA launch to a "
        "Transformer Engine Linear's forward (one GEMM) on a Grace CPU")
    sustained_compute_fraction: float = Field(
        ge=0.6, le=1.0, description="tensor-core throughput a training run sustains against the short benchmarks "
        "behind the catalog's ceilings (clocks under the power and thermal limits of hours of load)")


class MemoryConstants(Spec):
    """Memory the per-GPU model does not derive from the layout (catalog/memory.yaml; `cost.memory`)."""

    runtime_reserved_gib: NonNegativeFloat = Field(description="CUDA context, NCCL and library workspaces per GPU")
    fragmentation_fraction: float = Field(ge=0, lt=1, description="allocator margin on activations and buffers")
    fp8_weight_cache_bytes_per_param: NonNegativeFloat = Field(description="cached FP8 weight copy per parameter")
    fp4_weight_cache_bytes_per_param: NonNegativeFloat = Field(description="cached FP4 weight copy per parameter")
    zero3_prefetch_layers: NonNegativeInt = Field(le=MAX_LAYERS,
                                                  description="layers ZeRO-3 / parameter offload keep gathered")

    @property
    def runtime_reserved_bytes(self) -> float:
        return self.runtime_reserved_gib * GIB


class CommConstants(Spec):
    """Achieved fractions of rated one-direction per-GPU bandwidth and fixed latencies (catalog/comm.yaml;
    `cost.collectives`)."""

    scale_up_ring: float = Field(gt=0, le=1, description="ring bus bandwidth / line rate inside the NVLink domain")
    scale_up_in_network: float = Field(gt=0, le=1, description="NVLS all-reduce algorithm bandwidth / line rate")
    scale_up_all_to_all: float = Field(gt=0, le=1, description="all-to-all bus bandwidth / line rate, NVLink domain")
    network: float = Field(gt=0, le=1, description="ring bus bandwidth / line rate through a scale-out NIC")
    network_all_to_all: float = Field(gt=0, le=1, description="all-to-all bandwidth / line rate through a NIC")
    dedup_scale_up: float = Field(gt=0, le=1, description="a deduplicating MoE dispatcher's (DeepEP, HybridEP) "
                                  "bytes to other GPUs per second / NVLink line rate")
    dedup_network: float = Field(gt=0, le=1, description="a deduplicating MoE dispatcher's bytes to other scale-up "
                                 "domains per second / NIC line rate")
    base_latency_us: dict[Collective, NonNegativeFloat] = Field(
        description="fixed cost of one call, per collective (NCCL baseLat)"
    )
    in_network_latency_us: NonNegativeFloat = Field(description="latency of one NVLS all-reduce inside a domain")
    list_collective_rank_us: float = Field(
        ge=2, le=20, description="host time per member rank of a torch.distributed collective called on a list of "
        "per-rank tensors (one view made and one copy launched per rank): DeepSpeed's ZeRO-3 of 2021")

    @model_validator(mode="after")
    def _every_collective(self) -> CommConstants:
        missing = [op.value for op in Collective if op not in self.base_latency_us]
        if missing:
            raise FieldProblem("base_latency_us", sorted(k.value for k in self.base_latency_us),
                               f"needs a latency for every collective; missing {', '.join(missing)}")
        return self

    def base_latency_s(self, op: Collective) -> float:
        return self.base_latency_us[op] * US

    @property
    def in_network_latency_s(self) -> float:
        return self.in_network_latency_us * US

    @property
    def list_collective_rank_s(self) -> float:
        return self.list_collective_rank_us * US


class CheckpointConstants(Spec):
    """Restart times and storage figures the checkpoint model assumes (catalog/checkpoint.yaml;
    `reliability.checkpoint`)."""

    detection_s: NonNegativeFloat = Field(description="from a failure to the job noticing it")
    reschedule_hot_spare_s: NonNegativeFloat = Field(description="swapping in a warm standby node")
    reschedule_requeue_s: NonNegativeFloat = Field(description="requeueing and waiting for a node")
    startup_s: NonNegativeFloat = Field(description="process start-up, rendezvous and initialisation")
    storage_write_gb_per_s_per_gpu: PositiveFloat = Field(description="storage write share per GPU without a figure")
    storage_read_gb_per_s_per_gpu: PositiveFloat = Field(description="storage read share per GPU without a figure")
    host_memory_fraction: float = Field(gt=0, le=1, description="share of host memory a memory tier may use")
    background_interference: float = Field(ge=0, le=1, description="slow-down of training by a background transfer")

    @property
    def storage_write_bytes_per_s_per_gpu(self) -> float:
        return self.storage_write_gb_per_s_per_gpu * GB

    @property
    def storage_read_bytes_per_s_per_gpu(self) -> float:
        return self.storage_read_gb_per_s_per_gpu * GB


class SearchConstants(Spec):
    """The batch law, rounding, scaling floor and job-sizing constants of the search (catalog/plan.yaml;
    `search.plan`)."""

    batch_law_coefficient: PositiveFloat = Field(description="B_opt = coefficient · C^exponent tokens")
    batch_law_exponent: PositiveFloat = Field(description="B_opt = coefficient · C^exponent tokens")
    batch_rounding_sequences: PositiveInt = Field(le=MAX_GLOBAL_BATCH,
                                                  description="the critical batch is rounded down to a multiple")
    scaling_floor: float = Field(gt=0, le=1, description="a bigger job is worth it while its per-GPU rate stays above")
    state_bytes_per_param: PositiveFloat = Field(description="training state per parameter that must fit a job")
    usable_memory_fraction: float = Field(gt=0, le=1, description="share of GPU memory the training state may use")
    headroom_margin: float = Field(gt=0, lt=1, description="share of GPU memory a roomier alternative must free")
    headroom_tolerance: float = Field(ge=0, lt=1, description="score loss a roomier alternative may cost")


class MoeConstants(Spec):
    """Published measurements of MoE routing and its communication kernels (catalog/moe.yaml; `cost.routing`)."""

    max_violation: dict[Routing, NonNegativeFloat] = Field(
        description="MaxVio = (busiest expert's load − mean) / mean, by routing policy")
    max_violation_experts: PositiveInt = Field(le=MAX_EXPERTS,
                                               description="routed experts of the models MaxVio was measured on")
    overlap_sms: NonNegativeInt = Field(le=MAX_SMS,
                                        description="SMs the expert all-to-all kernels take while they overlap compute")
    dispatch_scale_bytes: NonNegativeFloat = Field(
        description="FP8 dispatch: scale bytes per element (a 4-byte scale per 128 elements)")

    @model_validator(mode="after")
    def _every_policy(self) -> MoeConstants:
        missing = [r.value for r in Routing if r not in self.max_violation]
        if missing:
            raise FieldProblem("max_violation", sorted(r.value for r in self.max_violation),
                               f"needs every routing policy; missing {', '.join(missing)}")
        return self


class Constants(Spec):
    """Every fitted or assumed constant of the models, by component (module docstring)."""

    step: StepConstants
    memory: MemoryConstants
    comm: CommConstants
    moe: MoeConstants
    checkpoint: CheckpointConstants
    search: SearchConstants
    mitigations: dict[Mitigation, MitigationSpec] = Field(description="share avoided and cost of each mitigation")
    failures: FailureSpec = Field(description="the failure profile of a cluster that names none")

    @model_validator(mode="after")
    def _every_mitigation(self) -> Constants:
        missing = [m.value for m in Mitigation if m not in self.mitigations]
        if missing:
            raise FieldProblem("mitigations", sorted(m.value for m in self.mitigations),
                               f"needs every mitigation; missing {', '.join(missing)}")
        return self

    def with_overrides(self, overrides: dict[str, Any]) -> Constants:
        """These constants with some replaced: `overrides` maps component names to mappings of field values
        (`{"step": {"step_overhead_s": 0.2}}`), validated as the whole object is, so an unknown name or a value
        outside its bounds is refused."""
        merged = _merge(self.model_dump(mode="json"), overrides)
        return Constants.model_validate(merged)


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` laid over it, mapping by mapping (an unknown key is kept, for validation to refuse)."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged
