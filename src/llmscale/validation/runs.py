"""Published training runs: loading a published-runs YAML file and building each run's ModelSpec.

Schema: docs/published-runs.md (a YAML list of flat mappings, `null` = not stated in the source).
The package ships a copy of the dataset as `llmscale/data/published_runs.yaml`. A key outside the
schema (`COLUMNS`) or a value of the wrong type is a SpecError: `validate` skips that row with the reason, so nothing a
file says is dropped unseen.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from llmscale.errors import InputFileError, SpecError
from llmscale.io.files import parse_spec
from llmscale.io.strict import parse_text, read_text
from llmscale.specs.base import MIN_MAGNITUDE
from llmscale.specs.layout import Recompute
from llmscale.specs.model import MLASpec, ModelSpec, Norm
from llmscale.specs.train import Precision
from llmscale.validation.conventions import FlopsFormula, published_flops_per_token

EnumT = TypeVar("EnumT", bound=Enum)


class PositionEmbedding(str, Enum):
    """How a published model encodes positions (the dataset's `position_embedding`)."""

    LEARNED = "learned"
    """A learned table of positions (GPT-3, Megatron's learned_absolute): seq_len × h more parameters."""
    ROPE = "rope"
    ALIBI = "alibi"
    """Attention biases, no parameters (BLOOM)."""


class ModelType(str, Enum):
    """The dataset's `model_type`."""

    DENSE = "dense"
    MOE = "moe"
    """Mixture of experts: the row's experts, top_k and expert_ffn_hidden build the model."""

DEEPSEEK_MLA = MLASpec(
    q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128
)
"""MLA dimensions of DeepSeek-V3 and V2 (deepseek-ai/DeepSeek-V3@9b4e9788e4a3 inference/configs/config_671B.json
and config_236B.json; the Megatron-Bridge DeepSeek providers agree): q_lora 1536, kv_lora 512, qk head dim 128 +
64 rope dims, v head dim 128."""


DEEPSEEK_V3_MAX_NODES = 4
"""DeepSeek-V3 node-limited routing: each token goes to at most 4 nodes (report §3.2.2; HF config topk_group 4 of
n_group 8)."""
DEEPSEEK_V3_ROUTER_GROUPS = 8
"""DeepSeek-V3's expert groups (HF config n_group 8, which Megatron-Bridge passes as moe_router_num_groups:
NVIDIA-NeMo/Megatron-Bridge@7af9601 src/megatron/bridge/models/deepseek/common.py)."""


@dataclass(frozen=True)
class PublishedRun:
    """One published run: the fields llmscale reads, typed, plus the raw row (`raw`)."""

    name: str
    source: str
    confidence: str | None
    framework: str | None
    """The training software behind the number (megatron-lm, megatron-bridge, nemo, deepspeed, …)."""
    flops_formula: FlopsFormula | None
    gpu: str | None
    num_gpus: int | None
    tp: int | None
    pp: int | None
    vp: int | None
    dp: int | None
    cp: int | None
    ep: int | None
    etp: int | None
    zero: int | None
    recompute: Recompute | None
    sequence_parallel: bool | None
    precision: Precision | None
    global_batch: int | None
    micro_batch: int | None
    seq_len: int | None
    tokens_per_s_per_gpu: float | None
    tokens_per_s_per_gpu_from: str | None
    reported_tflops_per_gpu: float | None
    reported_mfu: float | None
    mfu_kind: str | None
    step_time_s: float | None
    total_params: float | None
    active_params: float | None
    norm: Norm | None
    linear_bias: bool | None
    position_embedding: PositionEmbedding | None
    moe_dropless: bool | None
    """MoE rows: True when no token is dropped, False for capacity-factor dropping."""
    model_type: ModelType | None
    mla: bool | None
    """DeepSeek multi-head latent attention (`DEEPSEEK_MLA`)."""
    notes: str
    raw: Mapping[str, Any] = field(repr=False, compare=False, hash=False)


ROW_NUMBER_LIMIT = 1e30
"""No column of a published run comes near this (tokens ≤ 1e16, parameters ≤ 1e14): a larger number is a typo,
refused before Python's int → float conversion overflows."""


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= ROW_NUMBER_LIMIT and (
        math.isfinite(value))


def _int(row: Mapping[str, Any], key: str, where: str) -> int | None:
    value = row.get(key)
    if value is None:
        return None
    if not _finite(value) or value != int(value):
        raise SpecError(key, value, f"expected a whole number (|n| ≤ {ROW_NUMBER_LIMIT:.0e}) or null", where)
    return int(value)


def _float(row: Mapping[str, Any], key: str, where: str) -> float | None:
    value = row.get(key)
    if value is None:
        return None
    if not _finite(value):
        raise SpecError(key, value, f"expected a finite number (|x| ≤ {ROW_NUMBER_LIMIT:.0e}) or null", where)
    return float(value)


def _positive(row: Mapping[str, Any], key: str, where: str) -> float | None:
    """A measured quantity (a throughput, a time, a count of parameters): a finite number above 0, or null."""
    value = _float(row, key, where)
    if value is not None and value <= 0:
        raise SpecError(key, value, "expected a number > 0 or null (a published measurement cannot be 0 or less)",
                        where)
    return value


def _bool(row: Mapping[str, Any], key: str, where: str) -> bool | None:
    value = row.get(key)
    if value is not None and not isinstance(value, bool):
        raise SpecError(key, value, "expected true, false or null", where)
    return value


def _str(row: Mapping[str, Any], key: str, where: str) -> str | None:
    value = row.get(key)
    if value is not None and not isinstance(value, str):
        raise SpecError(key, value, "expected a string or null", where)
    return value


def _enum(row: Mapping[str, Any], key: str, cls: type[EnumT], where: str) -> EnumT | None:
    value = row.get(key)
    if value is None:
        return None
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in cls)
        raise SpecError(key, value, f"expected one of {allowed} or null", where) from None


