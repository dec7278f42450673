"""The dashboard in a real headless Chromium (Debian's `chromium`): the page's JS must have rendered the run's data
into the DOM — the latest step, the loss, a heat-map cell per rank and step, the breakdown rows, the timeline —
while a thread appends steps to the run directory. Skipped only when no Chromium is installed (.ci/run installs it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest

from llmscale.monitor.dashboard import start
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
    board = start(run)
    try:
        doc = json.loads(urllib.request.urlopen(board.url + "api/run", timeout=10).read())
        assert doc["latest_step"] == 4 and len(doc["heat"]) == 5 and doc["events"][0]["event"] == "launch"
        assert urllib.request.urlopen(board.url, timeout=10).read().startswith(b"<!doctype html>")
    finally:
        board.close()


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium; .ci/run does)")
def test_chromium_renders_a_run_being_appended(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", steps=8, slow_rank=1)
    (run / "prediction.json").write_text(json.dumps(Prediction(SHA, 2, {"data": 0.0, "compute": 0.11, "comm": 0.02,
                                                                         "checkpoint": 0.0, "idle": 0.0},
                                                               1e9, 1e6, {}).as_dict()))
    journal.append(run, journal.Event(event=journal.EventKind.FAULT, attempt=1, config_sha256=SHA, step=7,
                                      cause=journal.Cause.PROCESS_KILLED, host="host1"))
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
    board = start(run)
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
        assert re.search(r'<tr id="part-compute"><td>compute</td><td>[\d.]+</td><td>110\.0</td>', dom)
        assert "cause process_killed" in dom and "checkpoint_saved" in dom
        assert "rank 1 (host1)" in dom
        shot = tmp_path / "dashboard.png"
        _chromium(board.url, f"--screenshot={shot}", "--window-size=1100,760", "--hide-scrollbars")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    finally:
        stop.set()
        board.close()
