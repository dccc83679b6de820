"""The commit protocol against a real server: visibility, idempotence, a crash at every step of the
commit path and a connection killed mid-commit, each compared row for row with a fault-free run."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_jobs.sinks.postgres import AFTER_COMMIT, KILL_POINTS, PostgresTransactionalSink
from spark_jobs.sinks.postgres_conn import PostgresFailure, PostgresSinkError
from spark_jobs.sinks.postgres_ledger import AFTER_UPSERT
from state_store.core import killpoints
from state_store.core.twophase import (
    PreCommittedTxn,
    SinkCommitConflict,
    SinkCommitError,
    TransactionState,
    commit_pending_transactions,
)
from state_store.testing import SimulatedCrash
from tests.unit.sinks_postgres.conftest import JOB, UID, Db, KillAt, batch, stage

EPOCHS = 3
SUBTASKS = 2


def epoch(n: int, subtask: int) -> pa.RecordBatch:
    """Subtask ``subtask``'s output of epoch ``n``: a running total (updated every epoch) and one
    new key per epoch."""
    return batch(k=[f"total-{subtask}", f"e{n}-{subtask}"], v=[n, 10 * n + subtask], g=[0, 0])


def stage_epoch(sink: PostgresTransactionalSink, n: int) -> list[PreCommittedTxn]:
    return [stage(sink, n, epoch(n, s), subtask=s) for s in range(SUBTASKS)]


def staged(db: Db) -> list[str]:
    return [info.key for info in db.store.list(f"{JOB}/sinks/{UID}/")]


def fault_free(db: Db) -> list[tuple[object, ...]]:
    """The table after EPOCHS epochs without faults (a second sink and table in the same schema)."""
    sink = db.sink(unique_key=("k",), table=f"{db.schema}.ref", uid="ref")
    for n in range(1, EPOCHS + 1):
        assert sink.commit(stage_epoch(sink, n)) == (n,)
    return db.rows(table="ref")


def test_nothing_is_visible_before_the_commit_and_everything_after(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    records = stage_epoch(sink, 1)
    assert not db.exists()
    assert sink.committed_checkpoint_ids() == frozenset()
    assert sink.commit(records) == (1,)
    assert db.rows() == [("e1-0", 10, 0), ("e1-1", 11, 0), ("total-0", 1, 0), ("total-1", 1, 0)]
    assert db.commits() == [(1, 0, False)]
    assert db.query("SELECT row_count, target_table FROM {s}.epochal_sink_commits") == [
        (4, f"{db.schema}.out")
    ]
    assert sink.committed_checkpoint_ids() == frozenset({1})


def test_a_retried_commit_is_a_no_op(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    records = stage_epoch(sink, 1)
    assert sink.commit(records) == (1,)
    rows = db.rows()
    assert sink.commit(records) == ()
    assert db.sink(unique_key=("k",)).recover_and_commit(records) == ()  # another process
    assert db.rows() == rows
    assert db.commits() == [(1, 0, False)]


def test_a_retry_after_the_staged_files_were_swept_is_still_a_no_op(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    records = stage_epoch(sink, 1)
    sink.commit(records)
    for r in records:
        sink.recover_and_abort(r)  # the orphan sweep after retention: files gone, rows stay
    assert staged(db) == []
    assert db.sink(unique_key=("k",)).recover_and_commit(records) == ()
    assert len(db.rows()) == 4


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_crash_at_every_step_of_the_commit_path_then_recovery_equals_a_fault_free_run(
    db: Db, point: str
) -> None:
    sink = db.sink(unique_key=("k",), kill=KillAt(point, 2))
    for n in range(1, EPOCHS + 1):
        records = stage_epoch(sink, n)
        if n != 2:
            assert sink.commit(records) == (n,)
            continue
        with pytest.raises(SimulatedCrash):
            sink.commit(records)
        committed = point == AFTER_COMMIT
        assert db.commits() == [(1, 0, False), *([(2, 0, False)] if committed else [])]
        assert (("e2-0", 20, 0) in db.rows()) is committed  # all of checkpoint 2 or nothing
        sink = db.sink(unique_key=("k",))  # a new process restores the records and commits them
        assert sink.recover_and_commit(records) == (() if committed else (2,))
    assert db.rows() == fault_free(db)
    assert db.commits() == [(n, 0, False) for n in range(1, EPOCHS + 1)]


def test_a_connection_killed_mid_commit_loses_nothing_and_doubles_nothing(db: Db) -> None:
    def terminate_the_sinks_backend() -> None:
        with db.server.connect() as other:
            killed = other.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s "
                "AND state = 'idle in transaction'",
                (f"epochal {JOB}/{UID}",),
            ).fetchall()
        assert killed == [(True,)]

    sink = db.sink(kill=KillAt(AFTER_UPSERT, 2, action=terminate_the_sinks_backend))  # append mode
    for n in range(1, EPOCHS + 1):
        records = stage_epoch(sink, n)
        if n == 2:
            with pytest.raises(PostgresSinkError) as caught:
                sink.commit(records)
            assert caught.value.reason is PostgresFailure.INTERRUPTED
            assert "\n" not in str(caught.value) and f"127.0.0.1:{db.server.port}" in str(caught.value)
            assert sink.state_of(records[0].txn_id) is TransactionState.PRE_COMMITTED  # retryable
            assert db.commits() == [(1, 0, False)]
            assert len(db.rows()) == 4
        assert sink.commit(records) == (n,)
        assert sink.commit(records) == ()
    reference = db.sink(table=f"{db.schema}.ref", uid="ref")
    for n in range(1, EPOCHS + 1):
        reference.commit(stage_epoch(reference, n))
    assert db.rows() == db.rows(table="ref")
    assert len(db.rows()) == EPOCHS * SUBTASKS * 2


def test_commit_pending_transactions_commits_in_order_and_finishes_after_a_crash_between_two(
    db: Db,
) -> None:
    sink = db.sink(unique_key=("k",))
    records = [r for n in range(1, EPOCHS + 1) for r in stage_epoch(sink, n)]
    with pytest.raises(SimulatedCrash):
        commit_pending_transactions(sink, records, EPOCHS, kill=KillAtCore(killpoints.MID_SINK_COMMIT))
    assert [c[0] for c in db.commits()] == [1]
    report = commit_pending_transactions(db.sink(unique_key=("k",)), records, EPOCHS)
    assert report.committed == (2, 3)
    assert report.already_committed == (1,)
    assert db.rows() == fault_free(db)


def test_another_attempt_of_a_committed_checkpoint_is_a_conflict_and_changes_nothing(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    sink.commit([stage(sink, 1, epoch(1, 0), attempt=0)])
    rows = db.rows()
    zombie = stage(sink, 1, batch(k=["total-0"], v=[999], g=[0]), attempt=1)
    with pytest.raises(SinkCommitConflict, match="another attempt"):
        sink.commit([zombie])
    assert db.rows() == rows


def test_abort_deletes_the_staged_files_and_writes_nothing(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    records = stage_epoch(sink, 1)
    assert len(staged(db)) == SUBTASKS
    for r in records:
        sink.abort(r)
    assert staged(db) == []
    assert not db.exists()


def test_a_missing_staged_file_refuses_the_commit_with_one_line(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    records = stage_epoch(sink, 1)
    db.store.delete(records[1].files[0].key)
    with pytest.raises(SinkCommitError, match=r"is missing .* restore from an earlier checkpoint") as caught:
        db.sink(unique_key=("k",)).recover_and_commit(records)
    assert "\n" not in str(caught.value)
    assert not db.exists()
    assert db.commits() == []


def test_an_empty_checkpoint_commits_a_commit_row_and_no_table(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    record = stage(sink, 1)
    assert record.files == ()
    assert sink.commit([record]) == (1,)
    assert db.commits() == [(1, 0, False)]
    assert not db.exists()


class KillAtCore:
    """The core's kill point (mid_sink_commit) as a switch: raise once."""

    def __init__(self, point: str) -> None:
        self.point, self.fired = point, False

    def __call__(self, point: str, checkpoint_id: int | None = None) -> None:
        if point == self.point and not self.fired:
            self.fired = True
            raise SimulatedCrash(point, checkpoint_id)
