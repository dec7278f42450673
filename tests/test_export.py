"""`llmscale export`: a layout as Megatron-LM flags (the torchtitan recipe: tests/test_torchtitan_export.py).

The flag and key names are frozen against the frameworks' own definitions, read at one commit each:
a name that is not in the verified sets below was never checked and must not be emitted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from llmscale.cli.main import main
from llmscale.io.catalog import load_model
from llmscale.io.resolve import Job, JobRequest, resolve
from llmscale.launch.document import ExportFormat
from llmscale.launch.megatron import MEGATRON_FLAGS, megatron_args, megatron_notes, pipeline_layout
from llmscale.launch.megatron_model import moe_layer_pattern
from llmscale.specs.layout import Layout
from llmscale.specs.model import ModelSpec

# Every flag name below is defined by NVIDIA/Megatron-LM's pretrain_gpt.py parser at commit
# d98e8a64ddf34856e74b24714e3bedb2f5a39553 (megatron/training/arguments.py: its add_argument calls and the
# ArgumentGroupFactory dataclass groups, TransformerConfig among them), extracted with
# `python scripts/megatron_flags.py --git <Megatron-LM> --commit d98e8a64ddf34856e74b24714e3bedb2f5a39553`;
# test_frozen_megatron_flags_are_defined_at_the_cited_commit re-extracts them when a Megatron-LM clone is at hand.
# --pipeline-model-parallel-layout's grammar: megatron/core/transformer/pipeline_parallel_layer_layout.py; the
# Megatron-FSDP set: docs/discussions/megatron-fsdp-user-guide (both read at f6f94c70974acffa8141a1886fbc076a68e44190
# / 00caa53af30912914981c86f39db123961678bbd, re-checked as flag names at d98e8a6).
MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
VERIFIED_MEGATRON_FLAGS = frozenset({
    "--attention-backend", "--attention-dropout", "--bf16", "--ckpt-format", "--context-parallel-size",
    "--cpu-offloading-num-layers", "--cross-entropy-fusion-impl", "--cross-entropy-loss-fusion", "--cuda-graph-impl",
    "--data-parallel-sharding-strategy", "--disable-bias-linear",
    "--exp-avg-dtype", "--exp-avg-sq-dtype", "--expert-model-parallel-size", "--expert-tensor-parallel-size",
    "--ffn-hidden-size", "--fp16", "--fp4-format", "--fp4-recipe", "--fp8-format", "--fp8-output-proj",
    "--fp8-param-gather", "--fp8-recipe", "--fsdp-double-buffer",
    "--global-batch-size", "--grad-reduce-in-bf16", "--group-query-attention", "--hidden-dropout", "--hidden-size",
    "--kv-channels", "--kv-lora-rank", "--max-position-embeddings", "--micro-batch-size",
    "--moe-expert-capacity-factor", "--moe-ffn-hidden-size", "--moe-grouped-gemm", "--moe-layer-freq",
    "--moe-pad-expert-input-to-capacity", "--moe-router-dtype", "--moe-router-enable-expert-bias",
    "--moe-router-force-load-balancing", "--moe-router-group-topk", "--moe-router-load-balancing-type",
    "--moe-router-num-groups", "--moe-router-score-function", "--moe-router-topk",
    "--moe-shared-expert-intermediate-size", "--moe-token-dispatcher-type", "--mscale", "--mscale-all-dim",
    "--mtp-num-layers", "--multi-latent-attention", "--no-gradient-accumulation-fusion", "--norm-epsilon",
    "--normalization", "--num-attention-heads", "--num-experts", "--num-layers", "--num-query-groups",
    "--num-virtual-stages-per-pipeline-rank", "--optimizer", "--optimizer-cpu-offload", "--overlap-grad-reduce",
    "--overlap-moe-expert-parallel-comm", "--overlap-param-gather", "--pipeline-model-parallel-layout",
    "--pipeline-model-parallel-size", "--position-embedding-type", "--q-lora-rank", "--qk-head-dim",
    "--qk-pos-emb-head-dim", "--recompute-granularity", "--recompute-method", "--recompute-modules",
    "--recompute-num-layers", "--rope-scaling-factor", "--rope-type", "--rotary-base", "--rotary-scaling-factor",
    "--seq-length", "--sequence-parallel", "--swiglu", "--tensor-model-parallel-size", "--tp-comm-overlap",
    "--train-samples", "--untie-embeddings-and-output-weights", "--use-distributed-optimizer", "--use-megatron-fsdp",
    "--use-precision-aware-optimizer", "--use-rope-scaling", "--use-tp-pp-dp-mapping", "--v-head-dim", "--vocab-size",
    "--yarn-beta-fast", "--yarn-beta-slow", "--yarn-original-max-position-embeddings",
    "--moe-flex-dispatcher-backend", "--moe-permute-fusion", "--moe-router-fusion", "--use-transformer-engine-op-fuser",
    "--cuda-graph-modules", "--window-size", "--window-attn-skip-freq", "--activation-func-clamp-value",
})  # fmt: skip

# GPT-3 175B on Selene as Narayanan et al. 2021 (arXiv:2104.04473) ran it: tp 8, pp 8, batch 1536 × 2048.
GPT3 = ["--model", "gpt3-175b", "--cluster", "selene", "--tp", "8", "--pp", "8", "--dp", "24", "--vpp", "4",
        "--gbs", "1536", "--seq-len", "2048", "--recompute", "selective",
        "--framework", "any"]  # no release profile: exactly these settings (a release's reach the flags too, below)
GPT3_MEGATRON = [
    "--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "8",
    "--num-virtual-stages-per-pipeline-rank", "4", "--context-parallel-size", "1", "--sequence-parallel",
    "--micro-batch-size", "1", "--global-batch-size", "1536", "--seq-length", "2048",
    "--train-samples", "4882812500",  # llmscale's default total_tokens 10T / 2048
    "--recompute-granularity", "selective", "--use-distributed-optimizer", "--overlap-grad-reduce",
    "--overlap-param-gather", "--bf16",
    "--num-layers", "96", "--hidden-size", "12288", "--ffn-hidden-size", "49152", "--num-attention-heads", "96",
    "--vocab-size", "50257", "--position-embedding-type", "learned_absolute", "--max-position-embeddings", "2048",
    "--normalization", "LayerNorm", "--norm-epsilon", "1e-05",  # ModelSpec's (and Megatron's) default epsilon
]  # fmt: skip

# DeepSeek-V3 as its report (arXiv:2412.19437 §3.2) trained it: 2048 H800, pp 16, ep 64, DualPipe, fp8.
DSV3: dict[str, Any] = {"model": "deepseek-v3", "cluster": "deepseek-v3-h800",
        "train": {"global_batch": 15360, "seq_len": 4096, "precision": "fp8"},
        "layout": {"pp": 16, "dp": 128, "ep": 64, "schedule": "dualpipe"}}


def job(model: str = "gpt3-175b", cluster: str = "selene", train: dict[str, Any] | None = None,
        **layout: Any) -> Job:
    base = {"tp": 8, "pp": 8, "dp": 24, "vpp": 4, "recompute": "selective"} if model == "gpt3-175b" else {}
    train = train or ({"global_batch": 1536, "seq_len": 2048} if model == "gpt3-175b" else {})
    return resolve(JobRequest(model=model, cluster=cluster, train=train, layout={**base, **layout}, framework="any"))


def dsv3(**layout: Any) -> Job:
    return resolve(JobRequest(model=DSV3["model"], cluster=DSV3["cluster"], train=DSV3["train"],
                              layout={**DSV3["layout"], **layout}, framework="any"))  # the shape, not a release's


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 0), out, err


def body(text: str) -> str:
    """The export without its `#` preamble."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("#")).strip()


