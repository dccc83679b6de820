"""The Iceberg sink with its warehouse on S3 (a real SeaweedFS server; pyiceberg's pyarrow FileIO) and
the job's store on S3 too: commit, retry, recovery after a crash, a zombie racing the fence, abort --
the same protocol as on disk. The catalog is the SQL catalog on SQLite: its compare-and-swap of the
metadata pointer is what makes commits atomic, so S3 needs no conditional writes for the table."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from spark_jobs.sinks.iceberg import AFTER_ICEBERG_COMMIT, BEFORE_ICEBERG_COMMIT
from state_store.core.ports import ObjectStore
from state_store.core.twophase import FencedTransactionError
from state_store.faults import SimulatedCrash
from state_store.testing.seaweedfs import SeaweedFSServer
from tests.unit.sinks_iceberg.support import (
    CrashAt,
    load,
    make_sink,
    snapshot,
    staged_keys,
    standard_epoch,
    table_rows,
)

pytestmark = pytest.mark.integration

BUCKET = "epochal-test"


@pytest.fixture
def catalog(seaweedfs: SeaweedFSServer, tmp_path: Path) -> dict[str, str]:
    seaweedfs.make_store(BUCKET)  # creates the bucket
    return {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
        "warehouse": f"s3://{BUCKET}/iceberg-{uuid.uuid4().hex[:12]}",
        "s3.endpoint": seaweedfs.endpoint_url,
        "s3.access-key-id": seaweedfs.access_key,
        "s3.secret-access-key": seaweedfs.secret_key,
        "s3.region": seaweedfs.region,
    }


@pytest.fixture
def store(s3_store: ObjectStore) -> ObjectStore:
    return s3_store  # staged files on S3 as well


def dataset_rows(catalog: dict[str, str], table: str) -> list[dict[str, Any]]:
    """Plain pyarrow.dataset over the current snapshot's data files on S3."""
    found = load(catalog, table)
    assert found is not None
    endpoint = urlsplit(catalog["s3.endpoint"])
    fs = pafs.S3FileSystem(
        access_key=catalog["s3.access-key-id"],
        secret_key=catalog["s3.secret-access-key"],
        region=catalog["s3.region"],
        endpoint_override=endpoint.netloc,
        scheme=endpoint.scheme,
    )
    files = [t.file.file_path.removeprefix("s3://") for t in found.scan().plan_files()]
    schema = pa.schema([f.remove_metadata() for f in found.schema().as_arrow()])
    rows = ds.dataset(files, schema=schema, format="parquet", filesystem=fs).to_table().to_pylist()
    return sorted(rows, key=repr)


def both(catalog: dict[str, str], table: str = "lake.orders") -> list[dict[str, Any]]:
    rows = table_rows(catalog, table)
    assert dataset_rows(catalog, table) == rows
    return rows


@pytest.mark.parametrize("point", [BEFORE_ICEBERG_COMMIT, AFTER_ICEBERG_COMMIT])
def test_commit_retry_and_recovery_after_a_crash_on_s3_equal_the_fault_free_run(
    point: str, catalog: dict[str, str], store: ObjectStore
) -> None:
    plain = make_sink(store, catalog, uid="reference", table="lake.reference")
    sink = make_sink(store, catalog, kill=CrashAt(point, 2))
    for epoch in (1, 2, 3):
        plain.commit(standard_epoch(plain, epoch))
        records = standard_epoch(sink, epoch)
        try:
            sink.commit(records)
        except SimulatedCrash:
            sink = make_sink(store, catalog)  # the restarted process
            sink.recover_and_commit(records)
        at = snapshot(catalog)
        assert sink.commit(records) == ()  # retried: a no-op at the same snapshot
        assert snapshot(catalog) == at
    assert both(catalog) == both(catalog, "lake.reference") and len(both(catalog)) == 18


def test_a_zombie_racing_the_fence_on_s3_is_refused_and_abort_removes_its_files(
    catalog: dict[str, str], store: ObjectStore
) -> None:
    sink = make_sink(store, catalog)
    sink.commit(standard_epoch(sink, 1))

    def fence_meanwhile(point: str, checkpoint_id: int | None = None) -> None:
        if point == BEFORE_ICEBERG_COMMIT:
            make_sink(store, catalog).fence(2)

    zombie = make_sink(store, catalog, kill=fence_meanwhile)
    records = standard_epoch(zombie, 2)
    with pytest.raises(FencedTransactionError):
        zombie.commit(records)
    assert {r["id"] // 100 for r in both(catalog)} == {1}
    keys = {h.key for r in records for h in r.files}
    assert keys <= staged_keys(store)
    for record in records:
        make_sink(store, catalog).recover_and_abort(record)
    assert not keys & staged_keys(store)
