"""The epoch cycle of DESIGN section 3 (the DAG tasks, ``epochal run`` and the chaos driver call
these, nothing else):

1. :func:`trigger_epoch` -- barrier positions per source partition (capped by
   ``max_records_per_epoch``), expected acks, the base (the chain head the epoch continues), the
   effective parallelism; allocates checkpoint n. None when there is no new input.
2. :func:`run_epoch` -- registers an attempt and runs every subtask (Spark or in process) at the
   parallelism recorded at trigger time. In ``at_least_once`` mode the sinks' output becomes
   visible here (a non-transactional sink).
3. :func:`complete_epoch` -- the coordinator collects acks and commits or aborts.
4. :func:`notify_epoch_complete` -- sinks commit every pre-committed transaction up to n
   (``recover_and_commit`` after a crash: idempotent).
5. :func:`apply_job_retention`.

Every step that changes the job takes the caller's fencing token (``lease_token``): the caller
holds the job's lease (``state_store.lease_keeper``) for the whole command or DAG run, and every
commit point refuses a token that is no longer the job's. ``lease_token=None`` is for callers that
act on an idle job (tests): it is refused while anybody holds the lease.

Parallelism: the job record keeps the parallelism the job runs at (set by every committed epoch and
by a restore). A job definition whose ``parallelism`` equals the one recorded with it runs at the
recorded parallelism (a rescaling restore sticks); a definition that changed is a rescale, applied
with the restore plan in the log, or refused (``Job.rescale_on_change``).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

from spark_jobs.api.graph import Stage
from spark_jobs.api.job import Job
from spark_jobs.api.specs import SinkSpec
from spark_jobs.runtime import plan as topo
from spark_jobs.runtime import progress
from spark_jobs.runtime.executors import run_in_process, run_on_spark
from spark_jobs.runtime.plan import EpochPlan
from state_store.clocks import SystemClock
from state_store.core import documents, killpoints
from state_store.core.ack_bundles import write_ack_bundle
from state_store.core.cleaner import apply_retention
from state_store.core.completed import ChainHeadError, CompletedCheckpointStore
from state_store.core.coordinator import CheckpointCoordinator, CompletionResult, Gate
from state_store.core.failures import CheckpointException, CheckpointFailureReason
from state_store.core.jobrecord import JobRecords
from state_store.core.keygroups import check_parallelism
from state_store.core.layout import JobLayout
from state_store.core.manifests import (
    AckBundleEntry,
    AckRecord,
    JobRecord,
    PendingRecord,
    StoppedRecord,
    TaskId,
)
from state_store.core.ports import NO_KILL, Clock, KillSwitch, ObjectStore, StoreError
from state_store.core.positions import BarrierPositions
from state_store.core.properties import CheckpointProperties
from state_store.core.retention import RetentionPlan
from state_store.core.status import CheckpointStatus
from state_store.core.twophase import (
    PreCommittedTxn,
    commit_pending_transactions,
    records_from_metadata,
    records_from_snapshot,
)
from state_store.faults import task_kill_spec
from state_store.storage import open_store

Executor = str  # "local" (in process) or "spark"
log = logging.getLogger(__name__)


def coordinator_for(
    job: Job, store: ObjectStore, clock: Clock, kill: KillSwitch = NO_KILL, lease_token: int | None = None
) -> CheckpointCoordinator:
    return CheckpointCoordinator(
        store,
        job.job_id,
        clock=clock,
        config=job.checkpoint_config(),
        kill=kill,
        max_parallelism=job.max_parallelism,
        lease_token=lease_token,
        wall_clock=SystemClock(),  # true durations beside the epoch's logical clock
    )


class RescaleRefused(RuntimeError):
    """The job definition's parallelism changed and the job says ``rescale_on_change='refuse'``."""


def with_parallelism(job: Job, parallelism: int) -> Job:
    """``job`` at another parallelism (the same object when it already runs at it)."""
    if not parallelism or parallelism == job.parallelism:
        return job
    check_parallelism(job.max_parallelism, parallelism)
    scaled = copy.copy(job)
    scaled.parallelism = parallelism
    return scaled


