"""`llmscale goodput --plot FILE.png`: goodput vs checkpoint interval and vs job size, one curve per policy."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from llmscale.reliability.estimate import at_interval, job_goodput
from llmscale.reliability.goodput import CheckpointPolicy, GoodputEstimate
from llmscale.report.png import Panel, Series, write_png
from llmscale.specs.cluster import ClusterSpec
from llmscale.specs.constants import Constants
from llmscale.specs.failures import Mitigation
from llmscale.specs.model import ModelSpec
from llmscale.specs.train import TrainSpec
from llmscale.units import SECONDS_PER_DAY, si_count

INTERVALS_MIN = np.geomspace(1.0 / 6.0, 1440.0, 48)
"""10 s to a day."""


def _interval_panel(est: GoodputEstimate) -> Panel:
    def curve(policy: CheckpointPolicy) -> np.ndarray:
        values = np.array([at_interval(est, policy, m * 60.0)[0] for m in INTERVALS_MIN])
        return np.where(values > 0, values, np.nan)  # 0 marks intervals the policy cannot run at: leave a gap

    curves = {policy: curve(policy) for policy in est.policies}
    # A policy that cannot run at any single interval on this axis (tiered needs two) gets no legend entry.
    series = tuple(Series(policy.value, INTERVALS_MIN, c) for policy, c in curves.items() if np.isfinite(c).any())
    best = est.policies[est.best_policy[0]]
    marker = float(next(iter(best.interval_s.values()))[0]) / 60.0
    ticks = ((0.1, "0.1"), (1.0, "1"), (10.0, "10"), (100.0, "100"), (1000.0, "1000"))
    mtbf_min = float(est.rates.job_mtbf_s[0]) / 60.0
    mtbf = f"{mtbf_min:.3g} MIN" if mtbf_min < 120 else f"{mtbf_min / 60:.3g} H"
    return Panel(f"GOODPUT VS INTERVAL (JOB MTBF {mtbf})", "CHECKPOINT INTERVAL (MIN)", "GOODPUT", series, ticks,
                 marker_x=marker)


def _size_panel(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, constants: Constants, num_gpus: int,
                days: float, hot_spares: bool, mitigations: tuple[Mitigation, ...]) -> Panel:
    smallest = max(cluster.node.gpus_per_node, 1024)
    sizes = np.unique(np.append(2.0 ** np.arange(np.log2(smallest), np.log2(cluster.num_gpus) + 1e-9),
                                [cluster.num_gpus, num_gpus]))
    est = job_goodput(model, cluster, train, sizes, days * SECONDS_PER_DAY, constants, hot_spares=hot_spares,
                      mitigations=mitigations)
    series = tuple(Series(policy.value, sizes, np.where(result.terms.feasible, result.goodput, np.nan))
                   for policy, result in est.policies.items())
    step = max(1, len(sizes) // 6)  # at most ~7 labels
    ticks = tuple((float(g), si_count(float(g))) for g in sizes[::step])  # decimal: 500,000 GPUs is 500K
    return Panel("GOODPUT VS JOB SIZE (BEST INTERVALS)", "JOB SIZE (GPUS)", "GOODPUT", series, ticks,
                 marker_x=float(num_gpus), legend_low=True)


def write_charts(path: Path, est: GoodputEstimate, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec,
                 constants: Constants, num_gpus: int, days: float, hot_spares: bool,
                 mitigations: tuple[Mitigation, ...]) -> None:
    write_png(path, [_interval_panel(est),
                     _size_panel(model, cluster, train, constants, num_gpus, days, hot_spares, mitigations)])
