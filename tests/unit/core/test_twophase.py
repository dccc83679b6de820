"""The two-phase-commit protocol (state_store.core.twophase) against a minimal in-memory sink."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from state_store.core import killpoints
from state_store.core.codec import decode_document, encode_document
from state_store.core.manifests import AckRecord, StateHandle, TaskId
from state_store.core.twophase import (
    SNAPSHOT_KEY,
    IllegalTransactionState,
    PreCommittedTxn,
    SinkCommitConflict,
    SinkCommitError,
    Transaction,
    TransactionalSink,
    TransactionState,
    TxnId,
    commit_pending_transactions,
    group_by_checkpoint,
    records_from_snapshot,
    sink_snapshot,
)
from state_store.testing import KillAt, SimulatedCrash


class ListSink(TransactionalSink[list[int]]):
    """Stages lists of ints under a key per transaction; commits by checkpoint (create-only)."""

    def __init__(self, uid: str = "out", staged: dict[str, list[int]] | None = None) -> None:
        super().__init__(uid)
        self.staged: dict[str, list[int]] = {} if staged is None else staged
        self.log: dict[int, tuple[PreCommittedTxn, ...]] = {}
        self.commit_calls: list[int] = []

    def committed_checkpoint_ids(self) -> frozenset[int]:
        return frozenset(self.log)

    def visible(self) -> list[int]:
        return [x for n in sorted(self.log) for r in self.log[n] for h in r.files for x in self.staged[h.key]]

    def _write(self, txn: Transaction[list[int]], batch: list[int]) -> None:
        if any(x < 0 for x in batch):
            raise ValueError("negative values are refused")
        txn.batches.append(batch)

    def _pre_commit(self, txn: Transaction[list[int]]) -> PreCommittedTxn:
        t = txn.id
        key = f"{t.sink_uid}/txn-{t.checkpoint_id}/{t.subtask}-g{t.generation}-a{t.attempt}"
        txn.staged.append(key)
        self.staged[key] = [x for b in txn.batches for x in b]
        handle = StateHandle(key, len(self.staged[key]), "blake3:" + "0" * 64)
        return PreCommittedTxn(
            t.sink_uid, t.checkpoint_id, t.subtask, t.attempt, t.generation, (handle,), handle.size
        )

    def _commit_checkpoint(self, checkpoint_id: int, records: tuple[PreCommittedTxn, ...]) -> bool:
        self.commit_calls.append(checkpoint_id)
        if checkpoint_id in self.log:
            if self.log[checkpoint_id] != records:
                raise SinkCommitConflict(f"checkpoint {checkpoint_id} committed with other records")
            return False
        self.log[checkpoint_id] = records
        return True

    def _discard(self, txn_id: TxnId, keys: Sequence[str]) -> None:
        visible = {h.key for r in self.log.get(txn_id.checkpoint_id, ()) for h in r.files}
        for key in keys:
            if key not in visible:
                self.staged.pop(key, None)


def epoch(
    sink: ListSink, n: int, values: list[int], subtask: int = 0, attempt: int = 1, gen: int = 1
) -> PreCommittedTxn:
    txn = sink.begin_transaction(n, subtask, attempt, gen)
    sink.write(txn, values)
    return sink.pre_commit(txn)


def state(txn: Transaction[Any]) -> TransactionState:
    """The state as the guard sees it now (a call, so type checkers do not narrow it)."""
    return txn.state


# -- lifecycle guard ---------------------------------------------------------------------------
def test_transaction_moves_open_pre_committed_committed() -> None:
    sink = ListSink()
    txn = sink.begin_transaction(1, 0, 1, 1)
    assert state(txn) is TransactionState.OPEN
    sink.write(txn, [1, 2])
    record = sink.pre_commit(txn)
    assert state(txn) is TransactionState.PRE_COMMITTED
    assert record.txn_id == txn.id and record.rows == 2
    assert sink.visible() == []
    assert sink.commit([record]) == (1,)
    assert state(txn) is TransactionState.COMMITTED
    assert sink.visible() == [1, 2]
    assert sink.state_of(txn.id) is None


def test_write_after_pre_commit_is_refused() -> None:
    sink = ListSink()
    txn = sink.begin_transaction(1, 0, 1, 1)
    sink.pre_commit(txn)
    with pytest.raises(IllegalTransactionState, match="pre_committed, expected open"):
        sink.write(txn, [1])
    with pytest.raises(IllegalTransactionState):
        sink.pre_commit(txn)
    assert state(txn) is TransactionState.PRE_COMMITTED


def test_error_while_writing_fails_the_transaction_and_only_abort_is_allowed() -> None:
    sink = ListSink()
    txn = sink.begin_transaction(1, 0, 1, 1)
    sink.write(txn, [1])
    with pytest.raises(ValueError, match="negative"):
        sink.write(txn, [-1])
    assert state(txn) is TransactionState.FAILED
    assert isinstance(txn.error, ValueError)
    with pytest.raises(IllegalTransactionState, match="abort it and begin a new one"):
        sink.write(txn, [2])
    with pytest.raises(IllegalTransactionState):
        sink.pre_commit(txn)
    sink.abort(txn)
    assert state(txn) is TransactionState.ABORTED
    sink.abort(txn)  # aborting twice is a no-op
    assert state(txn) is TransactionState.ABORTED


def test_aborted_transaction_cannot_be_pre_committed_and_is_never_visible() -> None:
    sink = ListSink()
    txn = sink.begin_transaction(1, 0, 1, 1)
    sink.write(txn, [7])
    record = sink.pre_commit(txn)
    sink.abort(txn)
    assert state(txn) is TransactionState.ABORTED
    assert sink.staged == {}
    with pytest.raises(IllegalTransactionState):
        sink.write(txn, [1])
    assert sink.visible() == []
    assert sink.committed_checkpoint_ids() == frozenset()
    assert record.files[0].key not in sink.staged


def test_a_transaction_cannot_begin_twice_in_one_process_and_coordinates_are_checked() -> None:
    sink = ListSink()
    sink.begin_transaction(1, 0, 1, 1)
    with pytest.raises(IllegalTransactionState, match="already open"):
        sink.begin_transaction(1, 0, 1, 1)
    sink.begin_transaction(1, 0, 2, 1)  # another attempt is another transaction
    with pytest.raises(ValueError, match="invalid transaction coordinates"):
        sink.begin_transaction(0, 0, 1, 1)
    with pytest.raises(ValueError):
        sink.begin_transaction(1, -1, 1, 1)


def test_invalid_sink_uid_is_refused() -> None:
    with pytest.raises(ValueError, match="sink uid"):
        ListSink(uid="../etc")


# -- commit --------------------------------------------------------------------------------------
def test_commit_is_idempotent() -> None:
    sink = ListSink()
    record = epoch(sink, 1, [1, 2, 3])
    assert sink.commit([record]) == (1,)
    assert sink.commit([record]) == ()
    assert sink.recover_and_commit([record]) == ()
    assert sink.visible() == [1, 2, 3]


def test_commit_groups_subtasks_and_orders_checkpoints() -> None:
    sink = ListSink()
    records = [
        epoch(sink, 2, [20], subtask=1),
        epoch(sink, 1, [10], subtask=1),
        epoch(sink, 1, [11], subtask=0),
    ]
    assert sink.commit(records) == (1, 2)
    assert sink.commit_calls == [1, 2]
    assert [r.subtask for r in sink.log[1]] == [0, 1]
    assert sink.visible() == [11, 10, 20]


def test_records_of_another_sink_are_refused() -> None:
    sink = ListSink("a")
    other = epoch(ListSink("b"), 1, [1])
    with pytest.raises(SinkCommitError, match="sink 'b' given to sink 'a'"):
        sink.commit([other])
    with pytest.raises(SinkCommitError):
        sink.abort(other)


def test_two_attempts_of_one_subtask_in_one_commit_are_refused() -> None:
    sink = ListSink()
    zombie, real = epoch(sink, 1, [1], attempt=1), epoch(sink, 1, [1], attempt=2)
    with pytest.raises(SinkCommitError, match="several records for one sink subtask"):
        sink.commit([zombie, real])
    assert sink.visible() == []


def test_records_of_two_generations_in_one_checkpoint_are_refused() -> None:
    sink = ListSink()
    with pytest.raises(SinkCommitError, match="several generations"):
        group_by_checkpoint([epoch(sink, 1, [1], subtask=0, gen=1), epoch(sink, 1, [2], subtask=1, gen=2)])


def test_abort_of_a_committed_record_keeps_its_data() -> None:
    sink = ListSink()
    record = epoch(sink, 1, [5])
    sink.commit([record])
    sink.recover_and_abort(record)
    assert sink.visible() == [5]


def test_failed_commit_leaves_transaction_pre_committed_for_a_retry() -> None:
    sink = ListSink()
    txn = sink.begin_transaction(1, 0, 1, 1)
    sink.write(txn, [1])
    record = sink.pre_commit(txn)
    sink.log[1] = (PreCommittedTxn("out", 1, 9, 1, 1),)  # someone else committed other records
    with pytest.raises(SinkCommitConflict):
        sink.commit([record])
    assert state(txn) is TransactionState.PRE_COMMITTED


# -- the notify helper ---------------------------------------------------------------------------
def test_commit_pending_transactions_commits_up_to_n_in_order() -> None:
    sink = ListSink()
    records = [epoch(sink, n, [n]) for n in (3, 1, 2, 4)]
    report = commit_pending_transactions(sink, records, up_to=3)
    assert report.committed == (1, 2, 3)
    assert report.already_committed == ()
    assert sink.visible() == [1, 2, 3]
    again = commit_pending_transactions(sink, records, up_to=4)
    assert again.committed == (4,)
    assert again.already_committed == (1, 2, 3)
    assert sink.commit_calls == [1, 2, 3, 4]


def test_crash_mid_sink_commit_then_recover_and_commit_finishes_exactly_once() -> None:
    staged: dict[str, list[int]] = {}
    sink = ListSink(staged=staged)
    records = [epoch(sink, n, [n * 10, n * 10 + 1]) for n in (1, 2, 3)]
    with pytest.raises(SimulatedCrash) as crash:
        commit_pending_transactions(sink, records, 3, kill=KillAt(killpoints.MID_SINK_COMMIT))
    assert crash.value.checkpoint_id == 1
    assert sink.visible() == [10, 11]
    # a new process over the same storage: no live transactions, only the records
    restarted = ListSink(staged=staged)
    restarted.log = dict(sink.log)
    assert restarted.recover_and_commit(records) == (2, 3)
    assert restarted.visible() == [10, 11, 20, 21, 30, 31]
    assert commit_pending_transactions(restarted, records, 3).committed == ()


def test_no_kill_when_only_one_checkpoint_is_committed() -> None:
    sink = ListSink()
    kill = KillAt(killpoints.MID_SINK_COMMIT)
    commit_pending_transactions(sink, [epoch(sink, 1, [1])], 1, kill=kill)
    assert not kill.fired


# -- records are data: they travel in acks and metadata ------------------------------------------
def test_record_round_trips_through_json_and_an_ack_document() -> None:
    record = PreCommittedTxn(
        "out", 4, 2, 3, 1, (StateHandle("job/sinks/out/txn-0000000004/x", 10, "blake3:" + "ab" * 32),), 5
    )
    assert PreCommittedTxn.from_json(record.to_json()) == record
    ack = AckRecord(4, TaskId("out", 2), 1, 3, record.files, snapshot=sink_snapshot([record]))
    decoded = decode_document(encode_document("ack", ack), "ack", AckRecord, key="k")
    assert records_from_snapshot(decoded.snapshot) == (record,)
    assert records_from_snapshot({}) == ()


@pytest.mark.parametrize(
    "bad",
    [
        {SNAPSHOT_KEY: "nope"},
        {
            SNAPSHOT_KEY: [
                {"sink_uid": "out", "checkpoint_id": "1", "subtask": 0, "attempt": 1, "generation": 1}
            ]
        },
        {
            SNAPSHOT_KEY: [
                {"sink_uid": "out", "checkpoint_id": 1, "subtask": 0, "attempt": 1, "generation": True}
            ]
        },
        {SNAPSHOT_KEY: [{"checkpoint_id": 1, "subtask": 0, "attempt": 1, "generation": 1}]},
        {
            SNAPSHOT_KEY: [
                {
                    "sink_uid": "o",
                    "checkpoint_id": 1,
                    "subtask": 0,
                    "attempt": 1,
                    "generation": 1,
                    "files": [{"key": "k", "size": "1", "sha256": "x"}],
                }
            ]
        },
    ],
)
def test_malformed_sink_snapshot_is_a_clear_error(bad: dict[str, object]) -> None:
    # one line naming the record and the field (through the codec since issue 19)
    with pytest.raises(
        ValueError, match=r"must be a list|pre-committed sink record is invalid \(.*field '\w+'"
    ) as info:
        records_from_snapshot(bad)
    assert "\n" not in str(info.value)
