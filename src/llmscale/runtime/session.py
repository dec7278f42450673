"""The trainer-side API: a training loop uses the runtime in a handful of lines (`Session.from_env(...)`, `rt.steps()`,
`rt.phase(...)`, `rt.end_step(...)`). Resume: the memory tier if every rank holds a newer complete snapshot, else
storage, else from scratch; heartbeats carry the phase the hang watch's deadlines depend on.
The loop: docs/runtime.md ("The Session API"); resume and phases: docs/runtime.md#runtime-session.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from llmscale.errors import LlmscaleError
from llmscale.runtime import journal
from llmscale.runtime.config import RunConfig, config_sha256, load_config
from llmscale.runtime.entry import record_error
from llmscale.runtime.files import PHASES, BeatPhase, Heartbeat, RunPaths, StepRecord, append_step, write_heartbeat
from llmscale.runtime.memtier import MemoryTier
from llmscale.runtime.procs import die_with_launcher
from llmscale.runtime.restore import Restorer
from llmscale.runtime.storage import StorageTier
from llmscale.runtime.tiers import TierState
from llmscale.runtime.writer import start_writer, stop_writer

ENV_RUN_DIR, ENV_ATTEMPT, ENV_CONFIG = "LLMSCALE_RUN_DIR", "LLMSCALE_ATTEMPT", "LLMSCALE_CONFIG"


@dataclass(frozen=True)
class Context:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    host: str


def init_distributed(backend: str | None = None) -> Context:
    """Join (or start) the default process group: from torchrun's variables when set, else a group of one on
    loopback. gloo on CPU (one intra-op thread per rank, deterministic), NCCL with the local rank's GPU. Under
    `llmscale launch` the rank dies with its launcher (die_with_launcher)."""
    die_with_launcher()
    env = os.environ
    local_rank = int(env.get("LOCAL_RANK", "0"))
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    device = torch.device(f"cuda:{local_rank}") if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    if not dist.is_initialized():
        if "RANK" in env and "WORLD_SIZE" in env:
            dist.init_process_group(backend)
        else:
            env.setdefault("MASTER_ADDR", "127.0.0.1")
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    host = env.get("LLMSCALE_HOST") or socket.gethostname()  # the launcher's name for this node (multinode.py)
    return Context(dist.get_rank(), dist.get_world_size(), local_rank, device, host)


def current_config(path: Path | None = None) -> RunConfig:
    """The run config of this launch (LLMSCALE_CONFIG, set by `llmscale launch`), else the file at `path`: a
    script reads its own settings (`.user`) before it builds the model."""
    given = os.environ.get(ENV_CONFIG)
    if given is None and path is None:
        raise LlmscaleError(f"no run config: set {ENV_CONFIG} (llmscale launch does) or pass its path")
    return load_config(Path(given) if given else path)  # type: ignore[arg-type]


class Session:
    """One rank's runtime for one attempt (module docstring)."""

    def __init__(self, model: Any, optimizer: Any, scheduler: Any, loader: Any, ctx: Context, run_dir: Path,
                 config: RunConfig, attempt: int = 0) -> None:
        die_with_launcher()
        resumable = config.data.resumable
        if resumable and not (callable(getattr(loader, "state_dict", None))
                              and callable(getattr(loader, "load_state_dict", None))):
            raise LlmscaleError(f"loader: {type(loader).__name__} has no state_dict()/load_state_dict(), so a resumed "
                                "run would draw other batches than an uninterrupted one; give it both (its position "
                                "as a small dict: docs/runtime.md) or set data.resumable: false in the run config")
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.loader = loader if resumable else None
        """The loader whose position is saved and restored; None with data.resumable false."""
        self.ctx, self.config, self.attempt = ctx, config, attempt
        self.paths = RunPaths(Path(run_dir))
        self.sha = config_sha256(config)
        self.step = 0
        self._phases: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self._step_start = 0.0
        self.group: Any = None
        self.tiers: TierState | None = None

    @classmethod
    def from_env(cls, model: Any, optimizer: Any, scheduler: Any, loader: Any, ctx: Context,
                 run_dir: Path | None = None, config: RunConfig | None = None) -> Session:
        """A session from `llmscale launch`'s variables; `run_dir` / `config` stand in where they are absent."""
        env_dir = os.environ.get(ENV_RUN_DIR)
        directory = Path(env_dir) if env_dir else run_dir
        if directory is None:
            raise LlmscaleError(f"no run directory: set {ENV_RUN_DIR} (llmscale launch does) or pass run_dir")
        if config is None:
            given = os.environ.get(ENV_CONFIG)
            path = Path(given) if given else directory / "config.yaml"
            config = load_config(path)
        attempt_text = os.environ.get(ENV_ATTEMPT, "0")
        if not attempt_text.isdigit():
            raise LlmscaleError(f"{ENV_ATTEMPT} = {attempt_text!r} is invalid: a whole number")
        return cls(model, optimizer, scheduler, loader, ctx, directory, config, int(attempt_text))

    def event(self, kind: journal.EventKind, **values: Any) -> None:
        journal.append(self.paths.root, journal.Event(event=kind, attempt=self.attempt, config_sha256=self.sha,
                                                      rank=self.ctx.rank, host=self.ctx.host, pid=os.getpid(),
                                                      **values))

    def __enter__(self) -> Session:
        self.paths.root.mkdir(parents=True, exist_ok=True)
        self.group = dist.new_group(backend="gloo")
        ck = self.config.checkpoint
        storage = StorageTier(self.paths.storage_tier(ck.dir), self.ctx.rank, self.ctx.world_size, self.sha, ck.keep,
                              ck.save_timeout_s, self.group, tag=f"a{self.attempt}")
        memory = MemoryTier(self.paths.memory_tier(self.ctx.rank), self.sha, self.ctx.world_size)
        self.tiers = TierState(self.config, storage, memory, self.paths.root)
        self._beat(BeatPhase.STARTUP)
        start_writer(self.group)  # DCP's writer process, before step 1: no save pays for its spawn
        self._beat(BeatPhase.RESTORE)
        restorer = Restorer(self.model, self.optimizer, self.scheduler, self.loader, self.ctx.device, self.group)
        self.step = restorer.resume(self, storage, memory)
        self._beat()
        return self

    @property
    def user(self) -> dict[str, Any]:
        """The run config's `user:` section, as written (empty when there is none)."""
        return dict(self.config.user or {})

    def __exit__(self, *exc: object) -> None:
        assert self.tiers is not None
        if exc[0] is None:
            self._beat(BeatPhase.CHECKPOINT)
            self.tiers.storage.close()
            self._report()
            self._beat()
        else:
            if isinstance(exc[1], BaseException):
                record_error(exc[1])
            stop_writer()
        if self.group is not None:
            dist.destroy_process_group(self.group)
            self.group = None

    def steps(self) -> Iterator[int]:
        """The steps still to run: heartbeat at the start of each, timers reset."""
        while self.step < self.config.schedule.total_steps:
            self.step += 1
            self._phases = dict.fromkeys(PHASES, 0.0)
            self._step_start = time.perf_counter()
            self._check_writer()
            yield self.step

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a part of the step (one of files.PHASES); the same phase may be entered several times."""
        if name not in self._phases:
            raise ValueError(f"phase {name!r} is not one of {', '.join(PHASES)}")
        start = time.perf_counter()
        try:
            yield
        finally:
            self._phases[name] += time.perf_counter() - start

    def end_step(self, loss: float, tokens: int) -> None:
        """Save the tiers due at this step, write the step record and the heartbeat."""
        assert self.tiers is not None
        with self.phase("checkpoint"):
            if self.tiers.storage_due(self.step):
                self._beat(BeatPhase.CHECKPOINT)  # a storage save may block: the longer deadline (watch.py)
            for kind, values in self.tiers.after_step(self.step, self._payload, self._storage_state):
                self.event(kind, **values)
            self._report()
        step_s = time.perf_counter() - self._step_start
        phases = dict(self._phases)
        phases["compute"] += max(step_s - sum(phases.values()), 0.0)
        self.tiers.step_s.append(step_s - phases["checkpoint"])
        append_step(self.paths, StepRecord(self.step, self.ctx.rank, self.attempt, self.ctx.host, time.time(), step_s,
                                           phases, float(loss), int(tokens)))
        self._beat()

    def wait_for_saves(self) -> None:
        """Block until the storage save in flight (if any) has committed or failed, and journal it."""
        assert self.tiers is not None
        if self.tiers.storage.pending is not None:
            self.tiers.storage.poll(block=True)
        self._report()

    def _check_writer(self) -> None:
        """A finished or failed save, or a dead background writer, noticed at the start of a step."""
        assert self.tiers is not None
        start = time.perf_counter()
        self.tiers.storage.poll()
        self._report()
        self._phases["checkpoint"] += time.perf_counter() - start

    def _report(self) -> None:
        """Journal every save that finished (committed or failed) since the last report."""
        assert self.tiers is not None
        for outcome in self.tiers.storage.drain():
            for kind, values in self.tiers.outcome_events(outcome):
                self.event(kind, **values)

    def _beat(self, phase: BeatPhase = BeatPhase.TRAIN) -> None:
        write_heartbeat(self.paths, self.ctx.rank,
                        Heartbeat(os.getpid(), self.step, time.time(), self.attempt, phase))

    def _payload(self) -> dict[str, Any]:
        """The memory-tier snapshot of this rank (plain state dicts; torch.load(weights_only=True) reads it)."""
        from llmscale.runtime import state

        return {"step": self.step, "model": self.model.state_dict(), "optim": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
                "rank": state.capture(self.loader, self.ctx.device)}

    def _storage_state(self) -> dict[str, Any]:
        from llmscale.runtime.restore import storage_state

        return storage_state(self.model, self.optimizer, self.scheduler, self.loader, self.ctx, self.step)
