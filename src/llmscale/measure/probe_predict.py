"""llmscale's prediction for the probe, and the measured split it is compared with. Torch-free: it reads the numbers
the ranks measured (probe_worker), builds a `cpu-host` ClusterSpec from them (host_cluster), and calls
`estimate_step` with DP as the un-overlapped grad_sync_s and no step_overhead_s; measured idle = step − compute − comm.
Each spec slot and the comparison: docs/design-notes.md#measure-probe-predict.
"""

from __future__ import annotations

import os
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmscale.cost.calibrate import Calibrated, apply_calibration
from llmscale.cost.collectives import collective_time_s, group_links
from llmscale.cost.compute import _elementwise_bytes_per_token, layer_times, rank_compute
from llmscale.cost.derived import rank_params
from llmscale.cost.flops import attention_core_flops_per_layer
from llmscale.cost.model_state import optimizer_step_traffic_bytes_per_param
from llmscale.cost.params import count_params
from llmscale.cost.step import StepBreakdown, estimate_step
from llmscale.cost.traffic import data_parallel_comm, zero3_calls
from llmscale.layout.arrays import Layouts
from llmscale.layout.stages import RankOf, stage_layers
from llmscale.specs.bounds import MAX_GB_PER_S
from llmscale.specs.calibration import CalibrationProfile
from llmscale.specs.cluster import ClusterSpec, EfficiencySpec, GPUSpec, NetworkTier, NodeSpec
from llmscale.specs.collective import Collective
from llmscale.specs.constants import CommConstants, Constants
from llmscale.specs.layout import Layout
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Precision, TrainSpec
from llmscale.units import GB, GIB, TERA, US

TIER_NAME = "gloo-loopback"
_PROBE_BANDWIDTH = 1e9
_PROBE_LATENCY_S = 1e-3


@dataclass(frozen=True)
class ProbeSetup:
    """What the probe trains, as llmscale specs (the probe model is built from `model`)."""

    model: ModelSpec
    nproc: int
    ep: int
    seq_len: int
    mbs: int
    micro_batches: int

    @property
    def train(self) -> TrainSpec:
        return TrainSpec(seq_len=self.seq_len, global_batch=self.nproc * self.mbs * self.micro_batches,
                         precision=Precision.BF16, fp32_grads=True)

    @property
    def layout(self) -> Layout:
        """DP over every rank, EP folded inside it; ZeRO 0 (plain all-reduce, every rank keeps all states)."""
        return Layout(dp=self.nproc, ep=self.ep, mbs=self.mbs, zero=0)

    @property
    def layouts(self) -> Layouts:
        return Layouts.from_layout(self.layout, self.nproc)

    @property
    def tokens_per_micro_batch(self) -> int:
        return self.seq_len * self.mbs


@dataclass(frozen=True)
class Split:
    """One step's compute / communication / idle (seconds); the parts add up to `step_s`."""

    compute_s: float
    comm_s: float
    idle_s: float
    detail: dict[str, float]

    @property
    def step_s(self) -> float:
        return self.compute_s + self.comm_s + self.idle_s

    def as_dict(self) -> dict[str, Any]:
        return {"step_s": self.step_s, "compute_s": self.compute_s, "comm_s": self.comm_s, "idle_s": self.idle_s,
                **self.detail}


def _host_memory_bytes() -> float:
    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 16.0 * GIB


def _mean(ranks: list[dict[str, Any]], key: str) -> float:
    return statistics.fmean(float(r["bench"][key]) for r in ranks)


_UNBOUNDED_BANDWIDTH = MAX_GB_PER_S * GB
"""B/s standing in for an infinite bandwidth when the fit isolates the latency term: the largest a tier may
have (specs.bounds); a probe message of ≤ 10⁹ B adds ≤ 1 µs at it."""


def _single_tier_cluster(gpu: GPUSpec, nproc: int, bandwidth: float, latency_s: float) -> ClusterSpec:
    ranks = max(nproc, 2)
    return ClusterSpec(
        name="cpu-host", gpu=gpu, num_gpus=nproc,
        node=NodeSpec(gpus_per_node=nproc, nics_per_node=1, nic_gbit_per_s=8 * bandwidth / GB,
                      pcie_gb_per_s=gpu.memory_bandwidth_gb_per_s, host_memory_gib=gpu.memory_gib * nproc),
        tiers=(NetworkTier(name=TIER_NAME, ranks=ranks, bandwidth_gb_per_s=bandwidth / GB,
                           latency_us=latency_s / US),),
        source="measured by `llmscale probe` in this run (probe_host micro-benchmarks; probe_predict)",
    )


