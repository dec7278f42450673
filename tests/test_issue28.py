"""Issue 28's first-hour fixes, one test (or more) each: binary count suffixes and whole-node warnings, plan's
deadline, allocate's data cap and table, calibration devices in validate, both MFU conventions, HF model names and
folders, exit codes and divisibility messages, the API's argument checks."""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import llmscale
from llmscale.cli.main import main
from llmscale.errors import LlmscaleError
from llmscale.io.catalog import load_model
from llmscale.scaling.laws import ModelScale, ScalingLaw, predict_loss, training_flops
from llmscale.specs.model import ModelSpec
from llmscale.units import parse_count


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def warnings_of(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning: ")]


def test_gpu_counts_take_binary_suffixes(capsys: pytest.CaptureFixture[str]) -> None:
    # IEC 80000-13: Ki = 1024, so 16Ki = 16,384 (the size of Llama 3's cluster), while K stays 1,000.
    assert parse_count("16Ki") == 16_384 and parse_count("16ki") == 16_384 and parse_count("2Mi") == 2**21
    assert parse_count("16K") == 16_000
    code, out, err = run(capsys, "memory", "--model", "llama3-8b", "--cluster", "llama3-16k", "--tp", "8",
                         "--gpus", "16Ki", "--json")
    assert code == 0, err
    assert '"num_gpus": 16384' in out
    assert warnings_of(err) == []


def test_a_decimal_suffix_on_gpus_says_what_it_counts(capsys: pytest.CaptureFixture[str]) -> None:
    # 16K is 16,000 GPUs: on Llama-3-405B that plans pp125 (16,000 = 2^7·125); the user is told the binary reading.
    code, _, err = run(capsys, "memory", "--model", "llama3-8b", "--cluster", "llama3-16k", "--tp", "8",
                       "--gpus", "16K", "--gbs", "2K", "--json")
    assert code == 0, err
    lines = warnings_of(err)
    assert len(lines) == 1 and "16,000" in lines[0] and "16Ki" in lines[0] and "16,384" in lines[0], err
    code, _, err = run(capsys, "memory", "--model", "llama3-8b", "--cluster", "llama3-16k", "--tp", "8",
                       "--gpus", "1K", "--gbs", "1000", "--json")
    assert code == 0 and len(warnings_of(err)) == 1  # 1K = 1,000, 1Ki = 1,024: they differ
    code, _, err = run(capsys, "memory", "--model", "llama3-8b", "--cluster", "llama3-16k", "--tp", "8",
                       "--gpus", "1024", "--json")
    assert code == 0 and warnings_of(err) == []


def test_a_count_that_is_not_whole_nodes_warns_with_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    # 12 GPUs on 8-GPU nodes: 1.5 nodes; the whole-node counts either side are 8 and 16.
    code, _, err = run(capsys, "memory", "--model", "llama3-8b", "--cluster", "llama3-16k", "--tp", "4",
                       "--gpus", "12", "--gbs", "12", "--json")
    assert code == 0, err
    lines = warnings_of(err)
    assert len(lines) == 1 and "12" in lines[0] and "8 or 16" in lines[0] and "8-GPU nodes" in lines[0], err


def _plan_json(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    code, out, err = run(capsys, "plan", "--model", "llama3-8b", "--cluster", "h100-sxm:1024", "--tokens", "1T",
                         *flags, "--json")
    assert code == 0, err
    return dict(json.loads(out))


def test_plan_deadline_takes_the_cheapest_job_that_finishes_in_time(capsys: pytest.CaptureFixture[str]) -> None:
    # Every job size's best layout is in the document: the chosen one must finish by the deadline (failures
    # included) and no other size that finishes by then may use fewer GPU-hours (effective days × GPUs).
    document = _plan_json(capsys, "--deadline", "5")
    jobs, sizes = document["jobs"], [s for s in document["job_sizes"] if s["best"]]
    assert jobs["deadline_days"] == 5 and jobs["meets_deadline"] is True
    chosen = next(s["best"] for s in sizes if s["num_gpus"] == jobs["gpus_per_job"])
    assert chosen["effective_days"] <= 5
    in_time = [s for s in sizes if s["best"]["effective_days"] <= 5]
    assert len(in_time) >= 2  # a real choice: more than one size finishes in time
    assert all(chosen["effective_days"] * jobs["gpus_per_job"] <= s["best"]["effective_days"] * s["num_gpus"]
               for s in in_time)
    # The default rule (throughput) takes the largest efficient job here, not the cheapest one in time.
    assert _plan_json(capsys)["jobs"]["gpus_per_job"] != jobs["gpus_per_job"]
    assert jobs["gpu_hours"] == pytest.approx(chosen["days"] * 24 * jobs["gpus_per_job"])


def test_plan_deadline_missed_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", "--model", "llama3-8b", "--cluster", "h100-sxm:1024", "--tokens", "1T",
                         "--deadline", "0.5")
    assert code == 0, err
    text = " ".join(out.split())  # the console may wrap the line
    recommendation = text[text.index("recommendation:"):]
    assert recommendation.startswith("recommendation: one job of 1,024 GPUs") and "GPU-hours" in recommendation
    assert "misses the deadline" in out
    document = _plan_json(capsys, "--deadline", "0.5")
    assert document["jobs"]["meets_deadline"] is False and document["jobs"]["gpus_per_job"] == 1024


def test_allocate_law_optimum_is_never_worse_than_its_recommendation(capsys: pytest.CaptureFixture[str]) -> None:
    # Chinchilla's Approach-1 frontier (≈ 20 tokens per parameter) is not the minimum of its Eq. 2 loss: on 1,024
    # H100 for 90 days the "law optimum" line used to print a higher loss than the recommended model's. The line
    # now gives the least loss of the recommendation's shape at its compute, counted as the candidates are.
    code, out, err = run(capsys, "allocate", "--cluster", "h100-sxm:1024", "--family", "dense", "--law",
                         "chinchilla", "--days", "90")
    assert code == 0, err
    text = " ".join(out.split())
    recommended = float(re.search(r"recommendation: .*? predicted loss (\d\.\d+)", text).group(1))  # type: ignore[union-attr]
    optimum = float(re.search(r"law optimum .*? loss (\d\.\d+)", text).group(1))  # type: ignore[union-attr]
    assert optimum <= recommended


@pytest.mark.parametrize("name", ["llama3-8b", "llama3-405b", "deepseek-v3", "seed-10t-moe"])
@pytest.mark.parametrize("law", [ScalingLaw.CHINCHILLA, ScalingLaw.BESIROGLU, ScalingLaw.KRAJEWSKI])
@pytest.mark.parametrize("unique", [None, 1e12])
def test_shape_optimum_is_the_least_loss_at_its_compute(name: str, law: ScalingLaw, unique: float | None) -> None:
    from llmscale.scaling.optimum import shape_optimum

    scale = ModelScale.of(load_model(name))
    if scale.is_moe and law is not ScalingLaw.KRAJEWSKI:
        return  # the dense laws have no MoE term
    for tokens in (1e11, 1e13):
        compute = training_flops(law, scale, tokens)
        best = shape_optimum(law, scale, compute, unique)
        assert best.compute_flops == compute
        assert best.loss <= predict_loss(law, scale, tokens, unique) + 1e-12  # the model itself is one member
        assert training_flops(law, ModelScale(int(best.params), int(best.active_params), 0, scale.granularity,
                                              scale.expansion, scale.is_moe), best.tokens) == pytest.approx(compute)


def test_allocate_caps_unique_data_by_default_and_scores_repeats(capsys: pytest.CaptureFixture[str]) -> None:
    # 90 days on 1,024 H100: the 8B candidate trains ~80T tokens, more than the 30.4T unique tokens of
    # RedPajama-Data-v2 (togethercomputer/RedPajama-Data README: 30.4T deduplicated), the default cap. Its loss is
    # then the data-constrained one (Muennighoff et al. 2023), above what unique data would give.
    code, out, err = run(capsys, "allocate", "--cluster", "h100-sxm:1024", "--family", "dense", "--law",
                         "chinchilla", "--days", "90", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["unique_tokens"] == 30.4e12 and "RedPajama" in document["unique_tokens_source"]
    repeated = 0
    for entry in document["candidates"]:
        # Chinchilla counts every parameter (embeddings included), so the entry's own counts are the law's N.
        scale = ModelScale(entry["total_params"], entry["active_params"], 0, 1, 1.0, False)
        assert entry["epochs"] == pytest.approx(entry["tokens"] / 30.4e12)
        assert entry["loss"] == pytest.approx(predict_loss(ScalingLaw.CHINCHILLA, scale, entry["tokens"], 30.4e12))
        if entry["epochs"] > 1:
            repeated += 1
            assert entry["loss"] > predict_loss(ScalingLaw.CHINCHILLA, scale, entry["tokens"])  # small below 4 epochs
    assert repeated >= 1
    code, out, err = run(capsys, "allocate", "--cluster", "h100-sxm:1024", "--family", "dense", "--law",
                         "chinchilla", "--days", "90", "--max-tokens", "1e16", "--json")
    assert code == 0 and json.loads(out)["unique_tokens"] == 1e16 and json.loads(out)["unique_tokens_source"] == "given"


def test_allocate_table_never_cuts_cells_when_narrow(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # At 80 columns the candidate table used to print "…" in place of most cells: it now splits into several
    # tables, each with the rank and model, and every number is printed whole.
    from llmscale.report import tables

    monkeypatch.setattr(tables.console, "_width", 80)
    code, out, err = run(capsys, "allocate", "--cluster", "h100-sxm:1024", "--family", "dense", "--days", "30")
    assert code == 0, err
    tables_text = out.split("candidates, best predicted loss first")[1].split("recommendation")[0]
    assert "…" not in tables_text
    assert all(len(line) <= 80 for line in tables_text.splitlines())
    assert "continued" in out and "dense-L64" in out and "loss" in out and "GWh" in out


def test_piped_output_takes_columns_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmscale.report import tables

    monkeypatch.setenv("COLUMNS", "233")
    monkeypatch.setattr(tables.sys.stdout, "isatty", lambda: False)
    assert tables._width() == 233
    monkeypatch.setenv("COLUMNS", "junk")
    assert tables._width() == 150


def test_validate_refuses_a_cpu_profile_like_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A CPU's GEMM peak applied to A100/H100 rows set every prediction ~100 % low, with exit 0; plan and explain
    # refuse such a profile, and validate now does too (the same --force-calibration way out).
    from llmscale.specs.calibration import DeviceInfo
    from tests.test_measure import profile, write_profile

    rows = yaml.safe_load((Path(llmscale.__file__).parent / "data" / "published_runs.yaml").read_text())[:2]
    runs = tmp_path / "runs.yaml"
    runs.write_text(yaml.safe_dump(rows))
    cpu = tmp_path / "cpu.yaml"
    write_profile(profile(device=DeviceInfo(kind="cpu", name="test cpu", ranks=2)), cpu)
    code, _, err = run(capsys, "validate", "--runs", str(runs), "--calibration", str(cpu))
    assert code == 2 and err.startswith("error: ") and "cpu" in err and "--force-calibration" in err, err
    assert len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "validate", "--runs", str(runs), "--calibration", str(cpu), "--force-calibration")
    assert code == 0, err
    with pytest.raises(LlmscaleError, match="--force-calibration"):
        llmscale.validate(runs, calibration=cpu)


LLAMA70_128K = ["--model", "llama3-70b", "--cluster", "llama3-16k", "--gpus", "1024", "--tp", "8", "--cp", "16",
                "--pp", "1", "--seq-len", "131072", "--gbs", "128"]


def test_mfu_at_long_context_is_also_given_with_causal_halving(capsys: pytest.CaptureFixture[str]) -> None:
    # PaLM counts 6N + 12·L·s·q per token (Chowdhery et al. 2022 App. B); Megatron-Bridge halves the attention
    # core for the causal mask (flop_utils.py transformer_flops; validation.conventions). Llama 3 70B (L 80,
    # q = 64 heads × 128 = 8192, N ≈ 70.6B): at s = 128K the halved count is (6N + 6·L·s·q) / (6N + 12·L·s·q)
    # ≈ 0.646 of the full one.
    code, out, err = run(capsys, "explain", *LLAMA70_128K, "--json")
    assert code == 0, err
    document = json.loads(out)
    n, layers, q, s = 70.6e9, 80, 8192, 131072
    expected = (6 * n + 6 * layers * s * q) / (6 * n + 12 * layers * s * q)
    conventions = document["mfu_conventions"]
    assert conventions["causal_attention_mfu"] / document["mfu"] == pytest.approx(expected, rel=0.01)
    assert conventions["bf16_peak_mfu"] is None and "no causal halving" in conventions["headline"]
    code, out, err = run(capsys, "explain", *LLAMA70_128K)
    text = " ".join(out.split())
    assert "(PaLM, no causal halving)" in text and "MEG2025 / Megatron-Bridge" in text
    assert f"{conventions['causal_attention_mfu']:.1%}" in text
    assert f"MFU {document['mfu']:.1%} ·" in text  # the headline itself does not move


def test_mfu_of_a_short_bf16_run_prints_one_convention(capsys: pytest.CaptureFixture[str]) -> None:
    # At 4K tokens the halving moves Llama 3 70B's MFU by ~1 point (< 2): no extra line.
    code, out, err = run(capsys, "explain", "--model", "llama3-70b", "--cluster", "llama3-16k", "--gpus", "64",
                         "--tp", "8", "--pp", "2", "--gbs", "64")
    assert code == 0, err
    assert "causal half" not in out and "BF16 peak" not in out


def test_fp8_mfu_is_also_given_against_the_bf16_peak(capsys: pytest.CaptureFixture[str]) -> None:
    # H100 SXM dense peaks: 989 TFLOP/s BF16, 1,979 FP8 (catalog/gpus.yaml, NVIDIA H100 datasheet): the same FLOPs
    # over the BF16 peak are 1979/989 ≈ 2.0× the headline.
    flags = ["--model", "llama3-70b", "--cluster", "llama3-16k", "--gpus", "64", "--tp", "8", "--pp", "2", "--gbs",
             "64", "--precision", "fp8"]
    code, out, err = run(capsys, "explain", *flags, "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["mfu_conventions"]["bf16_peak_mfu"] == pytest.approx(document["mfu"] * 1979 / 989, rel=1e-3)
    code, out, err = run(capsys, "explain", *flags)
    assert "against the FP8 dense peak" in " ".join(out.split()) and "against the BF16 peak" in out


HF_LLAMA = Path(__file__).parent / "fixtures" / "hf" / "Llama-3.1-8B" / "config.json"


def _show_name(capsys: pytest.CaptureFixture[str], ref: Path) -> tuple[str, str]:
    code, out, err = run(capsys, "show", "model", str(ref), "--json")
    assert code == 0, err
    document = json.loads(out)
    return document["spec"]["name"], document["input_sha256"]


def test_hf_config_is_not_named_after_an_arbitrary_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A config.json saved in cfg/ used to be model "cfg", a name that reached exported file names.
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "config.json").write_text(HF_LLAMA.read_text())
    name, digest = _show_name(capsys, folder / "config.json")
    assert name == "llama-32L-4096h"  # model_type, layers, hidden of Llama 3.1 8B's config
    assert _show_name(capsys, folder) == (name, digest)  # the folder stands for its config.json
    code, out, err = run(capsys, "export", "--format", "torchtitan", "--model", str(folder), "--cluster",
                         "h100-sxm:8", "--tp", "8")
    assert code == 0, err
    assert "cfg" not in out.replace(str(folder), "")
    # A clone of the repository keeps its folder's name (it names the family: llama).
    assert _show_name(capsys, HF_LLAMA)[0] == "Llama-3.1-8B"


def test_hf_snapshot_folder_is_read_and_named_after_its_repository(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # The Hugging Face cache layout: models--{org}--{name}/snapshots/{revision}/config.json.
    snapshot = tmp_path / "models--meta-llama--Llama-3.1-8B" / "snapshots" / "0e9e39f"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(HF_LLAMA.read_text())
    assert _show_name(capsys, snapshot)[0] == "Llama-3.1-8B"
    code, out, err = run(capsys, "hash", str(snapshot))
    assert code == 0 and out.split()[1] == str(snapshot), err
    named = json.loads(HF_LLAMA.read_text()) | {"_name_or_path": "org/My-Llama"}
    (tmp_path / "named.json").write_text(json.dumps(named))
    assert _show_name(capsys, tmp_path / "named.json")[0] == "My-Llama"
    code, _, err = run(capsys, "show", "model", str(tmp_path))
    assert code == 2 and "without config.json" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("flags", "needles"), [
    # 16,384 GPUs / 3 is not whole: tp·cp·pp must divide the GPUs so that dp is a whole number.
    (["--tp", "3"], ["tp × cp × pp = 3", "does not divide the job's 16,384 GPUs", "5,461.33", "1, 2, 4, 8"]),
    # dp 2,048 leaves 4 sequences per rank of the 8,192-sequence batch; mbs 3 does not divide 4.
    (["--tp", "8", "--mbs", "3"], ["mbs (3) does not divide the 4 sequences per data-parallel rank", "1, 2, 4"]),
    # Llama 3 70B has 64 heads and 8 KV heads: tp 16 splits the KV heads unevenly.
    (["--tp", "16"], ["heads (64) and kv_heads (8)", "tp values that divide both: 1, 2, 4, 8"]),
    # 2 × cp = 6 does not divide 4,096 tokens (load-balanced context parallelism splits the sequence in 2·cp chunks).
    (["--tp", "8", "--cp", "3", "--gpus", "24", "--gbs", "8"], ["2 × cp = 6 does not divide seq_len (4096", "682.67"]),
])
def test_divisibility_errors_say_what_does_not_divide(capsys: pytest.CaptureFixture[str], flags: list[str],
                                                      needles: list[str]) -> None:
    code, _, err = run(capsys, "memory", "--model", "llama3-70b", "--cluster", "llama3-16k", *flags)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


def test_memory_of_a_layout_that_does_not_fit_exits_3_like_explain(capsys: pytest.CaptureFixture[str]) -> None:
    # GPT-3 175B with no model parallelism holds ~3 TB of training state per GPU: it cannot fit in 80 GiB.
    args = ["memory", "--model", "gpt3-175b", "--cluster", "selene", "--gpus", "512", "--gbs", "1536"]
    code, out, _ = run(capsys, *args)
    assert code == 3 and "OUT OF MEMORY" in out
    code, out, _ = run(capsys, *args, "--json")
    assert code == 3 and json.loads(out)["fits"] is False
    code, out, _ = run(capsys, "memory", "--model", "gpt3-175b", "--cluster", "selene", "--tp", "8", "--pp", "8",
                       "--dp", "24", "--gbs", "1536")
    assert code == 0 and "FITS" in out


@pytest.mark.parametrize("command", ["plan", "memory", "explain", "export", "allocate", "goodput"])
def test_help_keeps_every_flag_name_whole_at_80_columns(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    # At 80 columns rich shrank every column of typer's option table: `--max-memory-fra…`.
    import typer.main

    monkeypatch.setattr("typer.rich_utils.MAX_WIDTH", 80)  # typer's help console width (not COLUMNS: the report
    # console reads COLUMNS once, when first imported, and would keep 80 for the rest of the worker's tests)
    code, out, err = run(capsys, command, "--help")
    assert code == 0, err
    assert "…" not in out
    click_command = typer.main.get_command(main_app()).commands[command]  # type: ignore[attr-defined]
    names = {name for param in click_command.params for name in (*param.opts, *param.secondary_opts)}
    words = set(out.replace("│", " ").replace(",", " ").split())
    assert all(name in words for name in names if name.startswith("--")), sorted(n for n in names if n not in words)


def test_the_help_patch_is_installed_where_help_can_print(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # cli/help_width installs typer's table patch only for a command line that can print help: no command, a group's
    # name alone, or a help flag anywhere (importing typer.rich_utils costs every other command ~40 ms of start-up)
    from llmscale.cli.help_width import prints_help

    groups = {"bench"}
    assert prints_help((), groups) and prints_help(("bench",), groups)
    assert prints_help(("bench", "collectives", "--help"), groups) and prints_help(("plan", "--help"), groups)
    assert not prints_help(("plan",), groups) and not prints_help(("bench", "gemm", "--device", "cpu"), groups)
    # under a group: `bench collectives --help` cut an option name at 80 columns without the patch
    monkeypatch.setattr("typer.rich_utils.MAX_WIDTH", 80)
    code, out, _ = run(capsys, "bench", "collectives", "--help")
    assert code == 0 and "Usage: " in out and "…" not in out, out


def main_app() -> Any:
    from llmscale.cli.main import app

    return app


def test_dir_of_the_package_lists_the_api() -> None:
    # The API functions are imported lazily (module __getattr__); dir() used to list none of them.
    names = dir(llmscale)
    for name in ("plan", "explain", "memory", "export", "goodput", "allocate", "validate", "__version__"):
        assert name in names


def test_chart_x_labels_never_overlap() -> None:
    # The goodput-vs-job-size axis of seed-500k: powers of two from 1,024 to 262,144 GPUs and 500,000, log-spaced
    # over ~560 px; "16.4K32.8K65.5K131.1K262.1K500K" ran together.
    from llmscale.report.png import TICK_GAP, apart, text_width
    from llmscale.units import si_count

    sizes = [2.0**k for k in range(10, 19)] + [500_000.0]
    lo, hi, width = np.log10(sizes[0]), np.log10(sizes[-1]), 560
    ticks = [(float((np.log10(g) - lo) / (hi - lo) * width), si_count(g)) for g in sizes]
    kept = apart(ticks)
    assert kept[-1] == ticks[-1] and kept[0] == ticks[0]  # the axis' ends are labelled
    for (x0, a), (x1, b) in itertools.pairwise(kept):
        assert x0 + text_width(a) / 2 + TICK_GAP <= x1 - text_width(b) / 2
    assert len(kept) >= 4


def test_three_x_on_a_gpu_without_fp8_has_no_fp8_lever() -> None:
    # allocate --explain-3x on A100s raised ValueError (specs/cluster.py peak_flops_per_s: no fp8 peak): the A100
    # has no FP8 tensor cores, so the FP8 lever is 1× and says why.
    from llmscale.io.catalog import load_cluster, load_constants
    from llmscale.scaling.multiplier import decompose

    d = decompose(load_model("llama3-8b"), load_cluster("a100-80gb:64"), 1e12, load_constants())
    assert d is not None
    fp8 = next(f for f in d.factors if f.name == "FP8")
    assert fp8.gain == 1.0 and "no FP8 tensor cores" in fp8.planned_means
    assert d.product == pytest.approx(math.prod(f.gain for f in d.factors))


def test_a_yaml_alias_bomb_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Nine anchors of nine aliases each: 9⁹ ≈ 3.9·10⁸ values once expanded; `show model` walked them for > 20 s.
    lines = ["a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join([*lines, "name: bomb"]) + "\n")
    code, _, err = run(capsys, "show", "model", str(bomb))
    assert code == 2 and "alias" in err and str(bomb) in err and len(err.strip().splitlines()) == 1
    # A few aliases are fine YAML: the document is read (and then refused by the model spec for its own reasons).
    few = tmp_path / "few.yaml"
    few.write_text("a: &a [1, 2]\nb: *a\n")
    code, _, err = run(capsys, "show", "model", str(few))
    assert code == 2 and "alias bomb" not in err and "unknown key" in err


def test_a_vanishing_efficiency_in_a_cluster_file_is_refused(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # gemm_bf16 = 1e-300 was accepted (the field is only > 0) and planned a step of ~10³⁰⁰ s.
    from llmscale.io.catalog import load_cluster

    doc = load_cluster("h100-sxm:64").model_dump(mode="json")
    doc["gpu"]["efficiency"]["gemm_bf16"] = 1e-300
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = run(capsys, "explain", "-m", "llama3-8b", "-c", str(path), "--tp", "8", "--json")
    assert code == 2 and "gemm_bf16" in err and "1e-300" in err, err
    doc["gpu"]["efficiency"]["gemm_bf16"] = 0.7  # a real fraction is read as before
    path.write_text(yaml.safe_dump(doc))
    assert run(capsys, "explain", "-m", "llama3-8b", "-c", str(path), "--tp", "8", "--json")[0] == 0


def test_a_resealed_profile_with_a_vanishing_constant_is_refused(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # A profile's constant override of 1e-300, sealed again, passed the seal and the field's "> 0".
    from llmscale.specs.calibration import CalibrationProfile
    from tests.test_measure import profile

    body = profile().model_dump(mode="json") | {"constants": {"comm": {"network": 1e-300}}, "sha256": None}
    sealed = body | {"sha256": CalibrationProfile.model_validate(body).body_sha256()}
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump(sealed))
    code, _, err = run(capsys, "explain", "-m", "llama3-8b", "-c", "h100-sxm:64", "--tp", "8",
                       "--calibration", str(path), "--json")
    assert code == 2 and "network" in err and "1e-300" in err, err


@pytest.mark.parametrize(("flag", "value"), [("--days", "1e-300"), ("--interval-min", "1e-300"),
                                             ("--step-s", "1e-300")])
def test_goodput_refuses_vanishing_flag_values(capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    # A 1e-300-day run, checkpoint interval or step was evaluated as given, exit 0.
    code, _, err = run(capsys, "goodput", "-c", "h100-sxm:64", "--trials", "5", flag, value)
    named = flag in err or flag.lstrip("-").replace("-", "_") in err  # the flag, or its field's name
    assert code == 2 and named and "1e-300" in err, err


def test_a_json_nan_literal_is_reported_with_its_key_line_and_column(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # Python's json reads NaN/Infinity through parse_constant, which gives no position: the error named neither.
    doc = json.loads(HF_LLAMA.read_text())
    text = json.dumps(doc, indent=1).replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": NaN')
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "NaN" in row)
    path = tmp_path / "config.json"
    path.write_text(text)
    code, _, err = run(capsys, "show", "model", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "NaN" in err and "'rms_norm_eps'" in err and f"line {line} column" in err, err


def test_profile_skips_a_step_record_nested_too_deep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A line nested 100,000 deep made json.loads raise RecursionError out of runtime/files.py read_lines; it is now
    # one more unparseable line, skipped and counted like any other.
    from llmscale.monitor.predict import Prediction
    from llmscale.monitor.rundir import read_run
    from tests.monitor_fixture import SHA, make_run

    run_dir = make_run(tmp_path / "run", steps=3)
    with open(run_dir / "steps" / "rank0.jsonl", "a") as handle:
        handle.write('{"step": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    assert read_run(run_dir).skipped_lines == 1
    parts = {"data": 0.0, "compute": 0.2, "comm": 0.0, "checkpoint": 0.0, "idle": 0.0}
    (run_dir / "prediction.json").write_text(json.dumps(Prediction(SHA, 2, parts, 1e10, 1e6, {}).as_dict()))
    code, out, err = run(capsys, "profile", str(run_dir), "--json")
    assert code == 0, err
    assert [s["step"] for s in json.loads(out)["steps"]] == [0, 1, 2]


@pytest.mark.parametrize("value", ["''", "1.5", "True"])
def test_read_torchtitan_refuses_a_degree_that_is_not_a_whole_number(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     value: str) -> None:
    # tensor_parallel_degree = '' raised ValueError (int('')) in io/torchtitan_recipe.py; 1.5 was read as 1.
    code, recipe, err = run(capsys, "export", "--format", "torchtitan", "-m", "llama3-8b", "-c", "h100-sxm:64",
                            "--tp", "8")
    assert code == 0 and "tensor_parallel_degree=8," in recipe, err
    path = tmp_path / "recipe.py"
    path.write_text(recipe.replace("tensor_parallel_degree=8,", f"tensor_parallel_degree={value},"))
    code, _, err = run(capsys, "read-torchtitan", str(path))
    assert code == 2 and "tensor_parallel_degree" in err and "whole number" in err, err


@pytest.mark.parametrize(("function", "arguments", "name"), [
    # An int read as a file descriptor: open(5) waited on descriptor 5 for > 60 s.
    ("export", {"model": "llama3-8b", "cluster": "h100-sxm:8", "from_plan": 5}, "from_plan"),
    ("validate", {"runs": 5}, "runs"),  # TypeError from pathlib
    ("memory", {"model": "llama3-8b", "cluster": "h100-sxm:8", "layout": (("tp", 8),)}, "layout"),  # AttributeError
    ("goodput", {"cluster": "h100-sxm:8", "intervals_min": 5, "trials": 5}, "intervals_min"),  # not a list
    ("explain", {"model": 5}, "model"),
    ("explain", {"model": "llama3-8b", "cluster": "h100-sxm:8", "train": [1]}, "train"),
    ("plan", {"model": "llama3-8b", "cluster": "h100-sxm:8", "rules": [("tp", 8)]}, "rules"),
    ("allocate", {"cluster": 3}, "cluster"),
    ("allocate", {"cluster": "h100-sxm:8", "models": 5}, "models"),
    ("goodput", {"cluster": "h100-sxm:8", "hot_spares": "no"}, "hot_spares"),
])
def test_the_api_checks_its_arguments_at_the_door(function: str, arguments: dict[str, Any], name: str) -> None:
    import signal

    previous = signal.signal(signal.SIGALRM, lambda *_: pytest.fail(f"{function}({arguments}) hangs"))
    signal.alarm(20)
    try:
        with pytest.raises(LlmscaleError) as info:
            getattr(llmscale, function)(**arguments)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert str(info.value).startswith(f"{name} = ")


def test_goodput_takes_none_for_no_extra_intervals() -> None:
    # intervals_min=None raised TypeError ('NoneType' object is not iterable); None means none, as () does.
    assert llmscale.goodput("h100-sxm:8", intervals_min=None, trials=5).to_dict() == \
        llmscale.goodput("h100-sxm:8", intervals_min=(), trials=5).to_dict()


def test_profile_skips_a_step_record_of_the_wrong_types(tmp_path: Path) -> None:
    # Found by the run-dir fuzz surface: phases_s = '' parsed as JSON and reached profile, AttributeError.
    from llmscale.monitor.profile import profile
    from llmscale.monitor.rundir import read_run
    from tests.monitor_fixture import make_run

    run_dir = make_run(tmp_path / "run", steps=3)
    bad = {"step": 3, "rank": 0, "attempt": 1, "host": "h", "time_unix": 1e9, "step_s": 0.1, "phases_s": "",
           "loss": 3.0, "tokens": 512}
    with open(run_dir / "steps" / "rank0.jsonl", "a") as handle:
        handle.write(json.dumps(bad) + "\n" + json.dumps(bad | {"phases_s": {"compute": "x"}}) + "\n")
    snap = read_run(run_dir)
    assert snap.skipped_lines == 2
    assert [s.step for s in profile(snap, None).steps] == [0, 1, 2]


def test_the_probe_twin_runs_at_its_measured_kernel_rates() -> None:
    # The probe's kernel rates are measured in the run, on its own shapes, at the clocks the host runs the steps at;
    # the catalog's sustained_compute_fraction (0.763: a GPU under hours of load against short benchmarks) made the
    # twin's compute 1/0.763 = +31 % slow (issue 28: step +16.9 … +25 %, compute +30 % on a quiet 2-core host).
    from llmscale.io.catalog import load_constants
    from llmscale.measure.probe_predict import ProbeSetup, _single_tier_cluster, predict
    from llmscale.specs.cluster import EfficiencySpec, GPUSpec

    efficiency = EfficiencySpec(gemm_bf16=0.9, gemm_fp8=1.0, gemm_fp4=1.0, gemm_wave_overhead_us=0.0, attention=0.4,
                                attention_half_seq=0.0, attention_backward=0.4, attention_backward_half_seq=0.0,
                                hbm=0.3)
    gpu = GPUSpec(name="cpu-host", peak_bf16_tflops=0.03, memory_gib=8.0, memory_bandwidth_gb_per_s=10.0,
                  efficiency=efficiency, source="test")
    cluster = _single_tier_cluster(gpu, 2, 1e9, 1e-3)
    model = ModelSpec(name="probe", layers=4, hidden=256, ffn_hidden=1024, heads=4, vocab=1000)
    setup = ProbeSetup(model, nproc=2, ep=1, seq_len=256, mbs=4, micro_batches=1)
    catalog = load_constants()
    assert catalog.step.sustained_compute_fraction < 1  # the fitted GPU term the twin must not apply
    split, matched = predict(setup, cluster, catalog)
    at_one, _ = predict(setup, cluster, catalog.with_overrides({"step": {"sustained_compute_fraction": 1.0}}))
    assert split.detail["forward_s"] == pytest.approx(at_one.detail["forward_s"])
    assert split.compute_s == pytest.approx(at_one.compute_s)
    assert matched["sustained_compute_fraction_left_out"] == catalog.step.sustained_compute_fraction


def test_profile_refuses_an_edited_prediction_and_skips_absurd_phases(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # Found by the run-dir fuzz surface: a prediction.json phase of -8 s printed a predicted step of -7.9 s, and a
    # step record's phase of 1e308 s summed to inf in the text output.
    from tests.monitor_fixture import make_run, write_step

    run_dir = make_run(tmp_path / "run", steps=3)
    parts = {"data": 0.0, "compute": 0.1, "comm": 0.02, "checkpoint": -8.0, "idle": 0.0}
    document = {"format": 1, "config_sha256": "ab" * 32, "world_size": 2, "phases_s": parts, "step_s": -7.88,
                "peak_flops_per_s_per_rank": 1e10, "model_flops_per_token": 1e6, "detail": {}}
    (run_dir / "prediction.json").write_text(json.dumps(document))
    code, _, err = run(capsys, "profile", str(run_dir), "--json")
    assert code == 2 and "phases_s.checkpoint" in err and "prediction.json" in err, err
    (run_dir / "prediction.json").write_text(json.dumps(document | {"phases_s": 1e-300}))  # not a mapping
    code, _, err = run(capsys, "profile", str(run_dir), "--json")
    assert code == 2 and "not a prediction llmscale wrote" in err, err
    (run_dir / "prediction.json").unlink()
    write_step(run_dir, 3, 0, data=1e308)
    code, out, err = run(capsys, "profile", str(run_dir), "--no-predict")
    assert code == 0 and "inf" not in out, err


def test_a_step_record_with_a_number_too_large_for_a_float_is_skipped() -> None:
    # The long fuzz run (benchmarks/fuzz_issue28_long.md): a time_unix of 10^134 raised OverflowError in profile.
    from llmscale.monitor.rundir import well_formed
    from llmscale.runtime.files import StepRecord

    good = StepRecord(step=1, rank=0, attempt=1, host="h", time_unix=1e9, step_s=0.1, phases_s={"compute": 0.1},
                      loss=3.0, tokens=512)
    assert well_formed(good)
    for field in ("time_unix", "loss"):
        huge = StepRecord(**{**good.__dict__, field: 10**400})
        assert not well_formed(huge), field


def test_a_batch_rounding_beyond_any_batch_is_refused() -> None:
    # The same run: a re-sealed profile's batch_rounding_sequences of 10^30 overflowed a C long in plan.
    from pydantic import ValidationError

    from llmscale.io.catalog import load_constants

    search = load_constants().search.model_dump()
    with pytest.raises(ValidationError, match="batch_rounding_sequences"):
        type(load_constants().search).model_validate({**search, "batch_rounding_sequences": 10**30})


def test_goodput_names_its_mitigations_argument() -> None:
    import llmscale
    from llmscale.errors import SpecError

    with pytest.raises(SpecError, match=r"^mitigations = 'bogus'"):
        llmscale.goodput(mitigations=["bogus"])


def test_the_second_long_fuzz_runs_findings_are_one_line_each(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # benchmarks/fuzz_issue28_long.md, 2026-12-06 second run (seed 20261206): four tracebacks, one per input here.
    from pydantic import ValidationError

    from llmscale.io.catalog import load_constants
    from llmscale.monitor.predict import Prediction

    # a plan whose layout.recompute is an integer: ValueError in io.releases._moot_dropped under the default release
    plan = {"model": "llama3-8b", "cluster": "h100-sxm:64", "framework": {"release": "megatron-bridge@26.08"},
            "top": [{"num_gpus": 64, "layout": {"tp": 8, "pp": 1, "dp": 8, "cp": 1, "ep": 1, "etp": 8, "vpp": 1,
                                                "mbs": 1, "zero": 1, "recompute": 2**63}}]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    code, _, err = run(capsys, "export", "--format", "megatron", "--from-plan", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "recompute" in err, err
    # a re-sealed calibration's memory.zero3_prefetch_layers of 10^118: OverflowError in the memory model
    memory = load_constants().memory.model_dump()
    with pytest.raises(ValidationError, match="zero3_prefetch_layers"):
        type(load_constants().memory).model_validate({**memory, "zero3_prefetch_layers": 10**118})
    # an HF Llama config whose vocab_size is the string '1e3': ValueError in io.hfconfig._family
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                                  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                                  "vocab_size": "1e3"}), encoding="utf-8")
    code, _, err = run(capsys, "hash", str(config))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "vocab" in err, err
    # a prediction.json whose model_flops_per_token is 10^400: OverflowError in monitor.predict
    document = {"config_sha256": "ab", "world_size": 2, "phases_s": {"compute": 0.1},
                "peak_flops_per_s_per_rank": 1e10, "model_flops_per_token": 10**400}
    with pytest.raises(ValueError, match=r"^model_flops_per_token = an integer of about 10\^400"):
        Prediction.from_dict(document)


def _saved_plan(capsys: pytest.CaptureFixture[str]) -> str:
    """A plan document as `plan --json` writes it (llama3-8b on 64 H100 at tp 8, under the default release)."""
    code, out, err = run(capsys, "plan", "-m", "llama3-8b", "-c", "h100-sxm:64", "--gpus", "64", "--tp", "8",
                         "--top", "1", "--json")
    assert code == 0, err
    return out


def _memory_of_edited_plan(capsys: pytest.CaptureFixture[str], tmp_path: Path, plan: dict[str, Any]) -> str:
    """`memory --from-plan` of an edited plan: its one error line (exit 2 and one line asserted)."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    code, _, err = run(capsys, "memory", "--from-plan", str(path), "--json")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    return err


def test_the_third_long_fuzz_runs_findings_are_one_line_each(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # benchmarks/fuzz_issue28_long.md, third run (seed 20261207): two tracebacks, one per input here.
    # a saved plan whose inputs.train.precision is -1: ValueError in io.releases.fill before the spec named it
    plan = json.loads(_saved_plan(capsys))
    plan["inputs"]["train"]["precision"] = -1
    assert "precision = -1" in _memory_of_edited_plan(capsys, tmp_path, plan)
    # a FLOP budget of 1e-3 on a cluster: a ValidationError (total_tokens 2e-14) from inside the search
    code, out, err = run(capsys, "allocate", "-c", "h100-sxm:16", "--family", "dense", "--top", "1", "--json",
                         "--flops", "1e-3")
    doc = json.loads(out)
    assert code == 0 and doc["recommendation"] is None, err
    assert all("less than one sequence" in " ".join(c["problems"]) for c in doc["candidates"])
    # the sixth run (seed 20261210): a budget of 1e30 FLOPs buys more tokens than a train spec takes (1e16)
    code, out, err = run(capsys, "allocate", "-c", "h100-sxm:16", "--family", "dense", "--top", "1", "--json",
                         "--flops", "1e30")
    doc = json.loads(out)
    assert code == 0 and all("more than 1e+16 tokens" in " ".join(c["problems"]) for c in doc["candidates"]), err


def test_the_fifth_long_fuzz_runs_findings_are_one_line_each(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # benchmarks/fuzz_issue28_long.md, fifth run (seed 20261209): a traceback and an unclear error.
    from tests.test_measure import profile

    # a saved plan whose inputs.train.fp8_recipe is 1e308: ValueError in io.releases.fill (Fp8Recipe(1e308))
    plan = json.loads(_saved_plan(capsys))
    plan["inputs"]["train"]["fp8_recipe"] = 1e308
    assert "fp8_recipe = 1e+308" in _memory_of_edited_plan(capsys, tmp_path, plan)
    # a re-sealed calibration whose gpu is '': read as a file path, "error: .: is a directory, not a file"
    edited = profile().model_copy(update={"gpu": ""})  # sealed as the fuzzer seals an edit (no validation)
    sealed = edited.model_dump(mode="json") | {"sha256": edited.body_sha256()}
    cal = tmp_path / "cal.yaml"
    cal.write_text(yaml.safe_dump(sealed))
    code, _, err = run(capsys, "plan", "-m", "llama3-8b", "-c", "h100-sxm:8", "--gpus", "8", "--top", "1",
                       "--calibration", str(cal), "--json")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "gpu" in err and "directory" not in err, err


def test_a_saved_plans_layout_size_of_another_type_is_one_line(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Found beside the fifth fuzz run (every layout and train field of a saved plan set to a wrong type): a tp, pp
    # or cp that is a string, list or mapping raised TypeError in the release rules (io.releases.layout_sizes)
    saved = _saved_plan(capsys)
    for field in ("tp", "pp", "cp"):
        for value in ("x", [1], {"a": 1}):
            plan = json.loads(saved)
            plan["top"][0]["layout"][field] = value
            assert f"{field} = " in _memory_of_edited_plan(capsys, tmp_path, plan), (field, value)
