"""Rows of one (key group, state) as int64 columns: the shape of window accumulators and counters.

``IntRows(keys, namespaces, values)`` stands for the rows ``StateRow(int(keys[i]),
int(namespaces[i]), [int(v) for v in values[i]], None)``: int keys, int namespaces, every value a
list of ``width`` ints, no expiry. State files encode and decode such runs column-wise (``keyed``),
so a columnar operator (``spark_jobs.runtime.operators.window_columns``) snapshots and restores
without building a Python object per entry; everything else sees an ordinary sequence of rows.

Invariant: the arrays are never written to after construction (the owner hands over arrays it no
longer changes, e.g. fresh results of ``concatenate``/``take``), so an ``IntRows`` is as immutable
as the tuple of rows it stands for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

from state_store.core.state.snapshot import RowColumns, StateRow

_new_row = tuple.__new__


class IntRows(RowColumns):
    """See module docstring."""

    __slots__ = ("keys", "namespaces", "values")

    def __init__(
        self, keys: NDArray[np.int64], namespaces: NDArray[np.int64], values: NDArray[np.int64]
    ) -> None:
        if keys.ndim != 1 or namespaces.shape != keys.shape or values.ndim != 2 or len(values) != len(keys):
            raise ValueError(
                f"IntRows needs keys and namespaces of one length and an (n, width) value matrix, got "
                f"{keys.shape}, {namespaces.shape}, {values.shape}"
            )
        self.keys = keys
        self.namespaces = namespaces
        self.values = values

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, index: int) -> StateRow: ...
    @overload
    def __getitem__(self, index: slice) -> IntRows: ...
    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return IntRows(self.keys[index], self.namespaces[index], self.values[index])
        return _new_row(
            StateRow, (int(self.keys[index]), int(self.namespaces[index]), self.values[index].tolist(), None)
        )

    def __iter__(self) -> Iterator[StateRow]:
        rows = zip(self.keys.tolist(), self.namespaces.tolist(), self.values.tolist(), [None] * len(self))
        return (_new_row(StateRow, row) for row in rows)

    def __repr__(self) -> str:
        return f"IntRows({len(self)} rows, width {self.values.shape[1]})"
