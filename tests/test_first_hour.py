"""Issue 13's first-hour fixes, one test each: GPU:COUNT clusters, SI numbers, list flags, wrote-FILE lines, explain
of a layout that does not fit, bench gemm's CPU defaults, checkpoint intervals of at least one step, calibration
profiles of another device kind, SI chart labels, --help metavars, catalog tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmscale.cli.main import main
from llmscale.specs.calibration import DeviceInfo
from llmscale.units import parse_count, si_count

GPT3 = ["--model", "gpt3-175b", "--cluster", "selene", "--tp", "8", "--pp", "8", "--dp", "24", "--gbs", "1536"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def one_error_line(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_gpu_count_builds_a_superpod_style_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    # DGX SuperPOD H100 RA: 8 GPUs per NVLink domain, 32-node (256-GPU) SUs, 400 Gb/s per GPU = 50 GB/s one way;
    # NVL72: 72 GPUs per NVLink domain (catalog/standard_clusters.yaml cites both).
    code, out, err = run(capsys, "show", "cluster", "h100-sxm:512", "--json")
    assert code == 0, err
    spec = json.loads(out)["spec"]
    assert spec["num_gpus"] == 512 and spec["gpu"]["name"] == "H100-SXM5-80GB"
    assert [(t["ranks"], t["bandwidth_gb_per_s"]) for t in spec["tiers"]] == [(8, 450), (256, 50), (512, 50)]
    code, out, err = run(capsys, "show", "cluster", "gb200:72", "--json")
    assert code == 0 and [t["ranks"] for t in json.loads(out)["spec"]["tiers"]] == [72]
    code, out, err = run(capsys, "memory", "--model", "llama3-8b", "--cluster", "b200:1024", "--tp", "8", "--json")
    assert code == 0, err
    one_error_line(*run(capsys, "show", "cluster", "mi300x:8")[::2], "h100-sxm", "catalog GPUs")
    one_error_line(*run(capsys, "show", "cluster", "h100-sxm:100")[::2], "multiple of 8")


def test_si_numbers_on_count_and_token_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_count("15T") == 15e12 and parse_count("1.5e13") == 1.5e13 and parse_count("500K") == 5e5
    assert parse_count("2M") == 2e6 and parse_count("70B") == 70e9
    code, out, err = run(capsys, "memory", *GPT3[:6], "--gbs", "1.536K", "--gpus", "1.536K", "--json")
    assert code in (0, 3), err  # parsed and run (tp 8 alone does not fit GPT-3 in memory: exit 3)
    assert json.loads(out)["train"]["global_batch"] == 1536
    one_error_line(*run(capsys, "plan", "--tokens", "15X")[::2], "--tokens", "15X")
    one_error_line(*run(capsys, "memory", "--gpus", "1.5")[::2], "--gpus")


def test_interval_min_takes_space_and_comma_separated_values(capsys: pytest.CaptureFixture[str]) -> None:
    for values in (["5", "10", "30"], ["5,10,30"]):
        code, out, err = run(capsys, "goodput", "--interval-min", *values, "--trials", "0", "--json")
        assert code == 0, err
        assert [row["interval_min"] for row in json.loads(out)["at_intervals"]] == [5, 10, 30]


def test_written_files_are_announced_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "plan.html"
    code, out, err = run(capsys, "plan", "--model", "llama3-8b", "--cluster", "h100-sxm:64", "--html", str(html),
                         "--json")
    assert code == 0, err
    json.loads(out)  # stdout is the document alone
    assert f"wrote {html}" in err and html.exists()
    png = tmp_path / "g.png"
    code, out, err = run(capsys, "goodput", "--cluster", "selene", "--trials", "0", "--plot", str(png))
    assert code == 0 and f"wrote {png}" in err and png.exists()


def test_explain_of_a_layout_that_does_not_fit_is_not_runnable(capsys: pytest.CaptureFixture[str]) -> None:
    # GPT-3 175B with no model parallelism holds ~3 TB of training state per GPU: it cannot fit in 80 GiB.
    args = ["explain", "--model", "gpt3-175b", "--cluster", "selene", "--gpus", "512", "--gbs", "1536"]
    code, out, _ = run(capsys, *args)
    assert code == 3 and "NOT RUNNABLE" in out and "MFU" not in out
    assert out.startswith("# llmscale") and " explain · " in out.splitlines()[0]
    code, out, _ = run(capsys, *args, "--json")
    assert code == 3 and json.loads(out)["memory"]["fits"] is False
    assert run(capsys, "explain", *GPT3)[0] == 0


def test_bench_gemm_cpu_defaults_are_small_and_report_progress(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from llmscale.cli.bench_cmd import CPU_GEMM_MODEL, CPU_GEMM_SEQ_LEN
    from llmscale.io.resolve import resolve_model
    from llmscale.measure.gemm import gemm_shapes

    # The default CPU shapes: ~0.2 TFLOP per round, ~25 s at the ~0.06-0.1 TFLOP/s of a 2-core CPU (measured).
    assert sum(s.flops for s in gemm_shapes(resolve_model(CPU_GEMM_MODEL), seq_len=CPU_GEMM_SEQ_LEN)) < 3e11
    # The progress lines and one row per shape, on a model file of llama3-8b's shape at 1/16 of its widths (the
    # catalog model's 2 GB logits weight alone took ~10 s a run on this host)
    small = tmp_path / "small.yaml"
    small.write_text("name: small\nfamily: llama3\nlayers: 2\nhidden: 256\nffn_hidden: 896\nheads: 4\nkv_heads: 2\n"
                     "vocab: 8016\n", encoding="utf-8")
    shapes = gemm_shapes(resolve_model(str(small)), seq_len=8)
    code, out, err = run(capsys, "bench", "gemm", "--device", "cpu", "--model", str(small), "--seq-len", "8",
                         "--block-ms", "1", "--json")
    assert code == 0, err
    assert len(json.loads(out)["rows"]) == len(shapes) == 5 and f"[1/{len(shapes)}]" in err
    # Without --model and --seq-len a CPU run takes the CPU defaults (here pointed at the small file and seq 8)
    monkeypatch.setattr("llmscale.cli.bench_cmd.CPU_GEMM_MODEL", str(small))
    monkeypatch.setattr("llmscale.cli.bench_cmd.CPU_GEMM_SEQ_LEN", 8)
    code, out, err = run(capsys, "bench", "gemm", "--device", "cpu", "--block-ms", "1", "--json")
    assert code == 0, err
    assert [(row["m"], row["k"]) for row in json.loads(out)["rows"]] == [(s.m, s.k) for s in shapes]


def test_goodput_intervals_are_never_shorter_than_a_step(capsys: pytest.CaptureFixture[str]) -> None:
    # The default job's unclamped memory tier is ~2 s (issue 13); a 30 s step holds every interval at >= 30 s.
    code, out, err = run(capsys, "goodput", "--trials", "0", "--step-s", "30", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert min(doc["checkpoint_interval_min"].values()) * 60 >= 30 * (1 - 1e-9)
    assert "memory" in doc["min_interval"]["clamped_tiers"]
    code, out, _ = run(capsys, "goodput", "--trials", "0", "--step-s", "30")
    assert "clamped" in out and "30 s" in out
    code, out, _ = run(capsys, "goodput", "--trials", "0", "--json")
    doc = json.loads(out)
    assert min(doc["checkpoint_interval_min"].values()) * 60 >= doc["min_interval"]["seconds"] > 0


def test_a_cpu_calibration_profile_on_gpus_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_measure import profile, write_profile

    cpu = tmp_path / "cpu.yaml"
    write_profile(profile(device=DeviceInfo(kind="cpu", name="test cpu", ranks=2)), cpu)
    one_error_line(*run(capsys, "explain", *GPT3, "--calibration", str(cpu))[::2], "cpu", "--force-calibration")
    assert run(capsys, "explain", *GPT3, "--calibration", str(cpu), "--force-calibration")[0] == 0
    other = tmp_path / "h100.yaml"
    write_profile(profile(gpu="h100-sxm"), other)
    one_error_line(*run(capsys, "explain", *GPT3, "--calibration", str(other))[::2], "h100-sxm")
    mine = tmp_path / "a100.yaml"
    write_profile(profile(gpu="a100-80gb"), mine)
    assert run(capsys, "explain", *GPT3, "--calibration", str(mine))[0] == 0


def test_chart_labels_are_decimal_si() -> None:
    assert si_count(500_000) == "500K" and si_count(1.5e13) == "15T" and si_count(2_500) == "2.5K"
    assert si_count(999) == "999"


def test_help_shows_no_bool_or_str_placeholders(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    code, out, _ = run(capsys, "memory", "--help")
    assert code == 0
    options = out.split("--model", 1)[1].rsplit("--help", 1)[0]  # typer's own --help line is not ours
    assert "<bool>" not in options and "<str>" not in options
    assert "none|selective|full" in out and "NAME|GPU:COUNT|FILE" in out


def test_catalog_prints_tables_and_sources_on_request(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "catalog", "clusters")
    assert code == 0 and "selene" in out and "3,072" in out and "arXiv" not in out
    code, out, _ = run(capsys, "catalog", "gpus", "--sources")
    assert "989" in out and "dgxc-benchmarking" in out
    code, out, _ = run(capsys, "catalog", "models", "--json")
    rows: dict[str, Any] = {r["name"]: r for r in json.loads(out)["models"]}
    assert rows["llama3-8b"]["facts"]["layers"] == 32 and rows["llama3-8b"]["source"]


def test_bare_export_asks_for_a_layout(capsys: pytest.CaptureFixture[str]) -> None:
    # Without layout flags the default 1-way layout put dp = 500,000 on seed-500k (issue 13): now one line says what
    # export needs.
    code, _, err = run(capsys, "export", "--format", "megatron")
    one_error_line(code, err, "layout", "--from-plan")


def test_goodput_floor_is_the_fastest_step_the_published_record_allows(capsys: pytest.CaptureFixture[str]) -> None:
    # No step given: the floor is the dense-peak step ÷ the best published MFU of the generation (published_mfu.yaml:
    # hopper 16-bit 49.5 %, Megatron-Core r0.8 weak scaling GPT 16B on 192 H100), not the MFU-1 bound.
    code, out, err = run(capsys, "goodput", "--trials", "0", "--json")
    assert code == 0, err
    floor = json.loads(out)["min_interval"]
    assert "49.5%" in floor["source"]
