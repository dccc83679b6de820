"""Keyed-state files: a key-group snapshot part <-> bytes, as Arrow IPC (native) or Parquet (canonical).

One file holds the key groups of one :class:`KeyedStateSnapshot` part of one operator -- usually ONE
key group (``snapshot.part(KeyGroupRange(kg, kg))``, see :func:`encode_each_key_group`) so that an
unchanged key group's file is reused by the next incremental checkpoint (the caller content-addresses
it under ``shared/``), or one contiguous range (savepoints). File bytes depend only on the state, the
state kinds and the range -- never on a checkpoint id -- so equal content gives equal bytes.

The text layout, format version 1 (every Parquet file, and native files of any state that is not
the int64 shape of ``int_columns``, format version 2, which native files of counters and window
accumulators use). One row per :class:`StateRow`, rows in key-group, state-name, snapshot order::

    key_group  int32   not null
    state      string  not null   state name
    key        string  not null   tagged JSON of the key        (json_codec: tuples stay tuples)
    namespace  string  not null   tagged JSON of the namespace  ("null" when not windowed)
    value      string  not null   JSON of the value; map state: [<tagged user key>, <user value>]
    expiry_ms  int64   nullable   TTL expiry, null = never

Schema metadata (``epochal.*``): format name and version, max_parallelism, key_group_range
``[first, last]`` (inclusive), state_kinds ``{name: kind}`` and the key-hash version. Readers
refuse a newer ``format_version`` (an Epochal that reads only version 1 refuses the int64 layout).

The Parquet file is the canonical savepoint format: ``pandas.read_parquet``, DuckDB or Spark read
it without Epochal (JSON columns are plain strings). Note that a list state has one row per element
and a map state one row per entry.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from state_store.core.keygroups import KEY_ENCODING_VERSION, KeyGroupRange
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow
from state_store.formats.arrow_bytes import read_parquet
from state_store.formats.int_columns import INT_FORMAT_VERSION, from_int_table, int_table
from state_store.formats.int_rows import IntRows
from state_store.formats.json_codec import (
    StateValueError,
    key_from_jsonable,
    key_to_json,
    value_to_json,
)
from state_store.formats.typed_columns import TYPED_FORMAT_VERSION, from_typed_table, typed_table

FAST_CODEC = True
"""Bulk JSON parsing and int fast paths (same bytes, same rows); off only in ``bench/ablation.py``."""
INT_COLUMNS = True
"""Native files of counters and window accumulators use the int64 layout (``int_columns``); off
only in ``bench/ablation.py`` (then every file has the text layout)."""
FORMAT_NAME = "epochal-keyed-state"
FORMAT_VERSION = TYPED_FORMAT_VERSION
"""The newest format version this module reads. It writes version 1 (the text layout below),
version 2 (``int_columns``: the int64 layout) and version 3 (``typed_columns``: floats, bools and
string keys as typed columns); 2 and 3 in native files only."""
TEXT_FORMAT_VERSION = 1
FORMATS = ("arrow", "parquet")
_REMEDY = "restore from an earlier checkpoint or a savepoint"

SCHEMA = pa.schema(
    [
        pa.field("key_group", pa.int32(), nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("value", pa.string(), nullable=False),
        pa.field("expiry_ms", pa.int64(), nullable=True),
    ]
)


class StateFileError(ValueError):
    """A state file that cannot be read (truncated, corrupt, foreign or from a newer Epochal)."""


def _check_fmt(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"unknown state file format {fmt!r}: use one of {FORMATS}")
    return fmt


def encode_key_groups(part: KeyedStateSnapshot, fmt: str = "arrow") -> bytes:
    """Serialize every row of ``part``; raises StateValueError for values that are not JSON.

    Each (key group, state) run of rows is encoded column-wise by Arrow when its keys are ints,
    its namespaces all ints or all None and its values all ints or all equally long flat lists of
    ints (keyed counters, window accumulators); other runs go through the per-row JSON codec. The
    two give the same text per cell, and the table is written as one record batch either way, so
    a file's bytes do not depend on which path encoded which run."""
    _check_fmt(fmt)
    if fmt == "arrow" and INT_COLUMNS:
        typed = int_table(part, _metadata(part))
        if typed is None:
            typed = typed_table(part, _metadata(part))
        if typed is not None:
            return _write(typed, fmt)
    chunks: dict[str, list[pa.Array]] = {name: [] for name in SCHEMA.names}
    for kg, states in part.key_groups.items():
        for name, rows in states.items():
            if not rows:
                continue
            is_map = part.kinds[name] is StateKind.MAP
            if isinstance(rows, IntRows):
                fast: Any = _int_rows_columns(rows)
            else:
                fast = None if is_map or not FAST_CODEC else _int_run_columns(rows)
            key_arr, ns_arr, value_arr, expiry = (
                fast if fast is not None else _row_columns(rows, name, is_map)
            )
            chunks["key_group"].append(pa.repeat(pa.scalar(kg, pa.int32()), len(rows)))
            chunks["state"].append(pa.repeat(pa.scalar(name, pa.string()), len(rows)))
            chunks["key"].append(key_arr)
            chunks["namespace"].append(ns_arr)
            chunks["value"].append(value_arr)
            chunks["expiry_ms"].append(pa.array(expiry, pa.int64()))
    try:
        columns = [
            pa.concat_arrays(chunks[f.name]) if chunks[f.name] else pa.array([], f.type) for f in SCHEMA
        ]
        table = pa.Table.from_arrays(columns, schema=SCHEMA.with_metadata(_metadata(part)))
    except (pa.ArrowException, UnicodeError) as exc:
        raise StateValueError(
            f"state of key groups {part.key_group_range} cannot be encoded: {exc}"
        ) from None
    return _write(table, fmt)


