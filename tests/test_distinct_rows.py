"""layout.arrays.distinct_rows: the grouping every de-duplicated cost formula relies on (a table over a packed key
when its range is small, np.unique otherwise) must give np.unique(axis=0)'s groups whatever the ranges."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llmscale.layout.arrays import distinct_rows


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 400), st.integers(1, 4), st.sampled_from([2, 5, 300, 10**6, 2**33, 2**40]), st.integers(0, 2**31))
def test_groups_are_exact_whatever_the_key_range(size: int, ncols: int, spread: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    columns = [rng.integers(-3, spread, size=size) for _ in range(ncols)]
    rows = distinct_rows(*columns)
    table = np.stack(columns, axis=1)
    assert len(rows.first) == len(np.unique(table, axis=0))
    # every layout's group representative has the layout's own values, and distinct groups differ
    assert (table[rows.first][rows.inverse] == table).all()
    assert len(np.unique(table[rows.first], axis=0)) == len(rows.first)
    # groups come in ascending key order, as np.unique gives them
    _, unique_inverse = np.unique(table, axis=0, return_inverse=True)
    assert (np.asarray(rows.inverse) == unique_inverse.reshape(-1)).all()
