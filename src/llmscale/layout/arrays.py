"""Layouts: many candidate parallel layouts as a struct of numpy arrays (docs/architecture.md principle 1).

Every column is a 1-D array of shape (N,), one element per layout, read from `specs.layout.Layout` (`LAYOUT_FIELDS`);
a formula keyed on a few columns runs on a view of them (`select`), which refuses any other column. Types, defaults
and views: docs/cost-model.md#arrays."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any, TypeVar

import numpy as np

from llmscale.specs.layout import Layout, LayoutField, from_code, spec_fields

DataclassT = TypeVar("DataclassT")
FormulaT = TypeVar("FormulaT", bound=Callable[..., Any])


class Layouts:
    """N candidate layouts (module docstring): `lay.tp`, `lay.schedule`, … are the columns."""

    _spec: type[Layout]
    _view: tuple[str, ...] | None
    _names: tuple[str, ...]

    def __init__(self, columns: Mapping[str, np.ndarray], spec: type[Layout] = Layout,
                 view: tuple[str, ...] | None = None) -> None:
        """`columns` must hold every field of `spec` (a view: every name in `view`) as arrays of one shape; use
        `from_columns` or `from_layout` to fill defaults."""
        names = view if view is not None else tuple(f.name for f in spec_fields(spec))
        missing = [name for name in names if name not in columns]
        if missing:
            raise ValueError(f"Layouts needs the columns {missing}")
        object.__setattr__(self, "_spec", spec)
        object.__setattr__(self, "_view", view)
        object.__setattr__(self, "_names", names)
        self.__dict__.update({name: columns[name] for name in names})

    def __getattr__(self, name: str) -> np.ndarray:
        """Only reached for a name that is not a column here: say why."""
        if name.startswith("_"):
            raise AttributeError(name)
        if self._view is not None and name in {f.name for f in spec_fields(self._spec)}:
            raise AttributeError(f"layout column {name!r} is outside this view of {', '.join(self._view)}: a formula "
                                 "evaluated once per distinct row of those columns read another; add it to the key")
        raise AttributeError(f"{type(self).__name__} has no column {name!r}")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Layouts are immutable; use replace(**columns)")

    @classmethod
    def from_columns(cls, *, spec: type[Layout] = Layout, num_gpus: Any = None, **columns: Any) -> Layouts:
        """Broadcast scalar or array columns to one shape. Missing columns take the spec's defaults, derived
        fields their rule (dp needs `num_gpus` when it is not given; etp = tp, sp = tp > 1, schedule interleaved
        iff vpp > 1); enum members may be given as members or codes."""
        specs = spec_fields(spec)
        unknown = set(columns) - {f.name for f in specs}
        if unknown:
            raise ValueError(f"unknown layout columns: {sorted(unknown)}")
        merged: dict[str, Any] = {f.name: f.code(f.default) for f in specs if f.default is not None}
        merged |= {name: np.asarray(_code(value)) for name, value in columns.items() if value is not None}
        for f in specs:
            if f.name not in merged and f.knob.derive is not None:
                try:
                    merged[f.name] = f.knob.derive({**merged, "num_gpus": num_gpus})
                except TypeError:  # the rule needs what was not given (dp: num_gpus)
                    raise ValueError(f"Layouts.from_columns needs a {f.name} column (or what derives it)") from None
        names = [f.name for f in specs]
        arrays = np.broadcast_arrays(*(np.asarray(merged[name]) for name in names))
        typed = {f.name: np.ascontiguousarray(a, dtype=bool if f.kind is bool else np.int64).reshape(-1)
                 for f, a in zip(specs, arrays, strict=True)}
        return cls(typed, spec)

    @classmethod
    def from_layout(cls, layout: Layout, num_gpus: int) -> Layouts:
        """One layout as arrays of size one; dp defaults to num_gpus / (tp·cp·pp)."""
        values = {f.name: getattr(layout, f.name) for f in spec_fields(type(layout))}
        return cls.from_columns(spec=type(layout), num_gpus=num_gpus, **values)

    @property
    def names(self) -> tuple[str, ...]:
        """The columns this struct (or view) holds."""
        names: tuple[str, ...] = self._names
        return names

    @property
    def fields(self) -> tuple[LayoutField, ...]:
        """The field definitions of the columns, in order."""
        return tuple(f for f in spec_fields(self._spec) if f.name in self.names)

    @property
    def size(self) -> int:
        return int(self.__dict__[self.names[0]].shape[0])

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

    def column(self, name: str) -> np.ndarray:
        """The column `name` (as `getattr`, for names held in a variable)."""
        value: np.ndarray = getattr(self, name)
        return value

    def row(self, i: int) -> Layout:
        """Layout i as a validated scalar Layout (for reports and export); a view has too few columns for one."""
        if self._view is not None:
            raise AttributeError(f"a view of {', '.join(self._view)} holds no whole layout")
        values = {f.name: _scalar(f, self.__dict__[f.name][i]) for f in self.fields}
        row: Layout = self._spec.model_validate(values)
        return row

    def take(self, index: np.ndarray | slice) -> Layouts:
        """The layouts at `index` (an integer or boolean array: copies), or in the range `index` (a slice: views of
        these columns, no copy; the columns are never written)."""
        return Layouts({name: self.__dict__[name][index] for name in self.names}, self._spec, self._view)

    def select(self, *names: str) -> Layouts:
        """A view holding only the columns `names`: reading any other raises (module docstring)."""
        return Layouts({name: self.column(name) for name in names}, self._spec, tuple(names))

    def replace(self, **columns: np.ndarray) -> Layouts:
        """These layouts with some of their columns replaced (arrays of the same shape)."""
        unknown = set(columns) - set(self.names)
        if unknown:
            raise AttributeError(f"replace() got columns these layouts do not hold: {sorted(unknown)}")
        return Layouts({**{name: self.__dict__[name] for name in self.names}, **columns}, self._spec, self._view)

    @classmethod
    def concat(cls, *parts: Layouts) -> Layouts:
        """The layouts of `parts`, one after the other (all of the same spec and columns)."""
        first = parts[0]
        return cls({name: np.concatenate([p.column(name) for p in parts]) for name in first.names}, first._spec,
                   first._view)

    def distinct(self, *names: str) -> DistinctRows:
        """The distinct rows of the columns `names` (see `distinct_rows`)."""
        return distinct_rows(*(self.column(name) for name in names))

    def distinct_view(self, *names: str) -> tuple[DistinctRows, Layouts]:
        """The distinct rows of the columns `names` and one layout of each, as a view of those columns only: what a
        formula of those columns alone is evaluated on before `DistinctRows.spread` hands its result to every
        layout."""
        rows = self.distinct(*names)
        return rows, self.select(*names).take(rows.first)


def _code(value: Any) -> Any:
    """An enum member as its code; anything else as given."""
    code = getattr(value, "code", None)
    return code if code is not None and not isinstance(value, np.ndarray) else value


def _scalar(f: LayoutField, value: Any) -> Any:
    if f.kind is bool:
        return bool(value)
    if f.kind is int:
        return int(value)
    return from_code(f.kind, int(value))


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
        return take_fields(obj, self.inverse)


_READS = "layout_reads"
"""The attribute `reads` sets on a formula."""


def reads(*columns: str) -> Callable[[FormulaT], FormulaT]:
    """Declares, beside a vectorized formula, the layout columns it reads: the cost model evaluates it once per
    distinct row of a key made of such declarations (`reads_of`), on a view of them (`Layouts.select`), so a read
    outside them raises instead of spreading one row's value to rows that differ there."""
    known = {f.name for f in spec_fields(Layout)}
    unknown = [name for name in columns if name not in known]
    if unknown:
        raise ValueError(f"reads(): not layout columns: {unknown}")

    def declare(formula: FormulaT) -> FormulaT:
        setattr(formula, _READS, frozenset(columns))
        return formula

    return declare


