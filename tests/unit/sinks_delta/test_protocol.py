"""The two-phase-commit protocol into a real Delta table (delta-rs): one commit per checkpoint,
retries, crashes at every step of the sink's commit path, zombies, abort. Results are read back with
delta-rs and with plain pyarrow over the files the table lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from spark_jobs.sinks.delta import AFTER_DELTA_COMMIT, AFTER_STAGE, BEFORE_DELTA_COMMIT
from spark_jobs.sinks.delta_ledger import LineagePosition
from state_store.core import killpoints
from state_store.core.ports import ObjectStore
from state_store.core.twophase import (
    FencedTransactionError,
    SinkCommitConflict,
    TransactionState,
    commit_pending_transactions,
)
from state_store.faults import KillAt, SimulatedCrash
from tests.unit.sinks_delta.support import (
    JOB,
    UID,
    CrashAt,
    both_readers,
    epoch_rows,
    make_sink,
    pre_commit_epoch,
    staged_parquet,
    standard_epoch,
    table_rows,
    version,
)

EPOCHS = 4


def fault_free(store: ObjectStore, table: Path) -> list[dict[str, Any]]:
    sink = make_sink(store, table)
    for epoch in range(1, EPOCHS + 1):
        sink.commit(standard_epoch(sink, epoch))
    return both_readers(table)


def test_commit_publishes_every_subtask_of_a_checkpoint_in_one_delta_commit_with_its_app_txn(
    store: ObjectStore, table: Path
) -> None:
    sink = make_sink(store, table)
    records = standard_epoch(sink, 1)
    assert table_rows(table) == []  # staged only: no table, nothing visible
    assert sink.commit(records) == (1,)
    rows = both_readers(table)
    assert sorted(r["id"] for r in rows) == [100, 101, 102, 110, 111, 112]
    dt = DeltaTable(str(table))
    assert dt.version() == 0
    assert dt.transaction_version(f"epochal/{JOB}/{UID}") == LineagePosition(1, 1).version
    info = dt.history(1)[0]["epochal"]
    assert (info["job_id"], info["sink_uid"], info["checkpoint_id"], info["generation"]) == (JOB, UID, 1, 1)
    assert info["rows"] == 6


def test_staged_files_stay_invisible_until_their_checkpoint_commits(store: ObjectStore, table: Path) -> None:
    sink = make_sink(store, table)
    sink.commit(standard_epoch(sink, 1))
    before = both_readers(table)
    records = standard_epoch(sink, 2)
    staged = {h.key for r in records for h in r.files}
    assert staged <= staged_parquet(table)  # on disk, in the table folder
    assert both_readers(table) == before  # not in the log
    sink.commit(records)
    assert len(both_readers(table)) == 12


def test_a_retried_commit_is_a_no_op_at_the_same_table_version(store: ObjectStore, table: Path) -> None:
    sink = make_sink(store, table)
    records = standard_epoch(sink, 1)
    sink.commit(records)
    rows, at = both_readers(table), version(table)
    assert sink.commit(records) == ()
    assert sink.recover_and_commit(records) == ()
    assert make_sink(store, table).recover_and_commit(records) == ()  # another process
    assert (both_readers(table), version(table)) == (rows, at)


def test_another_attempt_of_a_committed_checkpoint_is_a_conflict_and_changes_nothing(
    store: ObjectStore, table: Path
) -> None:
    sink = make_sink(store, table)
    sink.commit(standard_epoch(sink, 1))
    rows, at = both_readers(table), version(table)
    other = pre_commit_epoch(
        make_sink(store, table), 1, {0: [epoch_rows(9, 0)], 1: [epoch_rows(9, 1)]}, attempt=1
    )
    with pytest.raises(SinkCommitConflict, match="another attempt"):
        make_sink(store, table).commit(other)
    assert (both_readers(table), version(table)) == (rows, at)


@pytest.mark.parametrize("point", [AFTER_STAGE, BEFORE_DELTA_COMMIT, AFTER_DELTA_COMMIT])
def test_a_crash_at_each_step_of_the_commit_path_then_recovery_equals_the_fault_free_run(
    point: str, store: ObjectStore, tmp_path: Path
) -> None:
    reference = fault_free(store, tmp_path / "reference")
    table = tmp_path / "faulty"
    sink = make_sink(store, table, kill=CrashAt(point, 2))
    crashed = 0
    for epoch in range(1, EPOCHS + 1):
        try:
            records = standard_epoch(sink, epoch)
            sink.commit(records)
        except SimulatedCrash:
            crashed += 1
            fresh = make_sink(store, table)  # the restarted process: no in-process transactions
            if point == AFTER_STAGE:  # died in pre-commit: no ack, the epoch runs again (attempt 1)
                records = pre_commit_epoch(
                    fresh, epoch, {s: [epoch_rows(epoch, s)] for s in range(2)}, attempt=1
                )
            assert fresh.recover_and_commit(records) == ((epoch,) if point != AFTER_DELTA_COMMIT else ())
            assert fresh.recover_and_commit(records) == ()
            sink = make_sink(store, table)
    assert crashed == 1
    assert both_readers(table) == reference
    if point == AFTER_STAGE:  # the dead attempt's staged file is on disk, never in the table
        listed = {Path(u).name for u in DeltaTable(str(table)).file_uris()}
        assert any("-a0-" in Path(p).name and Path(p).name not in listed for p in staged_parquet(table))


def test_a_crash_between_two_checkpoint_commits_is_finished_by_the_next_notify(
    store: ObjectStore, tmp_path: Path
) -> None:
    reference = fault_free(store, tmp_path / "reference")
    table = tmp_path / "faulty"
    sink = make_sink(store, table)
    records = [r for epoch in range(1, EPOCHS + 1) for r in standard_epoch(sink, epoch)]
    with pytest.raises(SimulatedCrash):
        commit_pending_transactions(sink, records, EPOCHS, kill=KillAt(killpoints.MID_SINK_COMMIT))
    assert make_sink(store, table).committed_checkpoint_ids() == {1}
    report = commit_pending_transactions(make_sink(store, table), records, EPOCHS)
    assert report.committed == (2, 3, 4)
    assert both_readers(table) == reference


def test_a_zombie_commit_after_the_fence_is_refused_and_the_table_is_unchanged(
    store: ObjectStore, table: Path
) -> None:
    sink = make_sink(store, table)
    old = [standard_epoch(sink, epoch) for epoch in (1, 2)]
    sink.commit(old[0])
    zombie = standard_epoch(make_sink(store, table), 3)  # pre-committed by the old run
    make_sink(store, table).recover_and_commit(old[1])  # the restore commits the restored lineage...
    make_sink(store, table).fence(2)  # ...then fences
    rows, at = both_readers(table), version(table)
    with pytest.raises(FencedTransactionError, match="generation 2"):
        make_sink(store, table).commit(zombie)
    assert make_sink(store, table).commit(old[1]) == ()  # a committed checkpoint retried: still a no-op
    assert (both_readers(table), version(table)) == (rows, at)
    keys = {h.key for r in zombie for h in r.files}
    for record in zombie:
        make_sink(store, table).recover_and_abort(record)
    assert not keys & staged_parquet(table)


def test_a_zombie_racing_the_fence_loses_in_the_delta_conflict_check(store: ObjectStore, table: Path) -> None:
    sink = make_sink(store, table)
    sink.commit(standard_epoch(sink, 1))
    fenced: list[int] = []

    def fence_meanwhile(point: str, checkpoint_id: int | None = None) -> None:
        if point == BEFORE_DELTA_COMMIT and not fenced:  # the zombie decided to commit; the restore fences
            make_sink(store, table).fence(2)
            fenced.append(version(table))

    zombie = make_sink(store, table, kill=fence_meanwhile)
    records = standard_epoch(zombie, 2)
    with pytest.raises(FencedTransactionError):
        zombie.commit(records)
    assert fenced == [version(table)]  # nothing after the fence commit
    assert sorted({r["id"] // 100 for r in both_readers(table)}) == [1]


def test_a_fence_given_before_the_table_exists_still_refuses_the_zombie(
    store: ObjectStore, table: Path
) -> None:
    zombie = standard_epoch(make_sink(store, table), 1)
    make_sink(store, table).fence(2)  # no table yet: kept in the job's store
    with pytest.raises(FencedTransactionError):
        make_sink(store, table).commit(zombie)
    assert not DeltaTable.is_deltatable(str(table))
    make_sink(store, table).commit(standard_epoch(make_sink(store, table), 2, generation=2))
    assert DeltaTable(str(table)).transaction_version(f"epochal/{JOB}/{UID}/fence") == 2


def test_abort_removes_staged_files_and_the_table_never_shows_them(store: ObjectStore, table: Path) -> None:
    sink = make_sink(store, table)
    committed = standard_epoch(sink, 1)
    sink.commit(committed)
    rows = both_readers(table)
    files_before = staged_parquet(table)
    pending = standard_epoch(sink, 2)
    assert staged_parquet(table) > files_before
    for record in pending:
        sink.abort(record)
    assert staged_parquet(table) == files_before
    open_txn = sink.begin_transaction(3, 0, 0, 1)
    sink.write(open_txn, epoch_rows(3, 0))
    sink.abort(open_txn)
    assert sink.state_of(open_txn.id) is None
    for record in committed:  # abort never removes what a commit made visible
        make_sink(store, table).recover_and_abort(record)
    assert staged_parquet(table) == files_before
    assert both_readers(table) == rows


def test_abort_of_a_transaction_that_failed_mid_pre_commit_removes_what_it_staged(
    store: ObjectStore, table: Path
) -> None:
    sink = make_sink(store, table, kill=CrashAt(AFTER_STAGE, 1))
    txn = sink.begin_transaction(1, 0, 0, 1)
    sink.write(txn, epoch_rows(1, 0))
    with pytest.raises(SimulatedCrash):
        sink.pre_commit(txn)
    assert txn.state is TransactionState.FAILED and staged_parquet(table)
    sink.abort(txn)
    assert staged_parquet(table) == set()


def test_committed_ids_are_those_of_the_newest_generation_so_a_reused_id_is_not_taken_as_done(
    store: ObjectStore, table: Path
) -> None:
    sink = make_sink(store, table)
    for epoch in range(1, 7):
        sink.commit(standard_epoch(sink, epoch))
    assert set(sink.committed_checkpoint_ids()) == {1, 2, 3, 4, 5, 6}
    sink.fence(2)  # restored from checkpoint 3 into generation 2
    assert 4 not in sink.committed_checkpoint_ids()
    rerun = [r for epoch in (4, 5, 6) for r in standard_epoch(sink, epoch, generation=2)]  # ids 4-6 again
    report = commit_pending_transactions(sink, rerun, 6)
    assert report.committed == (4, 5, 6)
    assert set(sink.committed_checkpoint_ids()) == {1, 2, 3, 4, 5, 6}
    assert len(both_readers(table)) == 6 * 6 + 3 * 6  # on_rewind="keep": the rewound rows stay
