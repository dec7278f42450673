"""monitor/profile.py on synthetic run directories (contract formats): parts, slowest rank, attempts, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmscale.monitor.predict import Prediction
from llmscale.monitor.profile import profile
from llmscale.monitor.rundir import read_run
from tests.conftest import run_cli
from tests.monitor_fixture import SHA, make_run, write_step


def _prediction(**phases: float) -> Prediction:
    parts = {"data": 0.0, "compute": 0.0, "comm": 0.0, "checkpoint": 0.0, "idle": 0.0, **phases}
    return Prediction(SHA, 2, parts, 1e10, 1e6, {})


def test_parts_are_rank_means_and_the_slow_rank_is_named(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", steps=12, slow_rank=1, slow_s=0.05)
    result = profile(read_run(run), _prediction(compute=0.1, comm=0.02), every=4)
    parts = {p.phase: p for p in result.parts}
    # rank 0 computes 0.10 s and waits 0.05 s; rank 1 computes 0.15 s: the mean compute is 0.125 s, idle 0.025 s
    assert parts["compute"].measured_s == pytest.approx(0.125)
    assert parts["idle"].measured_s == pytest.approx(0.025)
    assert parts["compute"].error_pct == pytest.approx(100 * (0.1 - 0.125) / 0.125)
    assert parts["checkpoint"].measured_s == 0.0  # one save in 12 steps: the median step has none
    assert [w.slowest_rank for w in result.windows] == [1, 1, 1]
    assert result.windows[0].slowest_host == "host1"
    # busy time: rank 1 0.171 s, rank 0 0.121 s; the median of two ranks is their mean, so the lag is half the gap
    assert result.windows[0].mean_lag_s == pytest.approx(0.025)


def test_a_later_attempt_replaces_a_replayed_step_and_first_steps_are_left_out(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", steps=6, slow_rank=None)
    for rank in (0, 1):  # attempt 2 resumes at step 4 after a restart, its first step slow (warm-up)
        write_step(run, 4, rank, attempt=2, compute=5.0)
        write_step(run, 5, rank, attempt=2, compute=0.1)
    snap = read_run(run)
    assert snap.replayed == 4 and snap.record(0, 4).attempt == 2
    result = profile(snap, None)
    assert {p.phase: p.measured_s for p in result.parts}["compute"] == pytest.approx(0.1)


def test_unparseable_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", steps=3)
    with open(run / "steps" / "rank0.jsonl", "a") as handle:
        handle.write("{not json\n")
    assert read_run(run).skipped_lines == 1


def test_a_step_not_yet_done_on_every_rank_is_not_profiled(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", steps=3)
    write_step(run, 3, 0)
    assert [s.step for s in profile(read_run(run), None).steps] == [0, 1, 2]


def test_cli_json_and_bad_every(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path / "run", steps=4)
    (run / "prediction.json").write_text(json.dumps(_prediction(compute=0.2).as_dict()))
    code, out, err = run_cli(capsys, "profile", str(run), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["predicted_step_s"] == pytest.approx(0.2) and doc["windows"][0]["slowest_rank"] == 1
    code, _, err = run_cli(capsys, "profile", str(run), "--every", "0")
    assert code == 2 and "every" in err
    code, _, err = run_cli(capsys, "profile", str(tmp_path / "missing"))
    assert code == 2 and err.startswith("error:")
