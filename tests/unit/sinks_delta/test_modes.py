"""Delta sink modes and schemas: merge upserts by key, partitioned tables, schema enforcement with
one-line errors, opt-in schema evolution, and option validation."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_jobs.api.sinks import DeltaSink
from spark_jobs.sinks import DeltaSchemaMismatch, InvalidDeltaLocation, InvalidDeltaSinkOptions
from spark_jobs.sinks.delta_publish import AFTER_SCHEMA_CHANGE
from state_store.core.ports import ObjectStore
from state_store.core.twophase import SinkCommitError
from state_store.faults import SimulatedCrash
from tests.unit.sinks_delta.support import (
    CrashAt,
    batch,
    both_readers,
    make_sink,
    pre_commit_epoch,
    staged_parquet,
    version,
)


def test_merge_mode_upserts_by_unique_key_across_epochs_and_the_last_row_of_a_key_wins(
    store: ObjectStore, table: Path
) -> None:
    sink = make_sink(store, table, mode="merge", unique_key=("id",))
    sink.commit(pre_commit_epoch(sink, 1, {0: [batch([1, 2], epoch=1)], 1: [batch([3], epoch=1, subtask=1)]}))
    second = {0: [batch([2, 4], epoch=2)], 1: [batch([4, 5], epoch=2, subtask=1)]}  # 4 twice: subtask 1 wins
    records = pre_commit_epoch(sink, 2, second)
    sink.commit(records)
    rows = {r["id"]: r["value"] for r in both_readers(table)}
    assert rows == {1: "e1-s0-1", 2: "e2-s0-2", 3: "e1-s1-3", 4: "e2-s1-4", 5: "e2-s1-5"}
    at = version(table)
    assert make_sink(store, table, mode="merge", unique_key=("id",)).recover_and_commit(records) == ()
    assert version(table) == at
    assert not [p for p in staged_parquet(table) if "epochal-" in p]  # the staged merge inputs are gone


def test_merge_mode_with_a_composite_key_and_a_partition_column(store: ObjectStore, table: Path) -> None:
    sink = make_sink(store, table, mode="merge", unique_key=("id", "region"), partition_by=("region",))
    first = batch([1, 1, 2], epoch=1, region=["eu", "us", "eu"])
    sink.commit(pre_commit_epoch(sink, 1, {0: [first]}))
    sink.commit(pre_commit_epoch(sink, 2, {0: [batch([1], epoch=2, region=["us"])]}))
    rows = {(r["id"], r["region"]): r["value"] for r in both_readers(table)}
    assert rows == {(1, "eu"): "e1-s0-1", (1, "us"): "e2-s0-1", (2, "eu"): "e1-s0-2"}
    assert DeltaTable(str(table)).metadata().partition_columns == ["region"]


def test_append_mode_partitions_files_hive_style_and_both_readers_agree(
    store: ObjectStore, table: Path
) -> None:
    sink = make_sink(store, table, partition_by=("region", "day"))
    regions = ["eu", "a b/c%d", None, "eu"]
    days = [dt.date(2026, 1, 1), dt.date(2026, 1, 2), dt.date(2026, 1, 1), dt.date(2026, 1, 1)]
    sink.commit(pre_commit_epoch(sink, 1, {0: [batch([1, 2, 3, 4], epoch=1, region=regions, day=days)]}))
    rows = both_readers(table)
    assert sorted((r["id"], r["region"], r["day"]) for r in rows) == sorted(
        zip([1, 2, 3, 4], regions, days), key=lambda r: r[0]
    )
    folders = {Path(u).parent.relative_to(table).as_posix() for u in DeltaTable(str(table)).file_uris()}
    assert folders == {
        "region=eu/day=2026-01-01",
        "region=a%20b%2Fc%25d/day=2026-01-02",
        "region=__HIVE_DEFAULT_PARTITION__/day=2026-01-01",
    }
    files = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pydict()
    assert sorted(files["num_records"]) == [1, 1, 2]


def test_a_batch_with_a_changed_type_is_refused_in_one_line_naming_table_column_and_remedy(
    store: ObjectStore, table: Path
) -> None:
    sink = make_sink(store, table)
    sink.commit(pre_commit_epoch(sink, 1, {0: [batch([1], epoch=1)]}))
    at, files = version(table), staged_parquet(table)
    sink = make_sink(store, table)
    txn = sink.begin_transaction(2, 0, 0, 1)
    bad = pa.RecordBatch.from_pydict({"id": pa.array([2], pa.int64()), "value": pa.array([7], pa.int64())})
    with pytest.raises(DeltaSchemaMismatch) as caught:
        sink.write(txn, bad)
    message = str(caught.value)
    assert "\n" not in message
    assert str(table) in message and "'value'" in message and "string" in message and "cast it" in message
    assert (version(table), staged_parquet(table)) == (at, files)


@pytest.mark.parametrize(
    ("columns", "named", "remedy"),
    [
        ({"id": pa.array([2], pa.int64())}, "'value'", "schema_evolution='merge' to write nulls"),
        (
            {"id": pa.array([2], pa.int64()), "value": ["x"], "extra": [1.5]},
            "'extra'",
            "schema_evolution='merge' to add it",
        ),
    ],
)
def test_a_missing_or_extra_column_is_refused_unless_evolution_is_opted_in(
    store: ObjectStore, table: Path, columns: dict[str, object], named: str, remedy: str
) -> None:
    sink = make_sink(store, table)
    sink.commit(pre_commit_epoch(sink, 1, {0: [batch([1], epoch=1)]}))
    at = version(table)
    with pytest.raises(DeltaSchemaMismatch, match=named) as caught:
        pre_commit_epoch(make_sink(store, table), 2, {0: [pa.RecordBatch.from_pydict(columns)]})
    assert remedy in str(caught.value) and str(table) in str(caught.value)
    assert version(table) == at
    evolving = make_sink(store, table, schema_evolution="merge")
    evolving.commit(pre_commit_epoch(evolving, 2, {0: [pa.RecordBatch.from_pydict(columns)]}))
    rows = both_readers(table)
    assert len(rows) == 2 and set(rows[0]) == set(rows[1])


def test_schema_evolution_survives_a_crash_between_the_schema_commit_and_the_data_commit(
    store: ObjectStore, table: Path
) -> None:
    sink = make_sink(store, table, schema_evolution="merge")
    sink.commit(pre_commit_epoch(sink, 1, {0: [batch([1], epoch=1)]}))
    crashing = make_sink(store, table, schema_evolution="merge", kill=CrashAt(AFTER_SCHEMA_CHANGE))
    records = pre_commit_epoch(crashing, 2, {0: [batch([2], epoch=2, score=[0.5])]})
    with pytest.raises(SimulatedCrash):
        crashing.commit(records)
    assert "score" in DeltaTable(str(table)).schema().to_arrow().names and len(both_readers(table)) == 1
    assert make_sink(store, table, schema_evolution="merge").recover_and_commit(records) == (2,)
    rows = {r["id"]: r["score"] for r in both_readers(table)}
    assert rows == {1: None, 2: 0.5}


def test_a_sink_partitioned_otherwise_than_the_table_is_refused(store: ObjectStore, table: Path) -> None:
    write_deltalake(str(table), pa.table({"id": pa.array([0], pa.int64()), "value": ["x"]}))
    sink = make_sink(store, table, partition_by=("value",))
    with pytest.raises(SinkCommitError, match=r"partitioned by \[\], the sink by \['value'\]"):
        pre_commit_epoch(sink, 1, {0: [batch([1], epoch=1)]})


def test_nanosecond_timestamps_are_refused_with_the_cast_to_make(store: ObjectStore, table: Path) -> None:
    ts = pa.array([1], pa.timestamp("ns"))
    with pytest.raises(DeltaSchemaMismatch, match=r"'ts'.*pa.timestamp\('us'\)"):
        pre_commit_epoch(make_sink(store, table), 1, {0: [batch([1], epoch=1, ts=ts)]})


def test_null_unique_keys_are_refused_in_merge_mode(store: ObjectStore, table: Path) -> None:
    nulls = pa.RecordBatch.from_pydict({"id": pa.array([None], pa.int64()), "value": ["x"]})
    with pytest.raises(DeltaSchemaMismatch, match="unique_key column 'id' has nulls"):
        pre_commit_epoch(make_sink(store, table, mode="merge", unique_key=("id",)), 1, {0: [nulls]})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "upsert"}, "mode 'upsert' is not one of"),
        ({"mode": "merge"}, "give unique_key"),
        ({"unique_key": "id"}, "must be a tuple of column names"),
        ({"on_rewind": "drop"}, "on_rewind 'drop'"),
        ({"schema_evolution": "overwrite"}, "schema_evolution 'overwrite'"),
        ({"max_rows_per_file": 0}, "max_rows_per_file must be a positive integer"),
    ],
)
def test_invalid_options_are_refused_at_construction_in_one_line(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidDeltaSinkOptions, match=message) as caught:
        DeltaSink("/tmp/t", **options)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("uri", "message"), [("gs://b/t", "scheme 'gs' is not supported"), ("s3:///t", "names no bucket")]
)
def test_unsupported_locations_are_refused_naming_what_works(
    store: ObjectStore, uri: str, message: str
) -> None:
    with pytest.raises(InvalidDeltaLocation, match=message):
        DeltaSink(uri).create(store, "job-1", "out")


def test_the_spec_builds_a_working_sink_and_never_prints_its_storage_options(
    store: ObjectStore, table: Path
) -> None:
    spec = DeltaSink(
        str(table), mode="merge", unique_key=["id"], storage_options={"AWS_SECRET_ACCESS_KEY": "s3cr3t"}
    )  # type: ignore[arg-type]
    assert spec.unique_key == ("id",) and "s3cr3t" not in repr(spec)
    sink = spec.create(store, "job-1", "out")
    sink.commit(pre_commit_epoch(sink, 1, {0: [batch([1, 2], epoch=1)]}))
    assert [r["id"] for r in both_readers(table)] == [1, 2]