COLUMNS = frozenset({
    "name", "source", "confidence", "framework", "flops_formula", "model_type", "layers", "hidden", "ffn_hidden",
    "heads", "kv_heads", "head_dim", "vocab", "seq_len", "gated_mlp", "experts", "top_k", "shared_experts",
    "expert_ffn_hidden", "first_dense_layers", "mla", "norm", "linear_bias", "position_embedding", "moe_dropless",
    "total_params", "active_params", "gpu", "num_gpus", "tp", "pp", "vp", "dp", "cp", "ep", "etp", "zero", "recompute",
    "sequence_parallel", "precision", "global_batch", "micro_batch", "tokens_per_s_per_gpu",
    "tokens_per_s_per_gpu_from", "reported_tflops_per_gpu", "reported_mfu", "mfu_kind", "step_time_s", "notes"})
"""The published-runs schema (docs/published-runs.md): every column a row may have."""


def run_from_row(row: Mapping[str, Any], where: str = "published run") -> PublishedRun:
    """Type one row; a key outside COLUMNS is an error, a missing key reads as null."""
    name = row.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError("name", name, "every run needs a non-empty name", where)
    where = f"{where} {name!r}"
    unknown = sorted(str(k) for k in row if k not in COLUMNS)
    if unknown:
        raise SpecError(unknown[0], row[unknown[0]], "is not a column of the published-runs schema "
                        "(docs/published-runs.md)", where)

    tiny = next((k for k, v in row.items() if isinstance(v, float) and 0 < abs(v) < MIN_MAGNITUDE), None)
    if tiny is not None:  # checked for every column, read for this row's model type or not
        raise SpecError(str(tiny), row[tiny], f"a non-zero number below {MIN_MAGNITUDE:g} in magnitude is no "
                        "published measurement", where)

    def num(key: str) -> int | None:
        return _int(row, key, where)

    def real(key: str) -> float | None:
        return _positive(row, key, where)

    return PublishedRun(
        name=name, source=_str(row, "source", where) or "", confidence=_str(row, "confidence", where),
        framework=_str(row, "framework", where),
        flops_formula=_enum(row, "flops_formula", FlopsFormula, where), gpu=_str(row, "gpu", where),
        num_gpus=num("num_gpus"), tp=num("tp"), pp=num("pp"), vp=num("vp"), dp=num("dp"), cp=num("cp"),
        ep=num("ep"), etp=num("etp"), zero=num("zero"), recompute=_enum(row, "recompute", Recompute, where),
        sequence_parallel=_bool(row, "sequence_parallel", where),
        precision=_enum(row, "precision", Precision, where), global_batch=num("global_batch"),
        micro_batch=num("micro_batch"), seq_len=num("seq_len"),
        tokens_per_s_per_gpu=real("tokens_per_s_per_gpu"),
        tokens_per_s_per_gpu_from=_str(row, "tokens_per_s_per_gpu_from", where),
        reported_tflops_per_gpu=real("reported_tflops_per_gpu"), reported_mfu=real("reported_mfu"),
        mfu_kind=_str(row, "mfu_kind", where), step_time_s=real("step_time_s"),
        total_params=real("total_params"), active_params=real("active_params"),
        norm=_enum(row, "norm", Norm, where), linear_bias=_bool(row, "linear_bias", where),
        position_embedding=_enum(row, "position_embedding", PositionEmbedding, where),
        moe_dropless=_bool(row, "moe_dropless", where),
        model_type=_enum(row, "model_type", ModelType, where), mla=_bool(row, "mla", where),
        notes=_str(row, "notes", where) or "", raw=MappingProxyType(dict(row)),
    )


