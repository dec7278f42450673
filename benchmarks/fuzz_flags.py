"""Fuzz cases over the command-line flags of issue 14: the layout flags of explain, memory, export and plan, the run
flags of plan, goodput and allocate, and random valid specs (tiny models on small clusters with random valid
layouts), whose outputs must be finite and non-negative.
"""

from __future__ import annotations

import random

import fuzz_values as fv
from fuzz_files import Case

INT_VALUES = ("1", "2", "4", "8", "0", "-1", "-8", "9223372036854775808", "1" + "0" * 30, "1" + "0" * 400, "1.5",
              "abc", "", "inf", "nan", "1e400", "2e3", " 8", "0x10", "8 ")
"""A counting flag's values: small valid ones, zero, negative, int64 overflow, 10^30, not an integer."""

FLOAT_VALUES = ("1", "0.5", "90", "0", "-1", "inf", "-inf", "nan", "1e400", "1e308", "1e-300", "1e9", "abc", "",
                "1e30", "5e-324", "-0")
"""A real flag's values: ordinary, zero, negative, non-finite, overflowing on read, absurd, not a number."""

TOKEN_VALUES = ("15T", "1.5e13", "10T", "0", "-5T", "inf", "nan", "1e400", "1e30", "9223372036854775808", "10Q",
                "abc", "", "1e-3", "1T", "1e308")
"""Token / FLOP budgets (with suffixes)."""

RANGE_VALUES = ("1,2,4", "4..16", "1..9223372036854775808", "16..4", "0..0", "1,,2", "-2..2", "8..8",
                "1..1" + "0" * 30, "a..b", "..", "2,inf", "1..100000000")
"""A plan layout flag's list/range values."""

LAYOUT_INT_FLAGS = ("--tp", "--pp", "--dp", "--cp", "--ep", "--etp", "--vpp", "--mbs", "--zero",
                    "--offload-activations", "--gpus", "--gbs", "--seq-len")
ENUM_FLAGS = {"--recompute": ("none", "selective", "full", "bogus"),
              "--schedule": ("1f1b", "interleaved", "zb-h1", "zbv", "dualpipe", "bogus"),
              "--precision": ("bf16", "fp16", "fp8", "fp4", "fp64"),
              "--rank-order": ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "pp-dp"),
              "--routing": ("forced", "loss-free", "aux-loss", "none"),
              "--fp8-cache": ("linear-inputs", "fine-grained", "all")}
SWITCHES = ("--sp", "--no-sp", "--offload-optimizer", "--offload-params", "--cuda-graphs", "--tp-comm-overlap",
            "--ep-comm-overlap", "--recompute-norm", "--recompute-mlp", "--recompute-moe-act", "--recompute-mla-up",
            "--fp8-dispatch", "--bf16-moments", "--no-flash-attention")
MODELS = ("llama3-8b", "mixtral-8x7b", "deepseek-v3", "gpt3-175b")


def _flag_value(rng: random.Random, flag: str) -> str:
    return rng.choice(INT_VALUES) if flag in LAYOUT_INT_FLAGS else rng.choice(ENUM_FLAGS[flag])


def layout_case(rng: random.Random) -> Case:
    """explain / memory / export with a valid base layout and one to three flags set to random values."""
    command = rng.choice(("explain", "memory", "export"))
    argv: list[str] = [command, "-m", rng.choice(MODELS), "-c", rng.choice(("h100-sxm:64", "selene", "b200:16"))]
    if command == "export":
        argv += ["--format", rng.choice(("megatron", "torchtitan"))]
    elif rng.random() < 0.7:
        argv.append("--json")
    names: list[str] = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        flag = rng.choice((*LAYOUT_INT_FLAGS, *ENUM_FLAGS))
        argv += [flag, _flag_value(rng, flag)]
        names.append(flag.lstrip("-"))
    for _ in range(rng.choice((0, 0, 1, 2))):
        switch = rng.choice(SWITCHES)
        argv.append(switch)
        names.append(switch.lstrip("-").removeprefix("no-"))
    return Case("layout-flags", tuple(argv), " ".join(argv[5:]), tuple(names))


def plan_case(rng: random.Random) -> Case:
    """plan on a small job with run flags and layout ranges set to random values."""
    argv = ["plan", "-m", rng.choice(("llama3-8b", "mixtral-8x7b")), "-c", "h100-sxm:16", "--gpus", "16", "--top",
            "2", "--json"]
    flag = rng.choice(("--gpus", "--tokens", "--max-global-batch-tokens", "--gbs", "--seq-len", "--top",
                       "--max-memory-fraction", "--objective", "--tp", "--pp", "--mbs", "--ep", "--vpp", "--recompute",
                       "--sp", "--offload-activations"))
    if flag in ("--tokens", "--max-global-batch-tokens"):
        value = rng.choice(TOKEN_VALUES)
    elif flag == "--max-memory-fraction":
        value = rng.choice(FLOAT_VALUES)
    elif flag == "--objective":
        value = rng.choice(("throughput", "time", "cost", "energy", "effective-time", "speed"))
    elif flag in ("--tp", "--pp", "--mbs", "--ep", "--vpp", "--offload-activations"):
        value = rng.choice(RANGE_VALUES + INT_VALUES)
    elif flag == "--recompute":
        value = rng.choice(("none,selective,full", "full", "none,bogus", ""))
    elif flag == "--sp":
        value = rng.choice(("on", "off", "on|off", "maybe"))
    else:
        value = rng.choice(INT_VALUES)
    if flag == "--gpus" and value.isdigit() and 0 < int(value) <= 16:
        argv[argv.index("-c") + 1] = f"h100-sxm:{value}"
    argv += [flag, value]
    return Case("run-flags", tuple(argv), f"{flag} {value!r}", (flag.lstrip("-"),))


