"""Megatron-LM launch flags read back into a job: the text `llmscale export --format megatron` writes (or any
`pretrain_gpt.py` argument list using the flags it writes) as a model, a run, a layout and a GPU count.

Defaults are Megatron-LM's, not llmscale's: without `--swiglu` the MLP is GELU, without `--disable-bias-linear`
linears have biases (megatron/training/arguments.py and TransformerConfig @ d98e8a64ddf34856e74b24714e3bedb2f5a39553).
A flag this reader does not know is an error naming it — it is never skipped. Flags that steer Megatron without a
llmscale field (`--overlap-grad-reduce`, `--moe-router-dtype`, ...) are read and listed in `ParsedLaunch.inert`.
What the flags cannot carry (a schedule Megatron lacks, fp32_master_weights = false) comes back as the default.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from llmscale.errors import SpecError
from llmscale.io.files import parse_spec
from llmscale.io.megatron_layout import layout_stages
from llmscale.io.resolve import JobRequest
from llmscale.layout.stages import chunk_bounds
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import Fp8Recipe

WHERE = "Megatron-LM arguments"

# flag → (section, field, converter); sections: model, mla, rope, train, layout
_INT, _FLOAT = int, float
_VALUED: dict[str, tuple[str, str, Callable[[str], Any]]] = {
    "--num-layers": ("model", "layers", _INT), "--hidden-size": ("model", "hidden", _INT),
    "--ffn-hidden-size": ("model", "ffn_hidden", _INT), "--num-attention-heads": ("model", "heads", _INT),
    "--num-query-groups": ("model", "kv_heads", _INT), "--kv-channels": ("model", "head_dim", _INT),
    "--vocab-size": ("model", "vocab", _INT), "--norm-epsilon": ("model", "norm_eps", _FLOAT),
    "--activation-func-clamp-value": ("model", "glu_clamp", _FLOAT),
    "--rotary-base": ("model", "rope_theta", _FLOAT), "--num-experts": ("model", "experts", _INT),
    "--moe-router-topk": ("model", "top_k", _INT), "--moe-ffn-hidden-size": ("model", "expert_ffn_hidden", _INT),
    "--moe-expert-capacity-factor": ("model", "capacity_factor", _FLOAT),
    "--moe-router-group-topk": ("model", "moe_max_nodes", _INT),
    "--moe-router-num-groups": ("model", "moe_router_groups", _INT), "--mtp-num-layers": ("model", "mtp_layers", _INT),
    "--q-lora-rank": ("mla", "q_lora_rank", _INT), "--kv-lora-rank": ("mla", "kv_lora_rank", _INT),
    "--qk-head-dim": ("mla", "qk_nope_head_dim", _INT), "--qk-pos-emb-head-dim": ("mla", "qk_rope_head_dim", _INT),
    "--v-head-dim": ("mla", "v_head_dim", _INT),
    "--rope-scaling-factor": ("rope", "llama3_factor", _FLOAT), "--rotary-scaling-factor": ("rope", "factor", _FLOAT),
    "--mscale": ("rope", "mscale", _FLOAT), "--mscale-all-dim": ("rope", "mscale_all_dim", _FLOAT),
    "--yarn-original-max-position-embeddings": ("rope", "original_max_positions", _INT),
    "--yarn-beta-fast": ("rope", "beta_fast", _FLOAT), "--yarn-beta-slow": ("rope", "beta_slow", _FLOAT),
    "--global-batch-size": ("train", "global_batch", _INT), "--seq-length": ("train", "seq_len", _INT),
    "--train-samples": ("train", "samples", _INT),
    "--tensor-model-parallel-size": ("layout", "tp", _INT), "--pipeline-model-parallel-size": ("layout", "pp", _INT),
    "--context-parallel-size": ("layout", "cp", _INT), "--expert-model-parallel-size": ("layout", "ep", _INT),
    "--expert-tensor-parallel-size": ("layout", "etp", _INT), "--micro-batch-size": ("layout", "mbs", _INT),
    "--num-virtual-stages-per-pipeline-rank": ("layout", "vpp", _INT),
    "--cpu-offloading-num-layers": ("layout", "offload_activations", _INT),
}
_SWITCHES: dict[str, tuple[str, str, Any]] = {
    "--swiglu": ("model", "gated_mlp", True), "--disable-bias-linear": ("model", "linear_bias", False),
    "--untie-embeddings-and-output-weights": ("model", "tied_embeddings", False),
    "--moe-pad-expert-input-to-capacity": ("model", "pad_to_capacity", True),
    "--multi-latent-attention": ("mla", "on", True), "--use-rope-scaling": ("rope", "llama3", True),
    "--fp16": ("train", "precision", "fp16"), "--bf16": ("train", "bf16", True),
    "--grad-reduce-in-bf16": ("train", "fp32_grads", False), "--fp8-output-proj": ("train", "fp8_output_proj", True),
    "--fp8-param-gather": ("train", "fp8_params", True), "--fsdp-double-buffer": ("train", "fsdp_double_buffer", True),
    "--moe-router-enable-expert-bias": ("train", "routing", "loss-free"),
    "--moe-router-force-load-balancing": ("train", "routing", "forced"),
    "--sequence-parallel": ("layout", "sp", True), "--tp-comm-overlap": ("layout", "tp_comm_overlap", True),
    "--overlap-moe-expert-parallel-comm": ("layout", "ep_comm_overlap", True),
    "--use-distributed-optimizer": ("layout", "zero", 1),
    "--optimizer-cpu-offload": ("layout", "offload_optimizer", True),
    "--use-tp-pp-dp-mapping": ("layout", "rank_order", "tp-cp-ep-pp-dp"),
}
# Read, and steering Megatron only (overlap is what step.py assumes; dtype/recipe/format choices of a setting
# carried by another flag).
_INERT = {"--group-query-attention": 0, "--overlap-grad-reduce": 0, "--overlap-param-gather": 0,
          "--use-precision-aware-optimizer": 0, "--use-megatron-fsdp": 0, "--no-gradient-accumulation-fusion": 0,
          "--ckpt-format": 1, "--moe-router-dtype": 1,
          "--fp4-recipe": 1, "--cuda-graph-impl": 1,
          "--max-position-embeddings": 1, "--recompute-method": 1, "--recompute-num-layers": 1,
          "--moe-router-score-function": 1, "--exp-avg-sq-dtype": 1}
_SPECIAL = ("--position-embedding-type", "--rope-type", "--normalization", "--attention-dropout", "--hidden-dropout",
            "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--moe-router-load-balancing-type",
            "--fp8-format", "--fp8-recipe", "--fp4-format", "--attention-backend", "--exp-avg-dtype", "--optimizer",
            "--recompute-granularity", "--recompute-modules", "--data-parallel-sharding-strategy",
            "--pipeline-model-parallel-layout", "--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl",
            "--moe-grouped-gemm", "--use-transformer-engine-op-fuser", "--moe-token-dispatcher-type",
            "--moe-flex-dispatcher-backend", "--moe-permute-fusion", "--moe-router-fusion", "--cuda-graph-modules",
            "--window-size", "--window-attn-skip-freq")
KNOWN_FLAGS = frozenset(_VALUED) | frozenset(_SWITCHES) | frozenset(_INERT) | frozenset(_SPECIAL)
"""Every flag this reader takes (tests hold `export.megatron.MEGATRON_FLAGS` to it)."""

_MODULE_FIELDS = {"layernorm": "recompute_norm", "mla_up_proj": "recompute_mla_up", "moe_act": "recompute_moe_act",
                  "mlp": "recompute_mlp"}


@dataclass(frozen=True)
class ParsedLaunch:
    """A launch command read back: the job it describes and the flags it read without a llmscale field."""

    model: ModelSpec
    train: dict[str, Any]
    layout: dict[str, Any]
    num_gpus: int | None
    cluster: str | None
    inert: tuple[str, ...]
    origin: ClassVar[str] = WHERE
    """What the error messages of its job name it (the torchtitan reader's subclass names a recipe)."""
    framework: ClassVar[str] = "megatron-core"
    """The release whose defaults stand for what the launch leaves out: a flag not given is Megatron-LM's default
    (catalog/frameworks.yaml megatron-core, its arguments.py); a torchtitan recipe's field not given is torchtitan's."""

    def request(self, cluster: Any = None, gpus: int | None = None) -> JobRequest:
        """The JobRequest of this launch on `cluster` (default: the one the export preamble names)."""
        return JobRequest(model=self.model, cluster=cluster if cluster is not None else self.cluster,
                          gpus=gpus if gpus is not None else self.num_gpus, train=self.train, layout=self.layout,
                          origin=self.origin, framework=self.framework)


def tokens(text: str) -> tuple[list[str], dict[str, str]]:
    """argv tokens of the text (`#` lines dropped, line continuations joined) and what its preamble says."""
    preamble: dict[str, str] = {}
    head = re.search(r"· model (\S+) · cluster (\S+) · ([\d,]+) GPUs", text)
    if head:
        preamble = {"model": head[1], "cluster": head[2], "gpus": head[3].replace(",", "")}
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    try:
        argv = shlex.split(body.replace("\\\n", " "))
    except ValueError as err:
        raise SpecError("text", None, f"not shell words ({err})", where=WHERE) from None
    return [t for t in argv if t != "\\"], preamble


def group_flags(argv: list[str]) -> dict[str, list[str]]:
    """flag → its values; a word before any flag (the script name) is dropped, a repeated flag is an error."""
    flags: dict[str, list[str]] = {}
    current: list[str] | None = None
    for token in argv:
        if token.startswith("--"):
            if token in flags:
                raise SpecError(token, token, "given twice", where=WHERE)
            if token not in KNOWN_FLAGS:
                raise SpecError(token, token, "not a flag llmscale reads back (see docs/export.md)", where=WHERE)
            current = flags[token] = []
        elif current is not None:
            current.append(token)
    return flags


def parse_megatron_args(text: str) -> ParsedLaunch:
    """The job that Megatron-LM flags describe (module docstring); one SpecError line for what does not fit."""
    argv, preamble = tokens(text)
    flags = group_flags(argv)
    parts: dict[str, dict[str, Any]] = {s: {} for s in ("model", "mla", "rope", "train", "layout")}
    for flag, values in flags.items():
        if flag in _VALUED:
            section, name, convert = _VALUED[flag]
            parts[section][name] = _one(flag, values, convert)
        elif flag in _SWITCHES:
            section, name, value = _SWITCHES[flag]
            _none(flag, values)
            parts[section][name] = value
    _special_model(flags, parts)
    _special_run(flags, parts)
    model = _model(parts, preamble.get("model", "megatron-args"))
    layout, train = parts["layout"], _train(parts["train"])
    gpus = int(preamble["gpus"]) if "gpus" in preamble else None
    _pipeline(flags, layout, train, model.layers)
    for key, flag in (("tp", "--tensor-model-parallel-size"), ("pp", "--pipeline-model-parallel-size"),
                      ("cp", "--context-parallel-size")):
        if layout.get(key, 1) < 1:
            raise SpecError(flag, layout[key], "must be a positive number of ranks", where=WHERE)
    if gpus is not None:
        layout["dp"] = gpus // (layout.get("tp", 1) * layout.get("pp", 1) * layout.get("cp", 1))
    inert = tuple(f for f in flags if f in _INERT or (f == "--fp8-recipe" and "fp8_recipe" not in train)
                  or (f == "--window-attn-skip-freq" and model.sliding_window is None))
    return ParsedLaunch(model, train, layout, gpus, preamble.get("cluster"), inert)


def _one(flag: str, values: list[str], convert: Callable[[str], Any] = str) -> Any:
    if len(values) != 1:
        raise SpecError(flag, " ".join(values), "takes exactly one value", where=WHERE)
    try:
        return convert(values[0])
    except ValueError:
        raise SpecError(flag, values[0], f"must be {convert.__name__}", where=WHERE) from None


def _none(flag: str, values: list[str]) -> None:
    if values:
        raise SpecError(flag, " ".join(values), "takes no value", where=WHERE)


def _choice(flags: dict[str, list[str]], flag: str, allowed: tuple[str, ...]) -> str | None:
    if flag not in flags:
        return None
    value = str(_one(flag, flags[flag]))
    if value not in allowed:
        raise SpecError(flag, value, f"llmscale reads {', '.join(allowed)}", where=WHERE)
    return value


def _special_model(flags: dict[str, list[str]], parts: dict[str, dict[str, Any]]) -> None:
    """Position embeddings, norm, dropout, shared experts, the MoE layer pattern (Megatron's defaults otherwise)."""
    model, rope = parts["model"], parts["rope"]
    position = _choice(flags, "--position-embedding-type", ("learned_absolute", "rope", "yarn")) or "learned_absolute"
    if position == "learned_absolute":
        model["learned_position_embeddings"] = _one("--max-position-embeddings",
                                                    flags.get("--max-position-embeddings", []), int)
    rope["yarn"] = position == "yarn" or _choice(flags, "--rope-type", ("rope", "yarn")) == "yarn"
    rms = _choice(flags, "--normalization", ("LayerNorm", "RMSNorm")) == "RMSNorm"
    model["norm"] = "rmsnorm" if rms else "layernorm"
    dropouts = [_one(f, flags[f], float) for f in ("--attention-dropout", "--hidden-dropout") if f in flags]
    model["dropout"] = len(dropouts) < 2 or any(dropouts)  # Megatron's default dropout is 0.1
    model.setdefault("gated_mlp", False)
    model.setdefault("linear_bias", True)
    model.setdefault("tied_embeddings", True)
    if "--moe-shared-expert-intermediate-size" in flags:
        size = _one("--moe-shared-expert-intermediate-size", flags["--moe-shared-expert-intermediate-size"], int)
        per_expert = model.get("expert_ffn_hidden") or size
        model["shared_experts"], rest = divmod(size, per_expert)
        if rest:
            model["shared_experts"], model["shared_expert_ffn_hidden"] = 1, size
    if "--moe-layer-freq" in flags:
        model |= moe_layers_of(_one("--moe-layer-freq", flags["--moe-layer-freq"]), model.get("layers", 0))
    if "--window-size" in flags and (window := _window(_one("--window-size", flags["--window-size"]))):
        model["sliding_window"] = window
        if "--window-attn-skip-freq" in flags:
            model["full_attention_every"] = _one("--window-attn-skip-freq", flags["--window-attn-skip-freq"], int)


def _window(value: str) -> int | None:
    """--window-size "left,right": ModelSpec's causal window left + 1; None for left -1 (no limit in Megatron, TE)."""
    parts = value.strip("()").split(",")
    numbers = [int(p) for p in parts if p.strip().lstrip("-").isdigit()]
    if len(parts) != 2 or len(numbers) != 2 or (numbers != [-1, 0] and (numbers[0] < 0 or numbers[1] != 0)):
        raise SpecError("--window-size", value, '"left,right" with left ≥ 0 (or -1: no limit) and right 0, a causal '
                        "window (llmscale models causal decoders)", where=WHERE)
    return None if numbers[0] == -1 else numbers[0] + 1


def _special_run(flags: dict[str, list[str]], parts: dict[str, dict[str, Any]]) -> None:
    """Precision, optimizer, routing, ZeRO stage and recompute."""
    train, layout = parts["train"], parts["layout"]
    if _choice(flags, "--fp8-format", ("hybrid", "e4m3")):
        train["precision"] = "fp8"
    recipe = _choice(flags, "--fp8-recipe", tuple(r.value for r in Fp8Recipe))
    if recipe and train.get("precision") == "fp8":  # without --fp8-format Megatron ignores the recipe (inert)
        train["fp8_recipe"] = recipe
    if _choice(flags, "--fp4-format", ("e2m1",)):
        train["precision"] = "fp4"
    backend = _choice(flags, "--attention-backend", ("unfused", "flash", "fused", "auto"))
    if backend == "unfused":
        train["flash_attention"] = False
    elif backend == "flash":  # Transformer Engine's flash-attn backend: FlashAttention-2 unless flash_attn_3 is there
        train["attention_kernel"] = "flash2"
    if _choice(flags, "--exp-avg-dtype", ("bf16", "fp32")) == "bf16":
        train["bf16_moments"] = True
    if _choice(flags, "--optimizer", ("adam", "sgd")) == "sgd":
        train["optimizer"] = "sgd"
    balancing = _choice(flags, "--moe-router-load-balancing-type", ("aux_loss", "none"))
    if balancing == "none" and train.get("routing") != "loss-free":
        raise SpecError("--moe-router-load-balancing-type", "none", "llmscale models 'none' with "
                        "--moe-router-enable-expert-bias only (aux-loss-free routing)", where=WHERE)
    if not {"--bf16", "--fp16"} & set(flags):
        raise SpecError("--bf16", None, "neither --bf16 nor --fp16: Megatron would train in fp32, which llmscale "
                        "does not model", where=WHERE)
    layout.setdefault("zero", 0)  # Megatron's default: no distributed optimizer (llmscale's default is ZeRO-1)
    strategy = _choice(flags, "--data-parallel-sharding-strategy", ("optim_grads", "optim_grads_params"))
    if strategy:
        layout["zero"] = 2 if strategy == "optim_grads" else 3
    granularity = _choice(flags, "--recompute-granularity", ("full", "selective"))
    modules = flags.get("--recompute-modules", ["core_attn"] if granularity == "selective" else [])
    unknown = set(modules) - {"core_attn", *_MODULE_FIELDS}
    if unknown:
        raise SpecError("--recompute-modules", " ".join(sorted(unknown)),
                        f"llmscale models core_attn, {', '.join(_MODULE_FIELDS)}", where=WHERE)
    layout["recompute"] = "full" if granularity == "full" else "selective" if "core_attn" in modules else "none"
    layout |= {_MODULE_FIELDS[name]: True for name in modules if name in _MODULE_FIELDS}
    if "--cuda-graph-impl" in flags:
        impl = _one("--cuda-graph-impl", flags["--cuda-graph-impl"])
        layout["cuda_graphs"] = impl != "none"
        captured = tuple(flags.get("--cuda-graph-modules", ()))
        scope = "iteration" if impl == "full_iteration" else _GRAPH_SCOPES.get(captured)
        if scope is None:
            allowed = sorted(" ".join(scope) for scope in _GRAPH_SCOPES)
            raise SpecError("--cuda-graph-modules", " ".join(captured), f"one of {allowed}", where=WHERE)
        train["cuda_graph_scope"] = scope
    _cross_entropy(flags, train)
    if parts["model"].get("experts"):
        _moe_kernels(flags, train)


_GRAPH_SCOPES = {(): "layer", ("attn",): "attn", ("moe_router", "moe_preprocess"): "moe-router",
                 ("attn", "moe_router", "moe_preprocess"): "attn-moe-router"}
"""--cuda-graph-modules as llmscale's CudaGraphScope (export.megatron.GRAPH_MODULES)."""


def _moe_kernels(flags: dict[str, list[str]], train: dict[str, Any]) -> None:
    """The MoE kernels of an MoE model, Megatron's defaults where a flag is absent (allgather, no fusion,
    SequentialMLP without --moe-grouped-gemm)."""
    grouped = "--moe-grouped-gemm" in flags
    train["moe_grouped_gemm_impl"] = ("te-fused" if "--use-transformer-engine-op-fuser" in flags else "te") if grouped \
        else "cublas-loop"
    kind = _choice(flags, "--moe-token-dispatcher-type", ("alltoall", "allgather", "flex")) or "allgather"
    backend = _choice(flags, "--moe-flex-dispatcher-backend", ("deepep", "hybridep")) or "deepep"
    train["moe_dispatcher"] = f"flex-{backend}" if kind == "flex" else kind
    train["moe_permute_fusion"] = "--moe-permute-fusion" in flags
    train["moe_router_fusion"] = "--moe-router-fusion" in flags


def _cross_entropy(flags: dict[str, list[str]], train: dict[str, Any]) -> None:
    """fused_cross_entropy is Transformer Engine's fusion (`--cross-entropy-fusion-impl te`, which Megatron-LM
    refuses from 168cb15d, 2026-06-03, on: read back from older commands); the native fusion, Megatron's default
    impl, keeps fp32 logits as the unfused loss does (megatron/core/tensor_parallel/cross_entropy.py
    `calculate_logits_max` casts them), so it reads back as false."""
    impl = _choice(flags, "--cross-entropy-fusion-impl", ("native", "te"))
    if "--cross-entropy-loss-fusion" in flags:
        _none("--cross-entropy-loss-fusion", flags["--cross-entropy-loss-fusion"])
        train["fused_cross_entropy"] = impl == "te"


def moe_layers_of(pattern: str, layers: int) -> dict[str, int]:
    """first_dense_layers and moe_layer_freq of Megatron's --moe-layer-freq: an integer N, or a list expression of
    0/1 built with `[...]`, `+` and `*` (evaluated here on the syntax tree, never with eval)."""
    marks = [int(i % int(pattern) == 0) for i in range(layers)] if pattern.isdigit() else _pattern_list(pattern)
    ones = [i for i, mark in enumerate(marks) if mark]
    if len(marks) != layers or not ones:
        raise SpecError("--moe-layer-freq", pattern, f"must mark {layers} layers, at least one MoE", where=WHERE)
    freq = ones[1] - ones[0] if len(ones) > 1 else layers - ones[0]
    if ones != list(range(ones[0], layers, freq)):
        raise SpecError("--moe-layer-freq", pattern, "llmscale models a dense prefix, then every k-th layer MoE",
                        where=WHERE)
    return {"first_dense_layers": ones[0], "moe_layer_freq": freq}


def _pattern_list(pattern: str) -> list[int]:
    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.List):
            return [value(e) for e in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = value(node.left), value(node.right)
            return left + right if isinstance(node.op, ast.Add) else left * right
        raise ValueError(ast.dump(node))

    try:
        result = value(ast.parse(pattern, mode="eval").body)
    except (SyntaxError, ValueError, TypeError):
        raise SpecError("--moe-layer-freq", pattern, "must be an integer or a list of 0/1 built with + and *",
                        where=WHERE) from None
    if not isinstance(result, list) or any(m not in (0, 1) for m in result):
        raise SpecError("--moe-layer-freq", pattern, "must give a list of 0 and 1", where=WHERE)
    return result


def _model(parts: dict[str, dict[str, Any]], name: str) -> ModelSpec:
    model, mla, rope = dict(parts["model"]), parts["mla"], parts["rope"]
    if mla.pop("on", False):
        model["mla"] = mla
    elif mla:
        raise SpecError(next(iter(mla)), None, "needs --multi-latent-attention", where=WHERE)
    if rope.get("llama3"):
        model["rope_scaling"] = {"kind": "llama3", "factor": rope.get("llama3_factor", 8.0),
                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_positions": 8192}
    elif rope.get("yarn"):
        keys = ("factor", "mscale", "mscale_all_dim", "original_max_positions", "beta_fast", "beta_slow")
        model["rope_scaling"] = {"kind": "yarn", "original_max_positions": 4096} | {
            k: rope[k] for k in keys if k in rope}
    if model.get("experts", 0) == 0:
        model.pop("moe_max_nodes", None)
        model.pop("moe_router_groups", None)
    return parse_spec(ModelSpec, {"name": name, "source": f"read back from {WHERE}", **model}, WHERE)


def _train(train: dict[str, Any]) -> dict[str, Any]:
    train = dict(train)
    train.pop("bf16", None)
    samples = train.pop("samples", None)
    if samples is not None:
        train["total_tokens"] = float(samples * train.get("seq_len", 4096))
    return train


def _pipeline(flags: dict[str, list[str]], layout: dict[str, Any], train: dict[str, Any], layers: int) -> None:
    """vpp and the schedule; a --pipeline-model-parallel-layout other than llmscale's split (stages.chunk_bounds)
    is the run's own (TrainSpec.pipeline_splits)."""
    pp = layout.get("pp", 1)
    if "--pipeline-model-parallel-layout" in flags:
        text = _one("--pipeline-model-parallel-layout", flags["--pipeline-model-parallel-layout"])
        counts = layout_stages(text, pp, layers, WHERE)
        layout["vpp"] = len(counts) // pp
        if counts != np.diff(chunk_bounds(layers, pp, layout["vpp"])).tolist():
            train["pipeline_splits"] = [{"pp": pp, "vpp": layout["vpp"], "layers": counts}]
    if pp > 1:
        layout["schedule"] = "interleaved" if layout.get("vpp", 1) > 1 else "1f1b"
    layout.setdefault("sp", False)
