"""Helpers for Iceberg sink tests: run epochs through the sink, read the table back two ways --
pyiceberg's scan, and plain pyarrow.dataset over the data files of the current snapshot."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.dataset as ds
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from spark_jobs.sinks.iceberg import IcebergSink, IcebergTransactionalSink
from state_store.core.ports import NO_KILL, KillSwitch, ObjectStore
from state_store.core.twophase import PreCommittedTxn
from tests.unit.sinks_delta.support import CrashAt as CrashAt
from tests.unit.sinks_delta.support import batch as batch
from tests.unit.sinks_delta.support import epoch_rows as epoch_rows

JOB = "job-1"
UID = "orders-sink"
TABLE = "lake.orders"


def make_sink(
    store: ObjectStore,
    catalog: Mapping[str, str],
    *,
    kill: KillSwitch = NO_KILL,
    uid: str = UID,
    table: str = TABLE,
    **options: Any,
) -> IcebergTransactionalSink:
    return IcebergTransactionalSink(
        store, JOB, uid, IcebergSink(catalog=catalog, table=table, **options), kill=kill
    )


def pre_commit_epoch(
    sink: IcebergTransactionalSink,
    checkpoint_id: int,
    batches: dict[int, list[pa.RecordBatch]],
    *,
    generation: int = 1,
    attempt: int = 0,
) -> list[PreCommittedTxn]:
    """Subtask side of one epoch: begin, write, pre-commit per subtask; the records of the acks."""
    records = []
    for subtask, items in sorted(batches.items()):
        txn = sink.begin_transaction(checkpoint_id, subtask, attempt, generation)
        for b in items:
            sink.write(txn, b)
        records.append(sink.pre_commit(txn))
    return records


def standard_epoch(
    sink: IcebergTransactionalSink, epoch: int, checkpoint_id: int | None = None, *, generation: int = 1
) -> list[PreCommittedTxn]:
    """Two subtasks with three rows each, content decided by ``epoch`` (not by the checkpoint id)."""
    n = epoch if checkpoint_id is None else checkpoint_id
    return pre_commit_epoch(sink, n, {s: [epoch_rows(epoch, s)] for s in range(2)}, generation=generation)


@functools.cache
def _catalog(config: str) -> Catalog:
    properties = json.loads(config)
    return load_catalog(properties.pop("name", "default"), **properties)


def load(catalog: Mapping[str, str], table: str = TABLE) -> Table | None:
    """The table as a reader of its own sees it (a catalog opened apart from the sink's)."""
    try:
        return _catalog(json.dumps(dict(catalog), sort_keys=True)).load_table(table)
    except NoSuchTableError:
        return None


def table_rows(catalog: Mapping[str, str], table: str = TABLE) -> list[dict[str, Any]]:
    """Reader 1: pyiceberg's scan of the current snapshot."""
    found = load(catalog, table)
    if found is None:
        return []
    return sorted(found.scan().to_arrow().to_pylist(), key=repr)


def data_files(catalog: Mapping[str, str], table: str = TABLE) -> list[str]:
    """The data files of the current snapshot (local paths), as its manifests list them."""
    found = load(catalog, table)
    if found is None or found.current_snapshot() is None:
        return []
    files = []
    for task in found.scan().plan_files():
        assert not task.delete_files
        files.append(urlsplit(task.file.file_path).path)
    return sorted(files)


def dataset_rows(catalog: Mapping[str, str], table: str = TABLE, **dataset: Any) -> list[dict[str, Any]]:
    """Reader 2: plain pyarrow.dataset over the current snapshot's data files, read with the
    table's schema (Arrow types) and nothing else of pyiceberg."""
    found = load(catalog, table)
    files = data_files(catalog, table)
    if found is None or not files:
        return []
    schema = pa.schema([f.remove_metadata() for f in found.schema().as_arrow()])
    rows = ds.dataset(files, schema=schema, format="parquet", **dataset).to_table().to_pylist()
    return sorted(rows, key=repr)


def both_readers(catalog: Mapping[str, str], table: str = TABLE) -> list[dict[str, Any]]:
    """The rows, after asserting both readers agree."""
    rows = table_rows(catalog, table)
    assert dataset_rows(catalog, table) == rows
    return rows


def snapshot(catalog: Mapping[str, str], table: str = TABLE) -> int | None:
    """The current snapshot id (the table's "version")."""
    found = load(catalog, table)
    return None if found is None else found.metadata.current_snapshot_id


def epochal_summaries(catalog: Mapping[str, str], table: str = TABLE) -> list[dict[str, Any]]:
    """The ``epochal`` summary of every snapshot, oldest first (parsed)."""
    found = load(catalog, table)
    if found is None:
        return []
    return [
        json.loads(str(s.summary["epochal"]))
        for s in found.snapshots()
        if s.summary is not None and s.summary.get("epochal") is not None
    ]


def staged_keys(store: ObjectStore) -> set[str]:
    """Every staged file of the sink in the job store."""
    return {info.key for info in store.list(f"{JOB}/sinks/") if "/txn-" in info.key}


def table_folder_files(catalog: Mapping[str, str], table: str = TABLE) -> set[str]:
    """Every Parquet file under the table's data folder (referenced or not)."""
    found = load(catalog, table)
    if found is None:
        return set()
    root = Path(urlsplit(found.location()).path) / "data"
    return {str(p) for p in root.rglob("*.parquet")}
