"""Resuming a rank: which tier, loading it, and the state dicts each tier stores (session.py's module docstring).

The storage tier's DCP state: `model` and `optim` from torch.distributed.checkpoint.state_dict.get_state_dict (the
optimizer's state initialised first, so a fresh process has the keys to load into), `extra` (the scheduler and the
step, the same on every rank: DCP writes it once) and `rank{R}` (state.capture of this rank: its RNGs and data
position) — both as torch.save bytes, which DCP stores as byte items and torch.load(weights_only=True) reads back.
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
from llmscale.runtime.memtier import MemoryTier, agree
from llmscale.runtime.storage import StorageTier, committed

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
    """The DCP state dict of this rank (module docstring)."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {"model": model_sd, "optim": optim_sd,
            "extra": _bytes({"scheduler": scheduler.state_dict(), "step": step}),
            f"rank{ctx.rank}": _bytes(state.capture(loader, ctx.device))}


@dataclass
class Restorer:
    model: Any
    optimizer: Any
    scheduler: Any
    loader: Any
    device: torch.device
    group: Any

    def resume(self, session: Session, storage: StorageTier, memory: MemoryTier) -> int:
        """Restore the newest complete tier (session.py); returns the restored step (0: from scratch)."""
        removed = storage.clean_partials()
        for name in removed:
            session.event(EventKind.CHECKPOINT_FAILED, cause=Cause.CHECKPOINT_IO, tier="storage",
                          reason=f"{name}: partial save (no manifest) removed")
        dist.barrier(group=self.group)
        newest = [committed(storage.root)[0][0] if session.ctx.rank == 0 and committed(storage.root) else -1]
        dist.broadcast_object_list(newest, src=0, group=self.group)
        start = time.perf_counter()
        step_m = agree(memory, self.group)
        if step_m > newest[0] and self._from_memory(memory, step_m):
            return self._restored(session, "memory", step_m, time.perf_counter() - start)
        if step_m > newest[0]:
            session.event(EventKind.CHECKPOINT_FAILED, cause=Cause.CHECKPOINT_IO, tier="memory", step=step_m,
                          reason="memory snapshot failed its hash or load on some rank; trying storage")
        target = storage_state(self.model, self.optimizer, self.scheduler, self.loader, session.ctx, 0)
        outcome = storage.load(target, self.group)
        if session.ctx.rank == 0:
            for name, reason in outcome.failures:
                session.event(EventKind.CHECKPOINT_FAILED, cause=Cause.CHECKPOINT_IO, tier="storage",
                              reason=f"{name}: {reason}")
        if outcome.step < 0:
            if outcome.attempted:
                raise LlmscaleError("every storage checkpoint failed to load (see the journal); the model may hold "
                                    "part of a failed load, so training does not start from it")
            return 0
        set_state_dict(self.model, self.optimizer, model_state_dict=target["model"], optim_state_dict=target["optim"])
        self.scheduler.load_state_dict(_unbytes(target["extra"])["scheduler"])
        state.restore(_unbytes(target[f"rank{session.ctx.rank}"]), self.loader, self.device)
        return self._restored(session, "storage", outcome.step, outcome.load_s)

    def _from_memory(self, memory: MemoryTier, step: int) -> bool:
        payload = memory.load(step)
        flag = torch.tensor([1 if payload is not None else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.group)
        if not int(flag.item()) or payload is None:
            return False
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optim"])
        self.scheduler.load_state_dict(payload["scheduler"])
        state.restore(payload["rank"], self.loader, self.device)
        return True

    def _restored(self, session: Session, tier: str, step: int, load_s: float) -> int:
        records, _ = read_steps(session.paths, session.ctx.rank)
        reached = max((r.step for r in records), default=step)
        session.event(EventKind.RESTORE, tier=tier, restored_step=step, steps_lost=max(reached - step, 0),
                      load_s=load_s, step=step)
        return step
