"""CheckpointCoordinator: trigger, collect acknowledgements, decide, complete (seeds 001, 002).

All protocol state lives in the ObjectStore; the coordinator object is a cache, so any process
can crash at any step and a new coordinator continues from storage alone. The job's lease
(``state_store.core.lease``) makes one actor at a time the writer; a coordinator carries that
actor's fencing token (``lease_token``) and every commit point checks it, so a zombie -- an actor
whose lease was taken over -- changes nothing. Every contended step is still a create-only write
or a compare-and-swap, so even two actors without leases can never fork the chain.

trigger(expected, positions)
  1. pre-checks (``state_store.core.trigger_checks``; forced triggers skip c, d and f);
  2. allocate id n = highest existing id + 1 by create-only write of ``chk-n/_pending.json``
     (a lost race moves on to n + 1): two coordinators can never own the same id. The pending
     record names the checkpoint's *base* (``positions["base"]``): the chain head its state and
     source positions continue;
  3. master hooks snapshot external state into the pending record.
complete(n)
  1. if ``_decision.json`` exists, follow it (roll a COMPLETE forward, report an ABORT);
  2. read the acks of the current attempt; classify each (SUCCESS/DUPLICATE/UNKNOWN/DISCARDED);
     a decline, the deadline, a missing state file or one of another size (no file is read:
     the checksum is the writer's, from the ack; ``deep_verify`` reads every file back and
     checks it too) or a failing gate decide ABORT;
  3. fully acknowledged: **the commit point** -- one fenced compare-and-swap of the job record
     that checks the caller's lease token, the generation (FENCED_BY_NEWER_GENERATION) and that
     the checkpoint's base is still the chain head (BASE_SUPERSEDED), and makes n the head;
  4. decide COMPLETE (create-only), write ``_metadata.json`` create-only, move ``LATEST`` by CAS
     (never backwards), subsume older pending checkpoints. A crash anywhere in 4 is rolled forward
     by the next ``recover()``: the job record holds what the decision needs.

Chain invariant: every completed checkpoint but an imported one (a restore) has as base the
checkpoint that was the head when it committed, so the completed checkpoints of a generation form
one chain and no two of them continue the same base.
"""

from __future__ import annotations

import base64
import dataclasses
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from state_store.core import documents, failure_manager, killpoints
from state_store.core.ack_bundles import AckRead, read_acks
from state_store.core.codec import ManifestError
from state_store.core.completed import (
    ChainHeadError,
    CheckpointVerificationError,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    RecoveryReport,
    load_completed,
    move_latest_pointer,
    verify_handles,
)
from state_store.core.config import CheckpointConfig
from state_store.core.failures import CheckpointException, CheckpointFailureReason
from state_store.core.jobrecord import JobRecords
from state_store.core.layout import JobLayout
from state_store.core.manifests import (
    AckRecord,
    AttemptRecord,
    ChainHead,
    CompletedMetadata,
    DecisionRecord,
    DeclineRecord,
    JobRecord,
    Outcome,
    PendingRecord,
    QuarantineRecord,
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
)
from state_store.core.properties import CheckpointProperties
from state_store.core.status import CheckpointStatus
from state_store.core.trigger_checks import TriggerFacts, check_trigger

_ID_RACE_RETRIES = 16
_CAS_RETRIES = 16


def continues(head: int | None, base: int | None) -> bool:
    """The chain rule: a checkpoint may complete only if its base is still the chain head."""
    return head == base


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
    status: CheckpointStatus  # COMPLETED | IN_PROGRESS | ABORTED
    acked: int
    expected: int
    reason: CheckpointFailureReason | None = None
    message: str = ""
    ack_results: dict[str, str] = field(default_factory=dict)
    checkpoint: CompletedCheckpoint | None = None


