"""ParquetTransactionalSink: exactly-once output over an ObjectStore (memory and local disk)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.sinks import (
    CommitLog,
    CorruptSinkFileError,
    ParquetTransactionalSink,
    SinkReadError,
    export_committed,
    read_committed,
    read_committed_pandas,
)
from state_store.core import killpoints
from state_store.core.checksums import checksum_of
from state_store.core.codec import ManifestError
from state_store.core.ports import ChecksumMismatchError, ObjectStore, StorageFullError, TransientStoreError
from state_store.core.twophase import (
    FencedTransactionError,
    IllegalTransactionState,
    PreCommittedTxn,
    SinkCommitConflict,
    SinkCommitError,
    Transaction,
    TransactionState,
    commit_pending_transactions,
)
from state_store.formats.arrow_bytes import read_parquet
from state_store.testing import Fault, FaultyObjectStore, KillAt, SimulatedCrash

JOB, UID = "job", "orders"


def rows(n: int, subtask: int = 0, count: int = 3) -> pa.RecordBatch:
    ids = [n * 1000 + subtask * 100 + i for i in range(count)]
    return pa.record_batch({"id": ids, "checkpoint": [n] * count, "subtask": [subtask] * count})


def expected(*parts: tuple[int, int]) -> list[int]:
    return [i for n, s in parts for i in rows(n, s).column("id").to_pylist()]


def ids(store: ObjectStore) -> list[int]:
    values: list[int] = read_committed(store, JOB, UID).column("id").to_pylist()
    return values


def pre_commit(
    sink: ParquetTransactionalSink, n: int, subtask: int = 0, attempt: int = 1, gen: int = 1
) -> PreCommittedTxn:
    txn = sink.begin_transaction(n, subtask, attempt, gen)
    sink.write(txn, rows(n, subtask))
    return sink.pre_commit(txn)


def staged_keys(store: ObjectStore) -> list[str]:
    return [i.key for i in store.list(f"{JOB}/sinks/{UID}/txn-")]


def state(txn: Transaction[Any]) -> TransactionState:
    """The state as the guard sees it now (a call, so type checkers do not narrow it)."""
    return txn.state


# -- pre-commit ----------------------------------------------------------------------------------
def test_pre_commit_stages_parquet_files_with_size_and_checksum(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    record = pre_commit(sink, 7, subtask=3, attempt=2, gen=4)
    (handle,) = record.files
    assert handle.key == "job/sinks/orders/txn-0000000007/00003-g4-a2-0.parquet"
    data = store.get(handle.key).data
    assert (handle.size, handle.checksum) == (len(data), checksum_of(data))
    assert handle.checksum.startswith("blake3:")
    assert (record.sink_uid, record.checkpoint_id, record.subtask, record.attempt, record.generation) == (
        UID,
        7,
        3,
        2,
        4,
    )
    assert record.rows == 3
    assert read_parquet(data).column("id").to_pylist() == expected((7, 3))


def test_readers_never_see_pre_committed_but_uncommitted_data(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    first = pre_commit(sink, 1)
    pre_commit(sink, 2)
    assert read_committed(store, JOB, UID).num_rows == 0
    sink.commit([first])
    assert ids(store) == expected((1, 0))
    assert len(staged_keys(store)) == 2


def test_large_transactions_are_split_into_several_files_in_order(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID, max_rows_per_file=4)
    txn = sink.begin_transaction(1, 0, 1, 1)
    sink.write(txn, pa.Table.from_batches([rows(1, 0, 5), rows(1, 1, 5)]))
    record = sink.pre_commit(txn)
    assert [h.key.rsplit("-", 1)[1] for h in record.files] == ["0.parquet", "1.parquet", "2.parquet"]
    sink.commit([record])
    assert ids(store) == rows(1, 0, 5).column("id").to_pylist() + rows(1, 1, 5).column("id").to_pylist()


def test_batch_with_another_schema_fails_the_transaction(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    txn = sink.begin_transaction(1, 0, 1, 1)
    sink.write(txn, rows(1))
    with pytest.raises(ValueError, match="schema"):
        sink.write(txn, pa.record_batch({"other": [1]}))
    assert state(txn) is TransactionState.FAILED
    with pytest.raises(IllegalTransactionState):
        sink.pre_commit(txn)
    assert staged_keys(store) == []


# -- commit --------------------------------------------------------------------------------------
def test_commit_writes_one_entry_listing_every_subtask_of_the_checkpoint(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    records = [pre_commit(sink, 1, subtask=s) for s in (2, 0, 1)]
    assert sink.commit(records) == (1,)
    assert [i.key for i in store.list("job/sinks/orders/_commits/")] == [
        "job/sinks/orders/_commits/0000000001.json"
    ]
    entry = CommitLog(store, JOB, UID).read(1)
    assert entry is not None and [t.subtask for t in entry.transactions] == [0, 1, 2]
    assert ids(store) == expected((1, 0), (1, 1), (1, 2))


def test_commit_twice_is_a_no_op(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    record = pre_commit(sink, 1)
    assert sink.commit([record]) == (1,)
    before = store.head("job/sinks/orders/_commits/0000000001.json")
    assert sink.commit([record]) == ()
    assert ParquetTransactionalSink(store, JOB, UID).recover_and_commit([record]) == ()
    assert store.head("job/sinks/orders/_commits/0000000001.json") == before
    assert ids(store) == expected((1, 0))


def test_commit_after_a_lost_response_is_retried_safely(store: ObjectStore) -> None:
    faulty = FaultyObjectStore(store, [Fault("lost_response", frozenset({"put_if_absent"}), "*/_commits/*")])
    sink = ParquetTransactionalSink(faulty, JOB, UID)
    record = pre_commit(sink, 1)
    with pytest.raises(TransientStoreError, match="lost response"):
        sink.commit([record])
    assert sink.state_of(record.txn_id) is TransactionState.PRE_COMMITTED
    assert sink.commit([record]) == ()  # the entry is there, with the same files
    assert sink.state_of(record.txn_id) is None
    assert ids(store) == expected((1, 0))
    assert faulty.injected == [
        ("put_if_absent", "job/sinks/orders/_commits/0000000001.json", "lost_response")
    ]


def test_crash_mid_sink_commit_then_recover_and_commit_gives_every_row_exactly_once(
    store: ObjectStore,
) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    records = [pre_commit(sink, n, subtask=s) for n in (1, 2, 3) for s in (0, 1)]
    with pytest.raises(SimulatedCrash):
        commit_pending_transactions(sink, records, 3, kill=KillAt(killpoints.MID_SINK_COMMIT))
    assert ids(store) == expected((1, 0), (1, 1))
    recovered = ParquetTransactionalSink(store, JOB, UID)  # a new process
    assert recovered.recover_and_commit(records) == (2, 3)
    assert recovered.recover_and_commit(records) == ()
    table = read_committed(store, JOB, UID)
    assert table.column("id").to_pylist() == expected((1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1))
    assert table.num_rows == len(set(table.column("id").to_pylist())) == 18


def test_commit_of_a_missing_staged_file_is_refused(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    record = pre_commit(sink, 1)
    store.delete(record.files[0].key)
    with pytest.raises(SinkCommitError, match="is missing"):
        sink.commit([record])
    assert sink.committed_checkpoint_ids() == frozenset()


def test_record_listing_files_outside_its_transaction_is_refused(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    a, b = pre_commit(sink, 1), pre_commit(sink, 2)
    forged = PreCommittedTxn(UID, 2, 0, 1, 1, a.files, a.rows)
    with pytest.raises(SinkCommitError, match="outside its transaction"):
        sink.commit([forged])
    assert sink.commit([b]) == (2,)


# -- abort, zombies, fencing -------------------------------------------------------------------
def test_aborted_transaction_is_never_visible_and_its_files_are_deleted(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    kept, dropped = pre_commit(sink, 1, subtask=0), pre_commit(sink, 2, subtask=0)
    sink.abort(dropped)
    assert sink.state_of(dropped.txn_id) is None
    assert all(store.head(h.key) is None for h in dropped.files)
    sink.commit([kept])
    assert ids(store) == expected((1, 0))
    with pytest.raises(SinkCommitError, match="is missing"):
        sink.commit([dropped])
    assert ids(store) == expected((1, 0))


def test_abort_after_a_failed_pre_commit_removes_the_partial_upload(store: ObjectStore) -> None:
    faulty = FaultyObjectStore(store, [Fault("disk_full", frozenset({"put_if_absent"}), "*-1.parquet")])
    sink = ParquetTransactionalSink(faulty, JOB, UID, max_rows_per_file=2)
    txn = sink.begin_transaction(1, 0, 1, 1)
    sink.write(txn, rows(1, 0, 4))
    with pytest.raises(StorageFullError):
        sink.pre_commit(txn)
    assert state(txn) is TransactionState.FAILED
    assert staged_keys(store) == ["job/sinks/orders/txn-0000000001/00000-g1-a1-0.parquet"]
    sink.abort(txn)
    assert state(txn) is TransactionState.ABORTED
    assert staged_keys(store) == []


def test_zombie_attempt_files_are_never_visible(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    zombie = pre_commit(sink, 1, attempt=1)
    real_sink = ParquetTransactionalSink(store, JOB, UID)
    txn = real_sink.begin_transaction(1, 0, 2, 1)
    real_batch = pa.record_batch({"id": [42], "checkpoint": [1], "subtask": [0]})
    real_sink.write(txn, real_batch)
    real = real_sink.pre_commit(txn)
    assert real_sink.commit([real]) == (1,)
    with pytest.raises(SinkCommitConflict, match="fenced zombie"):
        sink.commit([zombie])
    assert ids(store) == [42]
    sink.recover_and_abort(zombie)
    assert staged_keys(store) == [real.files[0].key]
    sink.recover_and_abort(real)  # abort never removes committed files
    assert ids(store) == [42]


def test_commit_of_an_older_generation_is_refused(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    old = pre_commit(sink, 4, gen=1)
    new = pre_commit(sink, 5, gen=2)
    sink.commit([new])
    with pytest.raises(FencedTransactionError, match="generation 2 already committed or fenced"):
        sink.commit([old])
    assert ids(store) == expected((5, 0))


def test_fence_refuses_older_generations_before_the_new_one_commits(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    restored = pre_commit(sink, 3, gen=1)
    abandoned = pre_commit(sink, 4, gen=1)
    sink.recover_and_commit([restored])  # restore: commit the restored checkpoint's records first,
    sink.fence(2)  # then fence the new generation
    sink.fence(2)  # idempotent
    with pytest.raises(FencedTransactionError):
        sink.commit([abandoned])
    assert sink.recover_and_commit([restored]) == ()  # an already committed entry stays a no-op
    assert ids(store) == expected((3, 0))


# -- readers ---------------------------------------------------------------------------------------
def test_corrupted_committed_file_is_reported_naming_the_file(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    record = pre_commit(sink, 1)
    sink.commit([record])
    key = record.files[0].key
    data = bytearray(store.get(key).data)
    data[len(data) // 2] ^= 0xFF
    store.put(key, bytes(data))
    with pytest.raises(
        CorruptSinkFileError, match=rf"{key} \(checkpoint 1\) has checksum blake3:[0-9a-f]{{64}}"
    ):
        read_committed(store, JOB, UID)
    store.put(key, bytes(data[:-1]))
    with pytest.raises(CorruptSinkFileError, match=f"{key}.*bytes, the commit log says {len(data)}"):
        read_committed(store, JOB, UID)
    store.delete(key)
    with pytest.raises(SinkReadError, match=f"{key}.*is missing"):
        read_committed(store, JOB, UID)


def test_corruption_on_the_way_to_the_store_is_refused_at_upload(store: ObjectStore) -> None:
    """The store verifies the staged file against the writer's checksum (issue 20): a bit flipped
    on the way in is refused and nothing is written; the pre-commit fails and is retried. (Bytes
    that change later, at rest, are caught by the reader: the test above.)"""
    faulty = FaultyObjectStore(store, [Fault("bitflip", frozenset({"put_if_absent"}), "*.parquet")], seed=3)
    sink = ParquetTransactionalSink(faulty, JOB, UID)
    with pytest.raises(
        ChecksumMismatchError, match=r"txn-0000000001/.*\.parquet.* refused.*nothing was written"
    ):
        pre_commit(sink, 1)
    assert staged_keys(store) == []
    retry = ParquetTransactionalSink(faulty, JOB, UID)  # the retried task: a new attempt
    record = pre_commit(retry, 1, attempt=2)  # the fault fired once: written whole
    retry.commit([record])
    assert ids(store) == expected((1, 0))


def test_corrupted_commit_entry_is_a_manifest_error(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    sink.commit([pre_commit(sink, 1)])
    key = "job/sinks/orders/_commits/0000000001.json"
    changed = store.get(key).data.replace(b'"rows":3', b'"rows":4')
    assert changed != store.get(key).data
    store.put(key, changed)
    with pytest.raises(ManifestError, match="fails its checksum"):
        read_committed(store, JOB, UID)


def test_read_up_to_a_checkpoint_and_as_pandas(store: ObjectStore) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    sink.commit([pre_commit(sink, n) for n in (1, 2, 3)])
    assert read_committed(store, JOB, UID, up_to=2).column("id").to_pylist() == expected((1, 0), (2, 0))
    frame = read_committed_pandas(store, JOB, UID)
    assert list(frame["id"]) == expected((1, 0), (2, 0), (3, 0))


def test_export_writes_exactly_the_committed_rows_to_a_local_parquet_file(
    store: ObjectStore, tmp_path: Path
) -> None:
    sink = ParquetTransactionalSink(store, JOB, UID)
    sink.commit([pre_commit(sink, 1, subtask=s) for s in (0, 1)])
    pre_commit(sink, 2)  # pre-committed only: not exported
    out = tmp_path / "out" / "orders.parquet"
    result = export_committed(store, JOB, UID, out)
    assert (result.rows, result.files, result.checkpoints) == (6, 2, (1,))
    assert pq.read_table(out).column("id").to_pylist() == expected((1, 0), (1, 1))
    assert [p.name for p in out.parent.iterdir()] == ["orders.parquet"]


def test_empty_sink_reads_as_an_empty_table(store: ObjectStore) -> None:
    assert read_committed(store, JOB, UID).num_rows == 0
    sink = ParquetTransactionalSink(store, JOB, UID)
    empty = sink.pre_commit(sink.begin_transaction(1, 0, 1, 1))
    assert empty.files == () and empty.rows == 0
    assert sink.commit([empty]) == (1,)
    assert read_committed(store, JOB, UID).num_rows == 0
    assert sink.committed_checkpoint_ids() == frozenset({1})
