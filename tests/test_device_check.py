"""scripts/device_check.sh, the prepared GPU check (issue 28): its syntax, and a dry run on this CPU machine that
lists every step with its time limit, within the 8 minutes the check may take. (A full run with DEVICE=cpu took
217 s on a 2-core host; a GPU session runs it for real.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "device_check.sh"
STEPS = ("env", "bench_gemm", "bench_memory", "bench_collectives", "probe", "launch_with_kill", "journal", "profile")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_device_check_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_device_check_dry_run_plans_every_step_within_eight_minutes(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path / "out"), "DEVICE": "cuda"}
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    plan = (tmp_path / "out" / "plan.txt").read_text().splitlines()
    assert [line.split(" ")[0] for line in plan] == list(STEPS)
    text = "\n".join(plan)
    assert "--device cuda" in text and "--backend nccl" in text and "LLMSCALE_CHAOS=save_start:20:0:0" in text
    rows = [line.split("\t") for line in (tmp_path / "out" / "summary.tsv").read_text().splitlines()[1:]]
    assert sum(int(row[3]) for row in rows) <= 8 * 60
    assert not (tmp_path / "out" / "run").exists()  # nothing ran
    bad = subprocess.run(["bash", str(SCRIPT), "--bogus"], capture_output=True, text=True, timeout=60, env=env)
    assert bad.returncode == 2 and "usage" in bad.stderr
