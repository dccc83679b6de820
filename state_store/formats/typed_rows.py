"""Rows of one (key group, state) as typed columns: window accumulators of any fixed-width type.

``TypedRows(keys, namespaces, slots)`` stands for the rows ``StateRow(keys[i], int(namespaces[i]),
[slots[0][i], ..., slots[w-1][i]], None)`` as Python values: int or str keys, int namespaces, every
value a list of ``w`` scalars whose type is fixed per slot (int, float or bool). It generalizes
``IntRows`` (int keys and int slots only) to float sums, min/max of floats and string keys, so a
columnar operator snapshots and restores them without a Python object per entry; everything else
sees an ordinary sequence of rows.

Invariant: the arrays are never written to after construction (as ``IntRows``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from state_store.core.state.snapshot import RowColumns, StateRow

_new_row = tuple.__new__
SLOT_DTYPES = (np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.bool_))
"""The slot types a typed run holds (Python int, float, bool)."""

Keys = Any
"""An int64 array or a non-null ``pa.string()`` array (pyarrow has no type stubs)."""


def key_list(keys: Keys) -> list[Any]:
    """The keys as Python values (int or str)."""
    out: list[Any] = keys.to_pylist() if isinstance(keys, pa.Array) else keys.tolist()
    return out


class TypedRows(RowColumns):
    """See module docstring."""

    __slots__ = ("keys", "namespaces", "slots")

    def __init__(self, keys: Keys, namespaces: NDArray[np.int64], slots: Sequence[NDArray[Any]]) -> None:
        n = len(keys)
        if isinstance(keys, pa.Array):
            if keys.type != pa.string() or keys.null_count:
                raise ValueError(f"TypedRows keys must be non-null strings or int64, got {keys.type}")
        elif keys.ndim != 1 or keys.dtype != np.int64:
            raise ValueError(f"TypedRows keys must be non-null strings or int64, got {keys.dtype}")
        if namespaces.shape != (n,) or not slots or any(s.shape != (n,) for s in slots):
            raise ValueError(
                f"TypedRows needs keys, namespaces and every slot of one length, got {n}, "
                f"{namespaces.shape}, {[s.shape for s in slots]}"
            )
        bad = [s.dtype for s in slots if s.dtype not in SLOT_DTYPES]
        if bad:
            raise ValueError(f"TypedRows slots must be int64, float64 or bool, got {bad}")
        self.keys = keys
        self.namespaces = namespaces
        self.slots = tuple(slots)

    @property
    def width(self) -> int:
        return len(self.slots)

    def __len__(self) -> int:
        return len(self.namespaces)

    @overload
    def __getitem__(self, index: int) -> StateRow: ...
    @overload
    def __getitem__(self, index: slice) -> TypedRows: ...
    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            lo, hi, step = index.indices(len(self))
            if step != 1:
                raise ValueError("TypedRows slices take contiguous rows only")
            keys = self.keys.slice(lo, hi - lo) if isinstance(self.keys, pa.Array) else self.keys[lo:hi]
            return TypedRows(keys, self.namespaces[lo:hi], [s[lo:hi] for s in self.slots])
        if index < 0:
            index += len(self)
        key = self.keys[index].as_py() if isinstance(self.keys, pa.Array) else int(self.keys[index])
        value = [s[index].item() for s in self.slots]
        return _new_row(StateRow, (key, int(self.namespaces[index]), value, None))

    def __iter__(self) -> Iterator[StateRow]:
        columns = [s.tolist() for s in self.slots]
        values = map(list, zip(*columns))
        rows = zip(key_list(self.keys), self.namespaces.tolist(), values, [None] * len(self))
        return (_new_row(StateRow, row) for row in rows)

    def __repr__(self) -> str:
        return f"TypedRows({len(self)} rows, slots {[s.dtype.name for s in self.slots]})"


class FlagRows(RowColumns):
    """Rows ``StateRow(keys[i], None, True, int(expiry[i]))``: deduplication's ``seen`` flags (a
    value state of ``True`` with a TTL, no namespace) as columns, so a columnar deduplication
    snapshots and restores them without a Python object per key. The typed layout (format version
    3) writes them exactly as it writes the same tuple rows.

    Invariant: the arrays are never written to after construction."""

    __slots__ = ("expiry", "keys")

    def __init__(self, keys: Keys, expiry: NDArray[np.int64]) -> None:
        n = len(keys)
        if isinstance(keys, pa.Array):
            if keys.type != pa.string() or keys.null_count:
                raise ValueError(f"FlagRows keys must be non-null strings or int64, got {keys.type}")
        elif keys.ndim != 1 or keys.dtype != np.int64:
            raise ValueError(f"FlagRows keys must be non-null strings or int64, got {keys.dtype}")
        if expiry.shape != (n,) or expiry.dtype != np.int64:
            raise ValueError(f"FlagRows needs one int64 expiry per key, got {expiry.shape} {expiry.dtype}")
        self.keys = keys
        self.expiry = expiry

    def __len__(self) -> int:
        return len(self.expiry)

    @overload
    def __getitem__(self, index: int) -> StateRow: ...
    @overload
    def __getitem__(self, index: slice) -> FlagRows: ...
    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            lo, hi, step = index.indices(len(self))
            if step != 1:
                raise ValueError("FlagRows slices take contiguous rows only")
            keys = self.keys.slice(lo, hi - lo) if isinstance(self.keys, pa.Array) else self.keys[lo:hi]
            return FlagRows(keys, self.expiry[lo:hi])
        if index < 0:
            index += len(self)
        key = self.keys[index].as_py() if isinstance(self.keys, pa.Array) else int(self.keys[index])
        return _new_row(StateRow, (key, None, True, int(self.expiry[index])))

    def __iter__(self) -> Iterator[StateRow]:
        n = len(self)
        rows = zip(key_list(self.keys), [None] * n, [True] * n, self.expiry.tolist())
        return (_new_row(StateRow, row) for row in rows)

    def __repr__(self) -> str:
        return f"FlagRows({len(self)} rows)"