def reads_of(*formulas: Callable[..., Any] | tuple[str, ...]) -> tuple[str, ...]:
    """The columns the formulas declare (`reads`), with any column tuples given, united in the layout's field
    order: the de-duplication key of a step that evaluates them all."""
    names: set[str] = set()
    for formula in formulas:
        names |= set(formula) if isinstance(formula, tuple) else vars(formula)[_READS]
    return tuple(f.name for f in spec_fields(Layout) if f.name in names)


def take_fields(obj: DataclassT, index: np.ndarray) -> DataclassT:
    """A dataclass of arrays with every array field (nested dataclasses included) taken at `index`; other fields
    kept."""
    values = {f.name: getattr(obj, f.name) for f in fields(obj)}  # type: ignore[arg-type]
    taken = {name: v.take(index) if isinstance(v, np.ndarray) else take_fields(v, index)
             for name, v in values.items() if isinstance(v, np.ndarray) or is_dataclass(v)}
    return replace(obj, **taken)  # type: ignore[type-var]


def distinct_rows(*columns: np.ndarray) -> DistinctRows:
    """Distinct rows of integer or bool columns of shape (N,), in ascending (lexicographic) order as np.unique(axis=0)
    gives them: one packed mixed-radix key per row, renumbered densely (`_dense`) whenever the next column would take
    its range past ~4N, so a table over the range groups the rows in O(N): np.unique's sort cost 8 % of the distinct
    layouts scored a second (benchmarks/results.md, 2026-12-06)."""
    size = columns[0].shape[0]
    if size == 0:
        return DistinctRows(np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp))
    limit = 4 * size + 1024
    key = np.zeros(size, dtype=np.int64)
    radix = 1
    for column in columns:
        low = int(column.min())
        span = int(column.max()) - low + 1
        if span > 2**31:  # a wide column: its own codes first, so the packed key stays inside int64
            column, low = np.unique(column, return_inverse=True)[1].reshape(-1), 0
            span = int(column.max()) + 1
        if span == 1:
            continue  # a constant column separates no rows
        if radix * span > limit:
            key, radix = _dense(key, radix)
        key = key * span + (column.astype(np.int64, copy=False) - low)
        radix *= span
    key, radix = _dense(key, radix)
    first = np.empty(radix, dtype=np.intp)
    first[key] = np.arange(size)  # some layout of each row: every one of them has the same values
    return DistinctRows(first, key)


