"""`llmscale goodput` output: the JSON document (one job: element 0 of the estimate) and the terminal table that
reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.table import Table

from llmscale import __version__
from llmscale.reliability.estimate import at_interval
from llmscale.reliability.goodput import CheckpointPolicy, GoodputEstimate, Tier
from llmscale.reliability.montecarlo import MonteCarloResult
from llmscale.report.tables import console
from llmscale.units import SECONDS_PER_DAY, SECONDS_PER_HOUR

MINUTE = 60.0


@dataclass(frozen=True)
class MinInterval:
    """The shortest checkpoint interval the optimizer may advise: one training step."""

    seconds: float
    source: str
    """Where the step time came from (`--step-s`, or the shortest step the best published MFU allows)."""

    def clamped(self, interval_s: float) -> bool:
        """Whether the optimizer's interval sits on this floor (it would have gone shorter)."""
        return interval_s <= self.seconds * (1.0 + 1e-6)


def _minutes(values: dict[Tier, np.ndarray]) -> dict[str, float]:
    return {tier.value: float(v[0]) / MINUTE for tier, v in values.items()}


def goodput_document(est: GoodputEstimate, mc: MonteCarloResult | None, intervals_min: list[float], *, days: float,
                     digest: str, floor: MinInterval | None = None) -> dict[str, Any]:
    """The JSON of `llmscale goodput` (one job: element 0 of the estimate); `floor`: the shortest interval allowed
    (`min_interval`: its seconds, source, and the tiers whose best interval sits on it)."""
    best = est.best_policy[0]
    value = float(est.goodput[0])
    unplanned, planned = float(est.expected_unplanned[0]), float(est.expected_planned[0])
    doc: dict[str, Any] = {
        "llmscale_version": __version__, "input_sha256": digest, "days": days,
        "job_mtbf_hours": float(est.rates.job_mtbf_s[0]) / SECONDS_PER_HOUR,
        "job_mtbi_hours": 1.0 / float(est.rates.total_per_s[0]) / SECONDS_PER_HOUR,
        "expected_interruptions": unplanned + planned,
        "expected_interruptions_by_kind": {"unplanned": unplanned, "planned": planned},
        "interruptions_per_day_by_cause": {name: float(r[0]) * SECONDS_PER_DAY
                                           for name, r in est.rates.by_cause_per_s.items()},
        "best_policy": best.value, "goodput": value,
        "checkpoint_interval_min": {tier.value: float(est.interval_s(tier)[0]) / MINUTE
                                    for tier in Tier if np.isfinite(est.interval_s(tier)[0])},
        "effective_time_to_train_days": days / value if value > 0 else None,
        "policies": {p.value: _policy_entry(est, p) for p in est.policies},
        "checkpoint": {name: _scalar(getattr(est.ckpt, name)) for name in (
            "state_bytes", "bytes_per_gpu", "bytes_per_node", "snapshot_s", "replicate_s", "storage_write_s",
            "storage_limited", "load_memory_s", "load_storage_s", "host_tier_fits", "storage_assumed")},
        "restart": {"detection_s": est.restart.detection_s, "reschedule_s": est.restart.reschedule_s,
                    "startup_s": est.restart.startup_s, "from_memory_s": float(est.restart.from_memory_s[0]),
                    "from_storage_s": float(est.restart.from_storage_s[0])},
        "at_intervals": [{"interval_min": m, "goodput": {p.value: float(at_interval(est, p, m * MINUTE)[0])
                                                          for p in est.policies}} for m in intervals_min],
        "monte_carlo": None,
        "min_interval": None if floor is None else {
            "seconds": floor.seconds, "source": floor.source,
            "clamped_tiers": [tier.value for tier in Tier if np.isfinite(est.interval_s(tier)[0])
                              and floor.clamped(float(est.interval_s(tier)[0]))]},
    }
    if mc is not None:
        doc["monte_carlo"] = {**mc.percentiles(mc.goodput), "stderr": mc.stderr, "trials": int(mc.goodput.size),
                              "seed": mc.seed, "policy": best.value,
                              "interruptions": mc.percentiles(mc.interruptions)}
    return doc


def _scalar(value: Any) -> Any:
    item = np.asarray(value).reshape(-1)[0] if not isinstance(value, bool) else value
    return bool(item) if isinstance(item, np.bool_ | bool) else float(item)


