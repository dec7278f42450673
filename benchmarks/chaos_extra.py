"""benchmarks/chaos.py's fixed cases under `llmscale launch` — the issue's re-save repro (a finished run's newest
shard corrupted, the same command launched twice) and a full disk — and the recovery times read from a run."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from chaos_faults import corrupt_newest_storage

from llmscale.runtime import journal as jr
from llmscale.runtime.files import RunPaths, read_lines
from llmscale.runtime.manifests import MANIFEST, committed, verify
from llmscale.runtime.verify import Losses, verify_run
from tests.launch_helpers import EXAMPLE, reap_all, start_launch

Config = Callable[..., Path]


def recovery(run_dir: Path) -> list[dict[str, float]]:
    """Per delivered fault that ended an attempt: detect, restart, load, and the total fault -> training again."""
    events = jr.read(run_dir).events
    first_step: dict[int, float] = {}
    for rank in (0, 1):
        for row in read_lines(RunPaths(run_dir).steps(rank)).rows:
            start = row["time_unix"] - row["step_s"]
            first_step[row["attempt"]] = min(first_step.get(row["attempt"], start), start)
    out = []
    for kill in read_lines(run_dir / "chaos_kills.jsonl").rows:
        if kill["phase"] in ("kill_writer", "stop_writer", "double_launch"):
            continue
        a = kill["attempt"]
        fault = next((e for e in events if e.event is jr.EventKind.FAULT and e.attempt == a), None)
        restores = [e for e in events if e.event is jr.EventKind.RESTORE and e.attempt == a + 1]
        if fault is None or a + 1 not in first_step:
            continue
        load = max((e.load_s or 0.0) for e in restores) if restores else 0.0
        began = (max(e.time_unix for e in restores) - load) if restores else first_step[a + 1]
        out.append({"detect_s": fault.time_unix - kill["time_unix"], "restart_s": began - fault.time_unix,
                    "load_s": load, "total_s": first_step[a + 1] - kill["time_unix"],
                    "tier": 1.0 if restores and restores[0].tier == "memory" else 0.0})
    return out


def _launch(cfg: Path, run_dir: Path, log: Path) -> int:
    proc = start_launch(cfg, run_dir, EXAMPLE, log=log)
    try:
        proc.wait(timeout=900)
    finally:
        reap_all(proc)
    return proc.returncode


def corrupt_shard(out: Path, reference: Losses, total: int, config: Config) -> str:
    """The issue's repro: 16 bytes flipped in the newest .distcp of a finished run, the same command launched twice.
    The first relaunch must skip it (SHA256 differs, quarantined), resume from the older checkpoint, save the newest
    step again as a fresh commit that verifies; the second must load that commit and train nothing."""
    run_dir, cfg = out / "corrupt", config(out / "corrupt.yaml", total, 1000, 3)
    first = _launch(cfg, run_dir, out / "corrupt.log")
    newest_step = corrupt_newest_storage(run_dir / "checkpoints")
    second = _launch(cfg, run_dir, out / "corrupt2.log")
    third = _launch(cfg, run_dir, out / "corrupt3.log")
    v = verify_run(run_dir, reference, 2, total)
    kept = committed(run_dir / "checkpoints")
    loads = all(verify(c.path, c.manifest) == "" and MANIFEST not in c.manifest["files"] for c in kept)
    failed = [e.reason or "" for e in jr.read(run_dir).of_kind(jr.EventKind.CHECKPOINT_FAILED)]
    ok = (first, second, third) == (0, 0, 0) and v.ok and loads and v.restores[-1][2] == newest_step and any(
        "SHA256 differs" in r and "quarantine" in r for r in failed)
    return (f"re-save after a corrupt newest shard (finished run, relaunched twice): exits {first}, {second}, {third}; "
            f"restores {v.restores}; kept {[c.step for c in kept]} all load: {loads}; journaled {failed[:1]}; "
            f"lost {v.lost}, curve mismatches {len(v.curve_mismatches)}: {'OK' if ok else 'FAILED'}")


def full_disk(out: Path, reference: Losses, total: int, config: Config) -> str:
    """The storage tier on a 1600 KiB tmpfs (two checkpoints of this model fit, ~630 KB each): later saves fail with
    ENOSPC (checkpoint_failed), training goes on, the committed checkpoints stay intact, the curve is the
    reference's."""
    mount = out / "small"
    mount.mkdir(exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1600k", "tmpfs", str(mount)], capture_output=True)
    if mounted.returncode:
        return "full disk under launch: not run (mounting a tmpfs is not permitted here)"
    try:
        run_dir, cfg = out / "fulldisk", config(out / "fulldisk.yaml", total, 1000, 3, str(mount))
        code = _launch(cfg, run_dir, out / "fulldisk.log")
        failed = jr.read(run_dir).of_kind(jr.EventKind.CHECKPOINT_FAILED)
        v = verify_run(run_dir, reference, 2, total, keep=2)
        kept = [c.step for c in committed(mount)]
        enospc = sum("space" in (e.reason or "").lower() for e in failed)
        ok = code == 0 and enospc > 0 and v.ok and len(kept) >= 1
        return (f"full disk under launch: exit {code}, {len(failed)} checkpoint_failed ({enospc} no space), "
                f"committed kept {kept}, lost {v.lost}, curve mismatches {len(v.curve_mismatches)}: "
                f"{'OK' if ok else 'FAILED'}")
    finally:
        subprocess.run(["umount", str(mount)], check=False)
