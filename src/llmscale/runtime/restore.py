"""Resuming a rank: which tier, loading it, and the state dicts each tier stores (`model`, `optim`, `extra`, `rank{R}`).
Another world size reads model and optimizer through DCP's own resharding; the data position must be the job's (every
saved rank's loader state equal to rank 0's), else the resume is refused. The memory tier is per rank.
Details: docs/runtime.md#runtime-restore.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from llmscale.errors import LlmscaleError
from llmscale.runtime import journal, state
from llmscale.runtime.files import read_steps
from llmscale.runtime.manifests import committed
from llmscale.runtime.memtier import MemoryTier, common_steps
from llmscale.runtime.storage import LoadOutcome, StorageTier

if TYPE_CHECKING:
    from llmscale.runtime.session import Context, Session

EventKind, Cause = journal.EventKind, journal.Cause


def _bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _unbytes(data: Any) -> Any:
    return torch.load(io.BytesIO(bytes(data)), weights_only=True)


def storage_state(model: Any, optimizer: Any, scheduler: Any, loader: Any, ctx: Context, step: int) -> dict[str, Any]:
    """The DCP state dict of this rank (module docstring); `loader` None: no data position (data.resumable false)."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    extra = {"scheduler": scheduler.state_dict() if scheduler is not None else None, "step": step,
             "world_size": ctx.world_size}
    return {"model": model_sd, "optim": optim_sd, "extra": _bytes(extra),
            f"rank{ctx.rank}": _bytes(state.capture(loader, ctx.device))}


@dataclass
class Restorer:
    model: Any
    optimizer: Any
    scheduler: Any
    loader: Any
    """None when the data position is not saved (data.resumable false)."""
    device: torch.device
    group: Any

    def resume(self, session: Session, storage: StorageTier, memory: MemoryTier) -> int:
        """Restore the newest complete tier (session.py); returns the restored step (0: from scratch)."""
        for name, what in storage.tidy():
            session.event(EventKind.CHECKPOINT_FAILED, cause=Cause.CHECKPOINT_IO, tier="storage",
                          reason=f"{name}: {what}")
        dist.barrier(group=self.group)
        newest = [-1]
        if session.ctx.rank == 0:
            done = committed(storage.root)
            newest = [done[0].step if done else -1]
        dist.broadcast_object_list(newest, src=0, group=self.group)
        for step in common_steps(memory, self.group):
            if step <= newest[0]:
                break
            start = time.perf_counter()
            if self._from_memory(session, memory, step):
                return self._restored(session, "memory", step, time.perf_counter() - start)
        outcome = storage.load(lambda saved: self._target(session.ctx, saved), self.group)
        if session.ctx.rank == 0:
            for name, reason in outcome.failures:
                session.event(EventKind.CHECKPOINT_FAILED, cause=Cause.CHECKPOINT_IO, tier="storage",
                              reason=f"{name}: {reason}")
        if outcome.step < 0:
            if outcome.attempted:
                raise LlmscaleError("every storage checkpoint failed to load (see the journal); the model may hold "
                                    "part of a failed load, so training does not start from it")
            return 0
        self._apply_storage(session.ctx, outcome)
        extra = {} if outcome.saved_world == session.ctx.world_size else {
            "resharded_from": outcome.saved_world, "world_size": session.ctx.world_size}
        return self._restored(session, "storage", outcome.step, outcome.load_s, extra)

    def _target(self, ctx: Context, saved_world: int) -> dict[str, Any]:
        """What to load from a checkpoint saved at `saved_world` ranks (module docstring)."""
        target = storage_state(self.model, self.optimizer, self.scheduler, self.loader, ctx, 0)
        if saved_world != ctx.world_size:
            del target[f"rank{ctx.rank}"]
            for i in sorted({0, *range(ctx.rank, saved_world, ctx.world_size)}):
                target[f"rank{i}"] = b""
        return target

    def _apply_storage(self, ctx: Context, outcome: LoadOutcome) -> None:
        loaded = outcome.state
        set_state_dict(self.model, self.optimizer, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"])
        scheduler = _unbytes(loaded["extra"])["scheduler"]
        if self.scheduler is not None and scheduler is not None:
            self.scheduler.load_state_dict(scheduler)
        if outcome.saved_world == ctx.world_size:
            state.restore(_unbytes(loaded[f"rank{ctx.rank}"]), self.loader, self.device)
            return
        ranks = {int(k[4:]): _unbytes(v) for k, v in loaded.items() if k.startswith("rank")}
        differs = [i for i, s in ranks.items() if s.get("loader") != ranks[0].get("loader")]
        flag = torch.tensor([len(differs)])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        if int(flag.item()):
            shown = f"rank {differs[0]}: {ranks[differs[0]].get('loader')} vs rank 0: {ranks[0].get('loader')}" \
                if differs else "on another rank"
            raise LlmscaleError(f"resume at world size {ctx.world_size} from a checkpoint of {outcome.saved_world} "
                                f"ranks: the data loader's saved state differs between ranks ({shown}); a resume at "
                                "another world size needs a loader whose state is the job's global position, the "
                                "same on every rank (docs/runtime.md, Session API)")
        if ctx.rank in ranks:
            state.restore(ranks[ctx.rank], None, self.device)  # this rank's RNGs
        if self.loader is not None and ranks[0].get("loader") is not None:
            self.loader.load_state_dict(ranks[0]["loader"])

    def _from_memory(self, session: Session, memory: MemoryTier, step: int) -> bool:
        """Load the snapshot of `step` on every rank; False (journaled by the ranks whose copy failed) when any
        rank's copy does not load."""
        payload, problem = memory.load(step)
        flag = torch.tensor([1 if payload is not None else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.group)
        if problem:
            session.event(EventKind.CHECKPOINT_FAILED, cause=Cause.CHECKPOINT_IO, tier="memory", step=step,
                          reason=f"memory snapshot of step {step}: {problem}; trying an older tier")
        if not int(flag.item()) or payload is None:
            return False
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optim"])
        if self.scheduler is not None and payload.get("scheduler") is not None:
            self.scheduler.load_state_dict(payload["scheduler"])
        state.restore(payload["rank"], self.loader, self.device)
        return True

    def _restored(self, session: Session, tier: str, step: int, load_s: float,
                  extra: dict[str, Any] | None = None) -> int:
        """Journal the restore. Steps lost: the last step this rank recorded (the step records are appended in
        time order, so the last one is where the failed attempt stopped) minus the restored one."""
        records, _ = read_steps(session.paths, session.ctx.rank)
        reached = records[-1].step if records else step
        session.event(EventKind.RESTORE, tier=tier, restored_step=step, steps_lost=max(reached - step, 0),
                      load_s=load_s, step=step, extra=extra or {})
        return step