@dataclass(frozen=True, slots=True)
class Parallelism:
    """What the next epoch runs at, and why (see module docstring)."""

    effective: int
    declared: int
    recorded: int  # 0: nothing recorded yet
    rescale: bool  # the definition changed since the recorded parallelism was set

    @property
    def describe(self) -> str:
        if self.rescale:
            return (
                f"the job definition's parallelism changed to {self.declared} (the job ran at "
                f"{self.recorded}): rescaling to {self.effective}"
            )
        if self.recorded and self.effective != self.declared:
            return (
                f"running at parallelism {self.effective} "
                f"(set by a restore; the definition says {self.declared})"
            )
        return f"running at parallelism {self.effective}"


def effective_parallelism(job: Job, record: JobRecord | None) -> Parallelism:
    """The parallelism the next epoch runs at (module docstring); RescaleRefused when the
    definition changed and the job refuses to rescale on its own."""
    if record is None or not record.parallelism:
        return Parallelism(job.parallelism, job.parallelism, 0, False)
    if job.parallelism == record.declared_parallelism:
        return Parallelism(record.parallelism, job.parallelism, record.parallelism, False)
    if job.rescale_on_change == "refuse":
        raise RescaleRefused(
            f"job {job.job_id}: its definition says parallelism {job.parallelism} but the job runs at "
            f"{record.parallelism} (its definition said {record.declared_parallelism}): rescale with "
            f"`epochal restore --job {job.job_id} --from latest --parallelism {job.parallelism}`, set "
            f"rescale_on_change='apply', or change the definition back to {record.declared_parallelism}"
        )
    return Parallelism(job.parallelism, job.parallelism, record.parallelism, True)


def rescale_plan(job: Job, parallelism: Parallelism, checkpoint_id: int | None) -> str:
    """The restore plan of a rescale by definition (the same table a restore prints)."""
    from spark_jobs.lifecycle.restore import job_shape
    from spark_jobs.lifecycle.restore_render import render_plan
    from state_store.core.restore import RestoreOptions, SnapshotShape, plan_restore

    before = job_shape(with_parallelism(job, parallelism.recorded))
    snapshot = SnapshotShape(
        job.job_id,
        job.max_parallelism,
        "checkpoint",
        checkpoint_id,
        f"checkpoint {checkpoint_id}",
        before.operators,
    )
    plan = plan_restore(job_shape(with_parallelism(job, parallelism.effective)), snapshot, RestoreOptions())
    return render_plan(plan)


def sink_specs(job: Job) -> dict[str, Any]:
    """Every sink of the job by uid (main sinks and window late-data sinks)."""
    specs: dict[str, Any] = {}
    for step in job.graph.steps:
        if isinstance(step.spec, SinkSpec) and step.uid:
            specs[step.uid] = step.spec.sink
        for output in step.side_outputs():
            specs[output.uid] = output.sink
    return specs


def sink_specs_of_store(store: ObjectStore, job_id: str) -> list[str]:
    """The uids of the sinks that have a commit log in the store (no job definition needed)."""
    prefix = f"{JobLayout(job_id).root}sinks/"
    uids = {info.key[len(prefix) :].split("/", 1)[0] for info in store.list(prefix)}
    return sorted(uids)


def expected_tasks(job: Job) -> list[TaskId]:
    """Who must acknowledge: every source partition, stateful operator subtask and sink subtask."""
    stages = job.graph.stages()
    tasks: list[TaskId] = []
    for stage in stages:
        n = topo.width(stage, job)
        for step in stage.steps:
            uids = [step.uid] if step.stateful and step.uid else []
            uids += [output.uid for output in step.side_outputs()]
            tasks.extend(TaskId(uid, i) for uid in uids for i in range(n))
    return tasks


class JobStoppedError(RuntimeError):
    """The job was stopped with a savepoint; epochs resume only after a restore."""


def stopped_record(job_id: str, store: ObjectStore) -> StoppedRecord | None:
    """The job's stop-with-savepoint record (ManifestError naming the file if it is damaged)."""
    return documents.read_optional(store, JobLayout(job_id).stopped, StoppedRecord)