def load_runs(path: Path | str | None = None) -> list[PublishedRun]:
    """Read a published-runs YAML file (default: the dataset shipped with llmscale); a bad row is an error."""
    rows, where = load_rows(path)
    return [run_from_row(row, where) for row in rows]


def load_rows(path: Path | str | None = None) -> tuple[list[dict[str, Any]], str]:
    """The raw rows of a published-runs YAML file and the name to report it by."""
    if path is None:
        text = resources.files("llmscale.data").joinpath("published_runs.yaml").read_text(encoding="utf-8")
        where = "llmscale/data/published_runs.yaml"  # read as text: the same YAML errors as a user's file
    else:
        where = str(path)
        text = read_text(Path(path))
    rows = parse_text(text, where, as_json=False)  # strictly: duplicate keys, tags and nesting refused (io.strict)
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise InputFileError(f"{where}: expected a YAML list of mappings, one per run")
    return rows, where


def _label(run: PublishedRun) -> str:
    return re.sub(r"[^a-z0-9/]", "", run.name.lower())


def _is_deepseek_v3(run: PublishedRun) -> bool:
    return "deepseekv3" in _label(run)


def _mtp_layers(run: PublishedRun) -> int:
    """DeepSeek-V3 trains with MTP depth 1 (DeepSeek-V3 report, arXiv:2412.19437 §4.2); Megatron-Bridge rows labelled
    "w/o MTP" ran without it. The schema has no MTP key, so the run name decides."""
    return 1 if _is_deepseek_v3(run) and "w/omtp" not in _label(run) else 0


def _take(run: PublishedRun, key: str, overrides: Mapping[str, Any]) -> Any:
    """An architecture key the model needs: from `overrides`, else the row; null is a SpecError."""
    value = overrides[key] if key in overrides else run.raw.get(key)
    if value is None:
        raise SpecError(key, None, "required to build the run's model", f"published run {run.name!r}")
    return value


FAMILY_LABELS = (("LLAMA3", "llama3"), ("Llama 3", "llama3"), ("LLAMA2", "llama2"), ("DeepSeekV3", "deepseek-v3"),
                 ("DeepSeek-V3", "deepseek-v3"), ("DeepSeek-V2", "deepseek-v2"), ("Qwen3", "qwen3"),
                 ("GPT OSS", "gpt-oss"), ("Nemotron", "nemotron"), ("BLOOM", "bloom"), ("GPT", "gpt3"),
                 ("Korthikanti 2022", "gpt3"), ("Megatron-Turing NLG", "gpt3"))
"""The model family a row's name (the published table's model column) names, first match; Qwen3 with experts is
qwen3-moe. GPT-3-style models of any size are the gpt3 family (Megatron's GPT recipes; Korthikanti et al. 2022
trains GPT models of 22B to 1T, arXiv:2205.05198 Table 3)."""


def family_of(run: PublishedRun) -> str | None:
    """The row's model family (FAMILY_LABELS), None where its name names none."""
    family = next((family for label, family in FAMILY_LABELS if label in run.name), None)
    return f"{family}-moe" if family == "qwen3" and run.model_type is ModelType.MOE else family


