"""Layouts: many candidate parallel layouts as a struct of numpy arrays (DESIGN.md principle 1).

Shape legend: every field is a 1-D array of shape (N,), one element per candidate layout. Integer
fields are int64; `recompute` and `schedule` hold the `.code` of their enum members; flags are bool.
Explaining one layout is a search of size one: `Layouts.from_layout(layout, num_gpus)`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass, replace
from typing import TypeVar

import numpy as np

from llmscale.specs.layout import Layout, RankOrder, Recompute, Schedule

_INT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "mbs", "zero", "recompute", "schedule", "rank_order")
_BOOL_FIELDS = ("sp", "offload_optimizer", "offload_params", "tp_comm_overlap", "ep_comm_overlap")
DataclassT = TypeVar("DataclassT")


@dataclass(frozen=True)
class Layouts:
    """N candidate layouts; see the module docstring for the shape legend."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    vpp: np.ndarray
    mbs: np.ndarray
    zero: np.ndarray
    recompute: np.ndarray
    schedule: np.ndarray
    sp: np.ndarray
    offload_optimizer: np.ndarray
    offload_params: np.ndarray
    tp_comm_overlap: np.ndarray
    ep_comm_overlap: np.ndarray
    rank_order: np.ndarray

    @classmethod
    def from_columns(cls, **columns: object) -> Layouts:
        """Broadcast scalar or array columns to one shape. Missing columns take Layout's defaults
        (dp must be given); etp defaults to tp, sp to tp > 1, schedule to interleaved iff vpp > 1."""
        defaults: dict[str, object] = {
            "tp": 1, "pp": 1, "cp": 1, "ep": 1, "vpp": 1, "mbs": 1, "zero": 1,
            "recompute": Recompute.NONE.code, "offload_optimizer": False, "offload_params": False,
            "tp_comm_overlap": False, "ep_comm_overlap": False, "rank_order": RankOrder.TP_CP_EP_DP_PP.code,
        }
        merged = {**defaults, **columns}
        if "dp" not in merged:
            raise ValueError("Layouts.from_columns needs a dp column")
        tp = np.asarray(merged["tp"])
        vpp = np.asarray(merged["vpp"])
        merged.setdefault("etp", tp)
        merged.setdefault("sp", tp > 1)
        merged.setdefault(
            "schedule", np.where(vpp > 1, Schedule.INTERLEAVED.code, Schedule.ONE_F_ONE_B.code)
        )
        names = [f.name for f in fields(cls)]
        unknown = set(merged) - set(names)
        if unknown:
            raise ValueError(f"unknown layout columns: {sorted(unknown)}")
        arrays = np.broadcast_arrays(*(np.asarray(merged[name]) for name in names))
        typed = {
            name: np.ascontiguousarray(arr, dtype=bool if name in _BOOL_FIELDS else np.int64).reshape(-1)
            for name, arr in zip(names, arrays, strict=True)
        }
        return cls(**typed)

    @classmethod
    def from_layout(cls, layout: Layout, num_gpus: int) -> Layouts:
        """One layout as arrays of size one; dp defaults to num_gpus / (tp·cp·pp)."""
        dp = layout.dp if layout.dp is not None else max(1, num_gpus // (layout.tp * layout.cp * layout.pp))
        return cls.from_columns(
            tp=layout.tp, pp=layout.pp, dp=dp, cp=layout.cp, ep=layout.ep, etp=layout.resolved_etp,
            vpp=layout.vpp, mbs=layout.mbs, zero=layout.zero, recompute=layout.recompute.code,
            schedule=layout.resolved_schedule.code, sp=layout.resolved_sp,
            offload_optimizer=layout.offload_optimizer, offload_params=layout.offload_params,
            tp_comm_overlap=layout.tp_comm_overlap, ep_comm_overlap=layout.ep_comm_overlap,
            rank_order=layout.rank_order.code,
        )

    @property
    def size(self) -> int:
        return int(self.tp.shape[0])

    @property
    def num_gpus(self) -> np.ndarray:
        return self.tp * self.cp * self.pp * self.dp

    def num_microbatches(self, global_batch: int) -> np.ndarray:
        """Micro-batches per step and pipeline: global batch / (dp · mbs), at least 1 (`rules.check` masks
        layouts where it does not divide)."""
        result: np.ndarray = np.maximum(global_batch // np.maximum(self.dp * self.mbs, 1), 1)
        return result

    @property
    def edp(self) -> np.ndarray:
        """Expert data-parallel size: the tp·cp·dp ranks of a stage re-partitioned as etp·ep·edp.
        Integer division; `rules.check` masks layouts where it does not divide."""
        return (self.tp * self.cp * self.dp) // np.maximum(self.ep * self.etp, 1)

    def row(self, i: int) -> Layout:
        """Layout i as a validated scalar Layout (for reports and export)."""
        recompute = list(Recompute)[int(self.recompute[i])]
        schedule = list(Schedule)[int(self.schedule[i])]
        return Layout(
            tp=int(self.tp[i]), pp=int(self.pp[i]), dp=int(self.dp[i]), cp=int(self.cp[i]),
            ep=int(self.ep[i]), etp=int(self.etp[i]), vpp=int(self.vpp[i]), mbs=int(self.mbs[i]),
            zero=int(self.zero[i]), recompute=recompute, sp=bool(self.sp[i]), schedule=schedule,
            offload_optimizer=bool(self.offload_optimizer[i]), offload_params=bool(self.offload_params[i]),
            tp_comm_overlap=bool(self.tp_comm_overlap[i]), ep_comm_overlap=bool(self.ep_comm_overlap[i]),
            rank_order=list(RankOrder)[int(self.rank_order[i])],
        )

    def take(self, index: np.ndarray) -> Layouts:
        """The layouts at `index` (an integer or boolean array)."""
        return Layouts(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def distinct(self, *names: str) -> DistinctRows:
        """The distinct rows of the columns `names` (see `distinct_rows`)."""
        return distinct_rows(*(getattr(self, name) for name in names))


@dataclass(frozen=True)
class DistinctRows:
    """Layouts grouped by the values of a few integer columns: a function of those columns alone is computed once
    per distinct row (on `first`) and spread back to every layout, with the same values element by element. A
    search has millions of layouts but few distinct (tp, cp, mbs, …) combinations."""

    first: np.ndarray
    """One layout index per distinct row, shape (U,)."""
    inverse: np.ndarray
    """The distinct row of every layout, shape (N,)."""

    def spread(self, values: np.ndarray) -> np.ndarray:
        """Per-row values (U,) → per-layout values (N,)."""
        result: np.ndarray = values.take(self.inverse)
        return result

    def spread_fields(self, obj: DataclassT) -> DataclassT:
        """A dataclass of per-row arrays → the same dataclass of per-layout arrays (nested dataclasses included,
        other fields kept)."""
        values = {f.name: getattr(obj, f.name) for f in fields(obj)}  # type: ignore[arg-type]
        spread = {name: self.spread(v) if isinstance(v, np.ndarray) else self.spread_fields(v)
                  for name, v in values.items() if isinstance(v, np.ndarray) or is_dataclass(v)}
        return replace(obj, **spread)  # type: ignore[type-var]


def distinct_rows(*columns: np.ndarray) -> DistinctRows:
    """Distinct rows of integer or bool columns of shape (N,): one mixed-radix key per row (each column offset by
    its minimum), then `np.unique` of the keys; falls back to `np.unique(axis=0)` if the key would overflow."""
    size = columns[0].shape[0]
    if size == 0:
        return DistinctRows(np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp))
    key = np.zeros(size, dtype=np.int64)
    radix = 1
    for column in columns:
        values = column.astype(np.int64, copy=False)
        low, high = int(values.min()), int(values.max())
        radix *= high - low + 1
        if radix >= 2**62:
            _, first, inverse = np.unique(np.stack(columns, axis=1).astype(np.int64), axis=0, return_index=True,
                                          return_inverse=True)
            return DistinctRows(first, inverse.reshape(-1))
        key *= high - low + 1
        key += values - low if low else values
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return DistinctRows(first, inverse.reshape(-1))
