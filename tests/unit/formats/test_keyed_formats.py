"""Keyed-state files: exact round trips (Arrow IPC and Parquet), plain-pandas readability, clear errors."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state_store.core.keygroups import KeyGroupRange, key_group_of
from state_store.core.state import (
    KeyedStateBackend,
    KeyedStateSnapshot,
    ListStateDescriptor,
    MapStateDescriptor,
    StateKind,
    StateRow,
    ValueStateDescriptor,
)
from state_store.formats import (
    FORMATS,
    StateFileError,
    StateValueError,
    decode_key_groups,
    encode_each_key_group,
    encode_key_groups,
    key_from_json,
    key_to_json,
    read_state_file,
    write_state_file,
)

MAX_P = 64
KINDS = {"v": StateKind.VALUE, "l": StateKind.LIST, "m": StateKind.MAP}

scalar_keys = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=6),
)
keys = st.recursive(scalar_keys, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=6)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
rows = st.tuples(
    st.sampled_from(sorted(KINDS)),
    keys,
    st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 10**6))),
    json_values,
    keys,
    st.one_of(st.none(), st.integers(0, 2**62)),
)


def build(entries: list[tuple[str, Any, Any, Any, Any, int | None]]) -> KeyedStateSnapshot:
    groups: dict[int, dict[str, list[StateRow]]] = {}
    for name, key, namespace, value, user_key, expiry in entries:
        stored = (user_key, value) if name == "m" else value
        row = StateRow(key, namespace, stored, expiry)
        groups.setdefault(key_group_of(key, MAX_P), {}).setdefault(name, []).append(row)
    states = {kg: {n: tuple(r) for n, r in by_name.items()} for kg, by_name in groups.items()}
    return KeyedStateSnapshot(MAX_P, KeyGroupRange(0, MAX_P - 1), KINDS, states)


def strict(value: Any) -> Any:
    """A comparable form that tells True from 1 from 1.0 and tuples from lists."""
    if isinstance(value, dict):
        return ("dict", sorted((k, strict(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [strict(v) for v in value])
    return (type(value).__name__, value)


def strict_groups(snapshot: KeyedStateSnapshot) -> Any:
    return strict(
        {str(kg): {n: list(r) for n, r in states.items()} for kg, states in snapshot.key_groups.items()}
    )


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=60, deadline=None)
@given(entries=st.lists(rows, max_size=25))
def test_round_trip_is_exact_for_json_values_and_tagged_keys(fmt: str, entries: list[Any]) -> None:
    snapshot = build(entries)
    decoded = decode_key_groups(encode_key_groups(snapshot, fmt), fmt)
    assert strict_groups(decoded) == strict_groups(snapshot)
    assert decoded.kinds == snapshot.kinds
    assert decoded.max_parallelism == MAX_P and decoded.key_group_range == KeyGroupRange(0, MAX_P - 1)


@pytest.mark.parametrize("fmt", FORMATS)
def test_encoding_is_deterministic_so_files_can_be_content_addressed(fmt: str) -> None:
    snapshot = build(
        [("v", "a", None, {"b": 1, "a": [2]}, None, 5), ("l", (1, "x"), (0, 9), 1.5, None, None)]
    )
    assert encode_key_groups(snapshot, fmt) == encode_key_groups(snapshot, fmt)


def test_tagged_key_json_keeps_tuples_bytes_and_numeric_types_apart() -> None:
    assert key_to_json((1, "a")) == '{"tuple":[1,"a"]}'
    assert key_to_json([1, "a"][0]) == "1"
    with pytest.raises(ValueError, match="not a tagged key"):
        key_from_json('[1,"a"]')  # a list is never a key
    assert [key_to_json(k) for k in (True, 1, 1.0, "1", None)] == ["true", "1", "1.0", '"1"', "null"]
    assert key_to_json(b"\x00\xff") == '{"bytes":"AP8="}'
    assert key_to_json((float("inf"), float("-inf"))) == '{"tuple":[{"float":"inf"},{"float":"-inf"}]}'
    assert math.isnan(key_from_json(key_to_json(float("nan"))))
    assert key_from_json(key_to_json(("é", (), (None,)))) == ("é", (), (None,))


def test_parquet_is_readable_by_plain_pandas() -> None:
    snapshot = build(
        [
            ("v", "user-1", None, {"clicks": 3}, None, 1_700_000_000_000),
            ("l", "user-1", None, "e1", None, None),
            ("l", "user-1", None, "e2", None, None),
            ("m", (7, "x"), (0, 60), [1, 2], "day", None),
        ]
    )
    frame = pd.read_parquet(io.BytesIO(encode_key_groups(snapshot, "parquet")))
    assert list(frame.columns) == ["key_group", "state", "key", "namespace", "value", "expiry_ms"]
    assert frame["key_group"].dtype == "int32"
    user = frame[frame["key"] == '"user-1"']
    assert sorted(user["state"]) == ["l", "l", "v"]
    assert json.loads(user[user["state"] == "v"]["value"].iloc[0]) == {"clicks": 3}
    assert user[user["state"] == "v"]["expiry_ms"].iloc[0] == 1_700_000_000_000
    assert frame[frame["state"] == "m"]["value"].iloc[0] == '["day",[1,2]]'
    assert frame[frame["state"] == "m"]["namespace"].iloc[0] == '{"tuple":[0,60]}'
    assert (
        pq.read_schema(io.BytesIO(encode_key_groups(snapshot, "parquet"))).metadata[b"epochal.format_version"]
        == b"1"
    )


def test_non_json_values_are_refused_naming_state_key_and_type() -> None:
    for value, fragment in [
        ({1, 2}, "value has type set"),
        ({1: "a"}, "value has a dict key 1 of type int"),
        ([1, {"x": b"raw"}], r"value\[1\]\['x'\] has type bytes"),
    ]:
        snapshot = build([("v", "k", None, value, None, None)])
        with pytest.raises(StateValueError, match=rf"state 'v' for key 'k': {fragment}.*must be JSON types"):
            encode_key_groups(snapshot, "arrow")


def test_tuples_in_values_come_back_as_lists() -> None:
    snapshot = build([("v", "k", None, (1, (2, 3)), None, None)])
    decoded = decode_key_groups(encode_key_groups(snapshot))
    assert next(decoded.rows("v"))[1].value == [1, [2, 3]]


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncated_or_garbage_files_give_an_error_naming_the_file(fmt: str) -> None:
    data = encode_key_groups(build([("v", "k", None, 1, None, None)] * 1), fmt)
    for broken in (data[: len(data) // 2], data[:-9], b"not a state file at all"):
        with pytest.raises(
            StateFileError, match=rf"state file 'job/chk-3/kg-0-63\.{fmt}'.*restore from an earlier"
        ):
            decode_key_groups(broken, fmt, source=f"job/chk-3/kg-0-63.{fmt}")


def _rewrite(data: bytes, edit: Any) -> bytes:
    table = edit(pa.ipc.open_stream(pa.py_buffer(data)).read_all())
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def test_foreign_newer_or_corrupt_content_is_refused_naming_the_file() -> None:
    data = encode_key_groups(build([("v", "k", None, 1, None, None)]))
    meta = pa.ipc.open_stream(pa.py_buffer(data)).schema.metadata
    foreign = _rewrite(data, lambda t: t.replace_schema_metadata({}))
    with pytest.raises(StateFileError, match=r"'f\.arrow': it is not an Epochal keyed-state file"):
        decode_key_groups(foreign, source="f.arrow")
    newer = _rewrite(data, lambda t: t.replace_schema_metadata({**meta, b"epochal.format_version": b"99"}))
    with pytest.raises(StateFileError, match="format_version 99, newer than this Epochal supports"):
        decode_key_groups(newer, source="f.arrow")
    bad_key = _rewrite(data, lambda t: t.set_column(2, "key", pa.array(["{not json"])))
    with pytest.raises(StateFileError, match=r"'f\.arrow' has invalid content"):
        decode_key_groups(bad_key, source="f.arrow")


def test_one_file_per_key_group_restores_into_rescaled_backends(tmp_path: Path) -> None:
    source = KeyedStateBackend(KeyGroupRange(0, MAX_P - 1), MAX_P)
    count = source.get_state(ValueStateDescriptor[int]("count"))
    events = source.get_state(ListStateDescriptor[str]("events"))
    seen = source.get_state(MapStateDescriptor[Any, bool]("seen"))
    for i in range(50):
        source.set_current_key(("user", i))
        count.update(i)
        events.add_all([f"e{i}", f"f{i}"])
        seen.put(i % 4, True)
    snapshot = source.snapshot(checkpoint_id=1)
    files = encode_each_key_group(snapshot, "arrow")
    assert set(files) == set(snapshot.key_groups)
    assert encode_each_key_group(snapshot, "arrow", only=[min(files)]).keys() == {min(files)}
    for kg, data in files.items():
        (tmp_path / f"kg-{kg}-{kg}.arrow").write_bytes(data)
    parts = [read_state_file(p) for p in sorted(tmp_path.glob("*.arrow"))]
    halves = [KeyedStateBackend(rng, MAX_P) for rng in (KeyGroupRange(0, 31), KeyGroupRange(32, 63))]
    for half in halves:
        half.restore(parts, from_checkpoint=1)
    merged = {kg: s for half in halves for kg, s in half.snapshot().key_groups.items()}
    assert merged == dict(snapshot.key_groups)
    assert all(half.changed_key_groups == frozenset() for half in halves)


def test_write_and_read_a_parquet_savepoint_file(tmp_path: Path) -> None:
    snapshot = build([("v", "k", None, [1, "x"], None, None)])
    path = tmp_path / "kg-0-63.parquet"
    assert write_state_file(path, snapshot) == path.stat().st_size
    assert read_state_file(path).key_groups == snapshot.key_groups
    with pytest.raises(ValueError, match=r"expected \.arrow or \.parquet"):
        read_state_file(tmp_path / "kg-0-63.csv")


def test_empty_snapshot_round_trips() -> None:
    empty = KeyedStateSnapshot(MAX_P, KeyGroupRange(4, 7), KINDS, {})
    for fmt in FORMATS:
        decoded = decode_key_groups(encode_key_groups(empty, fmt), fmt)
        assert (
            decoded.is_empty() and decoded.key_group_range == KeyGroupRange(4, 7) and decoded.kinds == KINDS
        )
