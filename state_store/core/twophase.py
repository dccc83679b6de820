"""Two-phase-commit sinks (seed 001, Flink's ``TwoPhaseCommitSinkFunction``), pure protocol part.

A sink publishes the output of epoch *n* only after checkpoint *n* completed, so a replayed epoch
never publishes twice and an aborted one never publishes at all. Ordered steps::

    subtask (run_epoch)                              coordinator (notify_checkpoint_complete)
    1. begin_transaction(n, subtask, attempt, gen)
    2. write(txn, batch) ...          (buffered)
    3. pre_commit(txn) -> PreCommittedTxn            (files staged, not visible to readers)
    4. the record travels in the subtask's ack       5. checkpoint n completes (_metadata.json)
       (``AckRecord.snapshot[SNAPSHOT_KEY]``)        6. commit_pending_transactions(sink, records
                                                        of every completed, uncommitted m <= n)
                                                        -> commit(records of m), in order of m
    on failure: abort(txn | record); on restore: recover_and_commit(records of the restored
    checkpoint) first, then recover_and_abort(records of abandoned attempts)

Transaction lifecycle (any other call raises :class:`IllegalTransactionState`)::

    OPEN --pre_commit--> PRE_COMMITTED --commit--> COMMITTED
      |                       |
      +--------abort----------+------------------> ABORTED
      |
      +--error while mutating (write, pre_commit)--> FAILED --abort--> ABORTED

Invariants:

* ``commit`` is idempotent: committing the same records again (after a lost response, a crash in
  the middle, or from a second coordinator) changes nothing. A commit that raises leaves the
  in-process transaction PRE_COMMITTED, so it can be retried.
* The records of one checkpoint are committed together (all subtasks of the sink at once):
  implementations make them visible with one atomic write.
* Checkpoints are committed in ascending id; a crash between two leaves a prefix committed
  (kill point ``mid_sink_commit``) and the next notify or ``recover_and_commit`` finishes it.
* Abort never removes data a commit made visible.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from state_store.core import killpoints
from state_store.core.codec import from_jsonable, to_jsonable
from state_store.core.layout import validate_name
from state_store.core.manifests import CompletedMetadata, StateHandle
from state_store.core.ports import NO_KILL, KillSwitch
from state_store.core.task_parts import SINK_TRANSACTIONS

B = TypeVar("B")

SNAPSHOT_KEY = SINK_TRANSACTIONS
"""Key of ``AckRecord.snapshot`` holding the list of a subtask's pre-committed sink records."""


class TransactionState(enum.Enum):
    OPEN = "open"
    PRE_COMMITTED = "pre_committed"
    COMMITTED = "committed"
    ABORTED = "aborted"
    FAILED = "failed"


_NEXT: dict[TransactionState, frozenset[TransactionState]] = {
    TransactionState.OPEN: frozenset(
        {TransactionState.PRE_COMMITTED, TransactionState.ABORTED, TransactionState.FAILED}
    ),
    TransactionState.PRE_COMMITTED: frozenset({TransactionState.COMMITTED, TransactionState.ABORTED}),
    TransactionState.FAILED: frozenset({TransactionState.ABORTED}),
    TransactionState.COMMITTED: frozenset(),
    TransactionState.ABORTED: frozenset(),
}


class IllegalTransactionState(RuntimeError):
    """A lifecycle call in the wrong state (a bug in the caller, not a data problem)."""


class SinkCommitError(RuntimeError):
    """A commit that must not happen: staged files missing, records of mixed sinks/checkpoints."""


class SinkCommitConflict(SinkCommitError):
    """Checkpoint n is already committed with other files (a fenced zombie tried to commit)."""


class FencedTransactionError(SinkCommitError):
    """A record of an older generation than the sink's newest one (a zombie after a restore)."""


@dataclass(frozen=True, slots=True, order=True)
class TxnId:
    """Identity of one transaction: one sink subtask's output of one checkpoint attempt."""

    sink_uid: str
    checkpoint_id: int
    subtask: int
    attempt: int
    generation: int

    def __str__(self) -> str:
        return (
            f"sink {self.sink_uid} checkpoint {self.checkpoint_id} subtask {self.subtask} "
            f"(generation {self.generation}, attempt {self.attempt})"
        )


