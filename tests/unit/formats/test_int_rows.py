"""``IntRows`` (int64 columns standing for rows) encode to the same bytes as the rows they stand
for, decode back column-wise only when a file has exactly that shape, and behave as the rows."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state_store.core.keygroups import KeyGroupRange
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow
from state_store.formats import keyed
from state_store.formats.int_rows import IntRows
from state_store.formats.keyed import StateFileError, decode_key_groups, encode_key_groups

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def _snapshot(rows: object, kind: StateKind = StateKind.VALUE) -> KeyedStateSnapshot:
    return KeyedStateSnapshot(64, KeyGroupRange(5, 5), {"acc": kind}, {5: {"acc": rows}})  # type: ignore[dict-item]


@st.composite
def int_rows(draw: st.DrawFn) -> IntRows:
    width = draw(st.integers(1, 4))
    keys = draw(st.lists(INT64, min_size=1, max_size=30, unique=True))
    namespaces = draw(st.lists(INT64, min_size=len(keys), max_size=len(keys)))
    values = draw(
        st.lists(st.lists(INT64, min_size=width, max_size=width), min_size=len(keys), max_size=len(keys))
    )
    return IntRows(np.array(keys, np.int64), np.array(namespaces, np.int64), np.array(values, np.int64))


@settings(max_examples=60, deadline=None)
@given(int_rows())
def test_int_rows_encode_as_the_rows_they_stand_for_and_decode_back(columns: IntRows) -> None:
    rows = tuple(columns)
    assert all(type(r.key) is int and type(r.value) is list and r.expiry_ms is None for r in rows)
    data = encode_key_groups(_snapshot(columns))
    assert data == encode_key_groups(_snapshot(rows))
    decoded = decode_key_groups(data, int_rows=True).key_groups[5]["acc"]
    assert isinstance(decoded, IntRows)
    assert decoded == rows and tuple(decoded) == rows
    assert decode_key_groups(data).key_groups[5]["acc"] == rows  # the row decoder agrees


@pytest.mark.parametrize(
    "rows",
    [
        (StateRow("a", 1, [1, 2], None),),
        (StateRow(1, None, [1, 2], None),),
        (StateRow(1, 1, [1, 2.5], None),),
        (StateRow(1, 1, [1, 2], None), StateRow(2, 1, [1], None)),
        (StateRow(True, 1, [1, 2], None),),
        (StateRow(1, 1, [1, 2], 77),),
        (StateRow(1, 1, [[1], 2], None),),
        (StateRow(1, 1, 5, None),),
        (StateRow(1, 1, [2**64, 1], None),),
    ],
    ids=[
        "str-key",
        "no-namespace",
        "float",
        "ragged",
        "bool-key",
        "expiry",
        "nested",
        "scalar",
        "beyond-int64",
    ],
)
def test_other_shapes_decode_to_ordinary_rows(rows: tuple[StateRow, ...]) -> None:
    decoded = decode_key_groups(encode_key_groups(_snapshot(rows)), int_rows=True).key_groups[5]["acc"]
    assert not isinstance(decoded, IntRows)
    assert decoded == rows
    assert [type(r.key) for r in decoded] == [type(r.key) for r in rows]


def test_a_list_state_is_never_int_rows() -> None:
    rows = (StateRow(1, 1, [1, 2], None),)
    decoded = decode_key_groups(encode_key_groups(_snapshot(rows, StateKind.LIST)), int_rows=True)
    assert not isinstance(decoded.key_groups[5]["acc"], IntRows)


def test_snapshots_keep_int_rows_and_slices_are_int_rows() -> None:
    columns = IntRows(np.array([3, 1]), np.array([0, 0]), np.array([[1, 2], [3, 4]]))
    snap = _snapshot(columns)
    assert snap.key_groups[5]["acc"] is columns
    assert snap.part(KeyGroupRange(0, 10)).key_groups[5]["acc"] is columns
    assert isinstance(columns[1:], IntRows) and columns[1:] == (StateRow(1, 0, [3, 4], None),)
    assert columns[0] == StateRow(3, 0, [1, 2], None)
    assert columns != (StateRow(3, 0, [1, 2], None),)
    with pytest.raises(ValueError, match="value matrix"):
        IntRows(np.array([1, 2]), np.array([0, 0]), np.array([1, 2]))


def test_a_file_of_several_key_groups_decodes_to_int_rows_per_key_group() -> None:
    """One file per subtask (the columnar window snapshot): each key group's run comes back as its
    own ``IntRows``, equal to the rows the plain decoder gives."""

    def cols(keys: list[int], width: int = 2) -> IntRows:
        n = len(keys)
        values = np.arange(n * width, dtype=np.int64).reshape(n, width)
        return IntRows(np.array(keys, np.int64), np.arange(n, dtype=np.int64), values)

    runs = {3: cols([1, 5, 9]), 4: cols([2]), 7: cols([4, 8, 12, 16])}
    states = {kg: {"acc": r} for kg, r in runs.items()}
    snapshot = KeyedStateSnapshot(64, KeyGroupRange(3, 7), {"acc": StateKind.VALUE}, states)  # type: ignore[arg-type]
    data = encode_key_groups(snapshot)
    columnar = decode_key_groups(data, int_rows=True)
    plain = decode_key_groups(data)
    assert sorted(columnar.key_groups) == [3, 4, 7] == sorted(plain.key_groups)
    for kg, rows in runs.items():
        decoded = columnar.key_groups[kg]["acc"]
        assert isinstance(decoded, IntRows)
        assert tuple(decoded) == tuple(rows) == plain.key_groups[kg]["acc"]
    assert encode_key_groups(columnar) == data


def _swapped(int_columns: bool) -> tuple[bytes, tuple[StateRow, ...], tuple[StateRow, ...]]:
    """A two-key-group file with its rows swapped (no writer produces this)."""
    rows_a = (StateRow(1, 0, [1, 2], None),)
    rows_b = (StateRow(2, 0, [3, 4], None),)
    with patch.object(keyed, "INT_COLUMNS", int_columns):
        ordered = encode_key_groups(
            KeyedStateSnapshot(
                64, KeyGroupRange(3, 4), {"acc": StateKind.VALUE}, {3: {"acc": rows_a}, 4: {"acc": rows_b}}
            )
        )
    table = ipc.open_stream(pa.py_buffer(ordered)).read_all()
    swapped = pa.concat_tables([table.slice(1, 1), table.slice(0, 1)])
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, swapped.schema) as writer:
        writer.write_table(swapped)
    return sink.getvalue().to_pybytes(), rows_a, rows_b


def test_a_text_file_with_key_groups_out_of_order_decodes_as_rows() -> None:
    data, rows_a, rows_b = _swapped(int_columns=False)
    decoded = decode_key_groups(data, int_rows=True)
    assert not any(isinstance(s["acc"], IntRows) for s in decoded.key_groups.values())
    assert decoded.key_groups[3]["acc"] == rows_a and decoded.key_groups[4]["acc"] == rows_b


def test_an_int64_layout_file_with_key_groups_out_of_order_is_refused() -> None:
    data, _, _ = _swapped(int_columns=True)
    with pytest.raises(StateFileError, match=r"'f\.arrow'.*key groups are not in ascending order"):
        decode_key_groups(data, int_rows=True, source="f.arrow")
