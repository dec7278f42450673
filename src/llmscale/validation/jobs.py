"""Published runs as jobs: a row of the published-runs file, its recipe facts (data/run_settings.yaml) and the
cluster it ran on, resolved through the one resolver (`io.resolve`) as every command resolves its inputs.

Where the schema leaves a layout field null, llmscale assumes, and says so here:

  micro_batch   1
  vp            1 (1F1B); where the source states that it interleaves without the degree (the Megatron-Core
                r0.8 scaling runs: `interleaved: true` in run_settings.yaml), the smallest v > 1
                dividing the layers per stage. Of the paper runs whose scripts state the degree, it gives four of
                five: Narayanan et al. 2021's artifact scripts (NVIDIA/Megatron-LM@79a3bb6 examples/sc21/) ran
                15, 10, 6 and 3 layers per rank at v = 3, 2, 2, 3 (run_table_1.sh) and 8 at v = 4
                (run_figure_12.sh, a study of interleaving); "the largest v ≤ 8" gives one (5, 5, 6, 3, 8).
                1F1B when that does not fit the GPU's memory or the micro-batch count is not a multiple of pp
  zero          1 (distributed optimizer, the Megatron/NeMo/Bridge default)
  cp, ep        1
  etp           1 for MoE rows (the Megatron-Bridge MoE recipes' expert_tensor_parallel_size)
  sp            on when tp > 1 (Megatron-LM, NeMo and Bridge recipes enable it with TP)
  precision     bf16
  fp8_recipe    the GPU's native one (TrainSpec.fp8_recipe_on: MXFP8 on Blackwell, per-tensor current scaling on
                Hopper) where run_settings.yaml states none (NeMo 24.07's rows)
  recompute     the lightest of none → selective → full whose memory fits the GPU (recipes enable
                recompute only when memory needs it)
  overlaps      TP and EP communication not overlapped

The model comes from the row's architecture keys and its block facts (`norm`, `linear_bias`,
`position_embedding`; validation.runs.model_from_run). Before those assumptions, null fields of a shipped row are
filled from data/run_settings.yaml: layout facts (recompute, sequence parallelism, micro-batch, interleaving, TP/EP
communication overlap, activation offload) and model facts the schema has no key for (`MODEL_FACTS`: tied
embeddings, dropout, an expert capacity factor), read in the public recipe code that produced the row, each entry
citing the file and commit. A value the row itself gives is never replaced.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llmscale.cost.calibrate import calibrates
from llmscale.cost.memory import memory_breakdown
from llmscale.errors import LlmscaleError
from llmscale.io.catalog import catalog_file, dataset_file, load_cluster
from llmscale.io.files import parse_spec
from llmscale.io.resolve import Job, JobRequest, resolve
from llmscale.specs.calibration import CalibrationProfile
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants
from llmscale.specs.layout import Layout, RankOrder, Recompute
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Precision
from llmscale.validation.runs import PublishedRun, model_from_run

MODEL_FACTS = ("tied_embeddings", "dropout", "capacity_factor", "pad_to_capacity")
"""ModelSpec fields a run_settings.yaml entry may state for rows whose schema has no key for them."""


def _settings_entries() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = dataset_file("run_settings.yaml")
    return entries


def run_settings() -> dict[str, dict[str, Any]]:
    """Recipe facts for shipped rows, by exact row name (data/run_settings.yaml)."""
    return {entry["name"]: entry for entry in _settings_entries() if "name" in entry}


def run_facts(run: PublishedRun) -> dict[str, Any]:
    """The recipe facts of one row: those of every `source_contains` entry whose text is in the row's source
    (facts shared by all rows of one paper, such as its attention kernel), then those of every `name_contains`
    entry whose text is in its name (rows of one recipe and release), then the row's own entry."""
    facts: dict[str, Any] = {}
    for key, text in (("source_contains", run.source), ("name_contains", run.name)):
        for entry in _settings_entries():
            if key in entry and entry[key] in text:
                facts |= entry
    return facts | run_settings().get(run.name, {})


MODULE_FLAGS = {"layernorm": "recompute_norm", "mla_up_proj": "recompute_mla_up", "moe_act": "recompute_moe_act",
                "mlp": "recompute_mlp"}
