"""The two-phase-commit protocol into a real Iceberg table (pyiceberg, SQL catalog on SQLite): one
snapshot per checkpoint, retries, crashes at every step of the sink's commit path, zombies, abort.
Results are read back with pyiceberg and with plain pyarrow over the current snapshot's data files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_jobs.sinks.delta_ledger import LineagePosition
from spark_jobs.sinks.iceberg import AFTER_CREATE, AFTER_ICEBERG_COMMIT, AFTER_STAGE, BEFORE_ICEBERG_COMMIT
from state_store.core import killpoints
from state_store.core.ports import ObjectStore
from state_store.core.twophase import (
    FencedTransactionError,
    SinkCommitConflict,
    TransactionState,
    commit_pending_transactions,
)
from state_store.faults import KillAt, SimulatedCrash
from tests.unit.sinks_iceberg.support import (
    JOB,
    UID,
    CrashAt,
    both_readers,
    data_files,
    epoch_rows,
    epochal_summaries,
    load,
    make_sink,
    pre_commit_epoch,
    snapshot,
    staged_keys,
    standard_epoch,
    table_folder_files,
    table_rows,
)

EPOCHS = 4
Catalog = dict[str, str]


def fault_free(store: ObjectStore, catalog: Catalog) -> list[dict[str, Any]]:
    sink = make_sink(store, catalog, table="lake.reference", uid="reference")
    for epoch in range(1, EPOCHS + 1):
        sink.commit(standard_epoch(sink, epoch))
    return both_readers(catalog, "lake.reference")


def test_commit_publishes_every_subtask_of_a_checkpoint_in_one_snapshot_with_its_ledger(
    store: ObjectStore, catalog: Catalog
) -> None:
    sink = make_sink(store, catalog)
    records = standard_epoch(sink, 1)
    assert load(catalog) is None  # staged in the job store only: no table yet
    assert sink.commit(records) == (1,)
    rows = both_readers(catalog)
    assert sorted(r["id"] for r in rows) == [100, 101, 102, 110, 111, 112]
    table = load(catalog)
    assert table is not None and len(table.snapshots()) == 1
    assert table.properties[f"epochal/{JOB}/{UID}/commits"] == str(LineagePosition(1, 1).version)
    (info,) = epochal_summaries(catalog)
    assert (info["kind"], info["job_id"], info["sink_uid"], info["checkpoint_id"], info["generation"]) == (
        "data", JOB, UID, 1, 1,
    )  # fmt: skip
    assert info["rows"] == 6 and info["files"] == 2 and len(info["digest"]) == 32


def test_staged_rows_stay_invisible_until_their_checkpoint_commits(
    store: ObjectStore, catalog: Catalog
) -> None:
    sink = make_sink(store, catalog)
    sink.commit(standard_epoch(sink, 1))
    before, files = both_readers(catalog), table_folder_files(catalog)
    records = standard_epoch(sink, 2)
    assert {h.key for r in records for h in r.files} <= staged_keys(store)  # in the job store
    assert (both_readers(catalog), table_folder_files(catalog)) == (before, files)  # nothing in the table
    sink.commit(records)
    assert len(both_readers(catalog)) == 12


def test_a_retried_commit_is_a_no_op_at_the_same_snapshot(store: ObjectStore, catalog: Catalog) -> None:
    sink = make_sink(store, catalog)
    records = standard_epoch(sink, 1)
    sink.commit(records)
    rows, at = both_readers(catalog), snapshot(catalog)
    assert sink.commit(records) == ()
    assert sink.recover_and_commit(records) == ()
    assert make_sink(store, catalog).recover_and_commit(records) == ()  # another process
    assert (both_readers(catalog), snapshot(catalog)) == (rows, at)


def test_another_attempt_of_a_committed_checkpoint_is_a_conflict_and_changes_nothing(
    store: ObjectStore, catalog: Catalog
) -> None:
    sink = make_sink(store, catalog)
    sink.commit(standard_epoch(sink, 1))
    rows, at = both_readers(catalog), snapshot(catalog)
    other = pre_commit_epoch(
        make_sink(store, catalog), 1, {0: [epoch_rows(9, 0)], 1: [epoch_rows(9, 1)]}, attempt=1
    )
    with pytest.raises(SinkCommitConflict, match="another attempt"):
        make_sink(store, catalog).commit(other)
    assert (both_readers(catalog), snapshot(catalog)) == (rows, at)


@pytest.mark.parametrize(
    ("point", "at"),
    [(AFTER_STAGE, 2), (AFTER_CREATE, 1), (BEFORE_ICEBERG_COMMIT, 1), (BEFORE_ICEBERG_COMMIT, 2),
     (AFTER_ICEBERG_COMMIT, 2)],
)  # fmt: skip
def test_a_crash_at_each_step_of_the_commit_path_then_recovery_equals_the_fault_free_run(
    point: str, at: int, store: ObjectStore, catalog: Catalog
) -> None:
    reference = fault_free(store, catalog)
    sink = make_sink(store, catalog, kill=CrashAt(point, at))
    crashed = 0
    for epoch in range(1, EPOCHS + 1):
        try:
            records = standard_epoch(sink, epoch)
            sink.commit(records)
        except SimulatedCrash:
            crashed += 1
            fresh = make_sink(store, catalog)  # the restarted process: no in-process transactions
            if point == AFTER_STAGE:  # died in pre-commit: no ack, the epoch runs again (attempt 1)
                records = pre_commit_epoch(
                    fresh, epoch, {s: [epoch_rows(epoch, s)] for s in range(2)}, attempt=1
                )
            assert fresh.recover_and_commit(records) == ((epoch,) if point != AFTER_ICEBERG_COMMIT else ())
            assert fresh.recover_and_commit(records) == ()
            sink = make_sink(store, catalog)
    assert crashed == 1
    assert both_readers(catalog) == reference
    assert [s["checkpoint_id"] for s in epochal_summaries(catalog)] == [1, 2, 3, 4]  # each exactly once
    if point == BEFORE_ICEBERG_COMMIT:  # the dead commit's data files: on disk, in no snapshot
        assert len(table_folder_files(catalog) - set(data_files(catalog))) == 1


def test_a_crash_between_two_checkpoint_commits_is_finished_by_the_next_notify(
    store: ObjectStore, catalog: Catalog
) -> None:
    reference = fault_free(store, catalog)
    sink = make_sink(store, catalog)
    records = [r for epoch in range(1, EPOCHS + 1) for r in standard_epoch(sink, epoch)]
    with pytest.raises(SimulatedCrash):
        commit_pending_transactions(sink, records, EPOCHS, kill=KillAt(killpoints.MID_SINK_COMMIT))
    assert set(make_sink(store, catalog).committed_checkpoint_ids()) == {1}
    report = commit_pending_transactions(make_sink(store, catalog), records, EPOCHS)
    assert report.committed == (2, 3, 4)
    assert both_readers(catalog) == reference


def test_an_empty_checkpoint_moves_the_ledger_with_an_empty_snapshot_once_the_table_exists(
    store: ObjectStore, catalog: Catalog
) -> None:
    sink = make_sink(store, catalog)
    assert sink.commit(pre_commit_epoch(sink, 1, {0: []})) == ()  # no table, no rows: nothing to record
    assert load(catalog) is None
    sink.commit(standard_epoch(sink, 2))
    rows = both_readers(catalog)
    empty = pre_commit_epoch(sink, 3, {0: [], 1: []})
    assert sink.commit(empty) == (3,)
    assert sink.commit(empty) == ()
    assert set(sink.committed_checkpoint_ids()) == {1, 2, 3}
    assert both_readers(catalog) == rows
    assert [(s["checkpoint_id"], s["rows"]) for s in epochal_summaries(catalog)] == [(2, 6), (3, 0)]


def test_a_commit_that_loses_to_another_writer_is_decided_again_not_rebased(
    store: ObjectStore, catalog: Catalog
) -> None:
    sink = make_sink(store, catalog)
    sink.commit(standard_epoch(sink, 1))
    other_rows = pa.table({"id": pa.array([7], pa.int64()), "value": pa.array(["other"])})
    appended: list[int] = []

    def other_writer_meanwhile(point: str, checkpoint_id: int | None = None) -> None:
        if point == BEFORE_ICEBERG_COMMIT and not appended:  # the sink decided; another writer commits
            table = load(catalog)
            assert table is not None
            table.append(other_rows)
            appended.append(1)

    racing = make_sink(store, catalog, kill=other_writer_meanwhile)
    assert racing.commit(standard_epoch(racing, 2)) == (2,)
    assert len(both_readers(catalog)) == 13 and {"id": 7, "value": "other"} in table_rows(catalog)
    assert [s["checkpoint_id"] for s in epochal_summaries(catalog)] == [1, 2]


def test_a_zombie_commit_after_the_fence_is_refused_and_the_table_is_unchanged(
    store: ObjectStore, catalog: Catalog
) -> None:
    sink = make_sink(store, catalog)
    old = [standard_epoch(sink, epoch) for epoch in (1, 2)]
    sink.commit(old[0])
    zombie = standard_epoch(make_sink(store, catalog), 3)  # pre-committed by the old run
    make_sink(store, catalog).recover_and_commit(old[1])  # the restore commits the restored lineage...
    make_sink(store, catalog).fence(2)  # ...then fences
    rows, at = both_readers(catalog), snapshot(catalog)
    with pytest.raises(FencedTransactionError, match="generation 2"):
        make_sink(store, catalog).commit(zombie)
    assert make_sink(store, catalog).commit(old[1]) == ()  # a committed checkpoint retried: still a no-op
    assert (both_readers(catalog), snapshot(catalog)) == (rows, at)
    keys = {h.key for r in zombie for h in r.files}
    for record in zombie:
        make_sink(store, catalog).recover_and_abort(record)
    assert not keys & staged_keys(store)


def test_a_zombie_racing_the_fence_loses_in_the_catalogs_compare_and_swap(
    store: ObjectStore, catalog: Catalog
) -> None:
    sink = make_sink(store, catalog)
    sink.commit(standard_epoch(sink, 1))
    fenced: list[int | None] = []

    def fence_meanwhile(point: str, checkpoint_id: int | None = None) -> None:
        if point == BEFORE_ICEBERG_COMMIT and not fenced:  # the zombie decided to commit; the restore fences
            make_sink(store, catalog).fence(2)
            fenced.append(snapshot(catalog))

    zombie = make_sink(store, catalog, kill=fence_meanwhile)
    records = standard_epoch(zombie, 2)
    with pytest.raises(FencedTransactionError):
        zombie.commit(records)
    assert fenced == [snapshot(catalog)]  # nothing after the fence's snapshot
    assert sorted({r["id"] // 100 for r in both_readers(catalog)}) == [1]
    table = load(catalog)
    assert table is not None and table.properties[f"epochal/{JOB}/{UID}/fence"] == "2"


def test_a_fence_given_before_the_table_exists_still_refuses_the_zombie(
    store: ObjectStore, catalog: Catalog
) -> None:
    zombie = standard_epoch(make_sink(store, catalog), 1)
    make_sink(store, catalog).fence(2)  # no table yet: kept in the job's store
    with pytest.raises(FencedTransactionError):
        make_sink(store, catalog).commit(zombie)
    assert load(catalog) is None
    make_sink(store, catalog).commit(standard_epoch(make_sink(store, catalog), 2, generation=2))
    with pytest.raises(FencedTransactionError):
        make_sink(store, catalog).commit(zombie)
    assert sorted({r["id"] // 100 for r in both_readers(catalog)}) == [2]


def test_a_fence_that_finds_the_table_a_zombie_just_created_refuses_the_zombie(
    store: ObjectStore, catalog: Catalog
) -> None:
    def fence_meanwhile(point: str, checkpoint_id: int | None = None) -> None:
        if point == AFTER_CREATE:  # the zombie created the table; the restore fences before it decides
            make_sink(store, catalog).fence(2)

    zombie = make_sink(store, catalog, kill=fence_meanwhile)
    with pytest.raises(FencedTransactionError):
        zombie.commit(standard_epoch(zombie, 1))
    assert both_readers(catalog) == [] and [s["kind"] for s in epochal_summaries(catalog)] == ["fence"]


def test_abort_removes_staged_files_and_the_table_never_shows_them(
    store: ObjectStore, catalog: Catalog
) -> None:
    sink = make_sink(store, catalog)
    committed = standard_epoch(sink, 1)
    sink.commit(committed)
    rows, files = both_readers(catalog), table_folder_files(catalog)
    before = staged_keys(store)
    pending = standard_epoch(sink, 2)
    assert staged_keys(store) > before
    for record in pending:
        sink.abort(record)
    assert staged_keys(store) == before
    open_txn = sink.begin_transaction(3, 0, 0, 1)
    sink.write(open_txn, epoch_rows(3, 0))
    sink.abort(open_txn)
    assert sink.state_of(open_txn.id) is None
    for record in committed:  # abort never removes what a commit made visible
        make_sink(store, catalog).recover_and_abort(record)
    assert (both_readers(catalog), table_folder_files(catalog)) == (rows, files)


def test_abort_of_a_transaction_that_failed_mid_pre_commit_removes_what_it_staged(
    store: ObjectStore, catalog: Catalog
) -> None:
    sink = make_sink(store, catalog, kill=CrashAt(AFTER_STAGE, 1))
    txn = sink.begin_transaction(1, 0, 0, 1)
    sink.write(txn, epoch_rows(1, 0))
    with pytest.raises(SimulatedCrash):
        sink.pre_commit(txn)
    assert txn.state is TransactionState.FAILED and staged_keys(store)
    sink.abort(txn)
    assert staged_keys(store) == set()


def test_committed_ids_are_those_of_the_newest_generation_so_a_reused_id_is_not_taken_as_done(
    store: ObjectStore, catalog: Catalog, tmp_path: Path
) -> None:
    sink = make_sink(store, catalog)
    for epoch in range(1, 7):
        sink.commit(standard_epoch(sink, epoch))
    assert set(sink.committed_checkpoint_ids()) == {1, 2, 3, 4, 5, 6}
    sink.fence(2)  # restored from checkpoint 3 into generation 2
    assert 4 not in sink.committed_checkpoint_ids()
    rerun = [r for epoch in (4, 5, 6) for r in standard_epoch(sink, epoch, generation=2)]  # ids 4-6 again
    report = commit_pending_transactions(sink, rerun, 6)
    assert report.committed == (4, 5, 6)
    assert set(sink.committed_checkpoint_ids()) == {1, 2, 3, 4, 5, 6}
    assert len(both_readers(catalog)) == 6 * 6 + 3 * 6  # on_rewind="keep": the rewound rows stay
