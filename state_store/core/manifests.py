"""The JSON documents of the checkpoint protocol (all versioned and self-checksummed, see codec).

| document          | key (layout)                       | written by   | how          |
|-------------------|------------------------------------|--------------|--------------|
| JobRecord         | ``_job.json``                      | coordinator  | create / CAS |
| PendingRecord     | ``chk-n/_pending.json``            | trigger      | create-only (allocates id n) |
| AttemptRecord     | ``chk-n/attempts/<a>.json``        | run_epoch    | create-only (allocates attempt a) |
| AckRecord         | ``chk-n/acks/<uid>/<st>-g<g>-a<a>``| subtask      | create-only  |
| DeclineRecord     | ``chk-n/declines/...``             | subtask      | create-only  |
| CompletedMetadata | ``chk-n/_metadata.json``           | complete     | create-only (the commit point) |
| DecisionRecord    | ``chk-n/_decision.json``           | complete     | create-only, once: COMPLETE/ABORT |
| LatestPointer     | ``LATEST``                         | complete     | CAS, never backwards |

Every referenced data file appears as a :class:`StateHandle` with its byte size and checksum
(``"<algorithm>:<hex>"``: BLAKE3 since format version 2 of ``ack`` and ``metadata``, SHA-256 in the
``"sha256"`` field of version 1, still read; see ``state_store.core.checksums``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from state_store.core import checksums
from state_store.core.codec import ManifestError, from_jsonable, read_older_spelling
from state_store.core.failures import CheckpointFailureReason
from state_store.core.positions import BarrierPositions
from state_store.core.properties import CheckpointProperties
from state_store.core.task_parts import TaskParts


@dataclass(frozen=True, slots=True, order=True)
class TaskId:
    """One subtask of one operator that must acknowledge: ``uid`` x ``subtask``."""

    uid: str
    subtask: int

    def __str__(self) -> str:
        return f"{self.uid}/{self.subtask}"


@dataclass(frozen=True, slots=True)
class StateHandle:
    """A data file (state, channel-state or staged sink file): its key (relative to the store
    root), byte size and the checksum its writer computed, ``"<algorithm>:<hex>"``
    (``state_store.core.checksums``: ``blake3:...`` for files written by this version,
    ``sha256:...`` for older ones). A malformed checksum is refused (a ``ValueError`` naming the
    file), so a decoded document never carries one."""

    key: str
    size: int
    checksum: str

    def __post_init__(self) -> None:
        try:
            checksums.parse(self.checksum)
        except checksums.ChecksumError as exc:
            raise checksums.ChecksumError(f"state file {self.key}: {exc}") from None

    @property
    def algorithm(self) -> str:
        """``blake3`` or ``sha256``: what verifies the file."""
        return self.checksum.partition(":")[0]

    def to_json(self) -> dict[str, Any]:
        """The handle as the ``snapshot`` parts of acks spell it (``from_json`` reads it back)."""
        return {"key": self.key, "size": self.size, "checksum": self.checksum}

    @classmethod
    def from_json(cls, value: Any, *, what: str = "state file handle") -> StateHandle:
        """A handle from its JSON object, either spelling (``checksum``, or a format-1 ``sha256``);
        a ManifestError naming ``what`` if it is invalid."""
        return from_jsonable(cls, value, what=what)


def _handle_of_format_1(value: dict[str, Any]) -> dict[str, Any]:
    """``{"key", "size", "sha256": "<hex>"}`` (format 1) -> ``{..., "checksum": "sha256:<hex>"}``."""
    if "checksum" in value or "sha256" not in value:
        return value
    older = dict(value)
    digest = older.pop("sha256")
    older["checksum"] = f"{checksums.SHA256}:{digest}" if isinstance(digest, str) else digest
    return older


read_older_spelling(StateHandle, _handle_of_format_1)


@dataclass(frozen=True, slots=True)
class Lease:
    """The one actor allowed to change a job right now (``state_store.core.lease``).

    ``token`` is the fencing token: it grows with every new holder (and every re-acquisition), and
    every commit point compares it with the job record's, so a holder that lost its lease (a
    zombie) can change nothing. ``expires_ms`` moves forward with each heartbeat; past it, another
    actor may take the lease over."""

    holder: str
    token: int
    command: str
    acquired_ms: int
    renewed_ms: int
    expires_ms: int


@dataclass(frozen=True, slots=True)
class ChainHead:
    """The newest completed checkpoint of the job's chain: what the next epoch continues from.

    Set by the fenced compare-and-swap that commits a checkpoint (the commit point); ``attempt``
    and ``completed_ms`` are what a crashed committer's successor needs to write the COMPLETE
    decision and byte-identical ``_metadata.json`` (roll forward). ``base`` is the checkpoint this
    one continued (None: imported by a restore)."""

    checkpoint_id: int
    attempt: int
    completed_ms: int
    base: int | None = None


@dataclass(frozen=True, slots=True)
class JobRecord:
    """``_job.json``: the job's single point of linearization (create-only, then CAS only).

    * ``generation`` -- bumped by every restore (at its commit point); fences zombie acks/commits;
      ``restored_from`` -- the checkpoint the generation was restored from (0: never restored).
    * ``fencing_token`` -- the highest token ever issued; ``lease`` -- the current holder (None: free).
    * ``chained`` -- True when ``head`` is authoritative (records written before chains existed
      have False: recovery then uses the newest verifying ``_metadata.json``).
    * ``head`` -- the chain head (None: no completed checkpoint in this generation's chain).
    * ``restore_finished`` -- the restore's import whose follow-up is done (see the field).
    * ``parallelism`` -- the effective parallelism (0: the job definition's); ``declared_parallelism``
      -- the job definition's parallelism when ``parallelism`` was recorded, so a definition that
      changed since is recognised as a rescale.
    """

    job_id: str
    generation: int
    max_parallelism: int = 128
    fingerprint: str = ""
    created_ms: int = 0
    restored_from: int = 0
    fencing_token: int = 0
    lease: Lease | None = None
    chained: bool = False
    head: ChainHead | None = None
    parallelism: int = 0
    declared_parallelism: int = 0
    restore_finished: int = 0
    """The import (restore) whose follow-up steps are done (``spark_jobs.lifecycle.restore.finish_restore``):
    they run once, so a stop or an unpin made after the restore stands."""


@dataclass(frozen=True, slots=True)
class PendingRecord:
    checkpoint_id: int
    job_id: str
    generation: int
    owner: str
    trigger_ms: int
    deadline_ms: int
    properties: CheckpointProperties
    expected: tuple[TaskId, ...]
    positions: dict[str, Any] = field(default_factory=dict)
    master_states: dict[str, Any] = field(default_factory=dict)
    request_id: str = ""
    parallelism: int = 0
    """The parallelism the epoch runs at (0: the job definition's); committed into the job record
    with the checkpoint, so a rescale sticks."""
    declared_parallelism: int = 0
    """The job definition's parallelism when the epoch was triggered (see JobRecord)."""
    wall_trigger_ms: int = 0
    """Wall-clock time of the trigger (0: not recorded -- older records, or no wall clock given).
    ``trigger_ms`` is the epoch's logical time (an Airflow run's data-interval end, a simulated
    clock): durations are measured on the wall clock, positions and pauses on the logical one."""

    @property
    def barrier(self) -> BarrierPositions:
        """``positions`` as a typed value (``state_store.core.positions``)."""
        return BarrierPositions.of(self.positions, what=f"checkpoint {self.checkpoint_id} positions")


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    checkpoint_id: int
    attempt: int
    generation: int
    started_ms: int
    owner: str


@dataclass(frozen=True, slots=True)
class AckRecord:
    checkpoint_id: int
    task: TaskId
    generation: int
    attempt: int
    handles: tuple[StateHandle, ...] = ()
    metrics: dict[str, Any] = field(default_factory=dict)
    snapshot: dict[str, Any] = field(default_factory=dict)

    @property
    def parts(self) -> TaskParts:
        """``snapshot`` as typed parts (``state_store.core.task_parts``)."""
        return TaskParts.of(self.snapshot, what=f"ack of {self.task} for checkpoint {self.checkpoint_id}")


@dataclass(frozen=True, slots=True)
class AckBundleEntry:
    """One ack document exactly as a task wrote it, with the version the store gave that write."""

    key: str
    version: str
    document: str


@dataclass(frozen=True, slots=True)
class AckBundleRecord:
    """The acks one epoch run wrote, gathered by its driver into one document (a read cache).

    Invariant: an entry stands for the ack document at ``key`` only while the store still reports
    ``version`` for it; the ack documents stay the protocol's source of truth (see ``ack_bundles``).
    """

    checkpoint_id: int
    generation: int
    attempt: int
    acks: tuple[AckBundleEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class DeclineRecord:
    checkpoint_id: int
    task: TaskId
    generation: int
    attempt: int
    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class TaskSnapshot:
    """What one acknowledged subtask contributed to a completed checkpoint."""

    task: TaskId
    attempt: int
    handles: tuple[StateHandle, ...]
    metrics: dict[str, Any]
    snapshot: dict[str, Any]

    @property
    def parts(self) -> TaskParts:
        """``snapshot`` as typed parts (``state_store.core.task_parts``)."""
        return TaskParts.of(self.snapshot, what=f"snapshot of {self.task}")


@dataclass(frozen=True, slots=True)
class CompletedMetadata:
    checkpoint_id: int
    job_id: str
    generation: int
    properties: CheckpointProperties
    trigger_ms: int
    completed_ms: int
    tasks: tuple[TaskSnapshot, ...]
    positions: dict[str, Any] = field(default_factory=dict)
    master_states: dict[str, Any] = field(default_factory=dict)
    wall_trigger_ms: int = 0
    """Wall-clock time of the trigger (the pending record's; 0: not recorded)."""
    wall_completed_ms: int = 0
    """Wall-clock time of the COMPLETE decision (the decision's ``wall_decided_ms``; 0: not
    recorded). ``wall_completed_ms - wall_trigger_ms`` is the checkpoint's true duration in both
    clock modes; ``completed_ms - trigger_ms`` is logical (0 when the epoch's clock stands still)."""

    @property
    def barrier(self) -> BarrierPositions:
        """``positions`` as a typed value (``state_store.core.positions``)."""
        return BarrierPositions.of(self.positions, what=f"checkpoint {self.checkpoint_id} positions")

    @property
    def handles(self) -> tuple[StateHandle, ...]:
        return tuple(h for t in self.tasks for h in t.handles)

    @property
    def state_size(self) -> int:
        return sum(h.size for h in self.handles)


class Outcome(enum.Enum):
    COMPLETE = "complete"
    ABORT = "abort"


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """The single, create-only commit/abort decision of checkpoint n (see layout docstring).

    COMPLETE fixes the attempt whose acks form the checkpoint and the completion time, so a
    coordinator that crashed after deciding rebuilds byte-identical ``_metadata.json``.
    """

    checkpoint_id: int
    outcome: Outcome
    decided_ms: int
    attempt: int = 0
    reason: str = ""
    message: str = ""
    wall_decided_ms: int = 0
    """Wall-clock time of the decision (0: not recorded); ``decided_ms`` is the logical time."""

    def abort_reason(self) -> CheckpointFailureReason:
        """``reason`` (stored by name) of an ABORT decision as the enum. A name this version does
        not know (a tampered or newer document), or a COMPLETE decision, is a ManifestError."""
        try:
            if self.outcome is Outcome.ABORT:
                return CheckpointFailureReason[self.reason]
        except KeyError:
            pass
        raise ManifestError(
            f"decision of checkpoint {self.checkpoint_id} ({self.outcome.name}) names no known failure "
            f"reason ({self.reason!r}): restore from an earlier checkpoint or a savepoint"
        )


@dataclass(frozen=True, slots=True)
class QuarantineRecord:
    checkpoint_id: int
    message: str
    quarantined_ms: int


@dataclass(frozen=True, slots=True)
class LatestPointer:
    checkpoint_id: int
    generation: int
    metadata_key: str
    metadata_sha256: str
    updated_ms: int


@dataclass(frozen=True, slots=True)
class PinRecord:
    """``pins/<n>.json``: checkpoint n is kept by retention until unpinned."""

    checkpoint_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class StoppedRecord:
    """``_stopped.json``: the job was stopped with a savepoint; no epoch runs until a restore."""

    job_id: str
    savepoint: str
    location: str
    stopped_ms: int


KINDS: dict[type, str] = {
    JobRecord: "job",
    PendingRecord: "pending",
    AttemptRecord: "attempt",
    AckRecord: "ack",
    AckBundleRecord: "ack_bundle",
    DeclineRecord: "decline",
    CompletedMetadata: "metadata",
    DecisionRecord: "decision",
    QuarantineRecord: "quarantine",
    LatestPointer: "latest",
    StoppedRecord: "stopped",
    PinRecord: "pin",
}
