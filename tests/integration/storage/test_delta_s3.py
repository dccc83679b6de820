"""The Delta sink on S3 (a real SeaweedFS server): commit, retry, recovery after a crash, a zombie
racing the fence, abort -- the same protocol as on disk, with delta-rs committing through
create-only puts (``If-None-Match: *``) and no lock service."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError

from spark_jobs.sinks import DeltaLocation
from spark_jobs.sinks.delta import AFTER_DELTA_COMMIT, BEFORE_DELTA_COMMIT
from state_store.core.ports import ObjectStore
from state_store.core.twophase import FencedTransactionError
from state_store.faults import SimulatedCrash
from state_store.storage import MemoryObjectStore
from state_store.testing.seaweedfs import SeaweedFSServer
from tests.unit.sinks_delta.support import CrashAt, make_sink, standard_epoch

pytestmark = pytest.mark.integration

BUCKET = "epochal-test"


@pytest.fixture
def options(seaweedfs: SeaweedFSServer) -> dict[str, str]:
    seaweedfs.make_store(BUCKET)  # creates the bucket
    return {
        "AWS_ACCESS_KEY_ID": seaweedfs.access_key,
        "AWS_SECRET_ACCESS_KEY": seaweedfs.secret_key,
        "AWS_REGION": seaweedfs.region,
        "AWS_ENDPOINT_URL": seaweedfs.endpoint_url,
        "AWS_ALLOW_HTTP": "true",
    }


@pytest.fixture
def uri() -> Iterator[str]:
    yield f"s3://{BUCKET}/delta-{uuid.uuid4().hex[:12]}/orders"


@pytest.fixture
def store() -> ObjectStore:
    return MemoryObjectStore(f"job-store-{uuid.uuid4().hex}")


def rows(uri: str, options: dict[str, str]) -> list[dict[str, Any]]:
    if not DeltaTable.is_deltatable(uri, options):
        return []
    return sorted(DeltaTable(uri, storage_options=options).to_pyarrow_table().to_pylist(), key=repr)


def test_seaweedfs_refuses_a_second_commit_of_one_version_so_no_lock_is_needed(
    uri: str, options: dict[str, str], store: ObjectStore
) -> None:
    DeltaLocation.parse(uri, options).check_commit_safety()  # the probe passes
    sink = make_sink(store, uri, storage_options=options)
    sink.commit(standard_epoch(sink, 1))
    first, second = (DeltaTable(uri, storage_options=options) for _ in range(2))
    props = CommitProperties(app_transactions=[Transaction("race", 1)])
    first.create_write_transaction([], "append", first.schema(), commit_properties=props)
    with pytest.raises(CommitFailedError):
        second.create_write_transaction([], "append", second.schema(), commit_properties=props)
    assert DeltaTable(uri, storage_options=options).version() == 1


@pytest.mark.parametrize("point", [BEFORE_DELTA_COMMIT, AFTER_DELTA_COMMIT])
def test_commit_retry_and_recovery_after_a_crash_on_s3_equal_the_fault_free_run(
    point: str, uri: str, options: dict[str, str], store: ObjectStore
) -> None:
    reference_uri = uri + "-reference"
    plain = make_sink(store, reference_uri, uid="reference", storage_options=options)
    sink = make_sink(store, uri, kill=CrashAt(point, 2), storage_options=options)
    for epoch in (1, 2, 3):
        plain.commit(standard_epoch(plain, epoch))
        records = standard_epoch(sink, epoch)
        try:
            sink.commit(records)
        except SimulatedCrash:
            sink = make_sink(store, uri, storage_options=options)  # the restarted process
            sink.recover_and_commit(records)
        version = DeltaTable(uri, storage_options=options).version()
        assert sink.commit(records) == ()  # retried: a no-op at the same version
        assert DeltaTable(uri, storage_options=options).version() == version
    assert rows(uri, options) == rows(reference_uri, options) and len(rows(uri, options)) == 18


def test_a_zombie_racing_the_fence_on_s3_is_refused_and_abort_removes_its_files(
    uri: str, options: dict[str, str], store: ObjectStore
) -> None:
    sink = make_sink(store, uri, storage_options=options)
    sink.commit(standard_epoch(sink, 1))

    def fence_meanwhile(point: str, checkpoint_id: int | None = None) -> None:
        if point == BEFORE_DELTA_COMMIT:
            make_sink(store, uri, storage_options=options).fence(2)

    zombie = make_sink(store, uri, kill=fence_meanwhile, storage_options=options)
    records = standard_epoch(zombie, 2)
    with pytest.raises(FencedTransactionError):
        zombie.commit(records)
    assert {r["id"] // 100 for r in rows(uri, options)} == {1}
    fs = DeltaLocation.parse(uri, options).files().fs
    keys = [h.key for r in records for h in r.files]
    assert all(info.size for info in fs.get_file_info(keys))
    for record in records:
        make_sink(store, uri, storage_options=options).recover_and_abort(record)
    assert {info.type.name for info in fs.get_file_info(keys)} == {"NotFound"}
