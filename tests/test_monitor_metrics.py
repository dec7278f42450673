"""The Prometheus endpoint (monitor/metrics.py), scraped over loopback and parsed with prometheus-client's parser."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmscale.monitor.metrics import serve
from llmscale.monitor.predict import Prediction
from llmscale.runtime import journal
from tests.monitor_fixture import SHA, make_run, write_step


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_scrape_reads_the_run_dir_each_time(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", steps=4, slow_rank=1, slow_s=0.05)
    prediction = Prediction(SHA, 2, {"compute": 0.1}, 1e9, 1e6, {})
    server = serve(run, 0, prediction)
    try:
        got = _scrape(server.port)
        assert got[("llmscale_step", ())] == 3
        # step 3: rank 0 0.121 s busy + 0.05 s idle, rank 1 0.171 s -> both 0.171 s; 1024 tokens
        assert got[("llmscale_step_seconds", ())] == pytest.approx(0.171)
        assert got[("llmscale_step_phase_seconds", (("phase", "compute"),))] == pytest.approx(0.125)
        assert got[("llmscale_tokens_per_second", ())] == pytest.approx(1024 / 0.171)
        assert got[("llmscale_mfu_ratio", ())] == pytest.approx(1024 / 0.171 * 1e6 / (2 * 1e9))
        assert got[("llmscale_checkpoints_saved_total", ())] == 1
        assert got[("llmscale_checkpoint_stall_seconds_total", ())] == pytest.approx(0.03)
        assert got[("llmscale_restarts_total", ())] == 0
        for rank in (0, 1):  # a new step and a fault appear in the next scrape
            write_step(run, 4, rank, compute=0.3 if rank else 0.1, idle=0.0 if rank else 0.2)
        journal.append(run, journal.Event(event=journal.EventKind.FAULT, attempt=1, config_sha256=SHA,
                                          cause=journal.Cause.HANG))
        got = _scrape(server.port)
        assert got[("llmscale_step", ())] == 4
        assert got[("llmscale_rank_step_spread_seconds", ())] == pytest.approx(0.0)
        assert got[("llmscale_faults_total", (("cause", "hang"),))] == 1
    finally:
        server.close()


def test_empty_run_dir_serves_only_counters(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    server = serve(tmp_path / "run", 0)
    try:
        got = _scrape(server.port)
        assert ("llmscale_step", ()) not in got and got[("llmscale_restarts_total", ())] == 0
    finally:
        server.close()
