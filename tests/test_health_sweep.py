"""`bench links --exclude-out`: an injected slow rank (the sweep's --slow-rank delay hook) is named, and its host
written to the exclusion list in both forms, readable by runtime/hosts.py (what `launch --exclude-from` reads)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from llmscale.runtime.hosts import read_exclusions
from tests.conftest import run_cli

pytest.importorskip("torch")


def test_slow_rank_is_named_and_its_host_excluded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "exclude.txt"
    code, out, err = run_cli(capsys, "bench", "links", "--nproc", "3", "--size", "64K", "--iters", "3", "--repeats",
                             "3", "--slow-rank", "1", "--slow-delay-ms", "5", "--exclude-out", str(out_file), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert {"kind": "rank", "ranks": [1]}.items() <= next(s for s in doc["suspects"] if s["kind"] == "rank").items()
    excluded = read_exclusions(out_file)
    assert [e.host for e in excluded] == [socket.gethostname()] and "rank 1 at" in excluded[0].reason
    assert (tmp_path / "exclude.txt.slurm").read_text() == f"--exclude={socket.gethostname()}\n"


def test_a_healthy_sweep_writes_an_empty_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "exclude.txt"
    out_file.write_text("stale-host\n")
    code, out, err = run_cli(capsys, "bench", "links", "--nproc", "2", "--size", "64K", "--iters", "3", "--repeats",
                             "3", "--exclude-out", str(out_file), "--json")
    assert code == 0, err
    # two ranks on one host: no rank verdict (links.py needs n >= 3) and no node verdict, so no host is named
    assert not [s for s in json.loads(out)["suspects"] if s["kind"] != "pair"]
    assert read_exclusions(out_file) == []