def flags_of(args: list[str]) -> set[str]:
    return {token for token in args if token.startswith("--")}


def parse_layout(text: str) -> list[str]:
    """Stages of a Megatron layout string: commas dropped, x*n unrolled, split on '|' (the documented grammar)."""
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text.replace(",", ""))
    return text.split("|")


# ---- frozen names ---------------------------------------------------------------------------------


def test_megatron_flag_tuple_is_verified() -> None:
    # A flag Megatron does not define makes argparse exit at launch, after the job waited in the queue.
    assert set(MEGATRON_FLAGS) <= VERIFIED_MEGATRON_FLAGS
    assert len(MEGATRON_FLAGS) == len(set(MEGATRON_FLAGS))


@pytest.mark.parametrize("make", [
    job, lambda: job(zero=0), lambda: job(zero=2), lambda: job(zero=3), lambda: job(recompute="full"),
    lambda: job(offload_optimizer=True),
    lambda: job(train={"global_batch": 1536, "seq_len": 2048, "precision": "fp16"}),
    dsv3, lambda: dsv3(tp=2, dp=64, etp=1, tp_comm_overlap=True, ep_comm_overlap=True),
    lambda: job("llama3-405b", "llama3-16k", {"precision": "fp8"}, tp=8, pp=16, dp=8),
    lambda: fsdp70b({"fused_cross_entropy": True}),  # --fp8-param-gather, --fsdp-double-buffer, CE fusion
])  # fmt: skip
def test_every_emitted_name_is_listed(make: Any) -> None:
    exported = make()
    assert flags_of(megatron_args(exported)) <= set(MEGATRON_FLAGS)


