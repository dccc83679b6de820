"""The typed layout of native state files (format version 3): window accumulators of floats, bools
and ints, over int or string keys, as typed columns -- no JSON text for any cell.

Format version 2 (``int_columns``) covers int keys with int values; this layout covers the rest of
the fixed-width shape. A native (Arrow IPC) file whose rows all have this shape is written in this
layout; other files keep version 1 or 2, and every Parquet file keeps the text layout::

    one state of a single-value kind (value, reducing, aggregating), and in every row:
    key        an int (within int64, not a bool) -- or a str -- the same in the whole file
    namespace  an int or None
    value      a scalar -- or a list of ``w >= 1`` scalars -- the same in the whole file; a scalar
               (slot ``j``) is an int (within int64), a float or a bool, the same type in every row
    expiry_ms  an int or None (TTL state: deduplication's ``seen`` flags)

    (int keys with int values and no expiry are format version 2's shape, not this one)

Schema (one row per entry, key groups ascending, each key group's rows in snapshot order)::

    key_group  int32             not null
    key        int64 | string    not null
    namespace  int64             null = None
    value      t, or struct<s0: t0, ..., s{w-1}: t{w-1}>; t in {int64, double, bool}   no nulls
    expiry_ms  int64             null = never

Schema metadata: that of version 1 with ``epochal.format_version`` = 3, ``epochal.layout`` =
``typed`` and ``epochal.state`` = the state's name.

Invariants: the decision depends only on the rows (a ``TypedRows`` and the tuple rows it stands for
give the same bytes: heap and columnar operators write identical files); decoding yields exactly the
rows that were encoded (floats bit for bit, -0.0 and NaN included), as ``TypedRows`` for a caller
that asks for them when every namespace is an int, the values are lists and nothing expires, as
``FlagRows`` for such a caller when every row is ``(key, None, True, expiry)`` (deduplication's
flags), else as tuples of rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from state_store.core.keygroups import KeyGroupRange
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow
from state_store.formats.int_columns import SINGLE_VALUE, key_group_runs, single_state_runs
from state_store.formats.int_rows import IntRows
from state_store.formats.typed_rows import FlagRows, TypedRows, key_list

TYPED_LAYOUT = "typed"
TYPED_FORMAT_VERSION = 3
_ARROW = {np.dtype(np.int64): pa.int64(), np.dtype(np.float64): pa.float64(), np.dtype(np.bool_): pa.bool_()}
_DTYPE = {int: np.dtype(np.int64), float: np.dtype(np.float64), bool: np.dtype(np.bool_)}

_new_row = tuple.__new__


def typed_table(part: KeyedStateSnapshot, metadata: Mapping[str, str]) -> pa.Table | None:
    """``part`` in the typed layout, or None when a row does not have its shape (module docstring)."""
    found = single_state_runs(part, _run)
    if found is None:
        return None
    name, runs = found
    if len({run.signature for _, run in runs}) != 1:
        return None
    string_keys, dtypes, scalar = runs[0][1].signature
    expiring = any(r.expiry is not None for _, r in runs)
    if not string_keys and all(d == np.int64 for d in dtypes) and not expiring:
        return None  # the int64 layout's shape (format version 2)
    if string_keys:
        keys: Any = pa.concat_arrays([r.keys for _, r in runs])
    else:
        keys = pa.array(np.concatenate([r.keys for _, r in runs]))
    namespaces = np.concatenate([r.namespaces for _, r in runs])
    valid = None
    if any(r.ns_valid is not None for _, r in runs):
        valid = np.concatenate(
            [np.ones(len(r.namespaces), np.bool_) if r.ns_valid is None else r.ns_valid for _, r in runs]
        )
    slots = [np.concatenate([r.slots[j] for _, r in runs]) for j in range(len(dtypes))]
    kgs = np.concatenate([np.full(len(r.namespaces), kg, dtype=np.int32) for kg, r in runs])
    if scalar:
        value_arr = pa.array(slots[0], _ARROW[slots[0].dtype])
    else:
        value_arr = pa.StructArray.from_arrays(
            [pa.array(s, _ARROW[s.dtype]) for s in slots], names=[f"s{j}" for j in range(len(slots))]
        )
    expiry = [r.expiry if r.expiry is not None else pa.nulls(len(r.namespaces), pa.int64()) for _, r in runs]
    schema = pa.schema(
        [
            pa.field("key_group", pa.int32(), nullable=False),
            pa.field("key", keys.type, nullable=False),
            pa.field("namespace", pa.int64(), nullable=True),
            pa.field("value", value_arr.type, nullable=False),
            pa.field("expiry_ms", pa.int64(), nullable=True),
        ],
        metadata={
            **metadata,
            "epochal.format_version": str(TYPED_FORMAT_VERSION),
            "epochal.layout": TYPED_LAYOUT,
            "epochal.state": name,
        },
    )
    ns_arr = pa.array(namespaces, mask=None if valid is None else ~valid)
    columns = [pa.array(kgs), keys, ns_arr, value_arr, pa.concat_arrays(expiry)]
    return pa.Table.from_arrays(columns, schema=schema)


class _Run:
    """One key group's rows as arrays; ``signature`` = (string keys?, slot dtypes, scalar values?);
    ``expiry`` is None when nothing expires."""

    __slots__ = ("expiry", "keys", "namespaces", "ns_valid", "signature", "slots")

    def __init__(
        self,
        keys: Any,
        namespaces: NDArray[np.int64],
        ns_valid: NDArray[np.bool_] | None,
        slots: Sequence[NDArray[Any]],
        scalar: bool = False,
        expiry: pa.Array | None = None,
    ) -> None:
        self.keys, self.namespaces, self.ns_valid, self.slots = keys, namespaces, ns_valid, tuple(slots)
        self.expiry = expiry
        self.signature = (isinstance(keys, pa.Array), tuple(s.dtype for s in self.slots), scalar)


def _run(rows: Sequence[StateRow]) -> _Run | None:
    if isinstance(rows, FlagRows):  # (key, None, True, expiry): what the tuple rows give, as arrays
        n = len(rows)
        return _Run(
            rows.keys,
            np.zeros(n, np.int64),
            np.zeros(n, np.bool_),
            [np.ones(n, np.bool_)],
            True,
            pa.array(rows.expiry),
        )
    if isinstance(rows, TypedRows):
        return _Run(rows.keys, rows.namespaces, None, rows.slots)
    if isinstance(rows, IntRows):
        return _Run(
            rows.keys, rows.namespaces, None, [rows.values[:, j] for j in range(rows.values.shape[1])]
        )
    keys, namespaces, values, expiry = (list(c) for c in zip(*rows))
    key_types = set(map(type, keys))
    if key_types not in ({int}, {str}):
        return None
    ns_types = set(map(type, namespaces))
    value_types = set(map(type, values))
    if not ns_types <= {int, type(None)} or len(value_types) != 1:
        return None
    scalar = value_types != {list}
    columns: Any = [values]
    if not scalar:
        widths = set(map(len, values))
        if len(widths) != 1 or 0 in widths:
            return None
        columns = zip(*values)
    valid = None
    if type(None) in ns_types:
        valid = np.array([ns is not None for ns in namespaces], np.bool_)
        namespaces = [0 if ns is None else ns for ns in namespaces]
    slots = []
    try:
        for column in columns:
            types = set(map(type, column))
            if len(types) != 1 or (dtype := _DTYPE.get(types.pop())) is None:
                return None
            slots.append(np.array(column, dtype))
        key_arr: Any = pa.array(keys, pa.string()) if key_types == {str} else np.array(keys, np.int64)
        expiries = None if set(expiry) == {None} else pa.array(expiry, pa.int64())
        return _Run(key_arr, np.array(namespaces, np.int64), valid, slots, scalar, expiries)
    except (OverflowError, pa.ArrowInvalid, TypeError):  # an int beyond int64: the text layout
        return None


def from_typed_table(
    table: pa.Table,
    meta: Mapping[str, str],
    rng: KeyGroupRange,
    kinds: Mapping[str, StateKind],
    typed_rows: bool,
) -> dict[int, dict[str, Any]]:
    """The key groups of a file in the typed layout; ValueError (the caller names the file) when it
    is not exactly that layout. ``typed_rows``: runs with int namespaces come back as ``TypedRows``
    (views of the file's buffers), others as tuples of rows."""
    if meta.get("epochal.layout") != TYPED_LAYOUT:
        raise ValueError(f"format_version {TYPED_FORMAT_VERSION} needs epochal.layout {TYPED_LAYOUT!r}")
    name = meta.get("epochal.state", "")
    if kinds.get(name) not in SINGLE_VALUE:
        raise ValueError(f"its state {name!r} is not a single-value state of its state_kinds")
    types = {f.name: f.type for f in table.schema}
    value_type: Any = types.get("value")
    scalar = value_type in _ARROW.values()
    if (
        types.get("key_group") != pa.int32()
        or types.get("key") not in (pa.int64(), pa.string())
        or types.get("namespace") != pa.int64()
        or types.get("expiry_ms") != pa.int64()
        or not (scalar or isinstance(value_type, pa.StructType))
        or (not scalar and value_type.num_fields == 0)
        or (
            not scalar
            and any(value_type.field(j).type not in _ARROW.values() for j in range(value_type.num_fields))
        )
    ):
        raise ValueError(f"its columns {types} are not those of the typed layout")
    table = table.combine_chunks()

    def column(name: str) -> pa.Array:
        chunks = table.column(name).chunks
        return chunks[0] if chunks else pa.array([], types[name])

    key_col, value_col = column("key"), column("value")
    fields = [value_col] if scalar else [value_col.field(j) for j in range(value_type.num_fields)]
    expiry_col = column("expiry_ms")
    if key_col.null_count or value_col.null_count or any(f.null_count for f in fields):
        raise ValueError("it has null keys or values")
    runs = key_group_runs(column("key_group").to_numpy(), rng)
    keys: Any = key_col if key_col.type == pa.string() else key_col.to_numpy()
    ns_col = column("namespace")
    namespaces = ns_col.to_numpy() if ns_col.null_count == 0 else None
    slots = [f.to_numpy(zero_copy_only=False) for f in fields]
    out: dict[int, dict[str, Any]] = {}
    flags = (
        typed_rows
        and scalar
        and value_type == pa.bool_()
        and ns_col.null_count == len(ns_col)
        and expiry_col.null_count == 0
        and bool(np.all(slots[0]))
    )
    expiry_values = expiry_col.to_numpy() if flags else None
    for kg, a, b in runs:
        run_keys = keys.slice(a, b - a) if isinstance(keys, pa.Array) else keys[a:b]
        if expiry_values is not None:
            out[kg] = {name: FlagRows(run_keys, expiry_values[a:b])}
            continue
        if typed_rows and namespaces is not None and not scalar and expiry_col.null_count == len(expiry_col):
            out[kg] = {name: TypedRows(run_keys, namespaces[a:b], [s[a:b] for s in slots])}
            continue
        ns_list = namespaces[a:b].tolist() if namespaces is not None else ns_col.slice(a, b - a).to_pylist()
        values: Any = slots[0][a:b].tolist() if scalar else map(list, zip(*(s[a:b].tolist() for s in slots)))
        expiries = expiry_col.slice(a, b - a).to_pylist()
        out[kg] = {
            name: tuple(_new_row(StateRow, row) for row in zip(key_list(run_keys), ns_list, values, expiries))
        }
    return out


def typed_rows_of(rows: Sequence[StateRow]) -> TypedRows | None:
    """``rows`` as ``TypedRows`` (an ``IntRows`` becomes one slot per column; tuple rows are checked
    row by row), or None when they do not have the typed shape with int namespaces."""
    if isinstance(rows, TypedRows):
        return rows
    if not len(rows):
        return None
    run = _run(rows)
    if run is None or run.ns_valid is not None or run.signature[2] or run.expiry is not None:
        return None
    return TypedRows(run.keys, run.namespaces, run.slots)
