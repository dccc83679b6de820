"""FileLogSource: offsets, segments and replay, on the memory and local stores, NDJSON and Parquet."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from spark_jobs.sources import (
    FileLogSource,
    InvalidPartitionError,
    OffsetOutOfRangeError,
    ReplayableSource,
    SegmentExistsError,
    SegmentFormat,
    SegmentLayoutError,
    batch_schema,
    ndjson,
    parquet,
    read_table,
)
from state_store.core.ports import ObjectData, ObjectInfo, ObjectStore
from tests.unit.sources.conftest import EVENTS, T0, events

FORMATS: list[SegmentFormat] = ["ndjson", "parquet"]
SIZES = (3, 5, 2)  # three segments: offsets [0, 3), [3, 8), [8, 10)


def source(store: ObjectStore, fmt: SegmentFormat, **kwargs: object) -> FileLogSource:
    return FileLogSource(store, "logs/clicks", uid="clicks", schema=EVENTS, format=fmt, **kwargs)  # type: ignore[arg-type]


def filled(store: ObjectStore, fmt: SegmentFormat, partition: str = "p0") -> FileLogSource:
    src = source(store, fmt)
    first = 0
    for size in SIZES:
        src.append(partition, events(first, size))
        first += size
    return src


def ids(table: pa.Table) -> list[str]:
    return [str(x) for x in table.column("event_id").to_pylist()]


@pytest.fixture(params=FORMATS)
def fmt(request: pytest.FixtureRequest) -> SegmentFormat:
    value: SegmentFormat = request.param
    return value


def test_file_log_source_is_a_replayable_source(store: ObjectStore, fmt: SegmentFormat) -> None:
    assert isinstance(source(store, fmt), ReplayableSource)


def test_append_writes_segments_named_by_base_offset(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt)
    keys = [info.key for info in store.list("logs/clicks/p0/")]
    assert keys == [f"logs/clicks/p0/{base:020d}.{fmt}" for base in (0, 3, 8)]
    assert [(s.base_offset, s.count, s.end_offset) for s in src.index("p0").segments] == [
        (0, 3, 3),
        (3, 5, 8),
        (8, 2, 10),
    ]


def test_read_returns_records_with_their_offsets(store: ObjectStore, fmt: SegmentFormat) -> None:
    table = read_table(filled(store, fmt), "p0", 0, 10)
    assert table.schema == batch_schema(EVENTS)
    assert table.column("_offset").to_pylist() == list(range(10))
    expected = pa.Table.from_pylist(events(0, 10), EVENTS)
    assert table.drop_columns(["_offset"]).to_pylist() == expected.to_pylist()


def test_every_range_is_exact_across_segment_boundaries(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt)
    for start in range(11):
        for end in range(start, 11):
            table = read_table(src, "p0", start, end, chunk_size=2)
            assert table.column("_offset").to_pylist() == list(range(start, end))
            assert ids(table) == [f"e{o}" for o in range(start, end)]


def test_reading_a_range_twice_gives_the_same_batches(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt)
    first = list(src.read("p0", 1, 9, chunk_size=3))
    again = list(src.read("p0", 1, 9, chunk_size=3))
    assert [b.to_pylist() for b in first] == [b.to_pylist() for b in again]


def test_split_ranges_concatenate_to_the_whole_range(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt)
    whole = read_table(src, "p0", 0, 10)
    for cut in range(11):
        parts = pa.concat_tables([read_table(src, "p0", 0, cut), read_table(src, "p0", cut, 10)])
        assert parts.equals(whole)
    for chunk in (1, 4, 100):
        assert read_table(src, "p0", 0, 10, chunk_size=chunk).equals(whole)


def test_batches_hold_at_most_chunk_size_offsets_and_never_span_segments(
    store: ObjectStore, fmt: SegmentFormat
) -> None:
    batches = list(filled(store, fmt).read("p0", 0, 10, chunk_size=4))
    assert [b.column("_offset").to_pylist() for b in batches] == [[0, 1, 2], [3, 4, 5, 6], [7], [8, 9]]


def test_empty_range_reads_nothing(store: ObjectStore, fmt: SegmentFormat) -> None:
    assert list(filled(store, fmt).read("p0", 4, 4)) == []


def test_end_offsets_list_every_partition(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt, "p1")
    src.append("p0", events(0, 4))
    store.put("logs/clicks/_SUCCESS", b"")
    store.put("logs/clicks/p0/_SUCCESS", b"")
    assert src.partitions() == ["p0", "p1"]
    assert src.end_offsets() == {"p0": 4, "p1": 10}


def test_declared_partitions_without_segments_end_at_zero(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = source(store, fmt, partitions=["p0", "p1"])
    src.append("p1", events(0, 2))
    assert src.end_offsets() == {"p0": 0, "p1": 2}
    with pytest.raises(InvalidPartitionError, match="no partition 'p7'"):
        src.read("p7", 0, 0)


def test_reading_past_the_end_is_refused_at_the_call(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt)
    with pytest.raises(OffsetOutOfRangeError, match=r"ends at offset 10 \(exclusive\)"):
        src.read("p0", 5, 11)
    with pytest.raises(OffsetOutOfRangeError, match="end is exclusive"):
        src.read("p0", 5, 4)


def test_offsets_deleted_by_retention_are_reported(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt)
    store.delete(f"logs/clicks/p0/{0:020d}.{fmt}")
    assert src.index("p0").start_offset == 3
    assert ids(read_table(src, "p0", 3, 10)) == [f"e{o}" for o in range(3, 10)]
    with pytest.raises(OffsetOutOfRangeError, match="before 3 are no longer stored"):
        src.read("p0", 2, 10)


def test_gap_between_segments_names_the_segment(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt)
    late = f"logs/clicks/p0/{12:020d}.{fmt}"
    store.put(late, store.get(f"logs/clicks/p0/{8:020d}.{fmt}").data)
    with pytest.raises(SegmentLayoutError, match=r"gap.*offsets \[10, 12\) are missing") as caught:
        src.end_offsets()
    assert caught.value.key == late and caught.value.partition == "p0"
    with pytest.raises(SegmentLayoutError, match="gap"):
        src.read("p0", 0, 3)


def test_overlap_between_segments_names_the_segment(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt)
    overlapping = f"logs/clicks/p0/{6:020d}.{fmt}"
    store.put(overlapping, store.get(f"logs/clicks/p0/{8:020d}.{fmt}").data)
    with pytest.raises(SegmentLayoutError, match=r"overlap.*offsets \[6, 8\) are in both") as caught:
        src.read("p0", 0, 2)
    assert caught.value.key == overlapping


def test_objects_that_are_not_segments_are_errors(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt)
    store.put("logs/clicks/p0/notes.txt", b"hello")
    with pytest.raises(
        SegmentLayoutError, match=r"'logs/clicks/p0/notes\.txt' in partition 'p0' is not a segment"
    ):
        src.end_offsets()


def test_segment_of_another_format_is_an_error(store: ObjectStore, fmt: SegmentFormat) -> None:
    other = "parquet" if fmt == "ndjson" else "ndjson"
    store.put(f"logs/clicks/p0/{0:020d}.{other}", b"x")
    with pytest.raises(SegmentLayoutError, match=f"is .{other} but the source reads .{fmt}"):
        source(store, fmt).end_offsets()


def test_empty_segment_is_an_error(store: ObjectStore) -> None:
    store.put(f"logs/clicks/p0/{0:020d}.ndjson", b"")
    with pytest.raises(SegmentLayoutError, match="holds no records"):
        source(store, "ndjson").end_offsets()


def test_unreadable_parquet_segment_is_an_error(store: ObjectStore) -> None:
    store.put(f"logs/clicks/p0/{0:020d}.parquet", b"not parquet at all")
    with pytest.raises(SegmentLayoutError, match="not a readable Parquet file"):
        source(store, "parquet").end_offsets()


def test_append_continues_at_the_end_offset(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt)
    segment = src.append("p0", events(10, 4))
    assert (segment.base_offset, segment.count) == (10, 4)
    assert src.end_offsets() == {"p0": 14}
    assert ids(read_table(src, "p0", 9, 14)) == ["e9", "e10", "e11", "e12", "e13"]


def test_create_only_append_refuses_an_existing_segment(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt)
    key = f"logs/clicks/p0/{3:020d}.{fmt}"
    before = store.get(key).data
    with pytest.raises(SegmentExistsError, match="another producer appended at offset 3 first") as caught:
        src.append("p0", events(100, 5), base_offset=3)
    assert caught.value.key == key
    assert store.get(key).data == before
    assert ids(read_table(src, "p0", 3, 8)) == [f"e{o}" for o in range(3, 8)]


def test_retried_append_with_the_same_records_is_idempotent(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt)
    segment = src.append("p0", events(3, 5), base_offset=3)
    assert (segment.base_offset, segment.count) == (3, 5)
    assert src.end_offsets() == {"p0": 10}


def test_racing_producer_loses_cleanly(store: ObjectStore, fmt: SegmentFormat) -> None:
    producer_a, producer_b = source(store, fmt), source(store, fmt)
    planned = producer_b.end_offsets()["p0"] if producer_b.partitions() else 0
    producer_a.append("p0", events(0, 2))
    with pytest.raises(SegmentExistsError):
        producer_b.append("p0", events(50, 3), base_offset=planned)
    assert producer_b.end_offsets() == {"p0": 2}


def test_append_that_would_leave_a_gap_or_overlap_is_refused(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt)
    with pytest.raises(OffsetOutOfRangeError, match="would leave a gap; append at 10"):
        src.append("p0", events(12, 1), base_offset=12)
    with pytest.raises(OffsetOutOfRangeError, match="would leave an overlap; append at 10"):
        src.append("p0", events(5, 1), base_offset=5)


def test_append_of_zero_records_is_refused(store: ObjectStore, fmt: SegmentFormat) -> None:
    with pytest.raises(ValueError, match="zero records"):
        source(store, fmt).append("p0", [])


def test_segment_rewritten_between_index_and_read_is_detected(store: ObjectStore, fmt: SegmentFormat) -> None:
    src = filled(store, fmt)
    src.end_offsets()  # counts are now cached
    batches = src.read("p0", 3, 8)
    key = f"logs/clicks/p0/{3:020d}.{fmt}"
    store.put(key, _encoded(fmt, events(3, 2)))
    with pytest.raises(SegmentLayoutError, match="indexed with 5 records but now holds 2"):
        list(batches)


def _encoded(fmt: SegmentFormat, records: list[dict[str, object]]) -> bytes:
    if fmt == "ndjson":
        return ndjson.encode_records(records)
    return parquet.encode_table(pa.Table.from_pylist(records, EVENTS))


def test_tables_round_trip_through_both_formats(store: ObjectStore, fmt: SegmentFormat) -> None:
    table = pa.Table.from_pylist(events(0, 6), EVENTS)
    src = source(store, fmt)
    src.append("p0", table)
    assert read_table(src, "p0", 0, 6).drop_columns(["_offset"]).equals(table)
    assert read_table(src, "p0", 0, 6).column("event_time")[0].as_py().timestamp() * 1000 == T0


class CountingStore:
    """Delegates to a store and records which keys were fetched."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.fetched: list[str] = []

    @property
    def uri(self) -> str:
        return self.inner.uri

    def get(self, key: str) -> ObjectData:
        self.fetched.append(key)
        return self.inner.get(key)

    def head(self, key: str) -> ObjectInfo | None:
        return self.inner.head(key)

    def put(self, key: str, data: bytes) -> str:
        return self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key: str, data: bytes, expected_version: str) -> str:
        return self.inner.put_if_match(key, data, expected_version)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