# ---- Megatron-LM ----------------------------------------------------------------------------------


def test_gpt3_megatron_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert megatron_args(job()) == GPT3_MEGATRON
    code, out, _ = run(capsys, "export", "--format", "megatron", *GPT3)
    assert code == 0
    assert body(out).replace(" \\\n", " ").split() == GPT3_MEGATRON
    assert "d98e8a64ddf34856e74b24714e3bedb2f5a39553" in out and "data-parallel size dp 24" in out


def test_zero_stages_and_full_recompute() -> None:
    # ZeRO-2/3 are Megatron-FSDP, whose user guide makes these five flags required.
    fsdp = ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params",
            "--no-gradient-accumulation-fusion", "--ckpt-format", "fsdp_dtensor"]
    args = " ".join(megatron_args(job(zero=3)))
    assert " ".join(["--use-distributed-optimizer", *fsdp]) in args
    assert "optim_grads " in " ".join(megatron_args(job(zero=2))) + " "
    zero0 = megatron_args(job(zero=0))
    assert "--use-distributed-optimizer" not in zero0 and "--overlap-param-gather" not in zero0
    assert " ".join(["--recompute-granularity", "full", "--recompute-method", "uniform",
                     "--recompute-num-layers", "1"]) in " ".join(megatron_args(job(recompute="full")))


def test_deepseek_v3_megatron_shape() -> None:
    args = megatron_args(dsv3())
    joined = " ".join(args)
    for piece in ("--multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 "
                  "--qk-pos-emb-head-dim 64 --v-head-dim 128", "--num-experts 256 --moe-router-topk 8 "
                  "--moe-ffn-hidden-size 2048 --moe-grouped-gemm --moe-token-dispatcher-type alltoall "
                  "--moe-permute-fusion --moe-router-fusion --moe-shared-expert-intermediate-size 2048",
                  # DeepSeek-V3 config.json: rope_theta 10000, rms_norm_eps 1e-6, YaRN factor 40, mscale 1 / 1;
                  # report §3.2.2: at most 4 nodes per token — over the 8 nodes of an ep-64 group of 8-GPU nodes.
                  "--rotary-base 10000 --rotary-scaling-factor 40 --mscale 1 --mscale-all-dim 1 --rope-type yarn",
                  "--norm-epsilon 1e-06", "--moe-router-num-groups 8 --moe-router-group-topk 4",
                  "--fp8-format hybrid --fp8-recipe tensorwise", "--mtp-num-layers 1", "--swiglu",
                  "--expert-model-parallel-size 64 --expert-tensor-parallel-size 1"):
        assert piece in joined
    # 61 layers do not split evenly over 16 stages: the layout string carries llmscale's balanced split.
    assert "--num-virtual-stages-per-pipeline-rank" not in args
    stages = parse_layout(args[args.index("--pipeline-model-parallel-layout") + 1])
    assert len(stages) == 16 and "".join(stages).count("t") == 61
    assert stages[0].startswith("E") and stages[-1].endswith("mL")


