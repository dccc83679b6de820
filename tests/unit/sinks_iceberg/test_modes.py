"""Iceberg sink modes, schemas and catalogs: upsert by key, a partitioned table its owner created,
schema enforcement with one-line errors (at write and again at commit), an unreachable catalog,
and option validation."""

from __future__ import annotations

import socket
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from spark_jobs.sinks.iceberg import IcebergSink
from spark_jobs.sinks.iceberg_catalog import IcebergCatalogError, InvalidIcebergTable
from spark_jobs.sinks.iceberg_schema import IcebergSchemaMismatch
from state_store.core.ports import ObjectStore
from tests.unit.sinks_iceberg.support import (
    batch,
    both_readers,
    data_files,
    epochal_summaries,
    load,
    make_sink,
    pre_commit_epoch,
    snapshot,
    staged_keys,
)

Catalog = dict[str, str]


def test_upsert_mode_upserts_by_unique_key_across_epochs_and_the_last_row_of_a_key_wins(
    store: ObjectStore, catalog: Catalog
) -> None:
    sink = make_sink(store, catalog, mode="upsert", unique_key=("id",))
    sink.commit(pre_commit_epoch(sink, 1, {0: [batch([1, 2], epoch=1)], 1: [batch([3], epoch=1, subtask=1)]}))
    second = {0: [batch([2, 4], epoch=2)], 1: [batch([4, 5], epoch=2, subtask=1)]}  # 4 twice: subtask 1 wins
    records = pre_commit_epoch(sink, 2, second)
    assert sink.commit(records) == (2,)
    rows = {r["id"]: r["value"] for r in both_readers(catalog)}
    assert rows == {1: "e1-s0-1", 2: "e2-s0-2", 3: "e1-s1-3", 4: "e2-s1-4", 5: "e2-s1-5"}
    at = snapshot(catalog)
    assert make_sink(store, catalog, mode="upsert", unique_key=("id",)).recover_and_commit(records) == ()
    assert snapshot(catalog) == at
    # checkpoint 2 is one catalog commit: its overwrite and append snapshots carry the same summary
    assert {s["checkpoint_id"] for s in epochal_summaries(catalog)} == {1, 2}


def test_an_upsert_that_changes_nothing_still_records_its_checkpoint(
    store: ObjectStore, catalog: Catalog
) -> None:
    sink = make_sink(store, catalog, mode="upsert", unique_key=("id",))
    same = batch([1, 2], epoch=1)
    sink.commit(pre_commit_epoch(sink, 1, {0: [same]}))
    rows = both_readers(catalog)
    assert sink.commit(pre_commit_epoch(sink, 2, {0: [same]})) == (2,)
    assert both_readers(catalog) == rows and set(sink.committed_checkpoint_ids()) == {1, 2}
    assert epochal_summaries(catalog)[-1]["checkpoint_id"] == 2


def test_append_and_upsert_into_a_partitioned_table_its_owner_created(
    store: ObjectStore, catalog: Catalog
) -> None:
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "value", StringType(), required=False),
        NestedField(3, "region", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "region"))
    owner = load_catalog("default", **catalog)
    owner.create_namespace("lake")
    owner.create_table("lake.orders", schema, partition_spec=spec)
    sink = make_sink(store, catalog, mode="upsert", unique_key=("id", "region"))
    sink.commit(pre_commit_epoch(sink, 1, {0: [batch([1, 1, 2], epoch=1, region=["eu", "us", "eu"])]}))
    sink.commit(pre_commit_epoch(sink, 2, {0: [batch([1], epoch=2, region=["us"])]}))
    rows = {(r["id"], r["region"]): r["value"] for r in both_readers(catalog)}
    assert rows == {(1, "eu"): "e1-s0-1", (1, "us"): "e2-s0-1", (2, "eu"): "e1-s0-2"}
    assert {f.split("/")[-2] for f in data_files(catalog)} == {"region=eu", "region=us"}


def test_a_batch_with_a_changed_type_is_refused_in_one_line_naming_table_column_and_remedy(
    store: ObjectStore, catalog: Catalog
) -> None:
    sink = make_sink(store, catalog)
    sink.commit(pre_commit_epoch(sink, 1, {0: [batch([1], epoch=1)]}))
    at, staged = snapshot(catalog), staged_keys(store)
    sink = make_sink(store, catalog)
    txn = sink.begin_transaction(2, 0, 0, 1)
    bad = pa.RecordBatch.from_pydict({"id": pa.array([2], pa.int32()), "value": ["x"]})
    with pytest.raises(IcebergSchemaMismatch) as caught:
        sink.write(txn, bad)
    message = str(caught.value)
    assert "\n" not in message
    assert "lake.orders" in message and "'id'" in message and "long" in message and "cast it" in message
    assert (snapshot(catalog), staged_keys(store)) == (at, staged)


@pytest.mark.parametrize(
    ("columns", "named", "remedy"),
    [
        ({"id": pa.array([2], pa.int64())}, "lacks column 'value'", "add it to the sink's input"),
        ({"id": pa.array([2], pa.int64()), "value": ["x"], "extra": [1.5]}, "'extra'", "ADD COLUMN"),
        ({"id": pa.array([2], pa.int64()), "value": pa.array([3], pa.int64())}, "'value'", "cast it"),
    ],
)
def test_a_missing_extra_or_retyped_column_is_refused_and_nothing_is_committed(
    store: ObjectStore, catalog: Catalog, columns: dict[str, object], named: str, remedy: str
) -> None:
    sink = make_sink(store, catalog)
    sink.commit(pre_commit_epoch(sink, 1, {0: [batch([1], epoch=1)]}))
    rows, at = both_readers(catalog), snapshot(catalog)
    with pytest.raises(IcebergSchemaMismatch, match=named) as caught:
        pre_commit_epoch(make_sink(store, catalog), 2, {0: [pa.RecordBatch.from_pydict(columns)]})
    assert remedy in str(caught.value) and "lake.orders (catalog default)" in str(caught.value)
    assert (both_readers(catalog), snapshot(catalog)) == (rows, at)