def _write(table: pa.Table, fmt: str) -> bytes:
    sink = pa.BufferOutputStream()
    if fmt == "arrow":
        with ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    else:
        pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def _row_columns(
    rows: Iterable[StateRow], name: str, is_map: bool
) -> tuple[pa.Array, pa.Array, pa.Array, list[int | None]]:
    """Key, namespace and value text and expiries of one run, cell by cell (the JSON codec)."""
    key_json, value_json = (_key_json, _value_json) if FAST_CODEC else (key_to_json, value_to_json)
    keys: list[str] = []
    namespaces: list[str] = []
    values: list[str] = []
    expiry: list[int | None] = []
    last_key: Any = object()
    last_key_json = ""
    for row in rows:
        if row.key is not last_key:  # rows of one key are adjacent; identity, never ==
            last_key, last_key_json = row.key, key_json(row.key)
        keys.append(last_key_json)
        namespaces.append(key_json(row.namespace))
        if is_map:
            user_key, user_value = row.value
            text = value_json(user_value, state=name, key=row.key)
            values.append(f"[{key_json(user_key)},{text}]")
        else:
            values.append(value_json(row.value, state=name, key=row.key))
        expiry.append(row.expiry_ms)
    return (
        pa.array(keys, pa.string()),
        pa.array(namespaces, pa.string()),
        pa.array(values, pa.string()),
        expiry,
    )


def _int_run_columns(rows: tuple[StateRow, ...]) -> tuple[pa.Array, pa.Array, pa.Array, list[Any]] | None:
    """The same columns as :func:`_row_columns` computed by Arrow (module docstring of
    ``encode_key_groups``); None when the run does not have that shape or an int leaves int64."""
    keys, namespaces, values, expiry = (list(c) for c in zip(*rows))
    if set(map(type, keys)) != {int}:
        return None
    ns_types = set(map(type, namespaces))
    value_types = set(map(type, values))
    try:
        key_arr = _int_text(keys)
        if ns_types == {int}:
            ns_arr = _int_text(namespaces)
        elif ns_types == {type(None)}:
            ns_arr = pa.array(["null"] * len(rows), pa.string())
        else:
            return None
        if value_types == {int}:
            value_arr = _int_text(values)
        elif value_types == {list}:
            widths = set(map(len, values))
            width = widths.pop() if len(widths) == 1 else 0
            flat = list(itertools.chain.from_iterable(values))
            if width == 0 or set(map(type, flat)) != {int}:
                return None
            inner = pc.binary_join_element_wise(*(_int_text(flat[i::width]) for i in range(width)), ",")
            value_arr = pc.binary_join_element_wise("[", inner, "]", "")
        else:
            return None
    except (OverflowError, pa.ArrowInvalid):
        return None
    return key_arr, ns_arr, value_arr, expiry


