"""Issue 28's first-hour fixes, one test (or more) each: binary count suffixes and whole-node warnings, plan's
deadline, allocate's data cap and table, calibration devices in validate, both MFU conventions, HF model names and
folders, exit codes and divisibility messages, the API's argument checks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmscale.cli.main import main
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
    recommendation = next(line for line in out.splitlines() if line.startswith("recommendation"))
    assert "1,024 GPUs" in recommendation and "GPU-hours" in recommendation and "days" in recommendation
    assert "misses the deadline" in out
    document = _plan_json(capsys, "--deadline", "0.5")
    assert document["jobs"]["meets_deadline"] is False and document["jobs"]["gpus_per_job"] == 1024
