"""The int64 layout (format version 2) of native state files: which rows take it, that they come
back exactly, that the bytes do not depend on how the rows were held, and that a damaged or
foreign file in this layout is refused naming the file."""

from __future__ import annotations

import json
from typing import Any
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state_store.core.keygroups import KeyGroupRange, key_group_of
from state_store.core.state import KeyedStateBackend
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow
from state_store.formats import keyed
from state_store.formats.int_rows import IntRows
from state_store.formats.keyed import StateFileError, decode_key_groups, encode_key_groups
from tests.unit.formats.support import file_meta, rewrite, with_meta

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
MAXP = 16


def _snap(
    key_groups: dict[int, dict[str, Any]], kinds: dict[str, StateKind] | None = None
) -> KeyedStateSnapshot:
    first, last = (min(key_groups), max(key_groups)) if key_groups else (0, -1)
    return KeyedStateSnapshot(MAXP, KeyGroupRange(first, last), kinds or {"s": StateKind.VALUE}, key_groups)


@st.composite
def int_shaped(draw: st.DrawFn) -> KeyedStateSnapshot:
    """Rows of one single-value state in 1-3 key groups: int keys, int-or-None namespaces, values
    all ints or all lists of one width."""
    width = draw(st.integers(0, 3))
    value = INT64 if width == 0 else st.lists(INT64, min_size=width, max_size=width)
    namespace = st.one_of(st.none(), INT64)
    key_groups: dict[int, dict[str, Any]] = {}
    for kg in draw(st.lists(st.integers(0, MAXP - 1), min_size=1, max_size=3, unique=True)):
        keys = draw(st.lists(INT64, min_size=1, max_size=12, unique=True))
        rows = tuple(StateRow(k, draw(namespace), draw(value), None) for k in keys)
        key_groups[kg] = {"s": rows}
    kind = draw(st.sampled_from([StateKind.VALUE, StateKind.REDUCING, StateKind.AGGREGATING]))
    return _snap(key_groups, {"s": kind})


@settings(max_examples=80, deadline=None)
@given(int_shaped())
def test_int_shaped_rows_take_the_int64_layout_and_come_back_exactly(snap: KeyedStateSnapshot) -> None:
    data = encode_key_groups(snap)
    meta = file_meta(data)
    assert (meta["epochal.format_version"], meta["epochal.layout"], meta["epochal.state"]) == (
        "2",
        "int64",
        "s",
    )
    for int_rows in (False, True):
        back = decode_key_groups(data, int_rows=int_rows)
        assert sorted(back.key_groups) == sorted(snap.key_groups)
        for kg, states in snap.key_groups.items():
            assert tuple(back.key_groups[kg]["s"]) == states["s"]
            assert [type(v) for r in back.key_groups[kg]["s"] for v in r[:2]] == [
                type(v) for r in states["s"] for v in r[:2]
            ]
    assert encode_key_groups(decode_key_groups(data, int_rows=True)) == data
    with patch.object(keyed, "INT_COLUMNS", False):
        text = encode_key_groups(snap)
    assert file_meta(text)["epochal.format_version"] == "1"
    assert decode_key_groups(text) == decode_key_groups(data)


def test_int_rows_and_the_rows_they_stand_for_write_the_same_bytes() -> None:
    keys = np.array([3, -7, 2**40], np.int64)
    columns = IntRows(keys, np.array([0, 10, 20], np.int64), np.array([[1, 2], [3, 4], [5, 6]], np.int64))
    as_rows = tuple(columns)
    assert encode_key_groups(_snap({4: {"s": columns}})) == encode_key_groups(_snap({4: {"s": as_rows}}))
    decoded = decode_key_groups(encode_key_groups(_snap({4: {"s": as_rows}})), int_rows=True)
    restored = decoded.key_groups[4]["s"]
    assert isinstance(restored, IntRows) and tuple(restored) == as_rows


def test_int_values_and_none_namespaces_decode_to_rows_even_when_int_rows_are_asked_for() -> None:
    counters = (StateRow(1, None, 5, None), StateRow(2, None, -3, None))
    windowed = (StateRow(1, None, [5], None), StateRow(2, 7, [6], None))
    for rows in (counters, windowed):
        back = decode_key_groups(encode_key_groups(_snap({0: {"s": rows}})), int_rows=True).key_groups[0]["s"]
        assert not isinstance(back, IntRows) and back == rows


