"""CheckpointCoordinator: trigger, collect acknowledgements, decide, complete (seeds 001, 002).

All protocol state lives in the ObjectStore; the coordinator object is a cache, so any process
can crash at any step and a new coordinator continues from storage alone. Two coordinators of the
same job may run at once: every contended step is a create-only write or a compare-and-swap.

trigger(expected, positions)
  1. pre-checks (skipped for forced triggers such as savepoints, except 1a and 1b):
     a. coordinator not shut down; b. job not failed (> tolerable consecutive failures);
     c. fewer than ``max_concurrent_checkpoints`` undecided checkpoints (expired ones are aborted
        first); d. ``min_pause_ms`` since the last completion; e. all expected tasks can run;
     f. new input exists.
  2. allocate id n = highest existing id + 1 by create-only write of ``chk-n/_pending.json``
     (a lost race moves on to n + 1): two coordinators can never own the same id.
  3. master hooks snapshot external state into the pending record.
complete(n)
  1. if ``_decision.json`` exists, follow it (roll a COMPLETE forward, report an ABORT);
  2. read the acks of the current attempt; classify each (SUCCESS/DUPLICATE/UNKNOWN/DISCARDED);
     a decline, the deadline, a size/SHA-256 mismatch, a newer generation or a failing gate
     decide ABORT;
  3. fully acknowledged: decide COMPLETE (create-only), write ``_metadata.json`` create-only,
     move ``LATEST`` by CAS (never backwards), subsume older pending checkpoints.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from state_store.core import documents, killpoints
from state_store.core.ack_bundles import AckRead, read_acks
from state_store.core.codec import ManifestError
from state_store.core.completed import (
    CheckpointVerificationError,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    RecoveryReport,
    load_completed,
    verify_handles,
)
from state_store.core.config import CheckpointConfig
from state_store.core.failures import CheckpointException, CheckpointFailureReason, JobFailedError
from state_store.core.layout import JobLayout
from state_store.core.manifests import (
    AckRecord,
    AttemptRecord,
    CompletedMetadata,
    DecisionRecord,
    DeclineRecord,
    JobRecord,
    LatestPointer,
    Outcome,
    PendingRecord,
    TaskId,
)
from state_store.core.parallel import read_concurrency
from state_store.core.pending import AckResult, PendingCheckpoint
from state_store.core.ports import (
    NO_KILL,
    Clock,
    KillSwitch,
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectStore,
    VersionMismatch,
)
from state_store.core.properties import CheckpointProperties

_ID_RACE_RETRIES = 16
#: Aborts that say nothing about the job's health (as Flink's CheckpointFailureManager ignores them).
_NOT_COUNTED = {CheckpointFailureReason.CHECKPOINT_SUBSUMED.name, CheckpointFailureReason.JOB_FAILOVER.name}
_CAS_RETRIES = 16


class MasterHook(Protocol):
    """User callback that snapshots external state with each checkpoint (seed 001)."""

    identifier: str

    def trigger_checkpoint(self, checkpoint_id: int, timestamp_ms: int) -> bytes | None: ...

    def restore_checkpoint(self, checkpoint_id: int, state: bytes | None) -> None: ...


#: A validation gate: given the metadata about to be committed, return None or a failure message.
Gate = Callable[[CompletedMetadata], str | None]


@dataclass(frozen=True, slots=True)
class CompletionResult:
    """Outcome of one ``complete`` call."""

    checkpoint_id: int
    status: str  # "completed" | "in_progress" | "aborted"
    acked: int
    expected: int
    reason: CheckpointFailureReason | None = None
    message: str = ""
    ack_results: dict[str, str] = field(default_factory=dict)
    checkpoint: CompletedCheckpoint | None = None


class CheckpointCoordinator:
    """The coordinator of one job over an ObjectStore (see module docstring for the steps)."""

    def __init__(
        self,
        store: ObjectStore,
        job_id: str,
        *,
        clock: Clock,
        config: CheckpointConfig | None = None,
        kill: KillSwitch = NO_KILL,
        owner: str | None = None,
        master_hooks: Sequence[MasterHook] = (),
        max_parallelism: int = 128,
    ) -> None:
        self.store = store
        self.layout = JobLayout(job_id)
        self.clock = clock
        self.config = config or CheckpointConfig()
        self.kill = kill
        self.owner = owner or uuid.uuid4().hex
        self.master_hooks = tuple(master_hooks)
        self.max_parallelism = max_parallelism
        self._shutdown = False
        #: Reads in flight at once while completing (1 unless the store declares it can do more).
        self._reads = read_concurrency(store, self.config.read_concurrency)

    # -- job record and generation ---------------------------------------------------------
    def job(self) -> JobRecord:
        """Read ``_job.json``, creating generation 1 if the job is new."""
        record = documents.read_optional(self.store, self.layout.job_record, JobRecord)
        if record is not None:
            return record
        fresh = JobRecord(self.layout.job_id, 1, self.max_parallelism, created_ms=self.clock.now_ms())
        try:
            documents.create(self.store, self.layout.job_record, fresh)
        except ObjectAlreadyExists:
            pass
        return documents.read(self.store, self.layout.job_record, JobRecord)

    def bump_generation(self, restored_from: int) -> JobRecord:
        """Start a new generation (on restore): acks and commits of older ones are fenced."""
        self.job()
        for _ in range(_CAS_RETRIES):
            current, raw = documents.read_versioned(self.store, self.layout.job_record, JobRecord)
            bumped = JobRecord(
                current.job_id,
                current.generation + 1,
                current.max_parallelism,
                current.fingerprint,
                current.created_ms,
                restored_from,
            )
            try:
                self.store.put_if_match(self.layout.job_record, documents.encode(bumped), raw.version)
                return bumped
            except VersionMismatch:
                continue
        raise RuntimeError(f"job {self.layout.job_id}: could not bump the generation (constant contention)")

    def shutdown(self) -> None:
        self._shutdown = True

    # -- reading protocol state ------------------------------------------------------------
    def checkpoint_ids(self) -> list[int]:
        """Every allocated checkpoint id (a ``_pending.json`` exists), ascending."""
        ids = {
            self.layout.checkpoint_id_of(info.key)
            for info in self.store.list(self.layout.checkpoints_prefix)
            if info.key.endswith("/_pending.json")
        }
        return sorted(i for i in ids if i is not None)

    def pending_record(self, checkpoint_id: int) -> PendingRecord:
        try:
            return documents.read(self.store, self.layout.pending(checkpoint_id), PendingRecord)
        except ObjectNotFound:
            raise ObjectNotFound(
                f"checkpoint {checkpoint_id} of job {self.layout.job_id} does not exist in {self.store.uri}: "
                "it was never triggered or retention removed it (see `epochal checkpoints list`)"
            ) from None

    def decision(self, checkpoint_id: int) -> DecisionRecord | None:
        return documents.read_optional(self.store, self.layout.decision(checkpoint_id), DecisionRecord)

    def undecided_ids(self) -> list[int]:
        return [i for i in self.checkpoint_ids() if self.store.head(self.layout.decision(i)) is None]

    def current_attempt(self, checkpoint_id: int) -> int:
        """The highest registered attempt of checkpoint n (0 if none)."""
        attempts = [
            int(info.key.rsplit("/", 1)[1].split(".")[0])
            for info in self.store.list(self.layout.attempts_prefix(checkpoint_id))
        ]
        return max(attempts, default=0)

    def recover(self, *, deep: bool = False) -> tuple[CompletedCheckpointStore, RecoveryReport]:
        """Roll forward checkpoints decided COMPLETE but not yet written, then rebuild the
        completed store from storage alone."""
        for checkpoint_id in self.checkpoint_ids():
            decision = self.decision(checkpoint_id)
            decided_complete = decision is not None and decision.outcome is Outcome.COMPLETE
            if decided_complete and self.store.head(self.layout.metadata(checkpoint_id)) is None:
                self.complete(checkpoint_id)
        return CompletedCheckpointStore.recover(
            self.store, self.layout, self.config.retained_checkpoints, deep=deep
        )

    def failover(self) -> tuple[CompletedCheckpointStore, RecoveryReport]:
        """The whole job restarts: abort every undecided checkpoint (as Flink does on failover),
        roll forward the decided ones, and recover the completed store. A retry of one epoch's
        run (same checkpoint, new attempt) uses :meth:`start_attempt` instead."""
        for checkpoint_id in self.undecided_ids():
            self.abort(
                checkpoint_id, CheckpointFailureReason.JOB_FAILOVER, f"coordinator {self.owner} restarted"
            )
        return self.recover()

    def latest_completed(self) -> CompletedCheckpoint | None:
        completed, _ = CompletedCheckpointStore.recover(self.store, self.layout, 1)
        return completed.latest()

    def consecutive_failures(self) -> int:
        """Checkpoints of the current generation aborted since the newest completed one."""
        generation = self.job().generation
        count = 0
        for checkpoint_id in reversed(self.checkpoint_ids()):
            decision = self.decision(checkpoint_id)
            if decision is None:
                continue
            if decision.outcome is Outcome.COMPLETE:
                break
            pending = self.pending_record(checkpoint_id)
            if pending.generation != generation or pending.properties.savepoint:
                continue
            if decision.reason not in _NOT_COUNTED:
                count += 1
        return count

    # -- trigger -----------------------------------------------------------------------------
    def trigger(
        self,
        expected: Sequence[TaskId],
        *,
        properties: CheckpointProperties | None = None,
        positions: dict[str, Any] | None = None,
        has_new_input: bool = True,
        tasks_ready: bool = True,
        request_id: str = "",
    ) -> PendingRecord:
        """Allocate and record checkpoint n (see module docstring); raise CheckpointException
        with a pre-flight reason when refused, JobFailedError when the job has failed.

        ``request_id`` (e.g. the Airflow DAG run id) makes the call idempotent: a retry whose
        first try created the checkpoint but lost the response gets the same undecided checkpoint
        back instead of a second one (or a TOO_MANY_CONCURRENT_CHECKPOINTS refusal)."""
        props = properties or CheckpointProperties.checkpoint()
        if self._shutdown:
            raise CheckpointException(CheckpointFailureReason.COORDINATOR_SHUTDOWN)
        if request_id:
            for checkpoint_id in self.undecided_ids():
                existing = self.pending_record(checkpoint_id)
                if existing.request_id == request_id:
                    return existing
        job = self.job()
        failures = self.consecutive_failures()
        if failures > self.config.tolerable_failures:
            raise JobFailedError(
                f"job {job.job_id} failed: {failures} consecutive checkpoint failures exceed "
                f"tolerable_failures={self.config.tolerable_failures}; fix the cause, then restore "
                "from the latest checkpoint or a savepoint"
            )
        now = self.clock.now_ms()
        self.abort_expired()
        if not props.forced:
            undecided = self.undecided_ids()
            if len(undecided) >= self.config.max_concurrent_checkpoints:
                raise CheckpointException(
                    CheckpointFailureReason.TOO_MANY_CONCURRENT_CHECKPOINTS,
                    f"pending: {undecided}, "
                    f"max_concurrent_checkpoints={self.config.max_concurrent_checkpoints}",
                )
            latest = self.latest_completed()
            if latest is not None and now - latest.metadata.completed_ms < self.config.min_pause_ms:
                raise CheckpointException(
                    CheckpointFailureReason.MINIMUM_TIME_BETWEEN_CHECKPOINTS,
                    f"{now - latest.metadata.completed_ms} ms since checkpoint {latest.checkpoint_id}, "
                    f"min_pause_ms={self.config.min_pause_ms}",
                )
        if not tasks_ready or not expected:
            raise CheckpointException(CheckpointFailureReason.NOT_ALL_REQUIRED_TASKS_RUNNING)
        if not has_new_input and not props.forced:
            raise CheckpointException(CheckpointFailureReason.NO_NEW_INPUT)
        checkpoint_id = (max(self.checkpoint_ids(), default=0)) + 1
        for _ in range(_ID_RACE_RETRIES):
            master = self._snapshot_master_hooks(checkpoint_id, now)
            record = PendingRecord(
                checkpoint_id=checkpoint_id,
                job_id=self.layout.job_id,
                generation=job.generation,
                owner=self.owner,
                trigger_ms=now,
                deadline_ms=now + self.config.timeout_ms,
                properties=props,
                expected=tuple(sorted(set(expected))),
                positions=dict(positions or {}),
                master_states=master,
                request_id=request_id,
            )
            try:
                documents.create(self.store, self.layout.pending(checkpoint_id), record)
            except ObjectAlreadyExists:
                checkpoint_id += 1
                continue
            self.kill(killpoints.AFTER_PENDING, checkpoint_id)
            return record
        raise CheckpointException(CheckpointFailureReason.ID_ALLOCATION_FAILED)

    def _snapshot_master_hooks(self, checkpoint_id: int, now: int) -> dict[str, Any]:
        states: dict[str, Any] = {}
        for hook in self.master_hooks:
            data = hook.trigger_checkpoint(checkpoint_id, now)
            states[hook.identifier] = None if data is None else base64.b64encode(data).decode()
        return states

    def restore_master_hooks(self, checkpoint: CompletedCheckpoint) -> None:
        """Hand each master hook the state it snapshotted with ``checkpoint``."""
        for hook in self.master_hooks:
            encoded = checkpoint.metadata.master_states.get(hook.identifier)
            hook.restore_checkpoint(
                checkpoint.checkpoint_id, None if encoded is None else base64.b64decode(encoded)
            )

    # -- attempts (task side, one per run of the epoch) ---------------------------------------
    def start_attempt(self, checkpoint_id: int) -> AttemptRecord:
        """Register a new attempt of checkpoint n; acks of earlier attempts become UNKNOWN."""
        pending = self.pending_record(checkpoint_id)
        attempt = self.current_attempt(checkpoint_id) + 1
        for _ in range(_ID_RACE_RETRIES):
            record = AttemptRecord(
                checkpoint_id, attempt, pending.generation, self.clock.now_ms(), self.owner
            )
            try:
                documents.create(self.store, self.layout.attempt(checkpoint_id, attempt), record)
            except ObjectAlreadyExists:
                attempt += 1
                continue
            self.kill(killpoints.AFTER_ATTEMPT, checkpoint_id)
            return record
        raise RuntimeError(f"checkpoint {checkpoint_id}: could not register an attempt (contention)")

    # -- abort ---------------------------------------------------------------------------------
    def abort(self, checkpoint_id: int, reason: CheckpointFailureReason, message: str = "") -> DecisionRecord:
        """Decide ABORT unless a decision exists; return the decision that stands."""
        record = DecisionRecord(
            checkpoint_id, Outcome.ABORT, self.clock.now_ms(), reason=reason.name, message=message
        )
        try:
            documents.create(self.store, self.layout.decision(checkpoint_id), record)
            return record
        except ObjectAlreadyExists:
            return documents.read(self.store, self.layout.decision(checkpoint_id), DecisionRecord)

    def abort_expired(self) -> list[int]:
        """Abort every undecided checkpoint past its deadline; return their ids."""
        now = self.clock.now_ms()
        aborted = []
        for checkpoint_id in self.undecided_ids():
            pending = self.pending_record(checkpoint_id)
            if now > pending.deadline_ms:
                decision = self.abort(
                    checkpoint_id,
                    CheckpointFailureReason.CHECKPOINT_EXPIRED,
                    f"deadline {pending.deadline_ms}",
                )
                if decision.outcome is Outcome.ABORT:
                    aborted.append(checkpoint_id)
        return aborted

    # -- complete ------------------------------------------------------------------------------
    def complete(self, checkpoint_id: int, *, gate: Gate | None = None) -> CompletionResult:
        """Collect acks of checkpoint n and complete or abort it (see module docstring)."""
        pending = self.pending_record(checkpoint_id)
        decision = self.decision(checkpoint_id)
        if decision is not None:
            return self._follow(pending, decision)
        attempt = self.current_attempt(checkpoint_id)
        checkpoint = PendingCheckpoint(pending, attempt)
        read = self._read_acks(checkpoint_id)
        results = self._classify(checkpoint, read)
        acked = len(checkpoint.acknowledged)
        expected = len(pending.expected)

        def aborted(reason: CheckpointFailureReason, message: str) -> CompletionResult:
            stands = self.abort(checkpoint_id, reason, message)
            if stands.outcome is Outcome.COMPLETE:
                return self._follow(pending, stands)
            return CompletionResult(
                checkpoint_id,
                "aborted",
                acked,
                expected,
                CheckpointFailureReason[stands.reason],
                stands.message,
                results,
            )

        if self.job().generation != pending.generation:
            return aborted(
                CheckpointFailureReason.FENCED_BY_NEWER_GENERATION,
                f"triggered in generation {pending.generation}, job is at {self.job().generation}",
            )
        decline = self._first_decline(pending, attempt)
        if decline is not None:
            return aborted(
                CheckpointFailureReason.CHECKPOINT_DECLINED,
                f"task {decline.task} declined: {decline.reason}: {decline.message}",
            )
        if checkpoint.is_expired(self.clock.now_ms()):
            missing = ", ".join(sorted(map(str, checkpoint.not_yet_acknowledged))) or "none"
            return aborted(
                CheckpointFailureReason.CHECKPOINT_EXPIRED,
                f"deadline {pending.deadline_ms} passed; tasks without ack: {missing}",
            )
        if not checkpoint.is_fully_acknowledged:
            return CompletionResult(checkpoint_id, "in_progress", acked, expected, ack_results=results)
        candidate = PendingCheckpoint(pending, attempt)
        for ack in checkpoint.acknowledged.values():
            candidate.acknowledge(ack)
        metadata = candidate.finalize(self.clock.now_ms())
        problems = verify_handles(
            self.store, metadata, deep=self.config.verify_sha256, concurrency=self._reads
        )
        if problems:
            return aborted(CheckpointFailureReason.CHECKSUM_MISMATCH, "; ".join(problems))
        if gate is not None:
            failure = gate(metadata)
            if failure is not None:
                return aborted(CheckpointFailureReason.VALIDATION_FAILED, failure)
        self.kill(killpoints.BEFORE_DECISION, checkpoint_id)
        record = DecisionRecord(checkpoint_id, Outcome.COMPLETE, metadata.completed_ms, attempt=attempt)
        try:
            documents.create(self.store, self.layout.decision(checkpoint_id), record)
        except ObjectAlreadyExists:
            # Another coordinator decided first: follow its decision from storage (re-read acks).
            record = documents.read(self.store, self.layout.decision(checkpoint_id), DecisionRecord)
            result = self._follow(pending, record)
        else:
            # Our decision stands: the acks it was made on (create-only documents of this
            # attempt, already read above) are the ones the metadata is built from.
            result = self._follow(pending, record, read)
        return CompletionResult(
            result.checkpoint_id,
            result.status,
            result.acked,
            result.expected,
            result.reason,
            result.message,
            results,
            result.checkpoint,
        )

    def _collect_acks(self, checkpoint: PendingCheckpoint) -> dict[str, str]:
        return self._classify(checkpoint, self._read_acks(checkpoint.checkpoint_id))

    def _read_acks(self, checkpoint_id: int) -> list[AckRead]:
        """Every ack document of checkpoint n in key order: the record, or ``"corrupt: ..."`` when
        it does not decode (or vanished); acks an ack bundle vouches for cost no read of their own
        (``ack_bundles``). Other store errors raise (the first in key order)."""
        return read_acks(self.store, self.layout, checkpoint_id, self._reads)

    @staticmethod
    def _classify(checkpoint: PendingCheckpoint, read: list[AckRead]) -> dict[str, str]:
        results: dict[str, str] = {}
        for key, ack in read:
            results[key] = ack if isinstance(ack, str) else checkpoint.acknowledge(ack).value
        return results

    def _first_decline(self, pending: PendingRecord, attempt: int) -> DeclineRecord | None:
        for info in self.store.list(self.layout.declines_prefix(pending.checkpoint_id)):
            try:
                decline = documents.read(self.store, info.key, DeclineRecord)
            except (ManifestError, ObjectNotFound):
                continue
            if decline.generation == pending.generation and decline.attempt == attempt:
                return decline
        return None

    def _follow(
        self,
        pending: PendingRecord,
        decision: DecisionRecord,
        read: list[AckRead] | None = None,
    ) -> CompletionResult:
        """Carry out a decision that stands: report an ABORT, roll a COMPLETE forward.

        ``read``: the acks this very call decided COMPLETE on (see ``complete``); None when the
        decision came from storage (another coordinator, or an earlier call): then they are read."""
        checkpoint_id = pending.checkpoint_id
        expected = len(pending.expected)
        if decision.outcome is Outcome.ABORT:
            return CompletionResult(
                checkpoint_id,
                "aborted",
                0,
                expected,
                CheckpointFailureReason[decision.reason],
                decision.message,
            )
        checkpoint = PendingCheckpoint(pending, decision.attempt)
        self._classify(checkpoint, read if read is not None else self._read_acks(checkpoint_id))
        self.kill(killpoints.BEFORE_METADATA, checkpoint_id)
        if self.store.head(self.layout.metadata(checkpoint_id)) is None:
            metadata = checkpoint.finalize(decision.decided_ms)
            try:
                documents.create(self.store, self.layout.metadata(checkpoint_id), metadata)
            except ObjectAlreadyExists:
                pass
        self.kill(killpoints.AFTER_METADATA, checkpoint_id)
        completed = load_completed(self.store, self.layout, checkpoint_id, concurrency=self._reads)
        if not completed.is_savepoint:
            self._move_pointer(completed)
            self.kill(killpoints.AFTER_POINTER, checkpoint_id)
            self._subsume_older(checkpoint_id)
        return CompletionResult(checkpoint_id, "completed", expected, expected, checkpoint=completed)

    def _move_pointer(self, completed: CompletedCheckpoint) -> None:
        """CAS ``LATEST`` to ``completed`` unless it already points at a newer checkpoint."""
        pointer = LatestPointer(
            completed.checkpoint_id,
            completed.generation,
            completed.metadata_key,
            completed.metadata_sha256,
            self.clock.now_ms(),
        )
        data = documents.encode(pointer)
        for _ in range(_CAS_RETRIES):
            try:
                current, raw = documents.read_versioned(self.store, self.layout.latest, LatestPointer)
            except ObjectNotFound:
                try:
                    self.store.put_if_absent(self.layout.latest, data)
                    return
                except ObjectAlreadyExists:
                    continue
            except ManifestError:
                raw = self.store.get(self.layout.latest)
                current = None
            if current is not None and (
                current.checkpoint_id >= completed.checkpoint_id or current.generation > completed.generation
            ):
                return
            try:
                self.store.put_if_match(self.layout.latest, data, raw.version)
                return
            except VersionMismatch:
                continue
        raise RuntimeError(f"job {self.layout.job_id}: could not move LATEST (constant contention)")

    def _subsume_older(self, checkpoint_id: int) -> None:
        for older in self.undecided_ids():
            if older >= checkpoint_id:
                continue
            if self.pending_record(older).properties.can_be_subsumed:
                self.abort(
                    older,
                    CheckpointFailureReason.CHECKPOINT_SUBSUMED,
                    f"checkpoint {checkpoint_id} completed",
                )

    # -- task side helpers ---------------------------------------------------------------------
    def acknowledge(self, ack: AckRecord) -> AckResult:
        """Classify one ack against the stored pending checkpoint, without writing anything."""
        try:
            pending = self.pending_record(ack.checkpoint_id)
        except ObjectNotFound:
            return AckResult.UNKNOWN
        if self.decision(ack.checkpoint_id) is not None:
            return AckResult.DISCARDED
        checkpoint = PendingCheckpoint(pending, self.current_attempt(ack.checkpoint_id))
        self._collect_acks(checkpoint)
        return checkpoint.acknowledge(ack)


__all__ = [
    "CheckpointCoordinator",
    "CheckpointVerificationError",
    "CompletionResult",
    "Gate",
    "MasterHook",
]