@pytest.mark.parametrize(("first_dense", "freq", "layers"), [(0, 1, 8), (0, 2, 8), (3, 1, 61), (2, 3, 20), (1, 4, 9)])
def test_moe_layer_pattern_matches_the_model(first_dense: int, freq: int, layers: int) -> None:
    # Megatron reads the pattern as a Python list (1 = MoE layer) or an integer N (i % N == 0).
    model = ModelSpec(name="m", layers=layers, hidden=64, ffn_hidden=128, heads=4, vocab=100, experts=4, top_k=1,
                      expert_ffn_hidden=32, first_dense_layers=first_dense, moe_layer_freq=freq)
    pattern = moe_layer_pattern(model)
    if pattern.isdigit():
        marks = [int(i % int(pattern) == 0) for i in range(layers)]
    else:
        assert re.fullmatch(r"[\d,\[\]()+*]+", pattern)  # the characters Megatron's _eval_pattern allows
        marks = eval(pattern)
    assert marks == [int(i >= first_dense and (i - first_dense) % freq == 0) for i in range(layers)]
    assert sum(marks) == model.num_moe_layers


def test_pipeline_layout_is_the_balanced_split() -> None:
    model = job().model
    stages = parse_layout(pipeline_layout(model, Layout(pp=5, vpp=2, dp=1)))
    counts = [stage.count("t") for stage in stages]
    assert len(stages) == 10 and sum(counts) == 96 and max(counts) - min(counts) <= 1


def test_unsupported_settings_become_notes(capsys: pytest.CaptureFixture[str]) -> None:
    # Megatron has no DualPipe: the flags run 1F1B, and the output says so instead of dropping it silently.
    code, out, _ = run(capsys, "export", "--format", "megatron", "--model", "deepseek-v3", "--cluster",
                       "deepseek-v3-h800", "--pp", "16", "--dp", "128", "--ep", "64", "--schedule", "dualpipe",
                       "--gbs", "15360", "--seq-len", "4096", "--offload-params")
    assert code == 0
    assert "# note: schedule 'dualpipe' has no Megatron-LM flag" in out
    assert "# note: offload_params has no Megatron-LM flag" in out