@dataclass(frozen=True, slots=True)
class RestoreCommit:
    """Completing an imported snapshot is a restore's commit point: in the same compare-and-swap
    that makes the import the chain head, the generation is bumped (so an epoch started before
    the restore can never complete after it) and the effective parallelism is recorded."""

    parallelism: int
    declared_parallelism: int


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
        lease_token: int | None = None,
        wall_clock: Clock | None = None,
    ) -> None:
        self.store = store
        #: Real time, for the records' ``wall_*`` fields only (true durations when ``clock`` is an
        #: epoch's logical clock); None: those fields stay 0. Never used for a protocol decision.
        self.wall_clock = wall_clock
        self.layout = JobLayout(job_id)
        self.records = JobRecords(store, job_id)
        self.clock = clock
        self.config = config or CheckpointConfig()
        self.kill = kill
        self.owner = owner or uuid.uuid4().hex
        self.master_hooks = tuple(master_hooks)
        self.max_parallelism = max_parallelism
        #: The caller's fencing token (None: the caller holds no lease; its commits are then
        #: refused while anybody holds one). See ``state_store.core.lease``.
        self.lease_token = lease_token
        self._shutdown = False
        self._replaced: list[JobRecord] = []  # the job record the last commit replaced
        #: Reads in flight at once while completing (1 unless the store declares it can do more).
        self._reads = read_concurrency(store, self.config.read_concurrency)

    # -- job record and generation ---------------------------------------------------------
    def job(self) -> JobRecord:
        """Read ``_job.json``, creating generation 1 if the job is new."""
        return self.records.ensure(self.max_parallelism, self.clock.now_ms())

    def fence(self) -> JobRecord:
        """Prove by compare-and-swap that the caller's lease is still the job's (LeaseLostError
        otherwise); guards changes that are not themselves a CAS of the job record."""
        self.job()
        return self.records.fenced_update(self.lease_token, lambda current: current)

    def bump_generation(self, restored_from: int) -> JobRecord:
        """Start a new generation restored from completed checkpoint ``restored_from``, which
        becomes the chain head (fenced like every commit point). Acks and commits of older
        generations are refused from now on."""
        self.job()
        head = self._head_of(restored_from)

        def bump(current: JobRecord) -> JobRecord:
            return dataclasses.replace(
                current,
                generation=current.generation + 1,
                restored_from=restored_from,
                chained=True,
                head=head if head is not None else current.head,
            )

        return self.records.fenced_update(self.lease_token, bump)

    def _head_of(self, checkpoint_id: int) -> ChainHead | None:
        """The chain-head entry of a checkpoint decided COMPLETE (None if it is not)."""
        decision = self.decision(checkpoint_id) if checkpoint_id > 0 else None
        if decision is None or decision.outcome is not Outcome.COMPLETE:
            return None
        base = self.pending_record(checkpoint_id).barrier.base
        return ChainHead(checkpoint_id, decision.attempt, decision.decided_ms, base)

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
        """Roll forward what was committed but not yet written, then rebuild the completed store
        from storage alone (ChainHeadError if the head does not verify: see ``completed``)."""
        self.roll_forward()
        return CompletedCheckpointStore.recover(
            self.store, self.layout, self.config.retained_checkpoints, deep=deep
        )

    def roll_forward(self) -> None:
        """Write what was committed but not yet written: the chain head's decision and every
        COMPLETE decision's ``_metadata.json`` (the committer crashed after its commit point)."""
        record = self.records.read()
        head = record.head if record is not None and record.chained else None
        if head is not None and self.store.head(self.layout.decision(head.checkpoint_id)) is None:
            self._decide_complete(head.checkpoint_id, head.attempt, head.completed_ms)
        for checkpoint_id in self.checkpoint_ids():
            decision = self.decision(checkpoint_id)
            decided_complete = decision is not None and decision.outcome is Outcome.COMPLETE
            if decided_complete and self.store.head(self.layout.metadata(checkpoint_id)) is None:
                self.complete(checkpoint_id)

    def failover(self) -> tuple[CompletedCheckpointStore, RecoveryReport]:
        """The whole job restarts: abort every undecided checkpoint (as Flink does on failover),
        roll forward the decided ones, and recover the completed store. A retry of one epoch's
        run (same checkpoint, new attempt) uses :meth:`start_attempt` instead."""
        self.abort_undecided(CheckpointFailureReason.JOB_FAILOVER, f"coordinator {self.owner} restarted")
        return self.recover()

    def abort_undecided(self, reason: CheckpointFailureReason, message: str) -> list[int]:
        """Abort every undecided checkpoint but the chain head (which is rolled forward);
        return the ids aborted."""
        return [
            checkpoint_id
            for checkpoint_id in self.undecided_ids()
            if self.abort(checkpoint_id, reason, message).outcome is Outcome.ABORT
        ]

    def fall_back(self, error: ChainHeadError) -> ChainHead | None:
        """Make the damaged head's base the chain head again, and quarantine the head.

        Only the caller can know that this is safe -- that none of the head's sink transactions
        was committed (``spark_jobs`` checks the sinks' commit logs); the core refuses only what it
        can see is unsafe: a head without a known base that is not the job's first checkpoint (an
        import of a restore: falling back would drop the restored state). Returns the new head."""
        record = self.job()
        head = record.head if record.chained else None
        if head is None or head.checkpoint_id != error.checkpoint_id:
            raise error
        if head.base is None and (record.restored_from or self.checkpoint_ids()[:1] != [head.checkpoint_id]):
            raise error
        previous = self._head_of(head.base) if head.base is not None else None
        if head.base is not None and previous is None:
            raise error

        def back(current: JobRecord) -> JobRecord:
            if current.head != head:
                raise error
            # a new generation, as a restore of the base: a zombie's late commit of the dropped
            # head's sink output (generation g) is refused by the sinks' fence (``spark_jobs``)
            return dataclasses.replace(
                current,
                head=previous,
                generation=current.generation + 1,
                restored_from=head.base or 0,
            )

        self.records.fenced_update(self.lease_token, back)
        record_key = self.layout.quarantined(head.checkpoint_id)
        if self.store.head(record_key) is None:
            documents.create(
                self.store,
                record_key,
                QuarantineRecord(
                    head.checkpoint_id, f"fell back to {head.base}: {error}", self.clock.now_ms()
                ),
            )
        return previous

    def latest_completed(self) -> CompletedCheckpoint | None:
        """The chain head (read only; ChainHeadError if it does not verify)."""
        completed, _ = CompletedCheckpointStore.recover(self.store, self.layout, 1)
        return completed.latest()

    def consecutive_failures(self) -> int:
        """Checkpoints of the current generation that failed in a row (``failure_manager``)."""
        return failure_manager.consecutive_failures(
            list(reversed(self.checkpoint_ids())), self.job().generation, self.decision, self.pending_record
        )

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
        parallelism: int = 0,
        declared_parallelism: int = 0,
        restoring: bool = False,
    ) -> PendingRecord:
        """Allocate and record checkpoint n (see module docstring); raise CheckpointException
        with a pre-flight reason when refused, JobFailedError when the job has failed.

        ``request_id`` (e.g. the Airflow DAG run id) makes the call idempotent: a retry whose
        first try created the checkpoint but lost the response gets the same undecided checkpoint
        back instead of a second one (or a TOO_MANY_CONCURRENT_CHECKPOINTS refusal). ``restoring``:
        a restore's import, which a failed job (too many failures in a row) must still accept."""
        props = properties or CheckpointProperties.checkpoint()
        if self._shutdown:
            raise CheckpointException(CheckpointFailureReason.COORDINATOR_SHUTDOWN)
        if request_id:
            for checkpoint_id in self.undecided_ids():
                existing = self.pending_record(checkpoint_id)
                if existing.request_id == request_id:
                    return existing
        job = self.job()
        failures = 0 if restoring else self.consecutive_failures()  # a restore is the remedy
        now = self.clock.now_ms()
        self.abort_expired()
        latest = None if props.forced else self.latest_completed()
        check_trigger(
            TriggerFacts(
                job_id=job.job_id,
                now_ms=now,
                forced=props.forced,
                consecutive_failures=failures,
                tolerable_failures=self.config.tolerable_failures,
                undecided=tuple(self.undecided_ids()),
                max_concurrent=self.config.max_concurrent_checkpoints,
                last_completion=None
                if latest is None
                else (latest.checkpoint_id, latest.metadata.completed_ms),
                min_pause_ms=self.config.min_pause_ms,
                tasks_ready=tasks_ready,
                has_expected=bool(expected),
                has_new_input=has_new_input,
            )
        )
        positions = dict(positions or {})
        if "base" not in positions:  # the chain head this checkpoint continues
            positions["base"] = job.head.checkpoint_id if job.chained and job.head is not None else None
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
                positions=positions,
                master_states=master,
                request_id=request_id,
                parallelism=parallelism,
                declared_parallelism=declared_parallelism,
                wall_trigger_ms=self._wall_ms(),
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
        """Register a new attempt of checkpoint n; acks of earlier attempts become UNKNOWN.
        Fenced: the caller must hold the lease."""
        pending = self.pending_record(checkpoint_id)
        self.fence()
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
        """Decide ABORT unless a decision exists; return the decision that stands.

        Fenced: the caller must hold the lease (LeaseLostError otherwise). The chain head is never
        aborted: its commit already happened (in the job record), so its COMPLETE decision is
        written instead and returned."""
        record = self.fence()
        head = record.head if record.chained else None
        if head is not None and head.checkpoint_id == checkpoint_id:
            return self._decide_complete(checkpoint_id, head.attempt, head.completed_ms)
        decision = DecisionRecord(
            checkpoint_id,
            Outcome.ABORT,
            self.clock.now_ms(),
            reason=reason.name,
            message=message,
            wall_decided_ms=self._wall_ms(),
        )
        try:
            documents.create(self.store, self.layout.decision(checkpoint_id), decision)
            return decision
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

    def _wall_ms(self) -> int:
        return self.wall_clock.now_ms() if self.wall_clock is not None else 0

    def _decide_complete(
        self, checkpoint_id: int, attempt: int, decided_ms: int, wall_ms: int | None = None
    ) -> DecisionRecord:
        """Write the COMPLETE decision of a checkpoint whose commit (the job record's CAS) happened;
        return the decision that stands (an ABORT only if one was written before the commit).
        ``wall_ms``: the wall time of the metadata built for it (None: now)."""
        wall = self._wall_ms() if wall_ms is None else wall_ms
        decision = DecisionRecord(
            checkpoint_id, Outcome.COMPLETE, decided_ms, attempt=attempt, wall_decided_ms=wall
        )
        try:
            documents.create(self.store, self.layout.decision(checkpoint_id), decision)
            return decision
        except ObjectAlreadyExists:
            return documents.read(self.store, self.layout.decision(checkpoint_id), DecisionRecord)

    # -- complete ------------------------------------------------------------------------------
    def complete(
        self, checkpoint_id: int, *, gate: Gate | None = None, restore: RestoreCommit | None = None
    ) -> CompletionResult:
        """Collect acks of checkpoint n and complete or abort it (see module docstring).

        ``restore``: n is a restore's import; its commit also bumps the generation."""
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
                CheckpointStatus.ABORTED,
                acked,
                expected,
                stands.abort_reason(),
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
            return CompletionResult(
                checkpoint_id, CheckpointStatus.IN_PROGRESS, acked, expected, ack_results=results
            )
        metadata = checkpoint.finalize(self.clock.now_ms(), self._wall_ms())
        problems = verify_handles(self.store, metadata, deep=self.config.deep_verify, concurrency=self._reads)
        if problems:
            return aborted(CheckpointFailureReason.CHECKSUM_MISMATCH, "; ".join(problems))
        if gate is not None:
            failure = gate(metadata)
            if failure is not None:
                return aborted(CheckpointFailureReason.VALIDATION_FAILED, failure)
        self.kill(killpoints.BEFORE_DECISION, checkpoint_id)
        committed = self._commit(pending, attempt, metadata.completed_ms, restore)
        if not isinstance(committed, ChainHead):
            return aborted(*committed)
        self.kill(killpoints.AFTER_CHAIN_COMMIT, checkpoint_id)
        stands = self._decide_complete(
            checkpoint_id, committed.attempt, committed.completed_ms, metadata.wall_completed_ms
        )
        if stands.outcome is Outcome.ABORT:
            # An ABORT was written between our commit and our decision (a zombie's, fenced only
            # by a check): the decision stands, so the chain goes back to where it was.
            self._uncommit(checkpoint_id, pending, self._replaced[-1])
            return aborted(stands.abort_reason(), stands.message)
        # Our decision stands: the metadata built above from this attempt's acks (create-only
        # documents) is the completed checkpoint (an equal decision of a racing try of the same
        # commit is followed from storage: it may have another attempt).
        ours = (
            stands.attempt == attempt
            and stands.decided_ms == metadata.completed_ms
            and stands.wall_decided_ms == metadata.wall_completed_ms
        )
        result = self._follow(pending, stands, metadata if ours else None)
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

    def _commit(
        self, pending: PendingRecord, attempt: int, completed_ms: int, restore: RestoreCommit | None
    ) -> ChainHead | tuple[CheckpointFailureReason, str]:
        """The commit point (module docstring, step 3): one fenced CAS of the job record.

        Returns the chain entry that stands for n (ours, or an earlier try's of this very commit:
        its attempt and time are then the decision's), or the abort reason when the chain refuses
        n. Raises LeaseLostError when the caller is not the lease holder any more (then nothing at
        all is written: a zombie must not even abort, the holder may be retrying n). A savepoint
        commits nothing to the chain but is fenced the same way."""
        checkpoint_id = pending.checkpoint_id
        base = pending.barrier.base
        ours = ChainHead(checkpoint_id, attempt, completed_ms, None if restore else base)
        outcome: list[ChainHead | tuple[CheckpointFailureReason, str]] = []

        def commit(current: JobRecord) -> JobRecord:
            outcome[:] = [ours]
            self._replaced = [current]
            if current.chained and current.head is not None and current.head.checkpoint_id == checkpoint_id:
                outcome[:] = [current.head]
                return current  # committed already (an earlier try of this very commit)
            if current.generation != pending.generation:
                outcome[:] = [
                    (
                        CheckpointFailureReason.FENCED_BY_NEWER_GENERATION,
                        f"triggered in generation {pending.generation}, job is at {current.generation}",
                    )
                ]
                return current
            if pending.properties.savepoint:
                return current
            head = current.head.checkpoint_id if current.chained and current.head is not None else None
            if restore is None and current.chained and not continues(head, base):
                outcome[:] = [
                    (
                        CheckpointFailureReason.BASE_SUPERSEDED,
                        f"checkpoint {checkpoint_id} continues checkpoint {base}, but the job's latest "
                        f"completed checkpoint is now {head}: another run completed first; nothing "
                        "of this epoch is committed",
                    )
                ]
                return current
            if restore is None:
                if pending.parallelism:
                    current = dataclasses.replace(
                        current,
                        parallelism=pending.parallelism,
                        declared_parallelism=pending.declared_parallelism,
                    )
                return dataclasses.replace(current, chained=True, head=ours)
            return dataclasses.replace(
                current,
                generation=current.generation + 1,
                restored_from=checkpoint_id,
                chained=True,
                head=ours,
                parallelism=restore.parallelism,
                declared_parallelism=restore.declared_parallelism,
            )

        self.records.fenced_update(self.lease_token, commit)
        return outcome[0]

    def _uncommit(self, checkpoint_id: int, pending: PendingRecord, before: JobRecord) -> None:
        """Undo our own commit of n when its decision lost to an ABORT (see ``complete``): the
        record goes back to ``before`` (the one our commit replaced), the lease as it is now."""

        def undo(current: JobRecord) -> JobRecord:
            if current.head is None or current.head.checkpoint_id != checkpoint_id:
                return current
            # everything the commit changed (head, chain, parallelism, a restore's generation)
            return dataclasses.replace(before, lease=current.lease, fencing_token=current.fencing_token)

        self.records.fenced_update(self.lease_token, undo)

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
        metadata: CompletedMetadata | None = None,
    ) -> CompletionResult:
        """Carry out a decision that stands: report an ABORT, roll a COMPLETE forward.

        ``metadata``: what this very call decided COMPLETE on (see ``complete``); None when the
        decision came from storage (another coordinator, or an earlier call): then it is rebuilt
        from the decided attempt's acks, byte for byte the same."""
        checkpoint_id = pending.checkpoint_id
        expected = len(pending.expected)
        if decision.outcome is Outcome.ABORT:
            return CompletionResult(
                checkpoint_id,
                CheckpointStatus.ABORTED,
                0,
                expected,
                decision.abort_reason(),
                decision.message,
            )
        if metadata is None:
            checkpoint = PendingCheckpoint(pending, decision.attempt)
            self._classify(checkpoint, self._read_acks(checkpoint_id))
            metadata = checkpoint.finalize(decision.decided_ms, decision.wall_decided_ms)
        self.kill(killpoints.BEFORE_METADATA, checkpoint_id)
        if self.store.head(self.layout.metadata(checkpoint_id)) is None:
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
        return CompletionResult(
            checkpoint_id, CheckpointStatus.COMPLETED, expected, expected, checkpoint=completed
        )

    def _move_pointer(self, completed: CompletedCheckpoint) -> None:
        """CAS ``LATEST`` to ``completed`` unless it already points at a newer checkpoint."""
        move_latest_pointer(self.store, self.layout, completed, self.clock.now_ms())

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
    "RestoreCommit",
]
