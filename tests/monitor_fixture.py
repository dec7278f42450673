"""Synthetic run directories in the contract's formats (steps/rank{R}.jsonl, journal.jsonl, config.sha256) for the
monitor tests, written with the runtime's own writers."""

from __future__ import annotations

from pathlib import Path

from llmscale.runtime import journal
from llmscale.runtime.files import RunPaths, StepRecord, append_step

SHA = "ab" * 32


def write_step(root: Path, step: int, rank: int, *, attempt: int = 1, compute: float = 0.1, comm: float = 0.02,
               data: float = 0.001, checkpoint: float = 0.0, idle: float = 0.0, loss: float = 3.0,
               tokens: int = 512, time_unix: float | None = None, host: str | None = None) -> None:
    phases = {"data": data, "compute": compute, "comm": comm, "checkpoint": checkpoint, "idle": idle}
    append_step(RunPaths(root), StepRecord(step=step, rank=rank, attempt=attempt, host=host or f"host{rank}",
                                           time_unix=time_unix if time_unix is not None else 1e9 + step,
                                           step_s=sum(phases.values()), phases_s=phases, loss=loss, tokens=tokens))


def make_run(root: Path, steps: int = 12, ranks: int = 2, slow_rank: int | None = 1, slow_s: float = 0.05) -> Path:
    """`steps` steps on `ranks` ranks; `slow_rank`'s compute is `slow_s` longer and the others wait that long (idle)
    at the barrier; a storage checkpoint at step 5; the journal with a launch, a fault and a restore."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "steps").mkdir(exist_ok=True)
    (root / "config.sha256").write_text(SHA + "\n")
    ev = journal.Event
    journal.append(root, ev(event=journal.EventKind.LAUNCH, attempt=1, config_sha256=SHA, time_unix=1e9))
    for step in range(steps):
        for rank in range(ranks):
            slow = rank == slow_rank
            write_step(root, step, rank, compute=0.1 + (slow_s if slow else 0.0),
                       idle=0.0 if slow or slow_rank is None else slow_s, checkpoint=0.03 if step == 5 else 0.0,
                       loss=4.0 - 0.1 * step)
    journal.append(root, ev(event=journal.EventKind.CHECKPOINT_SAVED, attempt=1, config_sha256=SHA, step=5,
                            time_unix=1e9 + 5, save_blocking_s=0.03, save_total_s=0.2))
    return root
