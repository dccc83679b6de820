"""Adversarial review of the exactly-once table sinks (issue 21): Delta and PostgreSQL.

Each test forces one interleaving of two actors (sinks built twice over the same store/table, as
two processes would) through the sinks' own kill hooks, and states what exactly-once requires."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from spark_jobs.sinks.delta import BEFORE_DELTA_COMMIT
from state_store.core.ports import ObjectStore
from state_store.core.twophase import FencedTransactionError, SinkCommitError
from tests.unit.sinks_delta.conftest import store, table  # noqa: F401  (fixtures)
from tests.unit.sinks_delta.support import both_readers, make_sink, standard_epoch, table_rows
from tests.unit.sinks_postgres.conftest import Db, batch, db, postgres, stage  # noqa: F401  (fixtures)


class Once:
    """A kill switch running ``action`` once, at ``point``."""

    def __init__(self, point: str, action: Any) -> None:
        self.point, self.action, self.fired = point, action, False

    def __call__(self, point: str, checkpoint_id: int | None = None) -> None:
        if point == self.point and not self.fired:
            self.fired = True
            self.action()


# -- Delta -----------------------------------------------------------------------------------


def test_delta_zombie_racing_a_fence_before_the_table_exists_is_refused(
    store: ObjectStore,  # noqa: F811
    table: Path,  # noqa: F811
) -> None:
    """A zombie of generation 1 has decided to commit checkpoint 1 (no table yet); the restore
    fences generation 2 and fence() returns; then the zombie's commit lands. The fence must have
    refused it (as it does when the table exists: test_a_zombie_racing_the_fence_loses...)."""
    fenced: list[bool] = []

    def fence() -> None:
        make_sink(store, table).fence(2)
        fenced.append(True)

    zombie = make_sink(store, table, kill=Once(BEFORE_DELTA_COMMIT, fence))
    records = standard_epoch(zombie, 1)
    outcome: Any
    try:
        outcome = zombie.commit(records)
    except FencedTransactionError:
        outcome = "fenced"
    assert fenced == [True]
    assert (outcome, table_rows(table)) == ("fenced", [])


def test_delta_abort_racing_a_commit_never_leaves_a_committed_file_missing(
    store: ObjectStore,  # noqa: F811
    table: Path,  # noqa: F811
) -> None:
    """Process A commits checkpoint 1 and has verified its staged files; process B aborts the same
    records meanwhile (a restore abandoning them). Either the commit is refused or the rows are
    readable: never a table version listing deleted files."""
    records: list[Any] = []

    def abort() -> None:
        other = make_sink(store, table)
        for r in records:
            other.recover_and_abort(r)

    sink = make_sink(store, table, kill=Once(BEFORE_DELTA_COMMIT, abort))
    records.extend(standard_epoch(sink, 1))
    try:
        sink.commit(records)
    except SinkCommitError:
        assert table_rows(table) == []
        return
    assert len(both_readers(table)) == 6  # committed: every file it lists must exist


def test_delta_merge_two_processes_recovering_the_same_checkpoint_at_once(
    store: ObjectStore,  # noqa: F811
    table: Path,  # noqa: F811
) -> None:
    """Merge mode, table exists. Process A (restore) decides to commit checkpoint 2; process B
    (another restore of the same checkpoint) commits it fully (and deletes the staged merge inputs).
    A must find it committed (a no-op, ()), not fail."""
    first = make_sink(store, table, mode="merge", unique_key=("id",))
    first.commit(standard_epoch(first, 1))
    records: list[Any] = []

    def other_process() -> None:
        assert make_sink(store, table, mode="merge", unique_key=("id",)).recover_and_commit(records) == (2,)

    a = make_sink(
        store, table, mode="merge", unique_key=("id",), kill=Once(BEFORE_DELTA_COMMIT, other_process)
    )
    records.extend(standard_epoch(a, 2))
    try:
        outcome: Any = a.recover_and_commit(records)
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    assert outcome == ()
    assert len(both_readers(table)) == 12


@pytest.mark.parametrize("mode", ["append", "merge"])
def test_delta_two_processes_creating_the_table_with_the_same_checkpoint(
    store: ObjectStore,  # noqa: F811
    table: Path,  # noqa: F811
    mode: str,
) -> None:
    """No table yet; A decides to commit checkpoint 1, B commits the same records first (creating
    the table). A must find it committed (), not fail with 'table exists'."""
    opts: dict[str, Any] = {"mode": mode, "unique_key": ("id",)} if mode == "merge" else {}
    records: list[Any] = []

    def other_process() -> None:
        assert make_sink(store, table, **opts).recover_and_commit(records) == (1,)

    a = make_sink(store, table, kill=Once(BEFORE_DELTA_COMMIT, other_process), **opts)
    records.extend(standard_epoch(a, 1))
    try:
        outcome: Any = a.recover_and_commit(records)
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    assert outcome == ()
    assert len(both_readers(table)) == 6
    assert DeltaTable(str(table)).version() == 0


# -- PostgreSQL ------------------------------------------------------------------------------


def test_postgres_nulls_in_unique_key_on_an_existing_nullable_unique_table_are_refused(
    db: Db,  # noqa: F811
) -> None:
    """The table exists (someone else created it: UNIQUE (k), k nullable). Rows with a null key
    cannot be upserted: the same key written by two epochs must not give two rows."""
    db.execute("CREATE TABLE {s}.out (k text, v bigint, g bigint, UNIQUE (k))")
    sink = db.sink(unique_key=("k",))
    outcomes = []
    for n in (1, 2):
        try:
            outcomes.append(
                sink.commit([stage(sink, n, batch(k=pa.array([None], pa.string()), v=[n], g=[0]))])
            )
        except Exception as exc:
            outcomes.append(type(exc).__name__)
    assert len(db.rows()) <= 1, (outcomes, db.rows())
