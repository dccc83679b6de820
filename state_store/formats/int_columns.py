"""The int64 layout of native state files (format version 2): counters and window accumulators as
typed columns, so snapshots and restores of them neither print nor parse a number.

A native (Arrow IPC) file whose rows all have this shape is written in this layout; everything
else, and every Parquet file (the canonical savepoint format, readable without Epochal), keeps the
JSON-text layout of format version 1 (``keyed``)::

    one state of a single-value kind (value, reducing, aggregating), and in every row:
    key        an int                      (not a bool; within int64)
    namespace  an int or None              (None: the state is not windowed)
    value      an int, or a list of ``w`` ints -- one of the two, with one ``w``, in the whole file
    expiry_ms  None                        (no TTL)

Schema (one row per entry, key groups ascending, each key group's rows in snapshot order)::

    key_group  int32                       not null
    key        int64                       not null
    namespace  int64                       null = None
    value      int64 | fixed_size_list<int64>[w]   not null (and no null items)

Schema metadata: that of version 1 (``keyed._metadata``) with ``epochal.format_version`` = 2,
``epochal.layout`` = ``int64`` and ``epochal.state`` = the state's name (the only state with rows).

Invariants: the decision depends only on the rows (an ``IntRows`` and the tuple rows it stands for
give the same bytes, so heap and columnar operators still write identical files); decoding yields
exactly the rows that were encoded (``IntRows`` for a caller that asks for them, when every
namespace is an int and the values are lists; plain rows otherwise).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from state_store.core.keygroups import KeyGroupRange
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow
from state_store.formats.int_rows import IntRows

INT_LAYOUT = "int64"
INT_FORMAT_VERSION = 2
SINGLE_VALUE = frozenset({StateKind.VALUE, StateKind.REDUCING, StateKind.AGGREGATING})

_new_row = tuple.__new__
R = TypeVar("R")


class _Run:
    """One key group's rows as arrays: keys, namespaces (``ns_valid`` False where None) and values
    (1-D for int values, ``(n, w)`` for lists)."""

    __slots__ = ("keys", "namespaces", "ns_valid", "values")

    def __init__(
        self,
        keys: NDArray[np.int64],
        namespaces: NDArray[np.int64],
        ns_valid: NDArray[np.bool_] | None,
        values: NDArray[np.int64],
    ) -> None:
        self.keys, self.namespaces, self.ns_valid, self.values = keys, namespaces, ns_valid, values


def single_state_runs(
    part: KeyedStateSnapshot, run_of: Callable[[Sequence[StateRow]], R | None]
) -> tuple[str, list[tuple[int, R]]] | None:
    """The name of ``part``'s only state with rows and ``run_of`` of each key group's rows (key groups
    ascending), or None when ``part`` has several states, a state of another kind than a
    single-value one, or a run ``run_of`` refuses: the shape the typed layouts share."""
    names = {name for states in part.key_groups.values() for name, rows in states.items() if len(rows)}
    if len(names) != 1:
        return None
    (name,) = names
    if part.kinds.get(name) not in SINGLE_VALUE:
        return None
    runs: list[tuple[int, R]] = []
    for kg in sorted(part.key_groups):
        rows = part.key_groups[kg].get(name)
        if rows is not None and len(rows):
            run = run_of(rows)
            if run is None:
                return None
            runs.append((kg, run))
    return name, runs


def int_table(part: KeyedStateSnapshot, metadata: Mapping[str, str]) -> pa.Table | None:
    """``part`` in the int64 layout, or None when a row does not have its shape (module docstring)."""
    found = single_state_runs(part, _run)
    if found is None:
        return None
    name, runs = found
    widths = {run.values.shape[1] if run.values.ndim == 2 else 0 for _, run in runs}
    if len(widths) != 1:
        return None
    width = widths.pop()
    keys = np.concatenate([r.keys for _, r in runs])
    namespaces = np.concatenate([r.namespaces for _, r in runs])
    valid = None
    if any(r.ns_valid is not None for _, r in runs):
        valid = np.concatenate(
            [np.ones(len(r.keys), np.bool_) if r.ns_valid is None else r.ns_valid for _, r in runs]
        )
    values = np.concatenate([r.values for _, r in runs])
    kgs = np.concatenate([np.full(len(r.keys), kg, dtype=np.int32) for kg, r in runs])
    value_arr = (
        pa.array(values)
        if width == 0
        else pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), width)
    )
    schema = pa.schema(
        [
            pa.field("key_group", pa.int32(), nullable=False),
            pa.field("key", pa.int64(), nullable=False),
            pa.field("namespace", pa.int64(), nullable=True),
            pa.field("value", value_arr.type, nullable=False),
        ],
        metadata={
            **metadata,
            "epochal.format_version": str(INT_FORMAT_VERSION),
            "epochal.layout": INT_LAYOUT,
            "epochal.state": name,
        },
    )
    ns_arr = pa.array(namespaces, mask=None if valid is None else ~valid)
    return pa.Table.from_arrays([pa.array(kgs), pa.array(keys), ns_arr, value_arr], schema=schema)


def _run(rows: Sequence[StateRow]) -> _Run | None:
    if isinstance(rows, IntRows):
        return _Run(rows.keys, rows.namespaces, None, rows.values)
    keys, namespaces, values, expiry = (list(c) for c in zip(*rows))
    if set(map(type, keys)) != {int} or set(expiry) != {None}:
        return None
    ns_types = set(map(type, namespaces))
    if not ns_types <= {int, type(None)}:
        return None
    valid = None
    if type(None) in ns_types:
        valid = np.array([ns is not None for ns in namespaces], np.bool_)
        namespaces = [0 if ns is None else ns for ns in namespaces]
    value_types = set(map(type, values))
    try:
        if value_types == {int}:
            value_arr = np.array(values, np.int64)
        elif value_types == {list}:
            widths = set(map(len, values))
            flat = list(itertools.chain.from_iterable(values))
            if len(widths) != 1 or 0 in widths or set(map(type, flat)) != {int}:
                return None
            value_arr = np.array(flat, np.int64).reshape(len(values), widths.pop())
        else:
            return None
        return _Run(np.array(keys, np.int64), np.array(namespaces, np.int64), valid, value_arr)
    except OverflowError:  # an int beyond int64: the text layout writes it exactly
        return None


def key_group_runs(kg_of_row: NDArray[np.int32], rng: KeyGroupRange) -> list[tuple[int, int, int]]:
    """(key group, first row, end row) of each key group's rows in a typed file; ValueError when the
    key groups are not ascending or one lies outside ``rng``."""
    if len(kg_of_row) > 1 and bool(np.any(np.diff(kg_of_row) < 0)):
        raise ValueError("its key groups are not in ascending order")
    starts = np.flatnonzero(np.diff(kg_of_row)) + 1 if len(kg_of_row) > 1 else np.zeros(0, np.int64)
    bounds = [0, *starts.tolist(), len(kg_of_row)] if len(kg_of_row) else [0]
    runs = [(int(kg_of_row[a]), a, b) for a, b in itertools.pairwise(bounds)]
    for kg, _, _ in runs:
        if kg not in rng:
            raise ValueError(f"a row of key group {kg} lies outside range {rng}")
    return runs


def from_int_table(
    table: pa.Table,
    meta: Mapping[str, str],
    rng: KeyGroupRange,
    kinds: Mapping[str, StateKind],
    int_rows: bool,
) -> dict[int, dict[str, Any]]:
    """The key groups of a file in the int64 layout; ValueError (the caller names the file) when it
    is not exactly that layout. ``int_rows``: runs with int namespaces and list values come back
    as ``IntRows`` (views of the file's buffers), others as tuples of rows."""
    if meta.get("epochal.layout") != INT_LAYOUT:
        raise ValueError(f"format_version {INT_FORMAT_VERSION} needs epochal.layout {INT_LAYOUT!r}")
    name = meta.get("epochal.state", "")
    if kinds.get(name) not in SINGLE_VALUE:
        raise ValueError(f"its state {name!r} is not a single-value state of its state_kinds")
    types = {f.name: f.type for f in table.schema}
    value_type = types.get("value")
    list_value = isinstance(value_type, pa.FixedSizeListType) and value_type.value_type == pa.int64()
    width = value_type.list_size if isinstance(value_type, pa.FixedSizeListType) else 0
    expected = {"key_group": pa.int32(), "key": pa.int64(), "namespace": pa.int64()}
    if any(types.get(n) != t for n, t in expected.items()) or not (list_value or value_type == pa.int64()):
        raise ValueError(f"its columns {types} are not those of the int64 layout")
    table = table.combine_chunks()

    def column(name: str) -> pa.Array:
        chunks = table.column(name).chunks
        return chunks[0] if chunks else pa.array([], types[name])

    value_col = column("value")
    flat = value_col.flatten() if list_value else value_col
    if column("key").null_count or value_col.null_count or flat.null_count:
        raise ValueError("it has null keys or values")
    runs = key_group_runs(column("key_group").to_numpy(), rng)
    keys = column("key").to_numpy()
    ns_col = column("namespace")
    namespaces = ns_col.to_numpy() if ns_col.null_count == 0 else None
    values = flat.to_numpy()
    if list_value:
        values = values.reshape(len(keys), width)
    out: dict[int, dict[str, Any]] = {}
    for kg, a, b in runs:
        if int_rows and list_value and namespaces is not None:
            out[kg] = {name: IntRows(keys[a:b], namespaces[a:b], values[a:b])}
            continue
        ns_list = namespaces[a:b].tolist() if namespaces is not None else ns_col.slice(a, b - a).to_pylist()
        out[kg] = {
            name: tuple(
                _new_row(StateRow, row)
                for row in zip(keys[a:b].tolist(), ns_list, values[a:b].tolist(), itertools.repeat(None))
            )
        }
    return out
