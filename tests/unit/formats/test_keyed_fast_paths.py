"""The fast paths of the keyed-state file codec write the same bytes and read the same rows."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state_store.core.keygroups import KeyGroupRange
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow
from state_store.formats import keyed
from state_store.formats.json_codec import key_to_json, value_to_json

VALUES = [0, -7, 2**70, [1, 2, 3], [], [1, "a"], [1.5, 2], {"a": [1]}, True, None, "x", [True, 1]]
KEYS = [0, -3, 2**70, "k", (1, "a"), 1.0, True, None, b"\x00"]


@pytest.mark.parametrize("value", VALUES)
def test_value_text_is_identical(value: object) -> None:
    assert keyed._value_json(value, state="s", key=1) == value_to_json(value, state="s", key=1)


@pytest.mark.parametrize("key", KEYS)
def test_key_text_is_identical(key: object) -> None:
    assert keyed._key_json(key) == key_to_json(key)


def test_bulk_parse_equals_per_cell_parse_and_falls_back_on_a_bad_cell() -> None:
    texts = ["1", '"a"', "[1,2]", '{"tuple":[1,"a"]}', "NaN", "null"]
    parsed = keyed._bulk_json(texts)
    assert parsed[:4] == [1, "a", [1, 2], {"tuple": [1, "a"]}] and parsed[5] is None
    assert keyed._bulk_keys(['{"tuple":[1,"a"]}', "3", "true"]) == [(1, "a"), 3, True]
    with pytest.raises(ValueError):
        keyed._bulk_json(["1", "[1"])  # a torn cell raises, it is not mis-parsed


def test_a_cell_holding_two_values_is_not_silently_split() -> None:
    with pytest.raises(ValueError):
        keyed._bulk_json(["1,2", "3"])


_SCALARS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
)
_VALUES = st.one_of(
    _SCALARS,
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), min_size=0, max_size=3),
    st.lists(_SCALARS, max_size=3),
)
_RUNS = st.lists(
    st.tuples(
        st.one_of(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.text(max_size=2), st.booleans()),
        st.one_of(st.none(), st.integers(min_value=0, max_value=2**62), st.integers()),
        _VALUES,
        st.one_of(st.none(), st.integers(min_value=0, max_value=2**40)),
    ),
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(0, 7), st.sampled_from(["acc", "cnt"]), _RUNS), max_size=5))
def test_columnar_runs_write_the_bytes_of_the_per_row_codec(
    runs: list[tuple[int, str, list[tuple[object, object, object, int | None]]]],
) -> None:
    """Runs of int keys with int (or no) namespaces and int or flat-int-list values are encoded by
    Arrow, everything else cell by cell: both must give byte-identical files, in both formats."""
    groups: dict[int, dict[str, tuple[StateRow, ...]]] = {}
    for kg, name, rows in runs:
        unique = {(k, ns): StateRow(k, ns, v, e) for k, ns, v, e in rows}
        groups.setdefault(kg, {})[name] = tuple(unique.values())
    part = KeyedStateSnapshot(
        max_parallelism=8,
        key_group_range=KeyGroupRange(0, 7),
        kinds={"acc": StateKind.VALUE, "cnt": StateKind.VALUE},
        key_groups=groups,
    )
    for fmt in keyed.FORMATS:
        columnar = keyed.encode_key_groups(part, fmt)
        with patch.object(keyed, "FAST_CODEC", False):
            per_row = keyed.encode_key_groups(part, fmt)
        assert columnar == per_row
        assert keyed.decode_key_groups(columnar, fmt) == keyed.decode_key_groups(per_row, fmt)


def test_window_accumulators_take_the_columnar_path() -> None:
    rows = tuple(StateRow(k, 10_000 * (k % 3), [k, -k * 7], None) for k in range(50))
    columns = keyed._int_run_columns(rows)
    assert columns is not None
    assert columns[2].to_pylist()[:2] == ["[0,0]", "[1,-7]"]
    assert keyed._int_run_columns((*rows, StateRow(1, 0, [1, 2**64], None))) is None  # beyond int64
    assert keyed._int_run_columns((*rows, StateRow(True, 0, [1, 2], None))) is None  # bool is not int
    assert keyed._int_run_columns((*rows, StateRow(2, 0, [1, 2, 3], None))) is None  # ragged widths