def ensure_running(job: Job, store: ObjectStore) -> None:
    stopped = stopped_record(job.job_id, store)
    if stopped is not None:
        raise JobStoppedError(
            f"job {job.job_id} was stopped with savepoint {stopped.savepoint!r}: restore from "
            f"{stopped.location} (or another snapshot) to resume"
        )


def abort_abandoned(
    job: Job, store: ObjectStore, clock: Clock, request_id: str, *, lease_token: int | None = None
) -> list[int]:
    """Abort the undecided checkpoints of other requests (earlier runs that died: the caller holds
    the job's lease, so nobody else can still be working on them) -- Flink's abort on failover."""
    coordinator = coordinator_for(job, store, clock, lease_token=lease_token)
    aborted = []
    for checkpoint_id in coordinator.undecided_ids():
        if coordinator.pending_record(checkpoint_id).request_id != request_id:
            decision = coordinator.abort(
                checkpoint_id, CheckpointFailureReason.JOB_FAILOVER, f"superseded by run {request_id}"
            )
            if decision.reason:
                aborted.append(checkpoint_id)
    return aborted


def recover_chain(
    job: Job, store: ObjectStore, coordinator: CheckpointCoordinator
) -> CompletedCheckpointStore:
    """Roll forward what was committed, check the chain head, and return the completed store (the
    head's lineage). A head that does not verify (or failed its audit) stops the job with
    ChainHeadError -- unless falling back to its base is provably safe: no sink of the job committed
    any of its output. Then the job falls back, the head is quarantined, and the log says so."""
    from spark_jobs.lifecycle.restore import finish_restore

    try:
        coordinator.roll_forward()
        finish_restore(job, store, coordinator)  # a restore that died after its commit
        return coordinator.recover()[0]
    except ChainHeadError as error:
        committed = [
            uid
            for uid, spec in sink_specs(job).items()
            if error.checkpoint_id in spec.create(store, job.job_id, uid).committed_checkpoint_ids()
        ]
        if committed:
            raise ChainHeadError(
                f"{error} (not resumed from an older checkpoint automatically: sink(s) "
                f"{', '.join(committed)} already committed its output, which would be committed twice)",
                error.checkpoint_id,
                error.key,
                error.base,
            ) from None
        previous = coordinator.fall_back(error)
        generation = coordinator.job().generation
        for uid, spec in sink_specs(job).items():  # the dropped head's output can never be committed
            spec.create(store, job.job_id, uid).fence(generation)
        line = (
            f"job {job.job_id}: checkpoint {error.checkpoint_id} cannot be used ({error.key}); no sink "
            f"committed its output, so the job resumes from "
            f"{'checkpoint ' + str(previous.checkpoint_id) if previous else 'the start of its input'} "
            "and reprocesses it; the checkpoint is quarantined"
        )
        log.warning(line)
        return coordinator.recover()[0]


def _source_stages(job: Job) -> list[Stage]:
    return [s for s in job.graph.stages() if s.key is None]