@pytest.mark.parametrize(
    "key_groups, kinds",
    [
        ({0: {"s": (StateRow(True, None, 1, None),)}}, None),  # a bool key is not an int
        ({0: {"s": (StateRow(1, None, True, None),)}}, None),  # nor a bool value
        ({0: {"s": (StateRow(1, None, 2**63, None),)}}, None),  # beyond int64
        ({0: {"s": (StateRow(1, None, [1, 2**70], None),)}}, None),
        ({0: {"s": (StateRow(1, None, 1, 99),)}}, None),  # an expiry
        ({0: {"s": (StateRow(1, None, 1.5, None),)}}, None),
        ({0: {"s": (StateRow(1, None, 1, None), StateRow(2, None, [1], None))}}, None),  # int and list
        ({0: {"s": (StateRow(1, None, [1], None),)}, 1: {"s": (StateRow(2, None, [1, 2], None),)}}, None),
        ({0: {"s": (StateRow(1, None, [], None),)}}, None),  # an empty list
        ({0: {"s": (StateRow(1, "w", 1, None),)}}, None),  # a string namespace
        ({0: {"s": (StateRow(1, None, 1, None),), "t": (StateRow(1, None, 1, None),)}}, None),  # two states
        ({0: {"s": (StateRow(1, None, 1, None), StateRow(1, None, 2, None))}}, {"s": StateKind.LIST}),
    ],
)
def test_other_rows_do_not_take_the_int64_layout(key_groups: dict[int, dict[str, Any]], kinds: Any) -> None:
    kinds = kinds or {name: StateKind.VALUE for states in key_groups.values() for name in states}
    snap = _snap(key_groups, kinds)
    data = encode_key_groups(snap)
    assert (
        file_meta(data)["epochal.format_version"] != "2" and file_meta(data).get("epochal.layout") != "int64"
    )
    assert decode_key_groups(data).key_groups == snap.key_groups  # the text or the typed layout


def test_parquet_files_keep_the_text_layout() -> None:
    import pyarrow.parquet as pq

    snap = _snap({0: {"s": (StateRow(1, None, [1, 2], None),)}})
    table = pq.read_table(pa.BufferReader(encode_key_groups(snap, "parquet")))
    assert table.column("value").to_pylist() == ["[1,2]"]
    assert table.schema.metadata[b"epochal.format_version"] == b"1"


@pytest.mark.parametrize(
    "change, message",
    [
        (with_meta(**{"epochal.layout": "float32"}), "layout"),
        (with_meta(**{"epochal.state": "other"}), "not a single-value state"),
        (with_meta(**{"epochal.format_version": "4"}), "newer than this Epochal supports"),
        (with_meta(**{"epochal.key_group_range": "[0, 0]"}), "outside range"),
        (lambda t: t.set_column(1, "key", t.column("key").cast(pa.string())), "columns"),
        (lambda t: t.set_column(1, "key", pa.array([None, 2], pa.int64())), "null keys"),
    ],
)
def test_a_damaged_int64_layout_file_is_refused_naming_the_file(change: Any, message: str) -> None:
    rows = (StateRow(1, 0, [1], None), StateRow(2, 0, [2], None))
    data = encode_key_groups(_snap({0: {"s": rows[:1]}, 3: {"s": rows[1:]}}))
    assert json.loads(file_meta(data)["epochal.key_group_range"]) == [0, 3]
    with pytest.raises(StateFileError, match=f"'chk-7/x.arrow'.*{message}"):
        decode_key_groups(rewrite(data, change), source="chk-7/x.arrow", int_rows=True)


def test_a_backend_restores_the_same_state_from_either_layout() -> None:
    rows = {
        kg: {"s": tuple(StateRow(k, None, k * 10, None) for k in range(200) if key_group_of(k, MAXP) == kg)}
        for kg in range(MAXP)
    }
    snap = KeyedStateSnapshot(MAXP, KeyGroupRange(0, MAXP - 1), {"s": StateKind.VALUE}, rows)
    with patch.object(keyed, "INT_COLUMNS", False):
        text = encode_key_groups(snap)
    typed = encode_key_groups(snap)
    assert len(typed) < len(text)
    backends = []
    for data in (text, typed):
        backend = KeyedStateBackend(KeyGroupRange(0, MAXP - 1), MAXP)
        backend.restore([decode_key_groups(data)])
        backends.append(backend.snapshot().key_groups)
    assert backends[0] == backends[1] == {kg: s for kg, s in rows.items() if s["s"]}
