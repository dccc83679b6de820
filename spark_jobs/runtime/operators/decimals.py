"""Decimal columns as scaled int64 ("unscaled values") inside window aggregation.

A ``decimal128(p, s)`` value ``x`` is held as the integer ``x * 10**s`` (Arrow's own unscaled value),
so sums, minima and maxima of decimals are exact integer arithmetic on both the columnar and the
heap path, state files hold plain ints, and a result is turned back into ``decimal128(38, s)`` when a
window fires. The scale of each column is part of the operator's state (``snapshot_extra``), so a
window that fires in an epoch that saw no batch still knows it.

Invariants: ``unscale`` is exact or raises (a value beyond int64, i.e. more than 18 digits, is
refused with a remedy; a column whose scale changes between batches likewise); ``rescale`` of an
``unscale``d column gives back the same values.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa

from state_store.core.errors import BadInputError

MAX_DIGITS = 18


def is_decimal(kind: pa.DataType) -> bool:
    return bool(pa.types.is_decimal(kind))


def unscale(column: pa.Array, name: str) -> pa.Array:
    """The unscaled int64 values of a decimal column (nulls kept)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if not pa.types.is_decimal128(kind):
        column = column.cast(pa.decimal128(38, kind.scale))  # decimal32/64/256: the same values
    words = np.frombuffer(column.buffers()[1], dtype=np.int64)[
        2 * column.offset : 2 * (column.offset + len(column))
    ]
    low, high = words[0::2], words[1::2]
    valid = (
        np.ones(len(column), bool)
        if column.null_count == 0
        else column.is_valid().to_numpy(zero_copy_only=False)
    )
    if bool(np.any((high != (low >> 63)) & valid)):
        raise BadInputError(
            f"column {name!r} holds a decimal of more than {MAX_DIGITS} digits, which a window aggregate "
            "cannot sum exactly: cast it to a decimal of at most 18 digits, or to float64, before the window"
        )
    mask = None if column.null_count == 0 else ~valid
    return pa.array(low.copy(), pa.int64(), mask=mask)


def rescale(values: Any, scale: int) -> pa.Array:
    """Unscaled ints (an int64 column, or a list of Python ints -- the heap path's exact sums, which
    may pass int64) as ``decimal128(38, scale)``."""
    target = pa.decimal128(38, scale)
    if isinstance(values, list):
        return pa.array([None if v is None else Decimal(int(v)).scaleb(-scale) for v in values], target)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_int64(values.type) and values.null_count == 0:
        low = values.to_numpy()
        words = np.empty((len(low), 2), np.int64)
        words[:, 0], words[:, 1] = low, low >> 63
        return pa.Array.from_buffers(target, len(low), [None, pa.py_buffer(words.tobytes())])
    items: list[Any] = values.to_pylist()
    return pa.array([None if v is None else Decimal(int(v)).scaleb(-scale) for v in items], target)