def trigger_epoch(
    job: Job,
    store: ObjectStore,
    clock: Clock,
    *,
    request_id: str = "",
    savepoint: bool = False,
    force: bool = False,
    kill: KillSwitch = NO_KILL,
    lease_token: int | None = None,
    log_rescale: Any = None,
) -> PendingRecord | None:
    """Step 1 (see module docstring). Returns None when no source has new input (and not forced).

    An undecided checkpoint of the same request is returned again (a retried trigger); one of
    another request is refused by the coordinator's concurrency check (the caller aborts those of
    dead runs first: ``abort_abandoned``)."""
    coordinator = coordinator_for(job, store, clock, kill, lease_token)
    completed = recover_chain(job, store, coordinator)  # first: a dead restore may un-stop the job
    if not savepoint:
        ensure_running(job, store)
    notify_epoch_complete(job, store, clock, None, kill=kill, lease_token=lease_token, completed=completed)
    record = coordinator.job()
    parallelism = effective_parallelism(job, record)
    latest = completed.latest()
    if parallelism.rescale and log_rescale is not None:
        log_rescale(parallelism, rescale_plan(job, parallelism, latest.checkpoint_id if latest else None))
    scaled = with_parallelism(job, parallelism.effective)
    base = latest.metadata.barrier if latest else BarrierPositions()
    now = clock.now_ms()
    ranges: dict[str, list[int]] = {}
    for stage in _source_stages(job):
        source = stage.source_spec.source
        uid = stage.steps[0].uid or source.uid
        available = source.end_offsets(now)
        for partition in source.partitions():
            key = topo.position_key(uid, partition)
            start = base.end(key)
            end = topo.epoch_end(
                source, partition, start, int(available.get(partition, start)), job.max_records_per_epoch
            )
            if savepoint:
                end = start  # a savepoint cuts the stream where the latest checkpoint did
            ranges[key] = [start, end]
    has_new_input = any(end > start for start, end in ranges.values())
    props = (
        CheckpointProperties.savepoint_props()
        if savepoint
        else CheckpointProperties.forced_checkpoint()
        if force or parallelism.rescale
        else CheckpointProperties.checkpoint()
    )
    try:
        return coordinator.trigger(
            expected_tasks(scaled),
            properties=props,
            positions={"ranges": ranges, "base": latest.checkpoint_id if latest else None},
            has_new_input=has_new_input,
            request_id=request_id,
            parallelism=scaled.parallelism,
            declared_parallelism=job.parallelism,
        )
    except CheckpointException as exc:
        if exc.reason is CheckpointFailureReason.NO_NEW_INPUT:
            return None
        raise


def run_epoch(
    job: Job,
    store_uri: str,
    checkpoint_id: int,
    clock: Clock,
    *,
    executor: Executor = "local",
    spark: Any = None,
    drain: bool = False,
    kill: KillSwitch = NO_KILL,
    lease_token: int | None = None,
) -> list[dict[str, Any]]:
    """Step 2: one new attempt of epoch n, restoring from the base recorded at trigger time, at
    the parallelism recorded at trigger time."""
    store = open_store(store_uri)
    coordinator = coordinator_for(job, store, clock, kill, lease_token)
    pending = coordinator.pending_record(checkpoint_id)
    job = with_parallelism(job, pending.parallelism)
    attempt = coordinator.start_attempt(checkpoint_id)
    plan = EpochPlan.for_attempt(
        job, store_uri, pending, attempt.attempt, drain=drain, kill=task_kill_spec(kill)
    )
    acks: list[AckBundleEntry] = []
    if executor not in ("spark", "local"):
        raise ValueError(f"executor {executor!r} is unknown: use 'local' or 'spark'")
    progress.epoch_started(f"epoch {checkpoint_id}", progress.stage_totals(job, pending, job.parallelism))
    try:
        with progress.spark_status(spark if executor == "spark" else None):
            summaries = run_on_spark(spark, plan, acks) if executor == "spark" else run_in_process(plan, acks)
    finally:
        progress.epoch_finished()
    _bundle_acks(store, coordinator.layout, plan, acks)
    if job.mode == "at_least_once":
        _commit_attempt_now(job, store, coordinator, checkpoint_id, attempt.attempt, kill)
    return summaries


def _bundle_acks(store: ObjectStore, layout: JobLayout, plan: EpochPlan, acks: list[AckBundleEntry]) -> None:
    """Best effort: one ack bundle for the acks this run's tasks wrote, so completion reads one
    object instead of one per subtask (``state_store.core.ack_bundles``). A failed write is logged
    and costs only those reads."""
    try:
        write_ack_bundle(store, layout, plan.checkpoint_id, plan.generation, plan.attempt, acks)
    except StoreError as exc:
        log.warning(
            "epoch %s of %s: ack bundle not written (%s); completion reads the %d acks one by one",
            plan.checkpoint_id, plan.job.job_id, exc, len(acks),
        )  # fmt: skip