def model_from_run(run: PublishedRun, overrides: Mapping[str, Any] | None = None) -> ModelSpec:
    """The run's ModelSpec from its architecture keys (schema: docs/published-runs.md): MLA rows get DeepSeek's
    dimensions (`DEEPSEEK_MLA`), DeepSeek-V3 rows MTP depth 1, GPT-OSS rows their sliding window, YaRN and
    MLP clamp (`family_fields`). `overrides` sets ModelSpec fields the row leaves null or states differently (e.g. a key
    the caller's formula does not read)."""
    given = dict(overrides or {})
    fields: dict[str, Any] = {"name": run.name, "source": run.source, "mtp_layers": _mtp_layers(run),
                              "family": family_of(run)}
    for key in ("layers", "hidden", "heads", "vocab", "gated_mlp"):
        fields[key] = _take(run, key, given)
    fields["kv_heads"] = run.raw.get("kv_heads")
    fields["head_dim"] = run.raw.get("head_dim")
    if run.model_type is ModelType.MOE:
        for key in ("experts", "top_k", "expert_ffn_hidden"):
            fields[key] = _take(run, key, given)
        fields["shared_experts"] = run.raw.get("shared_experts") or 0
        fields["first_dense_layers"] = run.raw.get("first_dense_layers") or 0
        if fields["first_dense_layers"] == 0 and run.raw.get("ffn_hidden") is None:
            given.setdefault("ffn_hidden", fields["expert_ffn_hidden"])  # no dense layer reads it
    fields["ffn_hidden"] = _take(run, "ffn_hidden", given)
    fields |= _block_facts(run)
    if run.mla:
        fields["mla"] = DEEPSEEK_MLA
    if _is_deepseek_v3(run):
        fields["moe_max_nodes"] = DEEPSEEK_V3_MAX_NODES
        fields["moe_router_groups"] = DEEPSEEK_V3_ROUTER_GROUPS
    if fields["family"] in FAMILY_MODEL:
        fields |= family_fields(fields["family"])
    return parse_spec(ModelSpec, {**fields, **given}, where=f"published run {run.name!r}")


FAMILY_MODEL = {"gpt-oss": "gpt-oss-120b"}
"""Families whose architecture the published tables print only in part, and the catalog model that holds the rest
(GPT-OSS: a 128-token window on every other layer, YaRN RoPE and the MLP's input clamp, from its config.json;
catalog/models.yaml cites it)."""
FAMILY_FIELDS = ("sliding_window", "full_attention_every", "rope_theta", "rope_scaling", "glu_clamp")


@cache
def family_fields(family: str) -> dict[str, Any]:
    """The fields (FAMILY_FIELDS) of the catalog model FAMILY_MODEL names for `family`."""
    from llmscale.io.catalog import load_model

    model = load_model(FAMILY_MODEL[family])
    return {key: getattr(model, key) for key in FAMILY_FIELDS}


def _block_facts(run: PublishedRun) -> dict[str, Any]:
    """The row's norm, biases and position table as ModelSpec fields; a null key keeps ModelSpec's default (RMSNorm,
    no biases, no learned table: the Llama-style block every null row of the dataset is). A learned table holds
    seq_len positions (GPT-3: n_ctx 2048 = its training length, arXiv:2005.14165 Table 2.1)."""
    facts: dict[str, Any] = {}
    if run.norm is not None:
        facts["norm"] = run.norm
    if run.linear_bias is not None:
        facts["linear_bias"] = run.linear_bias
    if run.position_embedding is PositionEmbedding.LEARNED and run.seq_len is not None:
        facts["learned_position_embeddings"] = run.seq_len
    return facts


def run_flops_per_token(run: PublishedRun, model: ModelSpec | None = None) -> float:
    """FLOPs per token under the run's own `flops_formula`, counted as its source counts (each FlopsFormula member names
    its paper or code; e.g. Megatron-Bridge `flop_utils.py`, PaLM App. B, arXiv:2204.02311): V padded to a multiple
    of 128·tp (Megatron-Bridge's DeepSeek-V3 provider: 1280·tp), PALM / Llama 3 with N = the row's active_params as
    printed, MTP layers as the model has them (none for "w/o MTP" rows), GPT-OSS's MLP as Bridge counts it.
    `model` defaults to `model_from_run(run)`."""
    where = f"published run {run.name!r}"
    model = model if model is not None else model_from_run(run)
    if run.flops_formula is FlopsFormula.BRIDGE2025 and model.family == "gpt-oss":
        # Bridge counts 3/2 for a gated MLP only when its activation is SiLU; GPT-OSS's clamped quick-GEGLU is not
        # (NVIDIA-NeMo/Megatron-Bridge@c810129341a8 src/megatron/bridge/training/utils/flop_utils.py L296-297).
        model = model.model_copy(update={"gated_mlp": False})
    if run.flops_formula is None or run.flops_formula is FlopsFormula.UNSPECIFIED:
        raise SpecError("flops_formula", run.flops_formula, "the run names no FLOP-counting formula", where)
    if run.seq_len is None:
        raise SpecError("seq_len", None, "required to count FLOPs per token", where)
    return published_flops_per_token(
        run.flops_formula,
        model,
        run.seq_len,
        tp=run.tp or 1,
        vocab_divisor=1280 if _is_deepseek_v3(run) else 128,
        n_params=run.active_params,
    )
