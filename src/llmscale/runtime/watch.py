"""Hang detection and fault attribution for one attempt. torch-free. A rank whose heartbeat is older than its phase's
deadline (`heartbeat_timeout_s` training, `phase_timeout_s` else; after NVIDIA/nvidia-resiliency-ext's rank monitor)
gets every worker SIGKILLed; one root cause per failed attempt: hang, signal (oom), then exit-code causes.
Deadlines and the attribution order: docs/runtime.md#runtime-watch.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from dataclasses import dataclass

from llmscale.runtime.agent import AttemptResult, RankFailure
from llmscale.runtime.files import BeatPhase, RunPaths, read_heartbeat
from llmscale.runtime.journal import Cause
from llmscale.runtime.procs import descendants, is_zombie, kill_pids, state_of

TORCH_PLACEHOLDER = "To enable traceback see"
"""torch's elastic agent's message for a worker that wrote no error file (torch/distributed/elastic/multiprocessing/
errors/__init__.py ProcessFailure): the trainer's own exception is recorded there by session.record_error."""
NETWORK_WORDS = re.compile(r"connection (reset|closed|refused)|timed out|timeout|gloo|nccl|broken pipe", re.I)


@dataclass(frozen=True)
class HangFound:
    rank: int
    pid: int | None
    step: int | None
    last_beat_unix: float | None
    """None: no heartbeat of this attempt at all."""
    detected_unix: float
    killed_pids: tuple[int, ...]


class HangWatch(threading.Thread):
    """The monitor thread of one attempt (module docstring); `found` is set when it killed the attempt."""

    def __init__(self, paths: RunPaths, world: int, attempt: int, timeout_s: float, phase_timeout_s: float,
                 poll_s: float = 0.1) -> None:
        super().__init__(name=f"llmscale-hang-watch-{attempt}", daemon=True)
        self.paths, self.world, self.attempt = paths, world, attempt
        self.timeout_s, self.phase_timeout_s, self.poll_s = timeout_s, phase_timeout_s, poll_s
        self.started_unix = time.time()
        self.found: HangFound | None = None
        self.last_beats: dict[int, tuple[float, int]] = {}
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5.0)

    def run(self) -> None:
        while not self._halt.wait(self.poll_s):
            hung = self._check(time.time())
            if hung is not None:
                pids = [p for p in descendants(os.getpid()) if not is_zombie(p)]
                killed = kill_pids(pids, signal.SIGKILL)
                self.found = HangFound(*hung, detected_unix=time.time(), killed_pids=tuple(killed))
                return

    def _check(self, now: float) -> tuple[int, int | None, int | None, float | None] | None:
        """The hung rank, if any (module docstring). While any rank is in a slow phase within its deadline, its
        peers wait for it in a collective with training heartbeats: they get the phase deadline too — except a
        stopped process (SIGSTOP), which never resumes by itself. Once any rank is past its deadline, a stopped
        process is the one hung — even when its own heartbeat is younger (a peer that wrote its heartbeat first and
        then waited for it in the collective ages past the deadline first) — else the oldest heartbeat."""
        beats = {}
        for rank in range(self.world):
            beat = read_heartbeat(self.paths, rank)
            if beat is not None and beat.attempt == self.attempt:
                self.last_beats[rank] = (beat.time_unix, beat.step)
                if not is_zombie(beat.pid):  # exited: the agent reports it
                    beats[rank] = beat
            elif now - self.started_unix > self.phase_timeout_s:
                return rank, None, None, None
        slow = any(b.phase is not BeatPhase.TRAIN and now - b.time_unix <= self.phase_timeout_s
                   for b in beats.values())
        late: list[tuple[bool, float, int, int, int]] = []
        for rank, beat in beats.items():
            age = now - beat.time_unix
            if age <= self.timeout_s:
                continue
            stopped = state_of(beat.pid) in ("T", "t")
            if stopped or age > self.phase_timeout_s or (beat.phase is BeatPhase.TRAIN and not slow):
                late.append((not stopped, beat.time_unix, rank, beat.pid, beat.step))
        if not late:
            return None
        stopped_ranks = [(b.time_unix, r, b.pid, b.step) for r, b in beats.items() if state_of(b.pid) in ("T", "t")]
        if stopped_ranks:
            when, rank, pid, step = min(stopped_ranks)
            return rank, pid, step, when
        _, when, rank, pid, step = min(late)
        return rank, pid, step, when


@dataclass(frozen=True)
class Attribution:
    cause: Cause
    rank: int | None
    pid: int | None
    exit_code: int | None
    signal: str | None
    message: str


def _signal_of(f: RankFailure) -> str | None:
    if f.exit_code < 0:
        return f.signal
    if 128 < f.exit_code < 128 + 65:
        try:
            return signal.Signals(f.exit_code - 128).name
        except ValueError:
            return None
    return None


def attribute(result: AttemptResult, hang: HangFound | None, oom_risen: bool,
              checkpoint_failed: bool) -> Attribution:
    """The root cause of a failed attempt (module docstring)."""
    if hang is not None:
        age = "no heartbeat since the attempt began" if hang.last_beat_unix is None else (
            f"heartbeat {hang.detected_unix - hang.last_beat_unix:.1f} s old")
        return Attribution(Cause.HANG, hang.rank, hang.pid, None, None,
                           f"rank {hang.rank} hung ({age}); killed pids {list(hang.killed_pids)}")
    if not result.failures:
        return Attribution(Cause.UNKNOWN, None, None, None, None, result.error or "the agent failed")
    # the agent SIGTERMs the surviving workers once one failed: a SIGTERM is a consequence when anything else failed
    candidates = [f for f in result.failures if _signal_of(f) != "SIGTERM"] or list(result.failures)
    signalled = [f for f in candidates if _signal_of(f) is not None]
    if signalled:
        f = signalled[0]
        sig = _signal_of(f)
        cause = Cause.OOM if sig == "SIGKILL" and oom_risen else Cause.PROCESS_KILLED
        return Attribution(cause, f.rank, f.pid, f.exit_code, sig, f"rank {f.rank} pid {f.pid} killed by {sig}")
    f = candidates[0]
    said = f.message if not f.message.startswith(TORCH_PLACEHOLDER) else (
        "the trainer recorded no message (an exception outside the Session: wrap the entry point in "
        "llmscale.runtime.entry.run)")
    if checkpoint_failed:
        cause = Cause.CHECKPOINT_IO
    elif NETWORK_WORDS.search(said):
        cause = Cause.NETWORK
    else:
        cause = Cause.PROCESS_EXIT
    return Attribution(cause, f.rank, f.pid, f.exit_code, None,
                       f"rank {f.rank} pid {f.pid} exited with code {f.exit_code}: {said[:300]}")