def _commit_attempt_now(
    job: Job,
    store: ObjectStore,
    coordinator: CheckpointCoordinator,
    checkpoint_id: int,
    attempt: int,
    kill: KillSwitch,
) -> None:
    """At-least-once sinks make their output visible at the snapshot, not at completion."""
    layout = coordinator.layout
    records: list[PreCommittedTxn] = []
    for info in store.list(layout.acks_prefix(checkpoint_id)):
        ack = documents.read(store, info.key, AckRecord)
        if ack.attempt == attempt:
            records.extend(records_from_snapshot(ack.snapshot))
    for uid, spec in sink_specs(job).items():
        mine = [r for r in records if r.sink_uid == uid]
        if mine:
            coordinator.fence()
            commit_pending_transactions(spec.create(store, job.job_id, uid), mine, checkpoint_id, kill=kill)


def complete_epoch(
    job: Job,
    store: ObjectStore,
    clock: Clock,
    checkpoint_id: int,
    *,
    gate: Gate | None = None,
    kill: KillSwitch = NO_KILL,
    lease_token: int | None = None,
) -> CompletionResult:
    """Step 3."""
    return coordinator_for(job, store, clock, kill, lease_token).complete(checkpoint_id, gate=gate)


def notify_epoch_complete(
    job: Job,
    store: ObjectStore,
    clock: Clock,
    checkpoint_id: int | None,
    *,
    kill: KillSwitch = NO_KILL,
    lease_token: int | None = None,
    completed: CompletedCheckpointStore | None = None,
) -> dict[str, tuple[int, ...]]:
    """Step 4: commit the sink transactions of every completed checkpoint of the head's lineage up
    to n (None: the latest) that is not committed yet, oldest first. Idempotent; finishes an
    interrupted commit. Each sink's commits are fenced: a caller that lost the job's lease commits
    nothing. ``completed``: the completed store the caller just recovered (else it is recovered)."""
    coordinator = coordinator_for(job, store, clock, lease_token=lease_token)
    if completed is None:
        completed, _ = coordinator.recover()
    metas = sorted((c.metadata for c in completed), key=lambda m: m.checkpoint_id)
    up_to = checkpoint_id if checkpoint_id is not None else (metas[-1].checkpoint_id if metas else 0)
    committed: dict[str, tuple[int, ...]] = {}
    for uid, spec in sink_specs(job).items():
        sink = spec.create(store, job.job_id, uid)
        done = sink.committed_checkpoint_ids()
        records = [
            r
            for m in metas
            if m.checkpoint_id <= up_to and m.checkpoint_id not in done
            for r in records_from_metadata(m, uid)
        ]
        if records:
            coordinator.fence()
            committed[uid] = commit_pending_transactions(sink, records, up_to, kill=kill).committed
            kill(killpoints.MID_SINK_COMMIT, up_to)  # committed, operators not yet notified
    return committed


def apply_job_retention(
    job: Job,
    store: ObjectStore,
    clock: Clock,
    *,
    kill: KillSwitch = NO_KILL,
    lease_token: int | None = None,
) -> RetentionPlan:
    """Step 5: checkpoint retention, then the sinks' orphan sweep (same grace period); both fenced
    by the caller's lease (checked before deleting).

    The monitoring history archive is written first, so the rows of the checkpoints retention deletes
    outlive their folders; archiving is best effort: a failure is logged and retention runs anyway
    (see ``state_store.monitoring.archive``)."""
    from spark_jobs.sinks.sweep import sweep_job_sinks
    from state_store.monitoring.archive import archive_history

    try:
        archive_history(store, job.job_id)
    except Exception as exc:  # monitoring must never fail or block retention
        log.warning("checkpoint history of job %s not archived: %s", job.job_id, exc)
    config = job.checkpoint_config()
    coordinator = coordinator_for(job, store, clock, lease_token=lease_token)
    coordinator.fence()
    plan = apply_retention(store, job.job_id, config, clock, kill=kill)
    grace_ms = config.orphan_grace_ms
    coordinator.fence()
    sweep_job_sinks(store, job.job_id, sink_specs(job), now_ms=clock.now_ms(), grace_ms=grace_ms)
    return plan


@dataclass
class CycleReport:
    checkpoint_id: int | None
    status: CheckpointStatus
    summaries: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""
    rescale_plan: str = ""