# ---- --from-plan and errors -----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [f.value for f in ExportFormat])
def test_from_explain_json_round_trips(fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, explained, _ = run(capsys, "explain", *GPT3, "--json")
    assert code == 0
    path = tmp_path / "explain.json"
    path.write_text(explained, encoding="utf-8")
    _, direct, _ = run(capsys, "export", "--format", fmt, *GPT3)
    # explain records its train spec; a flag that agrees with it (--seq-len 2048) is allowed.
    code, via_file, err = run(capsys, "export", "--format", fmt, "--from-plan", str(path), "--seq-len", "2048")
    assert code == 0 and err == ""
    assert via_file == direct


def test_from_plan_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = {"model": "gpt3-175b", "cluster": "selene", "global_batch": {"sequences": 1536, "tokens": 1536 * 2048},
            "top": [{"num_gpus": 1536, "layout": {"tp": 8, "pp": 8, "dp": 24, "cp": 1, "ep": 1, "etp": 8, "vpp": 4,
                                                  "mbs": 1, "zero": 1, "recompute": "selective", "sp": True,
                                                  "schedule": "interleaved"}}]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    code, out, err = run(capsys, "export", "--format", "megatron", "--from-plan", str(path), "--framework", "any")
    assert code == 0
    assert body(out).replace(" \\\n", " ").split() == GPT3_MEGATRON
    # A layout flag that contradicts the file would be silently overridden by one of them: it is an error.
    code, _, err = run(capsys, "export", "--format", "megatron", "--from-plan", str(path), "--tp", "4")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--tp" in err


def test_a_release_profiles_settings_reach_the_flags() -> None:
    # Megatron-Bridge 26.04.01's Llama 3 recipes overlap TP and reduce gradients in 16 bits (catalog/frameworks.yaml,
    # bridge-v0.4.2-llama-recipe / -llama3-perf): a job under that release exports those settings as flags.
    release = resolve(JobRequest(model="llama3-70b", cluster="eos-h100", gpus=512, layout={"tp": 8, "pp": 4},
                                 framework="megatron-bridge@26.04.01"))
    plain = resolve(JobRequest(model="llama3-70b", cluster="eos-h100", gpus=512, layout={"tp": 8, "pp": 4},
                               framework="any"))
    added = set(megatron_args(release)) - set(megatron_args(plain))
    assert {"--tp-comm-overlap", "--grad-reduce-in-bf16"} <= added


def test_bad_format_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # "deepspeed" is not an export target: one error line naming the value and the choices, exit 2.
    code, _, err = run(capsys, "export", "--format", "deepspeed", *GPT3)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "'deepspeed'" in lines[0] and "megatron, torchtitan" in lines[0]


def test_explain_batch_mismatch_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The document was made for 1536 sequences of 2048: --gbs 1000 disagrees with it (--seq-len 2048 agrees).
    _, explained, _ = run(capsys, "explain", *GPT3, "--json")
    path = tmp_path / "explain.json"
    path.write_text(explained, encoding="utf-8")
    code, _, err = run(capsys, "export", "--format", "megatron", "--from-plan", str(path), "--gbs", "1000",
                       "--seq-len", "2048")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--gbs" in err and "--seq-len" not in err


def test_document_without_layout_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A model file is neither a plan nor an explain document: there is no layout to export.
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"name": "tiny", "layers": 4}), encoding="utf-8")
    code, _, err = run(capsys, "export", "--format", "megatron", "--from-plan", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "neither a plan" in err


def test_llama31_405b_layout_matches_megatron_embedding_and_loss_accounting() -> None:
    # 126 layers on pp16 × vpp4: the Bridge recipe's account_for_embedding/loss_in_pipeline_split gives every
    # virtual stage 2 layers and the first and last 1 (Megatron-Core get_num_layers_to_build); the exported
    # layout carries exactly the split the cost model uses.
    model = load_model("llama3-405b")
    stages = parse_layout(pipeline_layout(model, Layout(tp=8, pp=16, vpp=4, dp=1)))
    assert [stage.count("t") for stage in stages] == [1] + [2] * 62 + [1]



# ---- run settings of the memory model: FP8 parameters, the FSDP double buffer, fused cross-entropy ------------
# What Megatron-LM accepts is read in its source at MEGATRON_COMMIT: --fp8-param-gather needs fp8
# (megatron/core/transformer/transformer_config.py:1566), the distributed optimizer or Megatron-FSDP
# (megatron/training/arguments.py:1095-1097) and, beside --optimizer-cpu-offload, --fp8-recipe delayed
# (arguments.py:1889-1892); --fsdp-double-buffer is refused beside --overlap-moe-expert-parallel-comm
# (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py:177-181); TE cross-entropy fusion is refused outright
# (arguments.py:1697-1702, since 168cb15d "Disable TE cross entropy loss fusion").

FSDP_FP8 = {"global_batch": 128, "seq_len": 8192, "precision": "fp8", "fp8_recipe": "tensorwise",
            "fp8_params": True, "fsdp_double_buffer": True}


def fsdp70b(train: dict[str, Any] | None = None, **layout: Any) -> Job:
    lay = {"tp": 1, "pp": 1, "dp": 64, "zero": 3, **layout}
    return job("llama3-70b", "gb200-nvl72", {**FSDP_FP8, **(train or {})}, **lay)


def test_fp8_params_and_double_buffer_reach_megatron_fsdp() -> None:
    args = megatron_args(fsdp70b())
    assert {"--fp8-param-gather", "--fsdp-double-buffer", "--use-megatron-fsdp"} <= flags_of(args)
    assert not [n for n in megatron_notes(fsdp70b()) if "fp8_params" in n or "fsdp_double_buffer" in n]


@pytest.mark.parametrize(("make", "flag", "note"), [
    (lambda: fsdp70b({"precision": "bf16", "fp8_recipe": None}), "--fp8-param-gather",
     "fp8_params needs precision fp8"),
    (lambda: fsdp70b(tp=8, dp=8, zero=0), "--fp8-param-gather", "fp8_params needs the distributed optimizer"),
    (lambda: fsdp70b(offload_optimizer=True), "--fp8-param-gather", "needs --fp8-recipe delayed"),
    (lambda: fsdp70b(zero=1), "--fsdp-double-buffer", "fsdp_double_buffer is Megatron-FSDP's (zero 2 or 3)"),
    (lambda: resolve(JobRequest(model=DSV3["model"], cluster=DSV3["cluster"],
                                train={**DSV3["train"], "fsdp_double_buffer": True},
                                layout={**DSV3["layout"], "zero": 3, "ep_comm_overlap": True})),
     "--fsdp-double-buffer", "refused by Megatron-FSDP beside --overlap-moe-expert-parallel-comm"),
])  # fmt: skip
def test_a_combination_megatron_refuses_is_a_note_not_a_flag(make: Any, flag: str, note: str) -> None:
    exported = make()
    assert flag not in megatron_args(exported)
    assert any(note in n and "not set" in n for n in megatron_notes(exported))


def test_fp8_params_with_offload_under_the_delayed_recipe_is_written() -> None:
    assert "--fp8-param-gather" in megatron_args(fsdp70b({"fp8_recipe": "delayed"}, offload_optimizer=True))


def test_fused_cross_entropy_writes_the_native_fusion_and_says_what_it_costs() -> None:
    exported = fsdp70b({"fused_cross_entropy": True})
    args = megatron_args(exported)
    assert args[args.index("--cross-entropy-fusion-impl") + 1] == "native" and "--cross-entropy-loss-fusion" in args
    note = next(n for n in megatron_notes(exported) if n.startswith("fused_cross_entropy"))
    # the 16-bit logits the plan priced, kept in fp32 instead: 2 B more × 8192 tokens × 128256 vocabulary / tp 1
    assert f"{2 * 8192 * 128256 / 2**30:.2f} GiB more" in note


def test_zero3_gather_module_is_a_note_at_zero_3_only() -> None:
    module = {"zero3_gather": "module"}
    assert any("zero3_gather module" in n and "no Megatron-LM flag" in n for n in megatron_notes(fsdp70b(module)))
    assert not any("zero3_gather" in n for n in megatron_notes(fsdp70b(module, zero=1)))


def test_zero3_synchronous_is_a_note_at_zero_3_only() -> None:
    synchronous = {"zero3_synchronous": True}
    assert any(n.startswith("zero3_synchronous") and "no Megatron-LM flag" in n
               for n in megatron_notes(fsdp70b(synchronous)))
    assert not any("zero3_synchronous" in n for n in megatron_notes(fsdp70b(synchronous, zero=1)))


def test_cuda_graphs_beside_ep_overlap_under_megatron_fsdp_capture_the_whole_iteration() -> None:
    """Megatron-LM@d98e8a64 mcore_fsdp_adapter.py L182-187 asserts cuda_graph_impl in ('none', 'full_iteration')
    when 1F1B EP overlap runs under Megatron-FSDP; per-layer graphs stay where it does not."""
    fsdp = dsv3(zero=3, ep_comm_overlap=True, cuda_graphs=True)
    args = megatron_args(fsdp)
    assert args[args.index("--cuda-graph-impl") + 1] == "full_iteration"
    assert any(n.startswith("cuda_graphs: Megatron-FSDP refuses per-layer graphs") for n in megatron_notes(fsdp))
    plain = dsv3(ep_comm_overlap=True, cuda_graphs=True)
    args = megatron_args(plain)
    assert args[args.index("--cuda-graph-impl") + 1] == "transformer_engine"
    assert not any(n.startswith("cuda_graphs:") for n in megatron_notes(plain))
