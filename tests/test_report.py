"""`plan --html`: one self-contained offline page whose numbers are the `plan --json` document's."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from llmscale.cli.main import main
from llmscale.cost.memory import MemoryBreakdown
from llmscale.report.plan_html import MEMORY_CLASSES
from llmscale.report.svg import linear_ticks, log_ticks

# GPT-3 175B on Selene with the batch of Narayanan et al. 2021 (arXiv:2104.04473) Table 1.
PLAN = ["plan", "--model", "gpt3-175b", "--cluster", "selene", "--gbs", "1536", "--seq-len", "2048"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """stdout of `main(argv)`, which must exit 0."""
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    assert info.value.code in (0, None), err
    return out


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("report") / "plan.html"
    with pytest.raises(SystemExit) as info:
        main([*PLAN, "--json", "--html", str(path)])
    assert info.value.code in (0, None)
    return path.read_text(encoding="utf-8")


def test_page_is_one_offline_document(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    # Offline: no scripts, stylesheets, imports or images fetched from anywhere.
    assert "http://" not in page and "https://" not in page
    assert not re.search(r"<script|<link|@import|<img|url\(", page, re.IGNORECASE)
    assert page.count("<svg") >= 3


def test_page_carries_the_json_fingerprint_and_numbers(capsys: pytest.CaptureFixture[str], page: str) -> None:
    document = json.loads(run(capsys, *PLAN, "--json"))
    assert document["input_sha256"] in page
    best = document["top"][0]
    assert f"{best['step_time_s']:.3f}" in page
    assert f"{document['jobs']['cluster_tokens_per_s']:,.0f} tokens/s" in page
    for key in best["breakdown"]:  # every step part is named (legend and table), e.g. tp_exposed_s → "tp exposed"
        assert f">{key.removesuffix('_s').replace('_', ' ')}<" in page


def test_page_names_every_memory_class_and_units(page: str) -> None:
    # The classes come from the dataclass fields: a new class shows up without editing the report.
    assert set(MEMORY_CLASSES) == {"weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                                   "comm_buffer_bytes", "runtime_bytes", "fragmentation_bytes"}
    assert all(name in MemoryBreakdown.__dataclass_fields__ for name in MEMORY_CLASSES)
    for name in ("weights", "activations", "comm buffer", "fragmentation", "out of memory", "GiB", "days", "MWh"):
        assert name in page
    assert "chosen" in page


def test_one_job_size_still_draws_the_time_chart(tmp_path: Path) -> None:
    # --gpus gives one point: the log axes must not divide by a zero span.
    path = tmp_path / "one.html"
    with pytest.raises(SystemExit) as info:
        main([*PLAN, "--gpus", "1024", "--json", "--html", str(path)])
    assert info.value.code in (0, None)
    assert path.read_text(encoding="utf-8").count("<svg") >= 3


def test_unwritable_path_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*PLAN, "--json", "--html", str(tmp_path / "missing-dir" / "plan.html")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--html" in err and "Traceback" not in err


def test_ticks_cover_the_data() -> None:
    assert linear_ticks(7.86) == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert log_ticks(289.0, 9066.0) == [200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0]
    assert len(log_ticks(300.0, 300.0)) >= 2  # one value still spans an axis


def test_page_shows_goodput_mtbf_and_why_the_job_size_won(capsys: pytest.CaptureFixture[str], page: str) -> None:
    document = json.loads(run(capsys, *PLAN, "--json"))
    best, jobs = document["top"][0], document["jobs"]
    text = re.sub(r"<[^>]+>", " ", page)
    assert f"{best['goodput']:.3f}" in text and "job MTBF" in text and best["checkpoint_policy"] in text
    assert f"Why {jobs['gpus_per_job']:,} GPUs per job" in text
    assert f"▶ {jobs['gpus_per_job']:,}" in text  # the chosen row is marked in the job-size table
    assert "stays ≥ 90% of the best job size" in text  # the throughput rule, with the scaling floor
    assert document["framework"]["checked"] in text


def test_page_explains_every_rejection_code_it_counts(page: str) -> None:
    from llmscale.layout.rules import Reason

    counted = set(re.findall(r"<td class=l>([a-z ]+)</td><td>[\d,]+</td><td>", page))
    assert counted, "the meanings table lists each counted reason"
    for name in counted:
        reason = Reason[name.upper().replace(" ", "_")]
        assert html.escape(reason.meaning) in page


def test_step_parts_get_distinct_colours(page: str) -> None:
    from llmscale.cost.step import STEP_PARTS

    section = page[page.index("<h2>Step time"):page.index("<h2>Memory")]
    legend = re.findall(r'<span style="--c:(#[0-9a-f]{6})">([^<]+)</span>', section)
    assert [name for _, name in legend] == [p.removesuffix("_s").replace("_", " ") for p in STEP_PARTS]
    assert len({colour for colour, _ in legend}) == len(STEP_PARTS)


def test_page_shows_the_best_layouts_placement(capsys: pytest.CaptureFixture[str], page: str) -> None:
    doc = json.loads(run(capsys, *PLAN, "--json"))
    placed = doc["placement"][0]
    assert "<h2>Placement of the best layout on the cluster's nodes</h2>" in page
    assert f"{placed['best']['step_s']:.3f} s ({html.escape(placed['best']['placement'])};" in page
    for tier in placed["best"]["tiers"]:
        assert f"<th>{html.escape(tier['name'])}</th>" in page