def _policy_entry(est: GoodputEstimate, policy: CheckpointPolicy) -> dict[str, Any]:
    r = est.policies[policy]
    return {"goodput": float(r.goodput[0]), "feasible": bool(r.terms.feasible[0]),
            "checkpoint_interval_min": _minutes(r.interval_s), "young_min": _minutes(r.young_s),
            "daly_min": _minutes(r.daly_s), "blocking_s": float(r.terms.blocking_s[0]),
            "restart_memory_s": float(r.terms.restart_memory_s[0]),
            "restart_storage_s": float(r.terms.restart_storage_s[0]),
            "storage_share": float(r.terms.storage_share[0])}


def goodput_table(doc: dict[str, Any]) -> None:
    """The terminal table of a goodput document."""
    console.print(f"# llmscale {doc['llmscale_version']} goodput · cluster {doc['cluster']} · {doc['num_gpus']:,} GPUs "
                  f"({doc['num_nodes']:,} nodes) · model {doc['model']} · {doc['days']:g} days · failures "
                  f"{doc['failure_profile']} · input_sha256 {doc['input_sha256'][:16]}…")
    ck = doc["checkpoint"]
    console.print(f"# checkpoint {ck['state_bytes'] / 1e12:,.1f} TB, {ck['bytes_per_gpu'] / 1e9:,.2f} GB per GPU "
                  f"(evenly sharded); snapshot {ck['snapshot_s']:.3g} s, storage write {ck['storage_write_s']:.3g} s"
                  + (" (storage bandwidth assumed: catalog/checkpoint.yaml)" if ck["storage_assumed"] else ""))
    console.print(f"job MTBF {doc['job_mtbf_hours']:.3g} h · expected interruptions "
                  f"{doc['expected_interruptions']:,.0f} "
                  f"({doc['expected_interruptions_by_kind']['unplanned']:,.0f} unplanned, "
                  f"{doc['expected_interruptions_by_kind']['planned']:,.0f} planned)")
    table = Table(title="checkpoint policies at their best intervals", title_justify="left")
    for column in ("policy", "goodput", "tier", "interval min", "Young min", "Daly min", "blocks s", "restart s"):
        table.add_column(column, justify="left" if column in ("policy", "tier") else "right")
    for name, p in doc["policies"].items():
        for i, (tier, minutes) in enumerate(p["checkpoint_interval_min"].items()):
            value = f"{p['goodput']:.4f}" if p["feasible"] else "no fit"
            table.add_row(name if i == 0 else "", value if i == 0 else "", tier, f"{minutes:.3g}",
                          f"{p['young_min'][tier]:.3g}", f"{p['daly_min'][tier]:.3g}",
                          f"{p['blocking_s']:.3g}" if i == 0 else "",
                          f"{p['restart_' + tier + '_s']:.0f}")
    console.print(table)
    if not all(p["feasible"] for p in doc["policies"].values()):
        console.print("no fit: a node's snapshot and its peer's replica exceed the host memory a tier may use")
    for row in doc["at_intervals"]:
        values = " · ".join(f"{k} {v:.4f}" for k, v in row["goodput"].items())
        console.print(f"at {row['interval_min']:g} min: {values}")
    console.print(f"[bold]best[/bold]: {doc['best_policy']} · goodput {doc['goodput']:.4f} · intervals "
                  + ", ".join(f"{k} {v:.3g} min" for k, v in doc["checkpoint_interval_min"].items())
                  + f" · {doc['days']:g} days of work take "
                  f"{doc['effective_time_to_train_days'] or float('inf'):,.1f} days")
    floor = doc.get("min_interval")
    if floor and floor["clamped_tiers"]:
        console.print(f"[yellow]clamped[/yellow]: the {', '.join(floor['clamped_tiers'])} interval would be shorter "
                      f"than one step; held at {floor['seconds']:.3g} s ({floor['source']})")
    mc = doc["monte_carlo"]
    if mc is not None:
        console.print(f"Monte Carlo ({mc['trials']:,} trials, seed {mc['seed']}): goodput p5 {mc['p5']:.4f} "
                      f"p50 {mc['p50']:.4f} p95 {mc['p95']:.4f} (mean {mc['mean']:.4f} ± {mc['stderr']:.1g}); "
                      f"interruptions p5 {mc['interruptions']['p5']:,.0f} p50 {mc['interruptions']['p50']:,.0f} "
                      f"p95 {mc['interruptions']['p95']:,.0f}")