class EpochCycle:
    """One run of steps 1-5 with one coordinator and one fencing token (a CLI command's epochs,
    one DAG run in the chaos driver). ``lease_token``: the caller holds the job's lease."""

    def __init__(
        self,
        job: Job,
        store_uri: str,
        clock: Clock,
        *,
        executor: Executor = "local",
        spark: Any = None,
        kill: KillSwitch = NO_KILL,
        lease_token: int | None = None,
    ) -> None:
        self.job = job
        self.store_uri = store_uri
        self.store = open_store(store_uri)
        self.clock = clock
        self.executor = executor
        self.spark = spark
        self.kill = kill
        self.lease_token = lease_token
        self.coordinator = coordinator_for(job, self.store, clock, kill, lease_token)

    def run_once(
        self, *, request_id: str = "", drain: bool = False, force: bool = False, gate: Gate | None = None
    ) -> CycleReport:
        """Steps 1-5 once. A crashed previous run leaves an undecided checkpoint: it is retried
        here as a new attempt of the same checkpoint when the request id matches, else aborted
        (failover)."""
        job, store, clock, kill, token = self.job, self.store, self.clock, self.kill, self.lease_token
        if not request_id:  # a new run: whatever earlier runs left undecided is abandoned
            self.coordinator.abort_undecided(CheckpointFailureReason.JOB_FAILOVER, "a new run started")
        plans: list[str] = []

        def log_rescale(parallelism: Parallelism, plan: str) -> None:
            log.warning("job %s: %s\n%s", job.job_id, parallelism.describe, plan)
            plans.append(f"{parallelism.describe}\n{plan}")

        try:
            pending = trigger_epoch(
                job,
                store,
                clock,
                request_id=request_id,
                force=drain or force,
                kill=kill,
                lease_token=token,
                log_rescale=log_rescale,
            )
        except JobStoppedError as exc:
            return CycleReport(None, CheckpointStatus.STOPPED, reason=str(exc))
        if pending is None:
            return CycleReport(None, CheckpointStatus.SKIPPED, reason="no new input")
        n = pending.checkpoint_id
        summaries = run_epoch(
            job,
            self.store_uri,
            n,
            clock,
            executor=self.executor,
            spark=self.spark,
            drain=drain,
            kill=kill,
            lease_token=token,
        )
        result = complete_epoch(job, store, clock, n, gate=gate, kill=kill, lease_token=token)
        if result.status is CheckpointStatus.COMPLETED:
            notify_epoch_complete(job, store, clock, n, kill=kill, lease_token=token)
        apply_job_retention(job, store, clock, kill=kill, lease_token=token)
        return CycleReport(n, result.status, summaries, result.message, "\n".join(plans))


def run_cycle(
    job: Job,
    store_uri: str,
    clock: Clock,
    *,
    executor: Executor = "local",
    spark: Any = None,
    request_id: str = "",
    drain: bool = False,
    force: bool = False,
    kill: KillSwitch = NO_KILL,
    gate: Gate | None = None,
    lease_token: int | None = None,
) -> CycleReport:
    """Steps 1-5 once (:meth:`EpochCycle.run_once`)."""
    cycle = EpochCycle(
        job, store_uri, clock, executor=executor, spark=spark, kill=kill, lease_token=lease_token
    )
    return cycle.run_once(request_id=request_id, drain=drain, force=force, gate=gate)


def job_record(job: Job, store: ObjectStore) -> JobRecord | None:
    """The job's record (None: it never ran in this store)."""
    return JobRecords(store, job.job_id).read()


__all__ = [
    "CycleReport",
    "EpochCycle",
    "JobStoppedError",
    "Parallelism",
    "RescaleRefused",
    "abort_abandoned",
    "apply_job_retention",
    "complete_epoch",
    "coordinator_for",
    "effective_parallelism",
    "ensure_running",
    "expected_tasks",
    "job_record",
    "notify_epoch_complete",
    "recover_chain",
    "run_cycle",
    "run_epoch",
    "sink_specs",
    "stopped_record",
    "trigger_epoch",
    "with_parallelism",
]