def _int_rows_columns(rows: IntRows) -> tuple[pa.Array, pa.Array, pa.Array, list[Any]]:
    """The columns of :func:`_int_run_columns` straight from an ``IntRows``'s arrays."""
    width = rows.values.shape[1]
    texts = [pa.array(rows.values[:, i]).cast(pa.string()) for i in range(width)]
    inner = texts[0] if width == 1 else pc.binary_join_element_wise(*texts, ",")
    value_arr = pc.binary_join_element_wise("[", inner, "]", "")
    return (
        pa.array(rows.keys).cast(pa.string()),
        pa.array(rows.namespaces).cast(pa.string()),
        value_arr,
        [None] * len(rows),
    )


def _int_text(values: list[int]) -> pa.Array:
    """Decimal text of Python ints (the text ``json`` and ``str`` write); raises beyond int64."""
    return pa.array(values, pa.int64()).cast(pa.string())


def _metadata(part: KeyedStateSnapshot) -> dict[str, str]:
    rng = part.key_group_range
    return {
        "epochal.format": FORMAT_NAME,
        "epochal.format_version": str(TEXT_FORMAT_VERSION),
        "epochal.key_encoding_version": str(KEY_ENCODING_VERSION),
        "epochal.max_parallelism": str(part.max_parallelism),
        "epochal.key_group_range": json.dumps([rng.first, rng.last]),
        "epochal.state_kinds": json.dumps({n: k.value for n, k in part.kinds.items()}, sort_keys=True),
    }


def encode_each_key_group(
    snapshot: KeyedStateSnapshot, fmt: str = "arrow", *, only: Iterable[int] | None = None
) -> dict[int, bytes]:
    """One file per non-empty key group (restricted to ``only``, e.g. ``changed_key_groups``)."""
    wanted = None if only is None else set(only)
    return {
        kg: encode_key_groups(snapshot.part(KeyGroupRange(kg, kg)), fmt)
        for kg in snapshot.key_groups
        if wanted is None or kg in wanted
    }