def _dense(key: np.ndarray, radix: int) -> tuple[np.ndarray, int]:
    """Keys below `radix` renumbered 0 … U − 1 in ascending order, and U: by a table over the range where it is
    small (a scatter, no sort), else by np.unique."""
    if radix > 4 * key.shape[0] + 1024:
        unique, inverse = np.unique(key, return_inverse=True)
        return inverse.reshape(-1).astype(np.intp, copy=False), int(unique.shape[0])
    present = np.zeros(radix, dtype=bool)
    present[key] = True
    keys = np.flatnonzero(present)
    code = np.empty(radix, dtype=np.intp)  # entries of absent keys are never read
    code[keys] = np.arange(keys.shape[0])
    return code.take(key), int(keys.shape[0])


def distinct_within(lay: Layouts, rows: DistinctRows, base: tuple[str, ...], names: tuple[str, ...],
                    *extra: np.ndarray) -> DistinctRows:
    """The distinct rows of the columns `names` of `lay` (and of the arrays `extra`), found through `rows`, the
    distinct rows of the columns `base`: the part of the key inside `base` is grouped on the U representatives of
    `rows`, so only the columns outside it are read per layout. The same groups as `distinct_rows`, in another
    order."""
    inside = [name for name in names if name in base]
    outside = [name for name in names if name not in base]
    part = distinct_rows(*(lay.column(name).take(rows.first) for name in inside)).inverse if inside else None
    key = [part.take(rows.inverse)] if part is not None else []
    return distinct_rows(*key, *(lay.column(name) for name in outside), *extra)
