"""Races of the Delta sink that the review of issue 21 found (``tests/unit/review21``), the other
side of each: the fence that sees a zombie's create-claim, a claimant that died, abort of a record
that may still be committed, and a staged file missing for good."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from spark_jobs.sinks.delta_claims import CreateClaims
from spark_jobs.sinks.delta_schema import delta_schema_of
from spark_jobs.sinks.delta_staging import StagedFileMissing
from state_store.core.ports import ObjectStore
from state_store.core.twophase import FencedTransactionError
from tests.unit.sinks_delta.support import (
    JOB,
    UID,
    both_readers,
    epoch_rows,
    make_sink,
    staged_parquet,
    standard_epoch,
    table_rows,
    version,
)

FENCE_APP = f"epochal/{JOB}/{UID}/fence"


def claims(store: ObjectStore) -> CreateClaims:
    return CreateClaims(store, JOB, UID)


def test_a_fence_that_sees_a_zombies_create_claim_returns_only_after_fencing_the_table_it_made(
    store: ObjectStore, table: Path
) -> None:
    """The zombie (generation 1) claimed the creation and read the fences before the fence document
    existed, so it creates the table; the fence saw its claim and must not return before that
    creation is settled: it returns after its own fence commit, which refuses the zombie's next
    commit."""
    zombie = make_sink(store, table)
    listed = threading.Event()
    returned: list[int] = []
    real_newest = zombie.fences.newest_generation
    real_older = CreateClaims.older_than

    def older_than(self: CreateClaims, generation: int) -> Any:
        found = real_older(self, generation)
        if found:
            listed.set()
        return found

    def fence() -> None:
        make_sink(store, table).fence(2)
        returned.append(version(table))

    def newest_then_fence() -> int:  # the zombie's re-read (after its claim), before the fence document
        seen = real_newest()
        if not real_older(claims(store), 2):
            return seen  # the decision, before the claim
        thread.start()
        assert listed.wait(10), "the fence never saw the claim"
        return seen

    thread = threading.Thread(target=fence)
    records = standard_epoch(zombie, 1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CreateClaims, "older_than", older_than)
        mp.setattr(zombie.fences, "newest_generation", newest_then_fence)
        assert zombie.commit(records) == (1,)  # it decided and read the fences before the fence
        thread.join(10)
    assert returned == [1]  # the fence's own commit (version 1) came after the zombie's creation
    assert DeltaTable(str(table)).transaction_version(FENCE_APP) == 2
    with pytest.raises(FencedTransactionError):
        make_sink(store, table).commit(standard_epoch(make_sink(store, table), 2))
    assert len(both_readers(table)) == 6 and not list(claims(store).older_than(99))


def test_a_claimant_that_died_is_settled_by_the_fence_creating_the_table_with_the_fence(
    store: ObjectStore, table: Path
) -> None:
    """A zombie claimed the creation and died (its claim stays): fence(2) waits ``claim_wait_s``,
    then creates the table empty (the claim's schema) in one create-only commit carrying the fence;
    the zombie's records, committed later, are refused."""
    zombie = make_sink(store, table)
    records = standard_epoch(zombie, 1)
    schema = delta_schema_of(epoch_rows(1, 0).schema, str(table))
    claims(store).claim(1, 1, schema.to_json(), ())
    make_sink(store, table, claim_wait_s=0.05).fence(2)
    dt = DeltaTable(str(table))
    assert (dt.version(), dt.transaction_version(FENCE_APP), table_rows(table)) == (0, 2, [])
    assert dt.history(1)[0]["epochal"]["kind"] == "fence"
    assert not list(claims(store).older_than(99))  # settled: the fence removed the stale claim
    with pytest.raises(FencedTransactionError):
        make_sink(store, table).commit(records)
    sink = make_sink(store, table)
    sink.commit(standard_epoch(sink, 1, generation=2))  # the new generation writes as usual
    assert len(both_readers(table)) == 6


def test_a_claim_of_the_fencing_generation_or_a_newer_one_does_not_hold_the_fence(
    store: ObjectStore, table: Path
) -> None:
    claims(store).claim(2, 1, delta_schema_of(epoch_rows(1, 0).schema, "t").to_json(), ())
    make_sink(store, table, claim_wait_s=60).fence(2)  # returns at once: no older claim
    assert not DeltaTable.is_deltatable(str(table))


def test_recover_and_abort_keeps_the_files_of_a_record_that_may_still_be_committed(
    store: ObjectStore, table: Path
) -> None:
    """Another process aborting records of the newest generation whose checkpoint is not committed
    keeps their files (a commit of them may be running); once a fence makes their commit impossible,
    the abort deletes them -- and never files a commit lists."""
    sink = make_sink(store, table)
    sink.commit(standard_epoch(sink, 1))
    files_before = staged_parquet(table)
    pending = standard_epoch(make_sink(store, table), 2)
    keys = {h.key for r in pending for h in r.files}
    for record in pending:
        make_sink(store, table).recover_and_abort(record)
    assert keys <= staged_parquet(table)
    assert make_sink(store, table).commit(pending) == (2,)  # still committable, and readable
    assert len(both_readers(table)) == 12
    abandoned = standard_epoch(make_sink(store, table), 3)
    make_sink(store, table).fence(2)
    for record in [*pending, *abandoned]:
        make_sink(store, table).recover_and_abort(record)
    assert staged_parquet(table) == files_before | keys  # committed files stay, abandoned ones go
    assert len(both_readers(table)) == 12


def test_recover_and_abort_of_a_fenced_generation_settles_the_fence_first(
    store: ObjectStore, table: Path
) -> None:
    """The job-store fence document exists but the table's fence is older (a fence that died before
    its commit): the abort commits the fence itself before deleting, so a racing zombie commit of
    those files conflicts with it and is refused."""
    sink = make_sink(store, table)
    sink.commit(standard_epoch(sink, 1))
    zombie = standard_epoch(make_sink(store, table), 2)
    make_sink(store, table).fences.fence(2)  # the document only
    assert DeltaTable(str(table)).transaction_version(FENCE_APP) == 1
    for record in zombie:
        make_sink(store, table).recover_and_abort(record)
    assert DeltaTable(str(table)).transaction_version(FENCE_APP) == 2
    assert not {h.key for r in zombie for h in r.files} & staged_parquet(table)
    with pytest.raises(FencedTransactionError):
        make_sink(store, table).commit(zombie)


@pytest.mark.parametrize("mode", ["append", "merge"])
def test_a_staged_file_missing_for_good_is_one_line_naming_file_and_checkpoint(
    store: ObjectStore, table: Path, mode: str
) -> None:
    opts: dict[str, Any] = {"mode": mode, "unique_key": ("id",)} if mode == "merge" else {}
    sink = make_sink(store, table, **opts)
    sink.commit(standard_epoch(sink, 1))
    at = version(table)
    records = standard_epoch(sink, 2)
    gone = records[1].files[0].key
    (table / gone).unlink()
    with pytest.raises(StagedFileMissing) as caught:
        make_sink(store, table, **opts).commit(records)
    text = str(caught.value)
    assert "\n" not in text and gone in text and "checkpoint 2" in text and "restore from" in text
    assert version(table) == at


def test_merge_inputs_deleted_between_inspect_and_read_by_a_winning_commit_are_not_an_error(
    store: ObjectStore, table: Path
) -> None:
    """The merge read fails because the winner merged and deleted the inputs: decided again, the
    checkpoint is found committed (no second commit)."""
    opts: dict[str, Any] = {"mode": "merge", "unique_key": ("id",)}
    first = make_sink(store, table, **opts)
    first.commit(standard_epoch(first, 1))
    loser = make_sink(store, table, **opts)
    records = standard_epoch(loser, 2)
    real_read = loser.stager.read

    def read_after_the_winner(files: Any, schema: pa.Schema, checkpoint_id: int) -> pa.Table:
        assert make_sink(store, table, **opts).recover_and_commit(records) == (2,)
        return real_read(files, schema, checkpoint_id)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loser.stager, "read", read_after_the_winner)
        assert loser.recover_and_commit(records) == ()
    assert version(table) == 1 and len(both_readers(table)) == 12
