"""The dashboard in a real headless Chromium (Debian's `chromium`): the page's JS must have rendered the run's data
into the DOM — the latest step, the loss, a heat-map cell per rank and step, the breakdown rows and bars with the
prediction.json fixture's numbers, the timeline with its fault and restore — while a thread appends steps to the
run directory. Skipped only when no Chromium is installed (.ci/run installs it). The prediction made in the
background (predictor.py) is tested with monitor.predict replaced (the real one measures the host for ~1 min)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest

from llmscale.monitor.dashboard import predictor as pr
from llmscale.monitor.dashboard import start
from llmscale.monitor.dashboard.api import timeline
from llmscale.monitor.predict import Prediction
from llmscale.runtime import journal
from tests.monitor_fixture import SHA, make_run, write_step

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(url: str, *args: str) -> str:
    assert CHROMIUM is not None
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                          "--virtual-time-budget=6000", *args, url], capture_output=True, text=True, timeout=120)
    return out.stdout


def test_api_serves_the_run(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", steps=5)
    board = start(run, predict=False)
    try:
        doc = json.loads(urllib.request.urlopen(board.url + "api/run", timeout=10).read())
        assert doc["latest_step"] == 4 and len(doc["heat"]) == 5 and doc["events"][-1]["event"] == "launch"
        assert urllib.request.urlopen(board.url, timeout=10).read().startswith(b"<!doctype html>")
        assert doc["prediction"]["state"] == "unavailable" and "--no-predict" in doc["prediction"]["reason"]
        assert doc["predicted"] is None
    finally:
        board.close()


def _event(kind: journal.EventKind, **kw: object) -> journal.Event:
    return journal.Event(event=kind, config_sha256=SHA, **kw)  # type: ignore[arg-type]


def test_timeline_folds_ranks_and_lists_newest_first() -> None:
    kind = journal.EventKind
    events = (_event(kind.LAUNCH, attempt=0, time_unix=1.0),
              _event(kind.CHECKPOINT_SAVED, attempt=0, step=10, rank=0, time_unix=2.0, save_blocking_s=0.1),
              _event(kind.CHECKPOINT_SAVED, attempt=0, step=10, rank=0, time_unix=2.1, message="auto intervals"),
              _event(kind.CHECKPOINT_FAILED, attempt=0, step=20, rank=1, time_unix=3.0, host="b", reason="disk"),
              _event(kind.CHECKPOINT_FAILED, attempt=0, step=20, rank=0, time_unix=3.2, host="a", reason="disk"),
              _event(kind.FAULT, attempt=0, step=22, rank=1, time_unix=4.0, cause=journal.Cause.PROCESS_KILLED),
              _event(kind.RESTORE, attempt=1, step=10, rank=0, time_unix=5.0, restored_step=10),
              _event(kind.RESTORE, attempt=1, step=10, rank=1, time_unix=5.1, restored_step=10))
    lines = timeline(events)
    assert [(e["event"], e["step"]) for e in lines] == [("restore", 10), ("fault", 22), ("checkpoint_failed", 20),
                                                         ("checkpoint_saved", 10), ("launch", None)]
    assert lines[0]["ranks"] == [0, 1] and lines[2]["ranks"] == [0, 1] and lines[2]["hosts"] == ["a", "b"]
    assert lines[2]["time_unix"] == 3.0 and lines[3]["save_blocking_s"] == 0.1
    assert lines[3]["message"] == "auto intervals" and lines[3]["lines"] == 2
    assert [e["highlight"] for e in lines] == [True, True, True, False, False]


def test_predictor_says_why_there_is_none_without_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pr, "_torch_missing", lambda: True)
    p = pr.Predictor(make_run(tmp_path / "run", steps=2))
    p.start()
    status = p.status()
    assert status.state is pr.PredictionState.UNAVAILABLE and "needs torch" in status.reason


def test_predictor_predicts_once_in_the_background(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import resources

    import llmscale.monitor.predict as predict_mod

    run = make_run(tmp_path / "run", steps=2)
    (run / "config.yaml").write_bytes(resources.files("llmscale.runtime.example").joinpath("run.yaml").read_bytes())
    release, calls = threading.Event(), []
    made = Prediction(SHA, 2, {"data": 0.0, "compute": 0.2, "comm": 0.01, "checkpoint": 0.0, "idle": 0.0}, 1e9, 1e6,
                      {})

    def fake_predict(run_dir: Path, world: int | None = None, refresh: bool = False) -> Prediction:
        calls.append(world)
        release.wait(10)
        (run_dir / "prediction.json").write_text(json.dumps(made.as_dict()))
        return made

    monkeypatch.setattr(predict_mod, "predict", fake_predict)
    # The prediction is replaced, so torch is not needed: the test runs under `pip install -e ".[test]"` too
    # (issue 28: it failed there, the predictor saw no torch and never started).
    monkeypatch.setattr(pr, "_torch_missing", lambda: False)
    p = pr.Predictor(run)
    p.start()
    try:
        assert p.status().state is pr.PredictionState.PREDICTING
        release.set()
        assert p._thread is not None
        p._thread.join(10)
        status = p.status()
        assert status.state is pr.PredictionState.READY and status.prediction == made
        assert calls == [2]  # once, for the config's world (example: dp 2)
    finally:
        p.close()


def test_predictor_without_torch_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run(tmp_path / "run", steps=2)
    monkeypatch.setattr(pr, "_torch_missing", lambda: True)
    p = pr.Predictor(run)
    p.start()
    try:
        status = p.status()
        assert status.state is pr.PredictionState.UNAVAILABLE and "torch" in status.reason
    finally:
        p.close()


def test_ci_has_the_browser() -> None:
    # .ci/run installs Debian's chromium and sets LLMSCALE_REQUIRE_BROWSER: there the page tests must run, not skip.
    if os.environ.get("LLMSCALE_REQUIRE_BROWSER"):
        assert CHROMIUM is not None, "LLMSCALE_REQUIRE_BROWSER is set but no chromium is on PATH"


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium; .ci/run does)")
def test_chromium_renders_a_run_being_appended(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", steps=8, slow_rank=1)
    fixture = {"data": 0.0, "compute": 0.1234, "comm": 0.0321, "checkpoint": 0.0, "idle": 0.0045}
    (run / "prediction.json").write_text(json.dumps(Prediction(SHA, 2, fixture, 1e9, 1e6, {}).as_dict()))
    journal.append(run, journal.Event(event=journal.EventKind.FAULT, attempt=1, config_sha256=SHA, step=7,
                                      cause=journal.Cause.PROCESS_KILLED, host="host1", rank=1))
    journal.append(run, journal.Event(event=journal.EventKind.RESTORE, attempt=2, config_sha256=SHA, step=5,
                                      restored_step=5, steps_lost=2, tier="storage", rank=0))
    stop = threading.Event()

    def append() -> None:  # the run goes on while the page loads
        step = 8
        while not stop.wait(0.2) and step < 40:
            for rank in (0, 1):
                write_step(run, step, rank, compute=0.15 if rank else 0.1, idle=0.0 if rank else 0.05,
                           loss=4.0 - 0.05 * step)
            step += 1

    writer = threading.Thread(target=append)
    writer.start()
    board = start(run, predict=False)
    try:
        dom = _chromium(board.url, "--dump-dom")
        stop.set()
        writer.join()
        latest = int(re.search(r'id="latest-step">(\d+)<', dom).group(1))
        assert latest >= 7  # the JS filled it from /api/run (the static HTML says "–")
        loss = float(re.search(r'id="loss-value">([\d.]+)<', dom).group(1))
        assert loss == pytest.approx(4.0 - (0.1 if latest < 8 else 0.05) * latest, rel=1e-3)
        cells = int(re.search(r'id="heat"[^>]*data-cells="(\d+)"', dom).group(1))
        assert cells == 2 * (latest + 1) and dom.count('class="cell"') == cells
        # every step: compute 0.10 s on rank 0, 0.15 s on rank 1 (mean 125 ms), comm 20 ms, idle 50/2 = 25 ms
        for part, measured, predicted, error in (("compute", "125.0", "123.4", "-1.3%"),
                                                 ("comm", "20.00", "32.10", "+60.5%"),
                                                 ("idle", "25.00", "4.500", "-82.0%")):
            assert f'<tr id="part-{part}"><td>{part}</td><td>{measured}</td><td>{predicted}</td><td>{error}</td>' in dom
        for part, ms in fixture.items():
            assert re.search(rf'data-phase="{part}" data-row="predicted" data-ms="{ms * 1e3:.3f}"', dom), part
        assert re.search(r'data-phase="compute" data-row="measured" data-ms="125\.000"', dom)
        incidents = re.search(r'<ol id="incidents">(.*?)</ol>', dom, re.S).group(1)
        assert re.search(r'<li class="fault hl">[^<]*attempt 1  fault  step 7  cause process_killed  rank 1', incidents)
        assert re.search(r'<li class="restore hl">[^<]*attempt 2  restore  step 5  storage  rank 0[^<]*restored step 5'
                         r'  2 steps lost', incidents)
        assert incidents.index("restore") < incidents.index("fault")  # newest first
        assert "checkpoint_saved" in dom and "checkpoint_saved" not in incidents
        assert "rank 1 (host1)" in dom
        shot = tmp_path / "dashboard.png"
        _chromium(board.url, f"--screenshot={shot}", "--window-size=1280,1000", "--hide-scrollbars")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    finally:
        stop.set()
        board.close()


def test_a_rewritten_prediction_is_picked_up(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", steps=2)
    first = Prediction(SHA, 2, {"data": 0.0, "compute": 0.3, "comm": 0.01, "checkpoint": 0.0, "idle": 0.0}, 1e9, 1e6,
                       {})
    (run / "prediction.json").write_text(json.dumps(first.as_dict()))
    p = pr.Predictor(run, enabled=False)
    p.start()
    assert p.status().prediction == first
    second = Prediction(SHA, 2, {**first.phases_s, "compute": 0.2}, 1e9, 1e6, {})
    path = run / "prediction.json"
    path.write_text(json.dumps(second.as_dict()))  # `llmscale profile --refresh-prediction`
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a coarse clock may not have moved
    assert p.status().prediction == second
    other = Prediction("cd" * 32, 2, first.phases_s, 1e9, 1e6, {})
    path.write_text(json.dumps(other.as_dict()))  # made for another config: not shown
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000))
    assert p.status().prediction == second