@dataclass(frozen=True, slots=True)
class PreCommittedTxn:
    """A pre-committed transaction: its staged files (key, size, checksum) and row count.

    JSON-serializable (:meth:`to_json` / :meth:`from_json`); it is part of the checkpoint.
    """

    sink_uid: str
    checkpoint_id: int
    subtask: int
    attempt: int
    generation: int
    files: tuple[StateHandle, ...] = ()
    rows: int = 0

    @property
    def txn_id(self) -> TxnId:
        return TxnId(self.sink_uid, self.checkpoint_id, self.subtask, self.attempt, self.generation)

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = to_jsonable(self)
        return value

    @classmethod
    def from_json(cls, value: Any) -> PreCommittedTxn:
        """Parse :meth:`to_json` output (the codec's reflective decoder); a ManifestError (a
        ValueError) naming the bad field otherwise."""
        return from_jsonable(cls, value, what="pre-committed sink record")


class Transaction(Generic[B]):
    """One open transaction of a sink subtask (in-process, mutable; the guard lives here)."""

    __slots__ = ("batches", "error", "id", "record", "staged", "state")

    def __init__(self, txn_id: TxnId) -> None:
        self.id = txn_id
        self.state = TransactionState.OPEN
        self.batches: list[B] = []
        self.staged: list[str] = []  # keys written so far (an abort after a failed pre-commit)
        self.record: PreCommittedTxn | None = None
        self.error: BaseException | None = None

    def require(self, *states: TransactionState) -> None:
        if self.state not in states:
            hint = " (it failed earlier: abort it and begin a new one)" if self.failed else ""
            raise IllegalTransactionState(
                f"transaction of {self.id} is {self.state.value}, expected "
                f"{' or '.join(s.value for s in states)}{hint}"
            )

    def move_to(self, state: TransactionState) -> None:
        if state not in _NEXT[self.state]:
            raise IllegalTransactionState(
                f"transaction of {self.id} cannot go from {self.state.value} to {state.value}"
            )
        self.state = state

    @contextmanager
    def mutating(self, *states: TransactionState) -> Iterator[None]:
        """Guard a mutation: refuse it in the wrong state; any error moves the txn to FAILED."""
        self.require(*states)
        try:
            yield
        except BaseException as exc:
            self.state = TransactionState.FAILED
            self.error = exc
            raise

    @property
    def failed(self) -> bool:
        return self.state is TransactionState.FAILED


