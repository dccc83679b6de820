"""Orphan sweep of staged sink files, and the sink records' journey: ack -> metadata -> commit."""

from __future__ import annotations

import pyarrow as pa

from spark_jobs.sinks import ParquetTransactionalSink, plan_orphan_sweep, read_committed, sweep_orphans
from state_store.core import (
    AckRecord,
    CompletedMetadata,
    JobLayout,
    TaskCheckpointResponder,
    TaskId,
    documents,
)
from state_store.core.ports import ObjectStore
from state_store.core.twophase import (
    PreCommittedTxn,
    commit_pending_transactions,
    records_from_metadata,
    sink_snapshot,
)
from tests.unit.core.helpers import make_job

JOB, UID = "job", "orders"


def pre_commit(sink: ParquetTransactionalSink, n: int, attempt: int = 1, gen: int = 1) -> PreCommittedTxn:
    txn = sink.begin_transaction(n, 0, attempt, gen)
    sink.write(txn, pa.record_batch({"id": [n * 10 + attempt]}))
    return sink.pre_commit(txn)


def newest_mtime(store: ObjectStore) -> int:
    return max(i.modified_ms for i in store.list(f"{JOB}/sinks/"))


def test_sweep_lists_only_unreferenced_uncommitted_old_files(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    committed = pre_commit(sink, 1, attempt=2)
    zombie = pre_commit(sink, 1, attempt=1)
    pending = pre_commit(sink, 2)
    aborted_leftover = pre_commit(sink, 3)
    sink.commit([committed])
    now = newest_mtime(store)
    assert plan_orphan_sweep(store, JOB, UID, now_ms=now, grace_ms=60_000, pending=[pending]) == []
    plan = plan_orphan_sweep(store, JOB, UID, now_ms=now + 60_000, grace_ms=60_000, pending=[pending])
    assert plan == [zombie.files[0].key, aborted_leftover.files[0].key]
    assert sweep_orphans(
        store, JOB, UID, now_ms=now + 60_000, grace_ms=60_000, pending=[pending], dry_run=True
    )
    assert all(store.head(k) is not None for k in plan)
    assert sweep_orphans(store, JOB, UID, now_ms=now + 60_000, grace_ms=60_000, pending=[pending]) == plan
    assert all(store.head(k) is None for k in plan)
    assert store.head(committed.files[0].key) is not None
    assert store.head(pending.files[0].key) is not None
    assert read_committed(store, JOB, UID).column("id").to_pylist() == [12]
    assert sink.commit([pending]) == (2,)
    assert plan_orphan_sweep(store, JOB, UID, now_ms=now + 10**9, grace_ms=0) == []


def test_sink_records_travel_in_the_ack_snapshot_to_the_completed_metadata() -> None:
    job = make_job()
    tasks = [TaskId("orders", 0), TaskId("orders", 1)]
    sink = ParquetTransactionalSink(job.store, job.job_id, UID)
    completed: list[int] = []
    for _ in range(2):
        n = job.coordinator.trigger(tasks).checkpoint_id
        attempt = job.coordinator.start_attempt(n).attempt
        gen = job.coordinator.pending_record(n).generation
        for task in tasks:  # run_epoch: each sink subtask pre-commits, then acks with its record
            txn = sink.begin_transaction(n, task.subtask, attempt, gen)
            sink.write(txn, pa.record_batch({"id": [n * 10 + task.subtask]}))
            record = sink.pre_commit(txn)
            ack = AckRecord(n, task, gen, attempt, record.files, snapshot=sink_snapshot([record]))
            TaskCheckpointResponder(job.store, job.job_id).acknowledge(ack)
        assert job.coordinator.complete(n).status == "completed"
        completed.append(n)
    assert read_committed(job.store, job.job_id, UID).num_rows == 0  # completed, not yet notified
    layout = JobLayout(job.job_id)
    records = [
        r
        for n in completed
        for r in records_from_metadata(documents.read(job.store, layout.metadata(n), CompletedMetadata), UID)
    ]
    report = commit_pending_transactions(sink, records, up_to=completed[-1])
    assert report.committed == tuple(completed)
    ids = read_committed(job.store, job.job_id, UID).column("id").to_pylist()
    assert ids == [n * 10 + s for n in completed for s in (0, 1)]
