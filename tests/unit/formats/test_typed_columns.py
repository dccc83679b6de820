"""The typed layout (format version 3) of native state files: float, bool and int slots over int or
string keys come back exactly (floats bit for bit), the bytes do not depend on whether the rows were
held as ``TypedRows`` or tuples (heap and columnar operators write the same files), and a damaged
file in this layout is refused naming the file."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state_store.core.keygroups import KeyGroupRange
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow
from state_store.formats.keyed import StateFileError, decode_key_groups, encode_key_groups
from state_store.formats.typed_rows import TypedRows
from tests.unit.formats.support import file_meta, rewrite, with_meta

MAXP = 16
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
SLOT = {int: INT64, float: st.floats(allow_nan=True, allow_infinity=True), bool: st.booleans()}


def _snap(key_groups: dict[int, dict[str, Any]]) -> KeyedStateSnapshot:
    first, last = min(key_groups), max(key_groups)
    return KeyedStateSnapshot(MAXP, KeyGroupRange(first, last), {"s": StateKind.VALUE}, key_groups)


def _bits(rows: Any) -> list[tuple[Any, ...]]:
    """Rows with floats as their bit patterns (NaN == NaN, -0.0 != 0.0)."""

    def cell(v: Any) -> Any:
        return ("f", struct.pack("<d", v)) if type(v) is float else (type(v).__name__, v)

    return [(cell(r.key), r.namespace, [cell(v) for v in r.value], r.expiry_ms) for r in rows]


@st.composite
def typed_shaped(draw: st.DrawFn) -> KeyedStateSnapshot:
    """One value state in 1-3 key groups: int or str keys, int namespaces, lists of slots whose
    types are fixed per slot and not all int over int keys (that is the int64 layout)."""
    string_keys = draw(st.booleans())
    types = draw(st.lists(st.sampled_from([int, float, bool]), min_size=1, max_size=4))
    if not string_keys and set(types) == {int}:
        types.append(float)
    key = st.text(max_size=6) if string_keys else INT64
    key_groups: dict[int, dict[str, Any]] = {}
    for kg in draw(st.lists(st.integers(0, MAXP - 1), min_size=1, max_size=3, unique=True)):
        keys = draw(st.lists(key, min_size=1, max_size=10, unique=True))
        rows = tuple(StateRow(k, draw(INT64), [draw(SLOT[t]) for t in types], None) for k in keys)
        key_groups[kg] = {"s": rows}
    return _snap(key_groups)


@settings(max_examples=80, deadline=None)
@given(typed_shaped())
def test_typed_rows_take_the_typed_layout_and_come_back_bit_for_bit(snap: KeyedStateSnapshot) -> None:
    data = encode_key_groups(snap)
    meta = file_meta(data)
    assert (meta["epochal.format_version"], meta["epochal.layout"], meta["epochal.state"]) == (
        "3",
        "typed",
        "s",
    )
    for typed in (False, True):
        back = decode_key_groups(data, int_rows=typed)
        assert sorted(back.key_groups) == sorted(snap.key_groups)
        for kg, states in snap.key_groups.items():
            got = back.key_groups[kg]["s"]
            assert isinstance(got, TypedRows) == typed
            assert _bits(got) == _bits(states["s"])
    columns = decode_key_groups(data, int_rows=True)
    assert encode_key_groups(columns) == data  # TypedRows and the tuples they stand for: same bytes
    parquet = decode_key_groups(encode_key_groups(snap, "parquet"), "parquet")  # canonical text layout
    for kg, states in snap.key_groups.items():
        finite = all(not (type(v) is float and not math.isfinite(v)) for r in states["s"] for v in r.value)
        if finite:
            assert _bits(parquet.key_groups[kg]["s"]) == _bits(states["s"])


def test_typed_rows_and_tuples_write_the_same_bytes() -> None:
    columns = TypedRows(
        pa.array(["b", "a", "ü"]),
        np.array([0, 10, 20], np.int64),
        [np.array([1, 2, 3]), np.array([0.1, -0.0, float("nan")]), np.array([True, False, True])],
    )
    assert encode_key_groups(_snap({4: {"s": columns}})) == encode_key_groups(
        _snap({4: {"s": tuple(columns)}})
    )


@pytest.mark.parametrize(
    "rows",
    [
        (StateRow(1, 0, [1, 2], None),),  # int keys and int slots: the int64 layout
        (StateRow("a", 0, [1, 2.5], None), StateRow("b", 0, [1.5, 2.5], None)),  # a slot int, then float
        (StateRow("a", 0, [1, 2.5], None), StateRow(1, 0, [1, 2.5], None)),  # str and int keys
        (StateRow("a", 0, [1, "x"], None),),  # a string slot
        (StateRow("a", 0, 1.5, None), StateRow("b", 0, [1.5], None)),  # a scalar and a list
        (StateRow(("a", 1), 0, [1.5], None),),  # a tuple key
    ],
    ids=["int", "mixed-slot", "mixed-keys", "str-slot", "scalar-and-list", "tuple-key"],
)
def test_other_rows_do_not_take_the_typed_layout(rows: tuple[StateRow, ...]) -> None:
    data = encode_key_groups(_snap({0: {"s": rows}}))
    assert file_meta(data).get("epochal.layout") != "typed"
    assert decode_key_groups(data).key_groups[0]["s"] == rows


@pytest.mark.parametrize(
    "change, message",
    [
        (with_meta(**{"epochal.layout": "int64"}), "layout"),
        (with_meta(**{"epochal.state": "other"}), "not a single-value state"),
        (with_meta(**{"epochal.format_version": "4"}), "newer than this Epochal supports"),
        (with_meta(**{"epochal.key_group_range": "[0, 0]"}), "outside range"),
        (lambda t: t.set_column(1, "key", t.column("key").cast(pa.large_string())), "columns"),
        (lambda t: t.set_column(1, "key", pa.array([None, "b"], pa.string())), "null keys"),
    ],
)
def test_a_damaged_typed_layout_file_is_refused_naming_the_file(change: Any, message: str) -> None:
    rows = (StateRow("a", 0, [1, 0.5], None), StateRow("b", 0, [2, 1.5], None))
    data = encode_key_groups(_snap({0: {"s": rows[:1]}, 3: {"s": rows[1:]}}))
    with pytest.raises(StateFileError, match=f"'chk-7/x.arrow'.*{message}"):
        decode_key_groups(rewrite(data, change), source="chk-7/x.arrow", int_rows=True)


@settings(max_examples=60, deadline=None)
@given(
    st.booleans(),
    st.sampled_from([int, float, bool]),
    st.lists(
        st.tuples(st.text(max_size=5), st.one_of(st.none(), INT64)),
        min_size=1,
        max_size=10,
        unique_by=lambda t: t[0],
    ),
    st.data(),
)
def test_scalar_values_and_expiries_take_the_typed_layout(
    string_keys: bool, kind: type, entries: list[tuple[str, int | None]], data: st.DataObject
) -> None:
    """Deduplication's ``seen`` flags (a bool with a TTL expiry) and other scalar value states."""
    rows = tuple(
        StateRow(k if string_keys else i, None, data.draw(SLOT[kind]), expiry)
        for i, (k, expiry) in enumerate(entries)
    )
    if not string_keys and kind is int and all(e is None for _, e in entries):
        return  # format version 2's shape
    data_bytes = encode_key_groups(_snap({5: {"s": rows}}))
    assert file_meta(data_bytes)["epochal.layout"] == "typed"
    back = decode_key_groups(data_bytes, int_rows=True).key_groups[5]["s"]
    assert not isinstance(back, TypedRows)
    assert _bits([r._replace(value=[r.value]) for r in back]) == _bits(
        [r._replace(value=[r.value]) for r in rows]
    )