class TransactionalSink(abc.ABC, Generic[B]):
    """Template of a two-phase-commit sink; subclasses implement the ``_``-prefixed hooks.

    The public methods enforce the lifecycle; the hooks do the storage work and must be
    idempotent (``_commit_checkpoint``, ``_discard``) since every step may be retried.
    """

    stages_in_job_store: bool = True
    """Whether the files of this sink's records are keys of the job's ObjectStore. The runtime then
    lists them in the sink's ack, so completion and restore verify them like state files; a sink
    that stages elsewhere (a Delta table's own folder) sets False and verifies them at commit."""

    def __init__(self, uid: str) -> None:
        self.uid = validate_name("sink uid", uid)
        self._live: dict[TxnId, Transaction[B]] = {}

    # -- subtask side ----------------------------------------------------------------------
    def begin_transaction(
        self, checkpoint_id: int, subtask: int, attempt: int, generation: int
    ) -> Transaction[B]:
        if checkpoint_id < 1 or subtask < 0 or attempt < 0 or generation < 0:
            raise ValueError(
                f"sink {self.uid}: invalid transaction coordinates checkpoint={checkpoint_id} "
                f"subtask={subtask} attempt={attempt} generation={generation}"
            )
        txn_id = TxnId(self.uid, checkpoint_id, subtask, attempt, generation)
        if txn_id in self._live:
            raise IllegalTransactionState(
                f"transaction of {txn_id} is already {self._live[txn_id].state.value} in this process"
            )
        txn: Transaction[B] = Transaction(txn_id)
        self._live[txn_id] = txn
        return txn

    def write(self, txn: Transaction[B], batch: B) -> None:
        with txn.mutating(TransactionState.OPEN):
            self._write(txn, batch)

    def pre_commit(self, txn: Transaction[B]) -> PreCommittedTxn:
        """Stage the transaction's data durably; return the record to put in the ack."""
        with txn.mutating(TransactionState.OPEN):
            record = self._pre_commit(txn)
            txn.record = record
            txn.batches.clear()
            txn.move_to(TransactionState.PRE_COMMITTED)
        return record

    # -- coordinator side ------------------------------------------------------------------
    def commit(self, records: Sequence[PreCommittedTxn]) -> tuple[int, ...]:
        """Commit ``records`` (all subtasks of each checkpoint at once) in checkpoint order.

        Idempotent. Returns the ids that this call newly committed (already committed ones are
        skipped silently; a different earlier commit raises :class:`SinkCommitConflict`).
        """
        newly: list[int] = []
        for checkpoint_id, group in group_by_checkpoint(records, self.uid).items():
            for record in group:
                live = self._live.get(record.txn_id)
                if live is not None:
                    live.require(TransactionState.PRE_COMMITTED, TransactionState.COMMITTED)
            if self._commit_checkpoint(checkpoint_id, group):
                newly.append(checkpoint_id)
            for record in group:
                self._finish(record.txn_id, TransactionState.COMMITTED)
        return tuple(newly)

    def recover_and_commit(self, records: Sequence[PreCommittedTxn]) -> tuple[int, ...]:
        """Commit records restored from a completed checkpoint (no in-process transaction)."""
        return self.commit(records)

    def abort(self, txn: Transaction[B] | PreCommittedTxn) -> None:
        """Discard a transaction's staged files (never files a commit made visible)."""
        if isinstance(txn, PreCommittedTxn):
            self._check_uid(txn)
            live = self._live.get(txn.txn_id)
            if live is None:
                self._discard(txn.txn_id, [h.key for h in txn.files])
                return
            txn = live
        if txn.state is TransactionState.ABORTED:
            return
        txn.require(TransactionState.OPEN, TransactionState.PRE_COMMITTED, TransactionState.FAILED)
        keys = [h.key for h in txn.record.files] if txn.record is not None else []
        self._discard(txn.id, sorted(set(keys) | set(txn.staged)))
        txn.batches.clear()
        self._finish(txn.id, TransactionState.ABORTED)

    def recover_and_abort(self, record: PreCommittedTxn) -> None:
        """Abort a record restored from storage (a zombie's or an abandoned attempt's)."""
        self.abort(record)

    def state_of(self, txn_id: TxnId) -> TransactionState | None:
        """The in-process state of a live transaction (None once committed/aborted or unknown)."""
        live = self._live.get(txn_id)
        return None if live is None else live.state

    @abc.abstractmethod
    def committed_checkpoint_ids(self) -> AbstractSet[int]:
        """Ids of the checkpoints whose transactions are committed (visible). Callers only test
        membership (and may iterate): a sink may answer with a set view (``range``-backed) instead
        of materializing every id a long-running job ever committed."""

    # -- hooks -----------------------------------------------------------------------------
    @abc.abstractmethod
    def _write(self, txn: Transaction[B], batch: B) -> None:
        """Buffer or stage ``batch`` (``txn.batches`` is there for buffering)."""

    @abc.abstractmethod
    def _pre_commit(self, txn: Transaction[B]) -> PreCommittedTxn:
        """Write the staged files (append each key to ``txn.staged`` before writing it)."""

    @abc.abstractmethod
    def _commit_checkpoint(self, checkpoint_id: int, records: tuple[PreCommittedTxn, ...]) -> bool:
        """Make checkpoint n's records visible atomically; False if it already was (same files)."""

    @abc.abstractmethod
    def _discard(self, txn_id: TxnId, keys: Sequence[str]) -> None:
        """Delete the staged ``keys`` of ``txn_id`` except those a commit made visible."""

    # -- helpers ---------------------------------------------------------------------------
    def _finish(self, txn_id: TxnId, state: TransactionState) -> None:
        live = self._live.pop(txn_id, None)
        if live is not None and live.state is not state:
            live.move_to(state)

    def _check_uid(self, record: PreCommittedTxn) -> None:
        if record.sink_uid != self.uid:
            raise SinkCommitError(f"record of sink {record.sink_uid!r} given to sink {self.uid!r}")


