"""Malformed records go to the dead letters, keep their offsets, and replay identically."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from spark_jobs.sources import (
    DEAD_LETTER_SCHEMA,
    DeadLetter,
    DeadLetterReason,
    DeadLetters,
    FileLogSource,
    MalformedRecordError,
    ndjson,
    read_table,
)
from spark_jobs.sources.ndjson import count_records, encode_lines
from state_store.core.ports import ObjectStore
from tests.unit.sources.conftest import EVENTS, T0, events

R = DeadLetterReason
GOOD = '{{"event_id":"e{0}","event_time":{1},"value":{0}}}'
LINES = [
    GOOD.format(0, T0),  # 0 valid (user_id is optional)
    "this is not json",  # 1 invalid JSON
    "",  # 2 an empty line is a record too
    "[1, 2]",  # 3 valid JSON, not an object
    '{"event_time": 1700000000000, "value": 3}',  # 4 required event_id missing
    '{"event_id": "e5", "event_time": 1700000000005, "value": "five"}',  # 5 value cannot be int64
    '{"event_id": "e6", "event_time": 1700000000006, "value": 2.5}',  # 6 value would be truncated
    '{"event_id": "e7", "event_time": "2023-11-14T22:13:20.007Z", "value": "7", "extra": [1]}',  # 7 valid
    '{"event_id": null, "event_time": 1700000000008, "value": 8}',  # 8 required field null
    '{"event_id": "e9", "event_time": "2023-11-14 22:13:20", "value": 9}',  # 9 no zone for a UTC field
    GOOD.format(10, T0 + 10),  # 10 valid
]
VALID = [0, 7, 10]
EXPECTED = {1: R.INVALID_JSON, 2: R.INVALID_JSON, 3: R.NOT_AN_OBJECT, 4: R.MISSING_FIELD, 5: R.BAD_TYPE,
            6: R.BAD_TYPE, 8: R.MISSING_FIELD, 9: R.BAD_TYPE}  # fmt: skip


def ndjson_source(store: ObjectStore) -> FileLogSource:
    return FileLogSource(store, "raw", uid="raw", schema=EVENTS, format="ndjson")


@pytest.fixture
def src(store: ObjectStore) -> FileLogSource:
    source = ndjson_source(store)
    source.append_lines("p0", LINES[:4])
    source.append_lines("p0", LINES[4:])
    return source


def test_malformed_records_go_to_the_dead_letters_with_partition_and_offset(src: FileLogSource) -> None:
    letters = DeadLetters()
    table = read_table(src, "p0", 0, len(LINES), dead_letters=letters)
    assert table.column("_offset").to_pylist() == VALID
    assert table.column("event_id").to_pylist() == ["e0", "e7", "e10"]
    assert table.column("value").to_pylist() == [0, 7, 10]
    assert {x.offset: x.reason for x in letters} == EXPECTED
    assert all(x.partition == "p0" and x.source == "raw" for x in letters)
    assert [x.raw for x in letters] == [LINES[o] for o in sorted(EXPECTED)]


def test_dead_letters_are_counted_per_reason(src: FileLogSource) -> None:
    letters = DeadLetters()
    read_table(src, "p0", 0, len(LINES), dead_letters=letters)
    assert dict(letters.counts) == {R.INVALID_JSON: 2, R.NOT_AN_OBJECT: 1, R.MISSING_FIELD: 2, R.BAD_TYPE: 3}
    assert letters.total == 8 and letters.offsets("p0") == sorted(EXPECTED)


def test_malformed_records_consume_their_offsets(src: FileLogSource) -> None:
    assert src.end_offsets() == {"p0": len(LINES)}
    segment = src.append("p0", events(11, 2))
    assert segment.base_offset == len(LINES)
    table = read_table(src, "p0", 10, 13, dead_letters=DeadLetters())
    assert table.column("_offset").to_pylist() == [10, 11, 12]


def test_replay_and_any_chunking_give_the_same_rows_and_dead_letters(src: FileLogSource) -> None:
    reference_letters = DeadLetters()
    reference = read_table(src, "p0", 0, len(LINES), dead_letters=reference_letters)
    for chunk in (1, 2, 3, 5, 64):
        letters = DeadLetters()
        assert read_table(src, "p0", 0, len(LINES), chunk_size=chunk, dead_letters=letters).equals(reference)
        assert letters.letters == reference_letters.letters
    halves = DeadLetters()
    first = read_table(src, "p0", 0, 6, dead_letters=halves)
    second = read_table(src, "p0", 6, len(LINES), dead_letters=halves)
    assert pa.concat_tables([first, second]).equals(reference)
    assert halves.letters == reference_letters.letters


def test_without_a_collector_the_first_malformed_record_raises(src: FileLogSource) -> None:
    assert read_table(src, "p0", 0, 1).column("_offset").to_pylist() == [0]
    with pytest.raises(MalformedRecordError, match=r"offset 1 of partition 'p0'.*invalid_json.*DeadLetters"):
        read_table(src, "p0", 0, 4)


def test_empty_line_and_missing_final_newline_count_as_records(store: ObjectStore) -> None:
    assert count_records(b"a\n\nb") == 3
    assert count_records(b"a\n\nb\n") == 3
    assert count_records(b"\n") == 1
    store.put(f"raw/p0/{0:020d}.ndjson", (GOOD.format(0, T0) + "\n\n" + GOOD.format(2, T0)).encode())
    letters = DeadLetters()
    table = read_table(ndjson_source(store), "p0", 0, 3, dead_letters=letters)
    assert table.column("_offset").to_pylist() == [0, 2]
    assert [(x.offset, x.reason) for x in letters] == [(1, R.INVALID_JSON)]


def test_crlf_lines_and_castable_values_are_valid(store: ObjectStore) -> None:
    lines = [
        '{"event_id": "a", "event_time": "2023-11-14T23:13:20.001+01:00", "value": "12"}\r',
        '{"event_id": "b", "event_time": 1700000000002, "value": 13.0, "user_id": "u"}',
    ]
    src = ndjson_source(store)
    src.append_lines("p0", lines)
    table = read_table(src, "p0", 0, 2)
    assert table.column("value").to_pylist() == [12, 13]
    assert [t.timestamp() * 1000 for t in table.column("event_time").to_pylist()] == [T0 + 1, T0 + 2]
    assert table.column("user_id").to_pylist() == [None, "u"]


def test_encode_lines_refuses_a_value_that_would_add_a_record() -> None:
    with pytest.raises(ValueError, match="line 1 contains a newline"):
        encode_lines(["{}", '{"a": 1}\n{"b": 2}'])


def test_parquet_rows_with_bad_values_are_dead_lettered(store: ObjectStore) -> None:
    loose = pa.table(
        {
            "event_id": ["e0", None, "e2", "e3"],
            "event_time": pa.array([T0, T0 + 1, T0 + 2, T0 + 3], pa.int64()),
            "value": ["0", "1", "two", "3"],
        }
    )
    src = FileLogSource(store, "pq", uid="pq", schema=EVENTS, format="parquet")
    src.append("p0", loose)
    letters = DeadLetters()
    table = read_table(src, "p0", 0, 4, dead_letters=letters)
    assert table.column("_offset").to_pylist() == [0, 3]
    assert table.column("value").to_pylist() == [0, 3]
    assert [(x.offset, x.reason) for x in letters] == [(1, R.MISSING_FIELD), (2, R.BAD_TYPE)]
    assert json.loads(letters.letters[1].raw)["value"] == "two"


def test_parquet_segment_missing_a_required_column_dead_letters_every_row(store: ObjectStore) -> None:
    src = FileLogSource(store, "pq", uid="pq", schema=EVENTS, format="parquet")
    src.append("p0", pa.table({"event_id": ["a", "b"], "event_time": pa.array([T0, T0], pa.int64())}))
    letters = DeadLetters()
    assert read_table(src, "p0", 0, 2, dead_letters=letters).num_rows == 0
    assert letters.count(R.MISSING_FIELD) == 2 and "'value'" in letters.letters[0].detail


def test_collector_bounds_memory_but_keeps_exact_counts() -> None:
    letters = DeadLetters(max_kept=2)
    for offset in range(5):
        letters.add(DeadLetter("s", "p0", offset, R.INVALID_JSON, "bad", "x"))
    assert (len(letters), letters.total, letters.dropped) == (2, 5, 3)


def test_dead_letters_export_as_arrow_and_ndjson(src: FileLogSource) -> None:
    letters = DeadLetters()
    read_table(src, "p0", 0, len(LINES), dead_letters=letters)
    table = letters.to_table()
    assert table.schema == DEAD_LETTER_SCHEMA
    assert table.column("offset").to_pylist() == sorted(EXPECTED)
    rows = [json.loads(line) for line in letters.to_ndjson().decode().splitlines()]
    assert [r["reason"] for r in rows] == [EXPECTED[o].value for o in sorted(EXPECTED)]


@pytest.mark.parametrize("timestamps", ["iso", "epoch_ms"])
def test_valid_ndjson_decodes_on_the_vectorized_path(timestamps: str) -> None:
    records = events(0, 50)
    if timestamps == "iso":
        data = ndjson.encode_table(pa.Table.from_pylist(records, EVENTS))
    else:
        data = ndjson.encode_records(records)
    lines = ndjson.split_lines(data)
    assert ndjson._fast_columns(lines, 0, len(lines), EVENTS) is not None
    assert ndjson._fast_columns(ndjson.split_lines(data + b"oops\n"), 0, 51, EVENTS) is None