def _model_time(gpu: GPUSpec, nproc: int, sample: dict[str, Any], bandwidth: float, latency_s: float,
                comm: CommConstants) -> float:
    cluster = _single_tier_cluster(gpu, nproc, bandwidth, latency_s)
    links = group_links(cluster, np.array([sample["size"]]), np.array([sample["stride"]]), comm)
    op = Collective(sample["op"])
    return float(collective_time_s(op, np.array([sample["bytes_total"]]), np.array([sample["size"]]), links)[0])


def fit_tier(gpu: GPUSpec, nproc: int, samples: list[dict[str, Any]], comm: CommConstants) -> tuple[float, float]:
    """(bandwidth B/s, latency s) of the one tier that makes collectives.py's times closest, in relative error, to the
    measured ones. collectives.py's time is base + a·latency + b/bandwidth for each sample (one tier): a and b are read
    off the model itself by evaluating it at three (bandwidth, latency) points, so the fit cannot drift from it."""
    rows, targets = [], []
    for s in samples:
        base = _model_time(gpu, nproc, s, _UNBOUNDED_BANDWIDTH, 0.0, comm)
        b = (_model_time(gpu, nproc, s, _PROBE_BANDWIDTH, 0.0, comm) - base) * _PROBE_BANDWIDTH
        a = (_model_time(gpu, nproc, s, _UNBOUNDED_BANDWIDTH, _PROBE_LATENCY_S, comm) - base) / _PROBE_LATENCY_S
        t = float(s["seconds"])
        rows.append([a / t, b / t])
        targets.append((t - base) / t)
    matrix, target = np.array(rows), np.array(targets)
    latency, inverse_bw = np.linalg.lstsq(matrix, target, rcond=None)[0]
    if latency < 0 or inverse_bw <= 0:  # one parameter alone
        inverse_bw = max(float(np.linalg.lstsq(matrix[:, 1:], target, rcond=None)[0][0]), 1e-12)
        latency = max(float(np.linalg.lstsq(matrix[:, :1], target - matrix[:, 1] * inverse_bw, rcond=None)[0][0]),
                      0.0)
    return 1.0 / float(inverse_bw), float(latency)


def memory_bound_bytes(setup: ProbeSetup) -> float:
    """Bytes the step model charges to memory-bound kernels in one step of the probe (compute.py, step.py):
    every layer's elementwise bytes and the logits' fp32 softmax/loss bytes, forward + backward (1 + 2 passes),
    per micro-batch; plus the optimizer step's bytes per parameter held (ZeRO 0, memory.py)."""
    model, tokens = setup.model, setup.tokens_per_micro_batch
    per_layer = {moe: sum(_elementwise_bytes_per_token(model, moe, 0.0)) * tokens for moe in (False, True)}
    layers = model.num_dense_layers * per_layer[False] + model.num_moe_layers * per_layer[True]
    logits = tokens * 3 * 4.0 * model.vocab
    counts = count_params(model)
    held = counts.total - counts.routed_experts + counts.routed_experts / setup.ep
    return setup.micro_batches * 3.0 * (layers + logits) + optimizer_step_traffic_bytes_per_param(setup.train) * held


def memory_bound_seconds(setup: ProbeSetup, ranks: list[dict[str, Any]]) -> float:
    """The measured time of the same work: the layers' non-GEMM kernels and the loss per micro-batch, one AdamW
    step (probe_host)."""
    model = setup.model
    per_micro = (model.num_dense_layers * _mean(ranks, "dense_layer_elementwise_s")
                 + model.num_moe_layers * _mean(ranks, "moe_layer_elementwise_s") + _mean(ranks, "loss_s"))
    return setup.micro_batches * per_micro + _mean(ranks, "optimizer_s")


