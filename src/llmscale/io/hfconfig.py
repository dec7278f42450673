"""Load a Hugging Face `config.json` as a ModelSpec, without transformers installed.

Families (`model_type`, else the `architectures` entry): llama, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe,
deepseek_v2, deepseek_v3, gpt_oss. Every value goes through `parse_spec(ModelSpec, ...)`, errors naming the
config.json key.
Key-to-field table, footnotes and what is not modelled: docs/design-notes.md#io-hfconfig.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmscale.errors import SpecError
from llmscale.io.files import parse_spec
from llmscale.specs.bounds import MAX_EXPERTS, MAX_LAYERS
from llmscale.specs.model import ModelSpec

FAMILIES = ("llama", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss")
_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss",
}
_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


@dataclass
class _Config:
    """A config.json being read, and which key each ModelSpec field was taken from."""

    data: dict[str, Any]
    model_type: str
    where: str
    sources: dict[str, str] = field(default_factory=dict)

    def need(self, key: str) -> Any:
        value = self.data.get(key)
        if value is None:
            raise SpecError(key, None, f"required in a {self.model_type} config.json, but missing",
                            where=self.where)
        return value

    def count(self, key: str, default: int, minimum: int = 0, maximum: int = MAX_LAYERS) -> int:
        """An integer key that drives the layer layout, checked here before it is used as a number or a
        range: at most `maximum` (a layer count by default: specs.bounds), so no per-layer list is built for 2⁶³
        layers and a mapping is not compared with a number."""
        value = self.data.get(key, default)
        value = default if value is None else value
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            raise SpecError(key, value, f"must be an integer in {minimum}..{maximum:,}", where=self.where)
        return value

    def put(self, spec: dict[str, Any], spec_field: str, key: str, value: Any) -> None:
        spec[spec_field] = value
        self.sources[spec_field] = key


def is_hf_config(data: dict[str, Any]) -> bool:
    """True for a Hugging Face config.json (it names `model_type` or `architectures`)."""
    return "model_type" in data or "architectures" in data


def hf_model_name(data: dict[str, Any], path: Path) -> str:
    """The name of a config.json's model: its `_name_or_path` (`meta-llama/Meta-Llama-3-8B` → `Meta-Llama-3-8B`);
    else the repository of a Hugging Face cache snapshot (`…/models--org--name/snapshots/<rev>/config.json`); else
    its folder's name when that names the model's family (`Llama-3.1-8B/` for model_type llama, as a clone of the
    repository is named); else its shape (`llama-32L-4096h`) — not a folder such as `cfg/` or `tmp/`, whose name
    would reach exported file names. Characters outside [A-Za-z0-9._-] become '-'."""
    given = data.get("_name_or_path")
    if isinstance(given, str) and given.strip().strip("/"):
        return _safe_name(given.strip().strip("/").split("/")[-1])
    parts = path.resolve().parts
    for part in reversed(parts):
        if part.startswith("models--") and part.count("--") >= 2:
            return _safe_name(part.split("--")[-1])
    given_type = data.get("model_type")
    kind = given_type if isinstance(given_type, str) else "hf"
    family = re.match(r"[a-z]*", kind.lower())
    folder = path.parent.name
    if family and len(family.group()) >= 3 and family.group() in re.sub(r"[^a-z]", "", folder.lower()):
        return _safe_name(folder)
    layers, hidden = data.get("num_hidden_layers"), data.get("hidden_size")
    shape = f"-{layers}L-{hidden}h" if isinstance(layers, int) and isinstance(hidden, int) else ""
    return _safe_name(f"{kind}{shape}")


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "hf-model"


def model_from_hf_config(data: dict[str, Any], name: str, where: str = "") -> ModelSpec:
    """The ModelSpec of a Hugging Face config.json (see the module docstring for the mapping)."""
    cfg = _Config(data, _model_type(data, where), where)
    spec = _dense_fields(cfg)
    if cfg.model_type.startswith("deepseek"):
        _deepseek_fields(cfg, spec)
    elif cfg.model_type in ("mixtral", "qwen2_moe", "qwen3_moe"):
        _moe_fields(cfg, spec)
    elif cfg.model_type == "gpt_oss":
        _gpt_oss_fields(cfg, spec)
    if cfg.model_type == "llama":
        _llama_bias(cfg, spec)
    spec["name"] = name
    spec["family"] = _family(cfg)
    spec["source"] = f"Hugging Face config.json of {name} (model_type {cfg.model_type})"
    try:
        return parse_spec(ModelSpec, spec, where)
    except SpecError as err:
        raise _relabel(err, cfg) from None


def _family(cfg: _Config) -> str:
    """The family release profiles know it by: the model_type with dashes; `llama` is Llama 3 with its 128K
    vocabulary (meta-llama/Meta-Llama-3-8B config.json vocab_size 128256), else Llama 2."""
    if cfg.model_type == "llama":
        vocab = cfg.data.get("vocab_size")  # not yet checked: a wrong one is named when the spec is read
        large = isinstance(vocab, int) and not isinstance(vocab, bool) and vocab >= 128000
        return "llama3" if large else "llama2"
    return cfg.model_type.replace("_", "-")


def _model_type(data: dict[str, Any], where: str) -> str:
    model_type = data.get("model_type")
    if model_type is None:
        archs = data.get("architectures") or []
        known = [_ARCHITECTURES[a] for a in archs if isinstance(a, str) and a in _ARCHITECTURES]
        if not known:
            raise SpecError("architectures", archs, f"supported: {', '.join(_ARCHITECTURES)}", where=where)
        model_type = known[0]
    if model_type not in FAMILIES:
        raise SpecError("model_type", model_type, f"supported: {', '.join(FAMILIES)}", where=where)
    return str(model_type)


def _dense_fields(cfg: _Config) -> dict[str, Any]:
    """Fields every family shares: depth, widths, heads, vocabulary, embedding tying."""
    spec: dict[str, Any] = {}
    for spec_field, key in (("layers", "num_hidden_layers"), ("hidden", "hidden_size"),
                            ("ffn_hidden", "intermediate_size"), ("heads", "num_attention_heads"),
                            ("vocab", "vocab_size")):
        cfg.put(spec, spec_field, key, cfg.need(key))
    kv_heads = cfg.data.get("num_key_value_heads")
    if kv_heads is not None and kv_heads != spec["heads"]:
        cfg.put(spec, "kv_heads", "num_key_value_heads", kv_heads)
    if cfg.data.get("head_dim") is not None:
        cfg.put(spec, "head_dim", "head_dim", cfg.data["head_dim"])
    cfg.put(spec, "tied_embeddings", "tie_word_embeddings", bool(cfg.data.get("tie_word_embeddings", False)))
    if cfg.data.get("rope_theta") is not None:
        cfg.put(spec, "rope_theta", "rope_theta", cfg.data["rope_theta"])
    for key in ("rms_norm_eps", "layer_norm_epsilon"):
        if cfg.data.get(key) is not None:
            cfg.put(spec, "norm_eps", key, cfg.data[key])
    _rope_scaling(cfg, spec)
    return spec


_ROPE_SCALING_KEYS = {"factor": "factor", "original_max_positions": "original_max_position_embeddings",
                      "low_freq_factor": "low_freq_factor", "high_freq_factor": "high_freq_factor",
                      "beta_fast": "beta_fast", "beta_slow": "beta_slow", "mscale": "mscale",
                      "mscale_all_dim": "mscale_all_dim"}


def _rope_scaling(cfg: _Config, spec: dict[str, Any]) -> None:
    """HF `rope_scaling` (transformers modeling_rope_utils: `rope_type`, formerly `type`) for llama3 and yarn."""
    scaling = cfg.data.get("rope_scaling")
    if not scaling:
        return
    if not isinstance(scaling, dict):
        raise SpecError("rope_scaling", scaling, "must be an object or null", where=cfg.where)
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind not in ("llama3", "yarn"):
        warnings.warn(f"{cfg.where}: rope_scaling type {kind!r} is not modelled (llama3 and yarn are): "
                      "the model is read without RoPE scaling", stacklevel=3)
        return
    values = {name: scaling[key] for name, key in _ROPE_SCALING_KEYS.items() if scaling.get(key) is not None}
    cfg.put(spec, "rope_scaling", "rope_scaling", {"kind": kind, **values})


def _moe_fields(cfg: _Config, spec: dict[str, Any]) -> None:
    """Mixtral (every layer MoE, experts as wide as intermediate_size) and Qwen2/Qwen3-MoE."""
    experts_key = "num_local_experts" if cfg.model_type == "mixtral" else "num_experts"
    experts = cfg.need(experts_key)
    layers = cfg.count("num_hidden_layers", 0)
    if cfg.model_type == "mixtral":
        moe_layers, blame = list(range(layers)), experts_key
        expert_key = "intermediate_size"
    else:
        step = cfg.count("decoder_sparse_step", 1, minimum=1)
        dense = cfg.data.get("mlp_only_layers") or []
        if not isinstance(dense, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in dense):
            raise SpecError("mlp_only_layers", dense, "must be a list of layer indices", where=cfg.where)
        dense_set = set(dense)
        moe_layers = [i for i in range(layers) if i not in dense_set and (i + 1) % step == 0]
        blame, expert_key = ("mlp_only_layers" if dense else "decoder_sparse_step"), "moe_intermediate_size"
    if not experts or not moe_layers:
        return
    cfg.put(spec, "experts", experts_key, experts)
    cfg.put(spec, "top_k", "num_experts_per_tok", cfg.need("num_experts_per_tok"))
    cfg.put(spec, "expert_ffn_hidden", expert_key, cfg.need(expert_key))
    _put_layout(cfg, spec, moe_layers, layers, blame)
    shared_ffn = cfg.data.get("shared_expert_intermediate_size") if cfg.model_type == "qwen2_moe" else None
    if shared_ffn:
        cfg.put(spec, "shared_experts", "shared_expert_intermediate_size", 1)
        cfg.put(spec, "shared_expert_ffn_hidden", "shared_expert_intermediate_size", shared_ffn)


def _gpt_oss_fields(cfg: _Config, spec: dict[str, Any]) -> None:
    """GPT-OSS (transformers models/gpt_oss/configuration_gpt_oss.py): every layer MoE, experts as wide as
    intermediate_size, biases on attention and experts, learned sinks (no cost modelled), the experts' inputs
    clamped at `swiglu_limit`, and `layer_types` alternating sliding-window and full attention."""
    experts = cfg.need("num_local_experts")
    cfg.put(spec, "experts", "num_local_experts", experts)
    cfg.put(spec, "top_k", "num_experts_per_tok", cfg.need("num_experts_per_tok"))
    cfg.put(spec, "expert_ffn_hidden", "intermediate_size", cfg.need("intermediate_size"))
    cfg.put(spec, "linear_bias", "attention_bias", bool(cfg.data.get("attention_bias", True)))
    if cfg.data.get("swiglu_limit") is not None:
        cfg.put(spec, "glu_clamp", "swiglu_limit", cfg.data["swiglu_limit"])
    _sliding_window(cfg, spec)


def _sliding_window(cfg: _Config, spec: dict[str, Any]) -> None:
    """`sliding_window` on the layers `layer_types` names "sliding_attention"; the full ones must be every N-th
    (1-based), the pattern ModelSpec.full_attention_every (Megatron --window-attn-skip-freq N) holds."""
    window = cfg.data.get("sliding_window")
    kinds = cfg.data.get("layer_types")
    if kinds is not None:
        layers = cfg.count("num_hidden_layers", 0)
        if (not isinstance(kinds, list) or len(kinds) != layers
                or any(k not in ("sliding_attention", "full_attention") for k in kinds)):
            raise SpecError("layer_types", kinds, f'a list of {layers} (num_hidden_layers) "sliding_attention" '
                            'and "full_attention"', where=cfg.where)
        if window is None and "sliding_attention" in kinds:
            raise SpecError("sliding_window", None, 'required where layer_types names "sliding_attention"',
                            where=cfg.where)
    if window is None:
        return
    cfg.put(spec, "sliding_window", "sliding_window", window)
    if kinds is None:
        return
    full = [i + 1 for i, kind in enumerate(kinds) if kind == "full_attention"]
    if len(full) == len(kinds):
        spec.pop("sliding_window")
        return
    every = full[0] if full else None
    if every is not None and full != list(range(every, len(kinds) + 1, every)):
        raise SpecError("layer_types", kinds, "full-attention layers must be every N-th layer (ModelSpec "
                        "full_attention_every)", where=cfg.where)
    if every is not None:
        cfg.put(spec, "full_attention_every", "layer_types", every)


def _deepseek_fields(cfg: _Config, spec: dict[str, Any]) -> None:
    """DeepSeek-V2/V3: multi-head latent attention, shared + routed experts, MTP modules."""
    mla = {key: cfg.data.get(key) if key == "q_lora_rank" else cfg.need(key) for key in _MLA_KEYS}
    cfg.put(spec, "mla", "kv_lora_rank", mla)
    cfg.put(spec, "head_dim", "v_head_dim", mla["v_head_dim"])
    spec.pop("kv_heads", None)
    cfg.put(spec, "mtp_layers", "num_nextn_predict_layers", cfg.data.get("num_nextn_predict_layers") or 0)
    experts = cfg.data.get("n_routed_experts") or 0
    layers = cfg.count("num_hidden_layers", 0)
    first = cfg.count("first_k_dense_replace", 0)
    freq = cfg.count("moe_layer_freq", 1, minimum=1)
    # DeepseekV3DecoderLayer: MoE when layer_idx >= first_k_dense_replace and layer_idx % moe_layer_freq == 0.
    moe_layers = [i for i in range(first, layers) if i % freq == 0]
    if not experts or not moe_layers:
        return
    cfg.put(spec, "experts", "n_routed_experts", experts)
    cfg.put(spec, "top_k", "num_experts_per_tok", cfg.need("num_experts_per_tok"))
    cfg.put(spec, "expert_ffn_hidden", "moe_intermediate_size", cfg.need("moe_intermediate_size"))
    cfg.put(spec, "shared_experts", "n_shared_experts", cfg.data.get("n_shared_experts") or 0)
    # Group-limited routing (topk_method "noaux_tc"/"group_limited_greedy"): experts are chosen from topk_group
    # of n_group groups; DeepSeek maps one group per node, so a token reaches at most topk_group nodes.
    topk_group, n_group = cfg.count("topk_group", 0, maximum=MAX_EXPERTS), cfg.count("n_group", 0, maximum=MAX_EXPERTS)
    if topk_group and n_group and topk_group < n_group:
        cfg.put(spec, "moe_max_nodes", "topk_group", topk_group)
        cfg.put(spec, "moe_router_groups", "n_group", n_group)
    _put_layout(cfg, spec, moe_layers, layers, "moe_layer_freq")


def _put_layout(cfg: _Config, spec: dict[str, Any], moe_layers: list[int], layers: int, blame: str) -> None:
    """first_dense_layers / moe_layer_freq reproducing exactly the MoE layer indices `moe_layers`."""
    first = moe_layers[0]
    freq = moe_layers[1] - first if len(moe_layers) > 1 else layers - first
    if list(range(first, layers, freq)) != moe_layers:
        raise SpecError(
            blame, cfg.data.get(blame),
            f"MoE layers {moe_layers} do not fit ModelSpec's layout (a dense prefix, then every k-th layer)",
            where=cfg.where,
        )
    cfg.put(spec, "first_dense_layers", blame, first)
    cfg.put(spec, "moe_layer_freq", blame, freq)


def _llama_bias(cfg: _Config, spec: dict[str, Any]) -> None:
    attention_bias, mlp_bias = bool(cfg.data.get("attention_bias")), bool(cfg.data.get("mlp_bias"))
    if attention_bias and mlp_bias:
        cfg.put(spec, "linear_bias", "attention_bias", True)
    elif attention_bias or mlp_bias:
        key = "attention_bias" if attention_bias else "mlp_bias"
        warnings.warn(f"{cfg.where}: {key} alone is not modelled (linear_bias means attention and MLP "
                      "biases); its parameters are left out", stacklevel=3)


def _relabel(err: SpecError, cfg: _Config) -> SpecError:
    """A ModelSpec error restated with the config.json keys its fields came from."""
    words = [err.field.split(".")[-1], *re.findall(r"[a-z_]+", err.allowed)]
    named = list(dict.fromkeys(w for w in words if w in cfg.sources or w in _MLA_KEYS))
    if not named:
        return err
    keys = {w: w if w in _MLA_KEYS else cfg.sources[w] for w in named}
    key = keys[named[0]]
    legend = ", ".join(f"{w} ← {k}" for w, k in keys.items())
    return SpecError(key, cfg.data.get(key), f"{err.allowed} (ModelSpec field ← config.json key: {legend})",
                     where=err.where)