def test_fresh_source_fetches_only_the_last_segment_for_end_offsets(
    store: ObjectStore, fmt: SegmentFormat
) -> None:
    filled(store, fmt)
    counting = CountingStore(store)
    src = source(counting, fmt)
    assert src.end_offsets() == {"p0": 10}
    assert counting.fetched == [f"logs/clicks/p0/{8:020d}.{fmt}"]
    counting.fetched.clear()
    assert src.end_offsets() == {"p0": 10}
    assert counting.fetched == []  # counts are cached per (key, version)
    assert ids(read_table(src, "p0", 4, 6)) == ["e4", "e5"]
    assert counting.fetched == [f"logs/clicks/p0/{3:020d}.{fmt}"]


def test_fresh_source_detects_a_middle_gap_when_reading_or_verifying(
    store: ObjectStore, fmt: SegmentFormat
) -> None:
    filled(store, fmt)
    store.put(f"logs/clicks/p0/{3:020d}.{fmt}", _encoded(fmt, events(3, 4)))  # now [3, 7), next starts at 8
    src = source(store, fmt)
    assert src.end_offsets() == {"p0": 10}  # only the last segment is fetched
    assert ids(read_table(src, "p0", 0, 3)) == ["e0", "e1", "e2"]
    with pytest.raises(SegmentLayoutError, match=r"gap.*offsets \[7, 8\) are missing") as caught:
        read_table(src, "p0", 2, 5)
    assert caught.value.key == f"logs/clicks/p0/{8:020d}.{fmt}"
    with pytest.raises(SegmentLayoutError, match="gap"):
        source(store, fmt).verify("p0")


def test_fresh_source_detects_a_middle_overlap_when_reading(store: ObjectStore, fmt: SegmentFormat) -> None:
    filled(store, fmt)
    store.put(f"logs/clicks/p0/{3:020d}.{fmt}", _encoded(fmt, events(3, 6)))  # now [3, 9), next starts at 8
    with pytest.raises(SegmentLayoutError, match=r"overlap.*offsets \[8, 9\) are in both"):
        read_table(source(store, fmt), "p0", 7, 8)