def goodput_case(rng: random.Random) -> Case:
    argv = ["goodput", "-m", "llama3-8b", "-c", rng.choice(("h100-sxm:64", "llama3-16k", "seed-500k")), "--gpus",
            "64", "--trials", "20", "--json"]
    flag = rng.choice(("--days", "--interval-min", "--trials", "--seed", "--step-s", "--gpus", "--mitigation"))
    if flag == "--mitigation":
        value = rng.choice(("predictive-migration", "subhealthy-eviction", "bogus", ""))
    elif flag in ("--trials", "--seed", "--gpus"):
        value = rng.choice(INT_VALUES)
    else:
        value = rng.choice(FLOAT_VALUES)
    argv += [flag, value]
    vanishing = flag in ("--days", "--interval-min", "--step-s") and value in VANISHING  # issue 28: accepted
    return Case("run-flags", tuple(argv), f"goodput {flag} {value!r}", (flag.lstrip("-").replace("-", "_"),
                                                                           flag.lstrip("-")), must_refuse=vanishing)


VANISHING = ("1e-300", "5e-324")
"""Flag values that read as finite numbers but are no measurement of anything (issue 28: silently accepted)."""


def allocate_case(rng: random.Random) -> Case:
    if rng.random() < 0.3:  # issue 28: --explain-3x on GPUs without an FP8 peak raised ValueError
        gpu = rng.choice(("a100-80gb", "h100-sxm", "b200"))
        argv = ("allocate", "-c", f"{gpu}:8", "--family", "dense", "--days", "1", "--top", "1", "--explain-3x",
                "--json")
        return Case("run-flags", argv, f"allocate --explain-3x on {gpu}", ("explain-3x",))
    argv = ["allocate", "-c", "h100-sxm:16", "--family", "dense", "--top", "1", "--json"]
    flag = rng.choice(("--days", "--flops", "--gpus", "--unique-tokens", "--seq-len", "--top", "--law"))
    if flag in ("--flops", "--unique-tokens"):
        value = rng.choice(TOKEN_VALUES)
    elif flag == "--days":
        value = rng.choice(FLOAT_VALUES)
    elif flag == "--law":
        value = rng.choice(("chinchilla", "besiroglu", "krajewski", "kaplan"))
    else:
        value = rng.choice(INT_VALUES)
    argv += [flag, value]
    return Case("run-flags", tuple(argv), f"allocate {flag} {value!r}", (flag.lstrip("-"),))


def run_flags_case(rng: random.Random) -> Case:
    roll = rng.random()
    if roll < 0.45:
        return plan_case(rng)
    if roll < 0.95:
        return goodput_case(rng)
    return allocate_case(rng)


def _tiny_model(rng: random.Random) -> dict[str, object]:
    heads = rng.choice((1, 2, 4, 8, 16))
    doc: dict[str, object] = {"name": "fuzz-valid", "layers": rng.choice((1, 2, 3, 4, 8, 24, 61)),
                              "hidden": heads * rng.choice((8, 64, 128)), "heads": heads,
                              "kv_heads": rng.choice([k for k in (1, 2, 4, 8, 16) if heads % k == 0]),
                              "ffn_hidden": rng.choice((16, 1000, 4096)), "vocab": rng.choice((2, 1000, 128256)),
                              "gated_mlp": rng.random() < 0.5, "tied_embeddings": rng.random() < 0.5}
    if rng.random() < 0.4:
        experts = rng.choice((2, 8, 64))
        doc.update(experts=experts, top_k=rng.choice([k for k in (1, 2, 8) if k <= experts]),
                   expert_ffn_hidden=rng.choice((16, 512)), shared_experts=rng.choice((0, 1)))
    return doc


def valid_case(rng: random.Random) -> Case:
    """A random valid tiny model on a small cluster with a random layout that divides the job: any exit 0 output
    must be finite and non-negative; an error must still be one line."""
    doc = _tiny_model(rng)
    gpus = rng.choice((8, 16, 64))  # GPU:COUNT takes whole 8-GPU nodes
    tp = rng.choice([t for t in (1, 2, 4, 8) if gpus % t == 0])
    pp = rng.choice([p for p in (1, 2) if (gpus // tp) % p == 0])
    command = rng.choice(("explain", "memory", "explain", "plan"))
    argv = [command, "-m", "{d}/model.yaml", "-c", f"{rng.choice(('h100-sxm', 'a100-80gb', 'b200', 'h200'))}:{gpus}",
            "--gpus", str(gpus), "--seq-len", rng.choice(("128", "2048", "4096", "32768")), "--json"]
    if command == "plan":
        argv += ["--top", "1", "--tokens", rng.choice(("1e9", "10T"))]
    else:
        argv += ["--tp", str(tp), "--pp", str(pp), "--mbs", rng.choice(("1", "2")),
                 "--recompute", rng.choice(("none", "selective", "full"))]
        if doc.get("experts"):
            argv += ["--ep", str(rng.choice([e for e in (1, 2) if (gpus // tp // pp) % e == 0]))]
    return Case("valid-spec", tuple(argv), f"{doc} {' '.join(argv[3:])}", ("model.yaml", *doc),
                (("model.yaml", fv.to_text(doc, False)),))
