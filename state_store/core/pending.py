"""PendingCheckpoint: a triggered checkpoint collecting acknowledgements (seed 002).

Lifecycle (any other call is refused with :class:`IllegalCheckpointState`)::

    PENDING --all expected tasks acked, finalize()--> COMPLETED
       \\------------------ abort(reason) ----------> ABORTED

``acknowledge`` never raises; it classifies the ack, as Flink's ``TaskAcknowledgeResult``:

* SUCCESS   -- an expected task of this generation and attempt, first ack.
* DUPLICATE -- the task already acked this checkpoint (ignored).
* UNKNOWN   -- not expected here: another checkpoint id, generation or attempt (a zombie), or a
               task that is not in the expected set. Its state is not referenced.
* DISCARDED -- the checkpoint is no longer pending (aborted or completed): a late ack.

Invariant: a PendingCheckpoint finalizes iff every expected task acked with SUCCESS.
"""

from __future__ import annotations

import enum

from state_store.core.failures import CheckpointFailureReason
from state_store.core.manifests import AckRecord, CompletedMetadata, PendingRecord, TaskId, TaskSnapshot


class AckResult(enum.Enum):
    SUCCESS = "success"
    DUPLICATE = "duplicate"
    UNKNOWN = "unknown"
    DISCARDED = "discarded"


class PendingState(enum.Enum):
    PENDING = "pending"
    COMPLETED = "completed"
    ABORTED = "aborted"


class IllegalCheckpointState(RuntimeError):
    """A lifecycle call in the wrong state (a bug in the caller, not a data problem)."""


class PendingCheckpoint:
    """In-memory view of one pending checkpoint of one attempt."""

    def __init__(self, record: PendingRecord, attempt: int) -> None:
        self.record = record
        self.attempt = attempt
        self._expected = frozenset(record.expected)
        self._acks: dict[TaskId, AckRecord] = {}
        self.state = PendingState.PENDING
        self.failure: tuple[CheckpointFailureReason, str] | None = None

    @property
    def checkpoint_id(self) -> int:
        return self.record.checkpoint_id

    @property
    def not_yet_acknowledged(self) -> frozenset[TaskId]:
        return self._expected - self._acks.keys()

    @property
    def acknowledged(self) -> dict[TaskId, AckRecord]:
        return dict(self._acks)

    @property
    def is_fully_acknowledged(self) -> bool:
        return self.state is PendingState.PENDING and not self.not_yet_acknowledged

    def is_expired(self, now_ms: int) -> bool:
        return now_ms > self.record.deadline_ms

    def acknowledge(self, ack: AckRecord) -> AckResult:
        if self.state is not PendingState.PENDING:
            return AckResult.DISCARDED
        if (
            ack.checkpoint_id != self.checkpoint_id
            or ack.generation != self.record.generation
            or ack.attempt != self.attempt
            or ack.task not in self._expected
        ):
            return AckResult.UNKNOWN
        if ack.task in self._acks:
            return AckResult.DUPLICATE
        self._acks[ack.task] = ack
        return AckResult.SUCCESS

    def abort(self, reason: CheckpointFailureReason, message: str = "") -> bool:
        """Move to ABORTED; False if already aborted. Aborting a completed checkpoint is a bug."""
        if self.state is PendingState.COMPLETED:
            raise IllegalCheckpointState(
                f"checkpoint {self.checkpoint_id} is completed; it cannot be aborted"
            )
        if self.state is PendingState.ABORTED:
            return False
        self.state = PendingState.ABORTED
        self.failure = (reason, message)
        return True

    def finalize(self, completed_ms: int, wall_completed_ms: int = 0) -> CompletedMetadata:
        """Build the completed checkpoint's metadata; only when fully acknowledged.
        ``wall_completed_ms``: the wall-clock time of the decision (0: not recorded)."""
        if self.state is not PendingState.PENDING:
            raise IllegalCheckpointState(
                f"checkpoint {self.checkpoint_id} is {self.state.value}, not pending"
            )
        missing = self.not_yet_acknowledged
        if missing:
            raise IllegalCheckpointState(
                f"checkpoint {self.checkpoint_id} cannot finalize: no ack from {sorted(map(str, missing))}"
            )
        tasks = tuple(
            TaskSnapshot(task=t, attempt=a.attempt, handles=a.handles, metrics=a.metrics, snapshot=a.snapshot)
            for t, a in sorted(self._acks.items())
        )
        rec = self.record
        self.state = PendingState.COMPLETED
        return CompletedMetadata(
            checkpoint_id=rec.checkpoint_id,
            job_id=rec.job_id,
            generation=rec.generation,
            properties=rec.properties,
            trigger_ms=rec.trigger_ms,
            completed_ms=completed_ms,
            tasks=tasks,
            positions=rec.positions,
            master_states=rec.master_states,
            wall_trigger_ms=rec.wall_trigger_ms,
            wall_completed_ms=wall_completed_ms,
        )
