"""The run's Prometheus endpoint: a prometheus-client custom Collector that reads the run directory on every scrape
(no state in the supervisor to lose), served by prometheus-client's own HTTP server. Gauges of the latest complete
step, counters from the journal; names after prometheus.io/docs/practices/naming. The metrics table:
docs/monitoring.md (Prometheus metrics); how each is read: docs/monitoring.md#monitor-metrics.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmscale.errors import LlmscaleError
from llmscale.monitor.predict import Prediction
from llmscale.monitor.rundir import PHASES, read_run


def _require_prometheus() -> None:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise LlmscaleError("the metrics endpoint needs prometheus-client: pip install 'llmscale[monitor]'") from None


def _gauges(root: Path, prediction: Prediction | None) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    snap = read_run(root)
    done = snap.step_numbers
    if not done:
        return
    step = done[-1]
    recs = {rank: snap.record(rank, step) for rank in snap.ranks}
    n = len(recs)
    step_s = sum(r.step_s for r in recs.values()) / n
    yield GaugeMetricFamily("llmscale_step", "latest step every rank has recorded", value=step)
    yield GaugeMetricFamily("llmscale_step_seconds", "step time, mean over ranks", value=step_s)
    phase = GaugeMetricFamily("llmscale_step_phase_seconds", "step parts, mean over ranks", labels=["phase"])
    for p in PHASES:
        phase.add_metric([p], sum(float(r.phases_s.get(p, 0.0)) for r in recs.values()) / n)
    yield phase
    rank = GaugeMetricFamily("llmscale_rank_step_seconds", "step time of each rank", labels=["rank", "host"])
    for r, rec in recs.items():
        rank.add_metric([str(r), rec.host], rec.step_s)
    yield rank
    times = [r.step_s for r in recs.values()]
    yield GaugeMetricFamily("llmscale_rank_step_spread_seconds", "max - min step time over ranks",
                            value=max(times) - min(times))
    tokens_per_s = sum(r.tokens for r in recs.values()) / step_s if step_s > 0 else 0.0
    yield GaugeMetricFamily("llmscale_tokens_per_second", "tokens per second over all ranks", value=tokens_per_s)
    yield GaugeMetricFamily("llmscale_loss", "training loss of rank 0 (lowest rank)", value=recs[min(recs)].loss)
    if prediction is not None:
        mfu = tokens_per_s * prediction.model_flops_per_token / (n * prediction.peak_flops_per_s_per_rank)
        yield GaugeMetricFamily("llmscale_mfu_ratio", "model FLOPs/s over ranks x the host's measured per-rank fp32 "
                                "GEMM rate (see docs/monitoring.md)", value=mfu)
        yield GaugeMetricFamily("llmscale_predicted_step_seconds", "llmscale's predicted step time",
                                value=prediction.step_s)


def _counters(root: Path) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily

    snap = read_run(root)
    kinds = Counter(e.event.value for e in snap.events)
    yield CounterMetricFamily("llmscale_restarts", "attempts started after the first",
                              value=max(kinds["attempt_start"] - 1, 0))
    faults = CounterMetricFamily("llmscale_faults", "faults in the journal, by cause", labels=["cause"])
    for cause, count in Counter((e.cause.value if e.cause else "unknown") for e in snap.events
                                if e.event.value == "fault").items():
        faults.add_metric([cause], count)
    yield faults
    yield CounterMetricFamily("llmscale_checkpoints_saved", "storage checkpoints committed",
                              value=kinds["checkpoint_saved"])
    yield CounterMetricFamily("llmscale_checkpoint_failures", "failed saves", value=kinds["checkpoint_failed"])
    stall = sum(e.save_blocking_s or 0.0 for e in snap.events if e.event.value in ("checkpoint_saved",
                                                                                  "memory_snapshot"))
    yield CounterMetricFamily("llmscale_checkpoint_stall_seconds", "blocking seconds of saves and snapshots",
                              value=stall)
    yield CounterMetricFamily("llmscale_journal_skipped_lines", "unparseable run-dir lines skipped",
                              value=snap.skipped_lines)


class RunCollector:
    """A prometheus-client custom collector over one run directory (module docstring)."""

    def __init__(self, root: Path, prediction: Prediction | None = None) -> None:
        self.root, self.prediction = root, prediction

    def collect(self) -> Iterator[Any]:
        yield from _gauges(self.root, self.prediction)
        yield from _counters(self.root)

    def describe(self) -> list[Any]:
        return []  # read on scrape: nothing to describe at registration


@dataclass
class MetricsServer:
    """A running endpoint: `.port` (the one bound, when 0 was asked), `.close()`."""

    port: int
    _server: Any
    _thread: Any

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(run_dir: Path, port: int, prediction: Prediction | None = None, host: str = "127.0.0.1") -> MetricsServer:
    """Serve /metrics for `run_dir` on host:port (0: a free port) in a daemon thread."""
    _require_prometheus()
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(RunCollector(Path(run_dir), prediction))
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise LlmscaleError(f"--metrics-port {port}: cannot listen on {host}:{port} ({exc.strerror})") from None
    return MetricsServer(server.server_address[1], server, thread)
