"""One attempt of a job on torch's elastic agent: `torch.distributed.launcher.api.elastic_launch` with
`max_restarts=0` (the supervisor drives the attempts, so it can journal each one, back off, detect hangs and stop
after K attempts without progress) and a c10d rendezvous on loopback with a fresh port and a fresh run id per
attempt.

Why fresh: torchrun's static rendezvous reuses one TCPStore across restarts without a per-attempt key prefix, so
new ranks can read the dead peers' addresses (issue 15 measured a re-rendezvous in only 1 of 4 kills with
`--max-restarts 1`). A new store per attempt — a new endpoint port and rendezvous id — shares no keys with the last
(pytorch/pytorch torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py creates the TCPStore on the
endpoint; dynamic_rendezvous.py keys its state under the run id).
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass
from pathlib import Path

TORCH_SIGNALS = "SIGQUIT"
"""The signals left to torch's agent (LaunchConfig.signals_to_handle): the stop signals are the supervisor's."""


@dataclass(frozen=True)
class RankFailure:
    """One worker that failed, as the elastic agent reported it."""

    rank: int
    pid: int
    exit_code: int
    """Negative: killed by signal −exit_code (subprocess convention)."""
    signal: str | None
    message: str


@dataclass(frozen=True)
class AttemptResult:
    ok: bool
    failures: tuple[RankFailure, ...]
    error: str | None = None
    """A failure of the agent itself (rendezvous, launch), not of a worker."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 free at this moment (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_attempt(script: Path, args: list[str], nproc: int, attempt: int, run_key: str, log_dir: Path,
                rdzv_timeout_s: int = 120) -> AttemptResult:
    """Start `nproc` workers of `python -u script args` under the elastic agent and wait for them; the environment
    (LLMSCALE_* variables) is inherited from this process."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    log_dir.mkdir(parents=True, exist_ok=True)
    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"{run_key}-attempt{attempt}",
        rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}", rdzv_configs={"is_host": True},
        rdzv_timeout=rdzv_timeout_s, max_restarts=0, monitor_interval=0.05, local_addr="127.0.0.1",
        signals_to_handle=TORCH_SIGNALS,  # SIGINT, SIGTERM, SIGHUP stay the supervisor's (interrupt.py)
        logs_specs=DefaultLogsSpecs(log_dir=str(log_dir), redirects=Std.NONE, tee=Std.NONE),
    )
    try:
        elastic_launch(config, entrypoint=sys.executable)("-u", str(script), *args)
    except ChildFailedError as exc:
        failures = tuple(
            RankFailure(rank, f.pid, f.exitcode, f.signal_name() if f.exitcode < 0 else None, str(f.message))
            for rank, f in sorted(exc.failures.items()))
        return AttemptResult(False, failures)
    except SignalException:
        raise  # the supervisor was told to stop: not a failed attempt
    except Exception as exc:  # the agent itself failed (rendezvous timeout, spawn error): one attempt lost
        return AttemptResult(False, (), f"{type(exc).__name__}: {exc}")
    return AttemptResult(True, ())