def test_a_table_changed_between_pre_commit_and_commit_refuses_the_commit_and_nothing_lands(
    store: ObjectStore, catalog: Catalog
) -> None:
    sink = make_sink(store, catalog)
    sink.commit(pre_commit_epoch(sink, 1, {0: [batch([1], epoch=1)]}))
    records = pre_commit_epoch(sink, 2, {0: [batch([2], epoch=2)]})
    table = load(catalog)
    assert table is not None
    with table.update_schema() as update:  # the owner adds a column meanwhile
        update.add_column("score", LongType())
    rows, at = both_readers(catalog), snapshot(catalog)
    with pytest.raises(IcebergSchemaMismatch, match="lacks column 'score'"):
        make_sink(store, catalog).commit(records)
    assert (both_readers(catalog), snapshot(catalog)) == (rows, at)
    assert 2 not in make_sink(store, catalog).committed_checkpoint_ids()


def test_nanosecond_timestamps_and_subtasks_disagreeing_on_a_type_are_refused_before_the_table_exists(
    store: ObjectStore, catalog: Catalog
) -> None:
    ts = pa.array([1], pa.timestamp("ns"))
    with pytest.raises(IcebergSchemaMismatch, match=r"'ts'.*pa.timestamp\('us'\)"):
        pre_commit_epoch(make_sink(store, catalog), 1, {0: [batch([1], epoch=1, ts=ts)]})
    sink = make_sink(store, catalog)
    retyped = pa.RecordBatch.from_pydict({"id": pa.array([2], pa.int32()), "value": ["x"]})
    records = pre_commit_epoch(sink, 1, {0: [batch([1], epoch=1)], 1: [retyped]})  # each alone is fine
    with pytest.raises(IcebergSchemaMismatch, match=r"not created yet.*'id'.*cast it"):
        sink.commit(records)
    assert load(catalog) is None


def test_null_unique_keys_are_refused_in_upsert_mode(store: ObjectStore, catalog: Catalog) -> None:
    nulls = pa.RecordBatch.from_pydict({"id": pa.array([None], pa.int64()), "value": ["x"]})
    with pytest.raises(IcebergSchemaMismatch, match="unique_key column 'id' has nulls"):
        pre_commit_epoch(make_sink(store, catalog, mode="upsert", unique_key=("id",)), 1, {0: [nulls]})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize("kind", ["sqlite", "rest"])
def test_an_unreachable_catalog_is_one_line_naming_it_and_the_remedy(
    store: ObjectStore, tmp_path: Any, kind: str
) -> None:
    catalog = (
        {"type": "sql", "uri": f"sqlite:///{tmp_path}/missing/dir/catalog.db", "warehouse": tmp_path.as_uri()}
        if kind == "sqlite"
        else {"type": "rest", "uri": f"http://127.0.0.1:{_closed_port()}", "token": "s3cr3t"}
    )
    sink = make_sink(store, catalog)
    for call in (
        sink.committed_checkpoint_ids,
        lambda: pre_commit_epoch(sink, 1, {0: [batch([1], epoch=1)]}),
    ):
        with pytest.raises(IcebergCatalogError) as caught:
            call()
        message = str(caught.value)
        assert "\n" not in message and "s3cr3t" not in message
        assert f"catalog 'default' ({'sql' if kind == 'sqlite' else 'rest'}, " in message
        assert "start the catalog service or fix the sink's catalog=" in message
    assert staged_keys(store) == set()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"table": "orders"}, "is not 'namespace.table'"),
        ({"mode": "merge"}, "mode 'merge' is not one of"),
        ({"mode": "upsert"}, "give unique_key"),
        ({"unique_key": ("id",)}, "set mode='upsert'"),
        ({"on_rewind": "drop"}, "on_rewind 'drop'"),
        ({"max_rows_per_file": 0}, "max_rows_per_file must be a positive integer"),
        ({"catalog": {"type": "sql", "uri": 1}}, "must map strings to strings"),
        ({"catalog": ""}, "catalog is empty"),
    ],
)
def test_invalid_options_are_refused_at_construction_in_one_line(
    options: dict[str, Any], message: str
) -> None:
    spec: dict[str, Any] = {"catalog": {"type": "sql", "uri": "sqlite://"}, "table": "lake.orders", **options}
    with pytest.raises(InvalidIcebergTable, match=message) as caught:
        IcebergSink(**spec)
    assert "\n" not in str(caught.value)


def test_the_spec_builds_a_working_sink_and_never_prints_its_catalog_properties(
    store: ObjectStore, catalog: Catalog
) -> None:
    secret = {**catalog, "name": "lake", "s3.secret-access-key": "s3cr3t"}
    spec = IcebergSink(catalog=secret, table="lake.orders", mode="upsert", unique_key="id")  # type: ignore[arg-type]
    assert spec.unique_key == ("id",) and "s3cr3t" not in repr(spec)
    sink = spec.create(store, "job-1", "out")
    sink.commit(pre_commit_epoch(sink, 1, {0: [batch([1, 2], epoch=1)]}))
    assert [r["id"] for r in both_readers({**catalog, "name": "lake"})] == [1, 2]  # the catalog's own name