def host_gpu(setup: ProbeSetup, ranks: list[dict[str, Any]]) -> GPUSpec:
    """The `cpu-host` GPUSpec from the micro-benchmarks (module docstring), averaged over ranks; memory_gib is
    the host's memory shared by the ranks."""
    model, tokens = setup.model, setup.tokens_per_micro_batch
    gemm_rate = _mean(ranks, "gemm_flops_per_micro_batch") / _mean(ranks, "gemm_s_per_micro_batch")
    peak = max(_mean(ranks, "reference_gemm_flops_per_s"), gemm_rate)
    core = attention_core_flops_per_layer(model, setup.seq_len, causal=True) * tokens
    fwd, bwd = _mean(ranks, "attention_forward_s"), _mean(ranks, "attention_backward_s")
    bandwidth = _mean(ranks, "copy_bytes_per_s")
    efficiency = EfficiencySpec(
        gemm_bf16=gemm_rate / peak, gemm_fp8=1.0, gemm_fp4=1.0, gemm_wave_overhead_us=0.0,
        attention=min(core / (peak * fwd), 1.0), attention_half_seq=0.0,
        attention_backward=min(2.5 * core / (peak * bwd), 1.0), attention_backward_half_seq=0.0,
        hbm=min(memory_bound_bytes(setup) / (bandwidth * memory_bound_seconds(setup, ranks)), 1.0),
    )
    return GPUSpec(
        name="cpu-host", peak_bf16_tflops=peak / TERA, memory_gib=_host_memory_bytes() / GIB / setup.nproc,
        memory_bandwidth_gb_per_s=bandwidth / GB, efficiency=efficiency,
        source=("measured in this run: peak = fp32 GEMM rate (the probe trains in fp32; the 16-bit slot holds it), "
                "efficiencies from the model's own GEMM shapes, SDPA and memory-bound kernels, copy bandwidth"),
    )


def host_cluster(setup: ProbeSetup, ranks: list[dict[str, Any]],
                 comm: CommConstants) -> tuple[ClusterSpec, list[dict[str, Any]]]:
    """The cpu-host cluster and, per measured collective, the measured and fitted-model times."""
    gpu = host_gpu(setup, ranks)
    samples = [dict(s, seconds=statistics.fmean(float(r["bench"]["collectives"][i]["seconds"]) for r in ranks))
               for i, s in enumerate(ranks[0]["bench"]["collectives"])]
    bandwidth, latency = fit_tier(gpu, setup.nproc, samples, comm)
    cluster = _single_tier_cluster(gpu, setup.nproc, bandwidth, latency)
    checks = [{"op": s["op"], "bytes_total": s["bytes_total"], "size": s["size"], "measured_s": s["seconds"],
               "model_s": _model_time(gpu, setup.nproc, s, bandwidth, latency, comm)} for s in samples]
    return cluster, checks


def calibrated_inputs(cluster: ClusterSpec, constants: Constants, profile: CalibrationProfile) -> Calibrated:
    """`apply_calibration` on the in-run cpu-host cluster: the profile's GEMM rate and roll-off,
    copy bandwidth and tier bandwidth/latency replace the in-run ones (calibration.py's rules). The profile's copy
    bandwidth becomes memory bandwidth × hbm there (its hbm is copy / datasheet: a GPU's fused kernels run near
    copy speed); the probe's eager memory-bound kernels reach only the in-run fraction φ of a copy, which a profile
    does not hold, so hbm = (the applied hbm) · φ: the profile's copy rate times the in-run φ."""
    calibrated = apply_calibration(cluster, constants, profile)
    gpu = calibrated.cluster.gpu
    hbm = min(gpu.efficiency.hbm * cluster.gpu.efficiency.hbm, 1.0)
    gpu = gpu.model_copy(update={"efficiency": gpu.efficiency.model_copy(update={"hbm": hbm})})
    return Calibrated(calibrated.cluster.model_copy(update={"gpu": gpu}), calibrated.constants)


def spec_changes(before: ClusterSpec, after: ClusterSpec) -> dict[str, list[Any]]:
    """Every leaf of the GPU and tier specs that differs, as {dotted path: [before, after]}."""

    def leaves(value: Any, prefix: str) -> dict[str, Any]:
        if isinstance(value, dict):
            return {k: v for key, item in value.items() for k, v in leaves(item, f"{prefix}.{key}").items()}
        if isinstance(value, list):
            return {k: v for i, item in enumerate(value) for k, v in leaves(item, f"{prefix}.{i}").items()}
        return {prefix: value}

    old = leaves(before.model_dump(mode="json", include={"gpu", "tiers"}), "cluster")
    new = leaves(after.model_dump(mode="json", include={"gpu", "tiers"}), "cluster")
    return {key: [old.get(key), new.get(key)] for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)}