"""Megatron --recompute-modules names and the layout switch of each (`core_attn` is recompute = selective)."""
TRAIN_FACTS = ("fp32_grads", "bf16_moments", "fp8_cache", "routing", "fp8_dispatch", "fp8_recipe", "zero3_gather",
               "zero3_synchronous",
               "fsdp_double_buffer", "fp8_params", "fused_cross_entropy", "attention_kernel")
"""TrainSpec fields a run_settings.yaml entry may state."""


def _module_recompute(recompute: Recompute, facts: dict[str, Any], where: str) -> dict[str, Any]:
    """The recompute setting and module switches of a row whose recipe lists `recompute_modules`: Megatron's
    selective granularity recomputes exactly the modules named, so the attention core only when `core_attn` is."""
    modules = facts.get("recompute_modules")
    if modules is None or recompute is Recompute.FULL:
        return {"recompute": recompute}
    unknown = sorted(set(modules) - set(MODULE_FLAGS) - {"core_attn"})
    if unknown:
        raise LlmscaleError(f"{where}: recompute_modules {unknown} are not modelled (llmscale models "
                            f"{', '.join(['core_attn', *MODULE_FLAGS])})")
    core = Recompute.SELECTIVE if "core_attn" in modules else Recompute.NONE
    return {"recompute": core} | {MODULE_FLAGS[m]: True for m in modules if m in MODULE_FLAGS}


def _reference_clusters() -> dict[str, Any]:
    table: dict[str, Any] = catalog_file("reference_clusters.yaml")
    return table


def reference_cluster(run: PublishedRun) -> ClusterSpec:
    """The cluster a run ran on (catalog/reference_clusters.yaml: the GPU's entry, a matching `by_source`
    rule first), sized to the run's GPUs. A run on more GPUs than that cluster holds runs on the same cluster with
    its outermost tier grown to hold them (`grown_cluster`): same GPU, node, tiers and per-GPU bandwidths."""
    entry = _reference_clusters().get(run.gpu or "")
    if not isinstance(entry, dict) or entry.get("cluster") is None:
        raise LlmscaleError(f"gpu {run.gpu!r} has no reference cluster in the catalog")
    name = entry["cluster"]
    for rule in entry.get("by_source") or []:
        if rule["source_contains"] in run.source:
            name = rule["cluster"]
            break
    cluster = load_cluster(name)
    if run.num_gpus is not None and run.num_gpus > cluster.tiers[-1].ranks:
        return grown_cluster(cluster, run.num_gpus)
    return load_cluster(name, num_gpus=run.num_gpus)