def group_by_checkpoint(
    records: Iterable[PreCommittedTxn], sink_uid: str | None = None
) -> dict[int, tuple[PreCommittedTxn, ...]]:
    """Records grouped by checkpoint id, ascending; inside a group sorted by subtask.

    Raises :class:`SinkCommitError` if ``sink_uid`` is given and a record belongs to another sink,
    or if one checkpoint has two records for the same subtask (two attempts: only the one the
    checkpoint completed with may be committed) or records of different generations.
    """
    groups: dict[int, list[PreCommittedTxn]] = {}
    for record in records:
        if sink_uid is not None and record.sink_uid != sink_uid:
            raise SinkCommitError(f"record of sink {record.sink_uid!r} given to sink {sink_uid!r}")
        groups.setdefault(record.checkpoint_id, []).append(record)
    out: dict[int, tuple[PreCommittedTxn, ...]] = {}
    for checkpoint_id in sorted(groups):
        group = sorted(set(groups[checkpoint_id]), key=lambda r: (r.sink_uid, r.subtask, r.attempt))
        seen = [(r.sink_uid, r.subtask) for r in group]
        if len(seen) != len(set(seen)):
            raise SinkCommitError(
                f"checkpoint {checkpoint_id} has several records for one sink subtask "
                f"({[str(r.txn_id) for r in group]}); pass only those of the attempt it completed with"
            )
        if len({(r.sink_uid, r.generation) for r in group}) != len({r.sink_uid for r in group}):
            raise SinkCommitError(f"checkpoint {checkpoint_id} has records of several generations")
        out[checkpoint_id] = tuple(group)
    return out


@dataclass(frozen=True, slots=True)
class SinkCommitReport:
    """What :func:`commit_pending_transactions` did: ids newly committed, ids already committed."""

    committed: tuple[int, ...]
    already_committed: tuple[int, ...]


def commit_pending_transactions(
    sink: TransactionalSink[Any],
    records: Iterable[PreCommittedTxn],
    up_to: int,
    *,
    kill: KillSwitch = NO_KILL,
) -> SinkCommitReport:
    """The notify step of one sink: commit every record of checkpoints ``<= up_to``, in order.

    ``records`` are the sink's pre-committed records of completed checkpoints (from
    ``CompletedMetadata`` via :func:`records_from_metadata`); records of already committed
    checkpoints are skipped. The kill point ``mid_sink_commit`` fires after the first commit when
    several checkpoints are committed. Re-running after a crash finishes the rest.
    """
    groups = {n: g for n, g in group_by_checkpoint(records, sink.uid).items() if n <= up_to}
    done = sink.committed_checkpoint_ids()
    todo = [n for n in groups if n not in done]
    committed: list[int] = []
    for i, n in enumerate(todo):
        committed.extend(sink.commit(groups[n]))
        if i == 0 and len(todo) > 1:
            kill(killpoints.MID_SINK_COMMIT, n)
    already = tuple(n for n in groups if n not in committed)
    return SinkCommitReport(tuple(committed), already)


def sink_snapshot(records: Iterable[PreCommittedTxn]) -> dict[str, Any]:
    """The ``AckRecord.snapshot`` fragment carrying a subtask's pre-committed records."""
    return {SNAPSHOT_KEY: [r.to_json() for r in records]}


def records_from_snapshot(snapshot: Mapping[str, Any]) -> tuple[PreCommittedTxn, ...]:
    """Inverse of :func:`sink_snapshot` (an ack or task snapshot without sinks gives ())."""
    items = snapshot.get(SNAPSHOT_KEY, [])
    if not isinstance(items, list):
        raise ValueError(f"ack snapshot field {SNAPSHOT_KEY!r} must be a list, got {items!r}")
    return tuple(PreCommittedTxn.from_json(item) for item in items)


def records_from_metadata(
    metadata: CompletedMetadata, sink_uid: str | None = None
) -> tuple[PreCommittedTxn, ...]:
    """Every sink record of a completed checkpoint (of one sink if ``sink_uid`` is given).

    A subtask may carry records of older checkpoints it found uncommitted (as Flink's
    ``pendingCommitTransactions``); they keep their own checkpoint id.
    """
    found = (r for task in metadata.tasks for r in records_from_snapshot(task.snapshot))
    return tuple(r for r in found if sink_uid is None or r.sink_uid == sink_uid)