def predict(setup: ProbeSetup, cluster: ClusterSpec, constants: Constants) -> tuple[Split, dict[str, float]]:
    """The step model's split for the probe (module docstring) and the terms matched to the probe's schedule."""
    model, train, lay = setup.model, setup.train, setup.layouts
    # The host's kernel rates were measured in this run on the probe's own shapes: they hold the eager dispatch gaps
    # (module docstring) and the clocks the host sustains now. The catalog's sustained fraction scales burst
    # benchmarks of GPUs to hours of load; applied to in-run rates it counted the probe's compute 1/0.76 too slow.
    sustained = constants.step.sustained_compute_fraction
    constants = constants.with_overrides({"step": {"launch_overhead_us": 0.0, "sustained_compute_fraction": 1.0}})
    step: StepBreakdown = estimate_step(model, cluster, train, lay, constants)
    layers = stage_layers(model, lay, RankOf.FIRST, train.pipeline_splits)
    params = rank_params(model, count_params(model), lay, layers)
    dp = data_parallel_comm(cluster, lay, params.non_expert, params.expert, 4.0,
                            zero3_calls(model, train, lay, layers), constants.comm)
    times = rank_compute(lay, layers, layer_times(model, cluster, train, lay, constants),
                         constants.step.launch_overhead_us)
    micro = setup.micro_batches

    def one(x: np.ndarray) -> float:
        return float(np.asarray(x)[0])

    comm = {"tp_s": one(step.tp_exposed_s), "cp_s": one(step.cp_exposed_s), "ep_s": one(step.ep_exposed_s),
            "pp_s": one(step.pp_exposed_s), "dp_s": one(dp.grad_sync_s)}
    detail = {
        "forward_s": micro * one(times.forward_s),
        "backward_s": micro * one(times.backward_input_s + times.backward_weight_s),
        "optimizer_s": one(step.optimizer_s), **comm,
    }
    split = Split(one(step.compute_s + step.recompute_s + step.optimizer_s), sum(comm.values()),
                  one(step.bubble_s + step.offload_s), detail)
    matched = {"dp_exposed_s_in_step_model": one(step.dp_exposed_s), "dp_unoverlapped_s_used": comm["dp_s"],
               "step_overhead_s_left_out": one(step.overhead_s), "sustained_compute_fraction_left_out": sustained,
               "step_model_step_time_s": one(step.step_time_s)}
    return split, matched


def _split_calls(steps: list[dict[str, Any]]) -> list[dict[str, float]]:
    """One step of every rank (`steps[r]` is rank r's): each collective call, matched across its group's members
    by order, split into the wait until the last member entered and the transfer after it, summed by kind."""
    calls: dict[tuple[tuple[int, ...], int], dict[int, tuple[str, float, float]]] = {}
    for rank, step in enumerate(steps):
        seen: Counter[tuple[int, ...]] = Counter()
        for kind, members, start, end in step["events"]:
            group = tuple(members)
            calls.setdefault((group, seen[group]), {})[rank] = (kind, start, end)
            seen[group] += 1
    parts = [{"ep_s": 0.0, "dp_s": 0.0, "ep_wait_s": 0.0, "dp_wait_s": 0.0} for _ in steps]
    for by_rank in calls.values():
        last = max(start for _, start, _ in by_rank.values())
        for rank, (kind, start, end) in by_rank.items():
            wait = min(max(last - start, 0.0), end - start)
            parts[rank][f"{kind}_wait_s"] += wait
            parts[rank][f"{kind}_s"] += end - start - wait
    return [{k: v for k, v in step.items() if k != "events"} | part for step, part in zip(steps, parts, strict=True)]


def rank_steps(ranks: list[dict[str, Any]]) -> list[list[dict[str, float]]]:
    """Per rank, per timed step: step_s, forward_s, backward_s, optimizer_s, and per collective kind its
    transfer (ep_s, dp_s) and its wait for peers (ep_wait_s, dp_wait_s)."""
    per_step = [_split_calls([r["steps"][i] for r in ranks]) for i in range(len(ranks[0]["steps"]))]
    return [[step[rank] for step in per_step] for rank in range(len(ranks))]


def mean_steps(per_rank: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    """Per timed step, every part averaged over the ranks (the parts of each rank add up to its step, so the
    averages add up to the mean step)."""
    return [{key: statistics.fmean(steps[i][key] for steps in per_rank) for key in per_rank[0][i]}
            for i in range(len(per_rank[0]))]


def measured_split(per_rank: list[list[dict[str, float]]]) -> tuple[Split, list[dict[str, float]]]:
    """The median step (by step time) of the rank-averaged steps and its split; and every step's parts. Comm is
    the transfer time of the collectives; the waits for peers (routing imbalance, skew) are idle."""
    steps = mean_steps(per_rank)
    median = sorted(steps, key=lambda t: t["step_s"])[(len(steps) - 1) // 2]
    compute = median["forward_s"] + median["backward_s"] + median["optimizer_s"]
    comm = median["ep_s"] + median["dp_s"]
    detail = {k: median[k] for k in ("forward_s", "backward_s", "optimizer_s", "ep_s", "dp_s")}
    detail["wait_s"] = median["ep_wait_s"] + median["dp_wait_s"]
    return Split(compute, comm, median["step_s"] - compute - comm, detail), steps