def grown_cluster(cluster: ClusterSpec, num_gpus: int) -> ClusterSpec:
    """`cluster` with its outermost tier spanning `num_gpus` (rounded up to whole domains of the tier inside it),
    named so that the report shows the growth: a larger machine of the same design, whose bandwidth per GPU and
    oversubscription at every tier are the catalog's."""
    tiers = list(cluster.tiers)
    inner = tiers[-2].ranks if len(tiers) > 1 else 1
    tiers[-1] = tiers[-1].model_copy(update={"ranks": -(-num_gpus // inner) * inner})
    data = cluster.model_dump() | {"name": f"{cluster.name} grown to {num_gpus:,} GPUs", "num_gpus": num_gpus,
                                   "tiers": [t.model_dump() for t in tiers]}
    return parse_spec(ClusterSpec, data, where=f"cluster {cluster.name} grown to {num_gpus} GPUs")


def _interleavings(run: PublishedRun, model: ModelSpec, vp: int | None, mbs: int, interleaved: bool) -> list[int]:
    """The row's vp; for vp null on a source that states it interleaves, the smallest v > 1 dividing the layers per
    stage, then 1F1B for when that does not fit (module docstring); else 1."""
    pp = run.pp or 1
    if vp is not None or pp == 1 or not interleaved:
        return [vp or 1]
    per_stage = max(model.layers // pp, 1)
    num_micro = (run.global_batch or 0) // max((run.dp or 1) * mbs, 1)
    if num_micro % pp:
        return [1]
    smallest = next((v for v in range(2, per_stage + 1) if per_stage % v == 0), None)
    return [1] if smallest is None else [smallest, 1]


def _given(value: Any, default: Any) -> Any:
    """The row's value when it gives one (0 included: the spec rejects it), else the default."""
    return default if value is None else value


def _layouts(run: PublishedRun, model: ModelSpec, recompute: Recompute, facts: dict[str, Any]) -> list[Layout]:
    """The row's layout with `recompute`: one per interleaving degree it may have (`_interleavings`)."""
    mbs = _given(run.micro_batch, facts.get("micro_batch", 1))
    degrees = _interleavings(run, model, _given(run.vp, facts.get("vp")), max(int(mbs), 1),
                             bool(facts.get("interleaved", False)))
    return [_layout(run, model, recompute, facts, vpp) for vpp in degrees]


def _layout(run: PublishedRun, model: ModelSpec, recompute: Recompute, facts: dict[str, Any], vpp: int) -> Layout:
    tp = _given(run.tp, 1)
    mbs = _given(run.micro_batch, facts.get("micro_batch", 1))
    sp = _given(run.sequence_parallel, facts.get("sequence_parallel"))
    fields = {
        "tp": tp, "pp": _given(run.pp, 1), "dp": run.dp, "cp": _given(run.cp, 1), "ep": _given(run.ep, 1),
        "etp": _given(run.etp, 1 if model.is_moe else tp), "vpp": vpp, "mbs": mbs,
        "schedule": facts.get("schedule"), "zero": _given(run.zero, 1),
        **_module_recompute(recompute, facts, f"published run {run.name!r}"),
        "sp": sp,  # None: the layout's rule (on when tp > 1)
        "tp_comm_overlap": bool(facts.get("tp_comm_overlap", False)) and isinstance(tp, int) and tp > 1,
        "ep_comm_overlap": bool(facts.get("moe_a2a_overlap", False)),
        "offload_activations": int(facts.get("activation_offload_layers", 0)) if facts.get("activation_offload") else 0,
        "cuda_graphs": bool(facts.get("cuda_graphs", False)),
        "rank_order": facts.get("rank_order", RankOrder.TP_CP_EP_DP_PP),
    }
    return parse_spec(Layout, fields, where=f"published run {run.name!r}")


def job_from_run(run: PublishedRun, constants: Constants, calibration: CalibrationProfile | None = None) -> Job:
    """The run as a resolved job (through the one resolver, io.resolve); raises LlmscaleError with the reason when it
    cannot be built. A calibration profile replaces the datasheet numbers — and its constant overrides, if any —
    of runs on its GPU only (every run when it names none): runs on other GPUs keep the catalog's."""
    if run.tokens_per_s_per_gpu is None:
        raise LlmscaleError("no throughput target (tokens_per_s_per_gpu is null)")
    for key in ("num_gpus", "global_batch", "seq_len", "dp"):
        if getattr(run, key) is None:
            raise LlmscaleError(f"{key} is null")
    facts = run_facts(run)
    model = model_from_run(run, {key: facts[key] for key in MODEL_FACTS if key in facts})
    train = {"seq_len": run.seq_len, "global_batch": run.global_batch, "precision": run.precision or Precision.BF16,
             "flash_attention": bool(facts.get("flash_attention", True)),
             **{key: facts[key] for key in TRAIN_FACTS if key in facts}}
    if train["precision"] != Precision.FP8:
        train.pop("fp8_recipe", None)  # a recipe fact of a release's rows describes its FP8 runs only
    request = JobRequest(model=model, cluster=reference_cluster(run), gpus=run.num_gpus, train=train,
                         calibration=calibration if calibration is not None and calibrates(calibration, run.gpu)
                         else None, force_calibration=True,  # validate picks the runs a profile applies to itself
                         constants=constants, origin=f"published run {run.name!r}")
    given = run.recompute or (Recompute(facts["recompute"]) if "recompute" in facts else None)
    last: Job | None = None
    for recompute in [given] if given is not None else list(Recompute):
        for layout in _layouts(run, model, recompute, facts):
            job = resolve(replace(request, layout=layout))
            last = job
            if bool(memory_breakdown(job.model, job.cluster, job.train, job.layouts, job.constants).fits[0]):
                return job
    assert last is not None
    return last
