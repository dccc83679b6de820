"""GeneratorSource: pure records, pure end offsets, bounded out-of-orderness, duplicates, speed."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.sources import (
    CLICKSTREAM_SCHEMA,
    DEFAULT_START_MS,
    FileLogSource,
    GeneratorSource,
    IdleWindow,
    InvalidPartitionError,
    OffsetOutOfRangeError,
    ReplayableSource,
    SegmentFormat,
    batch_schema,
    event_time_ms,
    read_table,
)
from state_store.clocks import ManualClock
from state_store.core.ports import ObjectStore

S = DEFAULT_START_MS


def test_generator_is_a_replayable_source_with_the_clickstream_schema() -> None:
    source = GeneratorSource(partitions=3)
    assert isinstance(source, ReplayableSource)
    assert source.partitions() == ["p0", "p1", "p2"]
    assert source.schema == CLICKSTREAM_SCHEMA and source.event_time_column == "event_time"
    table = read_table(source, "p1", 0, 100)
    assert table.schema == batch_schema(CLICKSTREAM_SCHEMA)
    assert table.column("_offset").to_pylist() == list(range(100))
    assert all(table.column(name).null_count == 0 for name in table.column_names)


def test_same_range_twice_and_another_instance_give_identical_records() -> None:
    kwargs = {"seed": 7, "duplicate_fraction": 0.1, "out_of_orderness_ms": 30}
    first = read_table(GeneratorSource(**kwargs), "p2", 500, 1500)  # type: ignore[arg-type]
    assert read_table(GeneratorSource(**kwargs), "p2", 500, 1500).equals(first)  # type: ignore[arg-type]
    assert not read_table(GeneratorSource(seed=8), "p2", 500, 1500).equals(first)


def test_split_ranges_and_any_chunking_equal_the_whole_range() -> None:
    source = GeneratorSource(seed=3, duplicate_fraction=0.2, out_of_orderness_ms=100)
    whole = read_table(source, "p0", 0, 3000)
    for cut in (0, 1, 999, 1000, 2999, 3000):
        parts = pa.concat_tables([read_table(source, "p0", 0, cut), read_table(source, "p0", cut, 3000)])
        assert parts.equals(whole)
    for chunk in (1, 7, 1000, 10_000):
        assert read_table(source, "p0", 0, 3000, chunk_size=chunk).equals(whole)
    assert [b.num_rows for b in source.read("p0", 0, 2500, chunk_size=1000)] == [1000, 1000, 500]


def test_partitions_are_independent_streams() -> None:
    source = GeneratorSource(partitions=2)
    p0, p1 = read_table(source, "p0", 0, 200), read_table(source, "p1", 0, 200)
    assert p0.column("value").to_pylist() != p1.column("value").to_pylist()
    assert set(p0.column("event_id").to_pylist()).isdisjoint(p1.column("event_id").to_pylist())


def test_end_offsets_are_a_pure_function_of_time() -> None:
    source = GeneratorSource(partitions=2, events_per_second=[1000, 250])
    assert source.end_offsets(S - 5) == {"p0": 0, "p1": 0}
    assert source.end_offsets(S) == {"p0": 0, "p1": 0}
    assert source.end_offsets(S + 1) == {"p0": 1, "p1": 0}
    assert source.end_offsets(S + 999) == {"p0": 999, "p1": 249}
    assert source.end_offsets(S + 1000) == {"p0": 1000, "p1": 250}
    assert GeneratorSource(partitions=2, events_per_second=[1000, 250]).end_offsets(S + 1000) == {
        "p0": 1000,
        "p1": 250,
    }


def test_end_offsets_without_a_time_use_the_injected_clock() -> None:
    clock = ManualClock(S)
    source = GeneratorSource(partitions=1, events_per_second=10, clock=clock)
    assert source.end_offsets() == {"p0": 0}
    clock.advance(2500)
    assert source.end_offsets() == {"p0": 25}


def test_idle_partition_produces_nothing_during_its_window() -> None:
    source = GeneratorSource(partitions=2, idle_partitions={1: [(S + 1000, S + 3000)]})
    ends = [source.end_offsets(S + t) for t in (1000, 2000, 2999, 3000, 3001, 4000)]
    assert [e["p1"] for e in ends] == [1000, 1000, 1000, 1000, 1001, 2000]
    assert [e["p0"] for e in ends] == [1000, 2000, 2999, 3000, 3001, 4000]


def test_record_appears_exactly_when_end_offsets_first_include_it() -> None:
    source = GeneratorSource(
        partitions=2,
        events_per_second=[7, 1234],
        idle_partitions={0: [(S + 2000, S + 2500), (S + 2400, S + 4100)], 1: [IdleWindow(S + 10, S + 11)]},
    )
    for partition in source.partitions():
        timeline = source.timeline(partition)
        offsets = np.arange(0, 400, dtype=np.int64)
        for offset, appear in zip(offsets.tolist(), timeline.appear_ms(offsets).tolist()):
            assert timeline.end_offset(appear) > offset >= timeline.end_offset(appear - 1)
            assert not any(w.start_ms < appear <= (w.end_ms or 0) for w in timeline.idle)


def test_partition_idle_forever_stops_and_cannot_be_read_beyond() -> None:
    source = GeneratorSource(partitions=1, events_per_second=100, idle_partitions={0: [(S + 1000, None)]})
    assert source.end_offsets(S + 1000) == source.end_offsets(S + 10**9) == {"p0": 100}
    assert read_table(source, "p0", 90, 100).num_rows == 10
    with pytest.raises(OffsetOutOfRangeError, match="offsets from 100 never appear"):
        list(source.read("p0", 95, 105))


def test_max_records_bounds_the_partition() -> None:
    source = GeneratorSource(partitions=1, max_records=50)
    assert source.end_offsets(S + 10**6) == {"p0": 50}
    with pytest.raises(OffsetOutOfRangeError, match="holds 50 records"):
        source.read("p0", 0, 51)


@pytest.mark.parametrize("bound", [0, 1, 250])
def test_out_of_orderness_is_bounded_by_the_configured_value(bound: int) -> None:
    source = GeneratorSource(partitions=1, events_per_second=5000, out_of_orderness_ms=bound)
    table = read_table(source, "p0", 0, 100_000)
    event = np.concatenate([event_time_ms(b, "event_time") for b in table.to_batches()])
    running_max = np.maximum.accumulate(event)
    lateness = running_max - event
    assert int(lateness.max()) <= bound
    if bound >= 250:
        assert int(lateness.max()) > 0.8 * bound
    appear = source.timeline("p0").appear_ms(np.arange(100_000, dtype=np.int64))
    assert np.all(event <= appear) and np.all(appear - event <= bound)


def test_out_of_orderness_can_differ_per_partition() -> None:
    source = GeneratorSource(partitions=2, out_of_orderness_ms=[0, 50])
    tables = [read_table(source, p, 0, 5000) for p in source.partitions()]
    lateness = [
        int(np.max(np.maximum.accumulate(e) - e))
        for e in (event_time_ms(t.combine_chunks().to_batches()[0], "event_time") for t in tables)
    ]
    assert lateness[0] == 0 and 0 < lateness[1] <= 50


def test_duplicate_fraction_is_about_right_and_duplicates_repeat_earlier_events() -> None:
    source = GeneratorSource(partitions=1, duplicate_fraction=0.05, duplicate_max_distance=50)
    table = read_table(source, "p0", 0, 200_000)
    ids = table.column("event_id")
    counts = pc.value_counts(ids)
    repeats = sum(c.as_py() - 1 for c in counts.field("counts") if c.as_py() > 1)
    assert 0.045 < repeats / table.num_rows < 0.055
    rows = table.slice(0, 20_000).to_pylist()
    first_seen: dict[str, dict[str, object]] = {}
    for row in rows:
        original = first_seen.setdefault(str(row["event_id"]), row)
        if original is not row:
            assert int(str(row["event_id"]).rsplit("-", 1)[1]) < int(row["_offset"])
            assert (row["user_id"], row["page"], row["value"]) == (
                original["user_id"],
                original["page"],
                original["value"],
            )
        else:
            assert row["event_id"] == f"clicks-p0-{row['_offset']}"


def test_zero_duplicate_fraction_gives_unique_ids() -> None:
    table = read_table(GeneratorSource(partitions=1), "p0", 0, 50_000)
    assert pc.count_distinct(table.column("event_id")).as_py() == 50_000


def test_users_and_pages_stay_in_their_domains() -> None:
    source = GeneratorSource(partitions=1, keys=10, pages=["/a", "/b"], key_skew=2.0)
    table = read_table(source, "p0", 0, 10_000)
    assert set(table.column("user_id").to_pylist()) == {f"u{k}" for k in range(10)}
    assert set(table.column("page").to_pylist()) == {"/a", "/b"}
    values = table.column("value").to_numpy()
    assert values.min() >= 1 and values.max() <= 1000
    users = table.column("user_id").to_pylist()
    assert users.count("u0") > users.count("u9")


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(InvalidPartitionError):
        GeneratorSource(partitions=2, idle_partitions={5: [(S, None)]})
    with pytest.raises(ValueError, match="2 values for 3 partitions"):
        GeneratorSource(partitions=3, events_per_second=[1, 2])
    with pytest.raises(ValueError, match="is empty"):
        IdleWindow(S + 5, S + 5)
    with pytest.raises(InvalidPartitionError, match="no partition 'p9'"):
        GeneratorSource(partitions=2).read("p9", 0, 1)


@pytest.mark.parametrize("fmt", ["ndjson", "parquet"])
def test_generated_records_round_trip_through_a_file_log(store: ObjectStore, fmt: SegmentFormat) -> None:
    generator = GeneratorSource(partitions=1, duplicate_fraction=0.1, out_of_orderness_ms=20)
    log = FileLogSource(store, "clicks", uid="clicks", schema=CLICKSTREAM_SCHEMA, format=fmt)
    for start, end in ((0, 700), (700, 1000)):
        log.append("p0", read_table(generator, "p0", start, end).drop_columns(["_offset"]))
    assert log.end_offsets() == {"p0": 1000}
    assert read_table(log, "p0", 0, 1000).equals(read_table(generator, "p0", 0, 1000))


def test_throughput_of_one_million_records_is_measured() -> None:
    source = GeneratorSource(partitions=1, duplicate_fraction=0.01, out_of_orderness_ms=100)
    timings = []
    for _ in range(2):
        began = time.perf_counter()
        rows = sum(batch.num_rows for batch in source.read("p0", 0, 1_000_000, chunk_size=65_536))
        timings.append(time.perf_counter() - began)
    assert rows == 1_000_000
    print(
        f"\nGeneratorSource: 1M records in {timings[0]:.3f} s (first), {timings[1]:.3f} s (second): "
        f"{rows / timings[1] / 1e6:.1f} M records/s"
    )