def decode_key_groups(
    data: bytes, fmt: str = "arrow", *, source: str = "<bytes>", int_rows: bool = False
) -> KeyedStateSnapshot:
    """Parse a file written by :func:`encode_key_groups`; StateFileError names ``source`` on failure.

    ``int_rows``: a file holding one run of a single-value state whose keys, namespaces and values
    are ints and equally long lists of ints, without expiries, decodes to an :class:`IntRows`
    (the same rows, as int64 columns, parsed by Arrow); a file in the typed layout (version 3)
    decodes to ``TypedRows``; other files decode as usual."""
    _check_fmt(fmt)
    try:
        table = ipc.open_stream(pa.py_buffer(data)).read_all() if fmt == "arrow" else read_parquet(data)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise StateFileError(
            f"state file {source!r} is not a readable {fmt} file (truncated or corrupt: {exc}); {_REMEDY}"
        ) from None
    try:
        return _from_table(table, int_rows)
    except StateFileError as exc:
        raise StateFileError(f"state file {source!r}: {exc}; {_REMEDY}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise StateFileError(f"state file {source!r} has invalid content ({exc}); {_REMEDY}") from None


def _from_table(table: pa.Table, int_rows: bool = False) -> KeyedStateSnapshot:
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    if meta.get("epochal.format") != FORMAT_NAME:
        raise StateFileError("it is not an Epochal keyed-state file (no epochal.format metadata)")
    version = int(meta["epochal.format_version"])
    if version > FORMAT_VERSION:
        raise StateFileError(
            f"it has format_version {version}, newer than this Epochal supports ({FORMAT_VERSION}): "
            "upgrade Epochal to read it"
        )
    if int(meta.get("epochal.key_encoding_version", "1")) != KEY_ENCODING_VERSION:
        raise StateFileError("it was written with another key hash version")
    first, last = json.loads(meta["epochal.key_group_range"])
    rng = KeyGroupRange(int(first), int(last))
    kinds = {n: StateKind(k) for n, k in json.loads(meta["epochal.state_kinds"]).items()}
    if version >= TYPED_FORMAT_VERSION:
        return KeyedStateSnapshot(
            max_parallelism=int(meta["epochal.max_parallelism"]),
            key_group_range=rng,
            kinds=kinds,
            key_groups=from_typed_table(table, meta, rng, kinds, int_rows),
        )
    if version >= INT_FORMAT_VERSION:
        return KeyedStateSnapshot(
            max_parallelism=int(meta["epochal.max_parallelism"]),
            key_group_range=rng,
            kinds=kinds,
            key_groups=from_int_table(table, meta, rng, kinds, int_rows),
        )
    missing = [n for n in SCHEMA.names if n not in table.column_names]
    if missing:
        raise StateFileError(f"it lacks columns {missing}")
    columnar = _int_run(table, rng, kinds) if int_rows and FAST_CODEC else None
    if columnar is not None:
        run_name, runs = columnar
        return KeyedStateSnapshot(
            max_parallelism=int(meta["epochal.max_parallelism"]),
            key_group_range=rng,
            kinds=kinds,
            key_groups={kg: {run_name: rows} for kg, rows in runs.items()},  # type: ignore[dict-item]  # IntRows are rows
        )
    groups: dict[int, dict[str, list[StateRow]]] = {}
    cols = [table.column(n).to_pylist() for n in SCHEMA.names]
    keys, namespaces, values = _bulk_keys(cols[2]), _bulk_keys(cols[3]), _bulk_json(cols[4])
    new_row = tuple.__new__  # StateRow(...) without NamedTuple's Python-level __new__
    maps = {n for n, k in kinds.items() if k is StateKind.MAP}
    key_groups, names = set(cols[0]), set(cols[1])
    if len(key_groups) == 1 and len(names) == 1 and not names & maps:  # one run: the usual file
        (kg,), (name,) = key_groups, names
        _check_run(kg, name, rng, kinds)
        groups[kg] = {
            name: list(map(functools.partial(new_row, StateRow), zip(keys, namespaces, values, cols[5])))
        }
    else:
        at: tuple[Any, Any] = (None, None)
        rows: list[StateRow] = []
        for kg, name, key, ns, value, expiry in zip(cols[0], cols[1], keys, namespaces, values, cols[5]):
            if (kg, name) != at:  # writers keep them adjacent; if not, setdefault finds the same list
                _check_run(kg, name, rng, kinds)
                rows = groups.setdefault(kg, {}).setdefault(name, [])
                at = (kg, name)
            if name in maps:
                user_key, user_value = value
                value = (key_from_jsonable(user_key), user_value)
            rows.append(new_row(StateRow, (key, ns, value, expiry)))
    return KeyedStateSnapshot(
        max_parallelism=int(meta["epochal.max_parallelism"]),
        key_group_range=rng,
        kinds=kinds,
        key_groups={kg: {n: tuple(rows) for n, rows in states.items()} for kg, states in groups.items()},
    )


_SINGLE_VALUE = frozenset({StateKind.VALUE, StateKind.REDUCING, StateKind.AGGREGATING})


def _int_run(
    table: pa.Table, rng: KeyGroupRange, kinds: dict[str, StateKind]
) -> tuple[str, dict[int, IntRows]] | None:
    """The file's rows as one ``IntRows`` per key group of a single state, or None when it is not
    exactly that shape (several states, key groups not in ascending runs, a list or map state,
    expiries, or a key, namespace or value that is not int text / a bracketed list of int texts of
    one width: Arrow's int parsing refuses anything else)."""
    if table.num_rows == 0 or table.column("expiry_ms").null_count != table.num_rows:
        return None
    name_col = table.column("state")
    name = name_col[0].as_py()
    if pc.count_distinct(name_col).as_py() != 1 or kinds.get(name) not in _SINGLE_VALUE:
        return None
    kg_of_row = table.column("key_group").to_numpy()
    if len(kg_of_row) > 1 and bool(np.any(np.diff(kg_of_row) < 0)):
        return None  # not written by this encoder (it writes key groups in ascending order)
    starts = np.flatnonzero(np.diff(kg_of_row)) + 1 if len(kg_of_row) > 1 else np.zeros(0, np.int64)
    bounds = [0, *starts.tolist(), len(kg_of_row)]
    for first in bounds[:-1]:
        _check_run(int(kg_of_row[first]), name, rng, kinds)
    values = table.column("value").combine_chunks()
    try:
        keys = table.column("key").cast(pa.int64()).to_numpy()
        namespaces = table.column("namespace").cast(pa.int64()).to_numpy()
        if not (pc.all(pc.starts_with(values, "[")).as_py() and pc.all(pc.ends_with(values, "]")).as_py()):
            return None
        parts = pc.split_pattern(pc.utf8_slice_codeunits(values, 1, -1), ",")
        widths = pc.list_value_length(parts)
        width = pc.min(widths).as_py()
        if not width or pc.max(widths).as_py() != width:
            return None
        flat = pc.list_flatten(parts).cast(pa.int64()).to_numpy().reshape(len(keys), width)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return name, {
        int(kg_of_row[a]): IntRows(keys[a:b], namespaces[a:b], flat[a:b])
        for a, b in itertools.pairwise(bounds)
    }


def _check_run(kg: int, name: str, rng: KeyGroupRange, kinds: dict[str, StateKind]) -> None:
    if kg not in rng or name not in kinds:
        raise StateFileError(f"row of state {name!r} in key group {kg} lies outside range {rng} or kinds")


def _bulk_json(texts: list[str]) -> list[Any]:
    """``[json.loads(t) for t in texts]`` with one parser call: valid JSON texts joined by commas
    inside brackets parse to exactly these values. Anything else (a corrupt cell that would merge
    into or split from its neighbours changes the count, or fails) falls back to the per-cell parse,
    which raises on the bad cell. Not caught: two adjacent cells corrupted so that they still parse
    as the same number of values (``"[1"``, ``"2]", "3,4"``) -- no writer produces such cells, and
    every checkpoint and savepoint file's size and SHA-256 are verified before it is decoded."""
    if texts and FAST_CODEC:
        try:
            values = json.loads("[" + ",".join(texts) + "]")
        except ValueError:
            values = None
        if isinstance(values, list) and len(values) == len(texts):
            return values
    return [json.loads(t) for t in texts]


def _bulk_keys(texts: list[str]) -> list[Any]:
    """Decoded tagged keys of a column (runs of the same text are decoded once)."""
    scalar = (int, str) if FAST_CODEC else ()
    return [v if type(v) in scalar else key_from_jsonable(v) for v in _bulk_json(texts)]


def _key_json(key: Any) -> str:
    """:func:`key_to_json` with a fast path for plain ints (the same text: ``json`` writes ``str``)."""
    return str(key) if type(key) is int else key_to_json(key)


def _value_json(value: Any, *, state: str, key: Any) -> str:
    """:func:`value_to_json` with fast paths for ints and flat lists of ints (byte-identical text)."""
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is list and all(type(v) is int for v in value):
        return "[" + ",".join(map(str, value)) + "]"
    return value_to_json(value, state=state, key=key)


def format_of(path: str | Path) -> str:
    """The format of a state file from its extension (``.arrow`` or ``.parquet``)."""
    suffix = Path(path).suffix.lstrip(".")
    if suffix not in FORMATS:
        raise ValueError(f"state file {str(path)!r} has extension {suffix!r}; expected .arrow or .parquet")
    return suffix


def write_state_file(path: str | Path, part: KeyedStateSnapshot) -> int:
    """Write ``part`` to a local file (format from the extension); return the byte size."""
    data = encode_key_groups(part, format_of(path))
    Path(path).write_bytes(data)
    return len(data)


def read_state_file(path: str | Path) -> KeyedStateSnapshot:
    """Read a local ``.arrow`` or ``.parquet`` state file (e.g. a savepoint's canonical Parquet)."""
    fmt = format_of(path)
    return decode_key_groups(Path(path).read_bytes(), fmt, source=str(path))
