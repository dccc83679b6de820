"""The epoch cycle of DESIGN section 3 as plain functions (the DAG tasks and ``epochal run`` call
these, nothing else):

1. :func:`trigger_epoch` -- barrier positions per source partition (capped by
   ``max_records_per_epoch``), expected acks, restore base; allocates checkpoint n. None when there
   is no new input (the DAG run short-circuits).
2. :func:`run_epoch` -- registers an attempt and runs every subtask (Spark or in process).
   In ``at_least_once`` mode the sinks' output becomes visible here (a non-transactional sink).
3. :func:`complete_epoch` -- the coordinator collects acks and commits or aborts.
4. :func:`notify_epoch_complete` -- sinks commit every pre-committed transaction up to n
   (``recover_and_commit`` after a crash: idempotent).
5. :func:`apply_job_retention`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from spark_jobs.api.graph import Stage
from spark_jobs.api.job import Job
from spark_jobs.runtime import plan as topo
from spark_jobs.runtime.executors import run_in_process, run_on_spark
from spark_jobs.runtime.plan import EpochPlan
from state_store.core import documents, killpoints
from state_store.core.ack_bundles import write_ack_bundle
from state_store.core.cleaner import apply_retention
from state_store.core.coordinator import CheckpointCoordinator, CompletionResult, Gate
from state_store.core.failures import CheckpointException, CheckpointFailureReason
from state_store.core.layout import JobLayout
from state_store.core.manifests import AckBundleEntry, AckRecord, PendingRecord, TaskId
from state_store.core.ports import NO_KILL, Clock, KillSwitch, ObjectStore, StoreError
from state_store.core.properties import CheckpointProperties
from state_store.core.retention import RetentionPlan
from state_store.core.twophase import (
    PreCommittedTxn,
    commit_pending_transactions,
    records_from_metadata,
    records_from_snapshot,
)
from state_store.storage import open_store

Executor = str  # "local" (in process) or "spark"
log = logging.getLogger(__name__)


def coordinator_for(
    job: Job, store: ObjectStore, clock: Clock, kill: KillSwitch = NO_KILL
) -> CheckpointCoordinator:
    return CheckpointCoordinator(
        store,
        job.job_id,
        clock=clock,
        config=job.checkpoint_config(),
        kill=kill,
        max_parallelism=job.max_parallelism,
    )


def sink_specs(job: Job) -> dict[str, Any]:
    """Every sink of the job by uid (main sinks and window late-data sinks)."""
    specs: dict[str, Any] = {}
    for step in job.graph.steps:
        if step.kind == "sink" and step.uid:
            specs[step.uid] = step.spec["sink"]
        if step.kind == "window" and step.spec.get("late_output") is not None:
            specs[f"{step.uid}-late"] = step.spec["late_output"]
    return specs


def expected_tasks(job: Job) -> list[TaskId]:
    """Who must acknowledge: every source partition, stateful operator subtask and sink subtask."""
    stages = job.graph.stages()
    tasks: list[TaskId] = []
    for stage in stages:
        n = topo.width(stage, job)
        for step in stage.steps:
            uids = [step.uid] if step.stateful and step.uid else []
            if step.kind == "window" and step.spec.get("late_output") is not None:
                uids.append(f"{step.uid}-late")
            tasks.extend(TaskId(uid, i) for uid in uids for i in range(n))
    return tasks


class JobStoppedError(RuntimeError):
    """The job was stopped with a savepoint; epochs resume only after a restore."""


def stopped_marker(job_id: str) -> str:
    return f"{job_id}/_stopped.json"


def ensure_running(job: Job, store: ObjectStore) -> None:
    raw = store.head(stopped_marker(job.job_id))
    if raw is not None:
        info = json.loads(store.get(stopped_marker(job.job_id)).data)
        raise JobStoppedError(
            f"job {job.job_id} was stopped with savepoint {info.get('savepoint')!r}: restore from "
            f"{info.get('location')} (or another snapshot) to resume"
        )


def abort_abandoned(job: Job, store: ObjectStore, clock: Clock, request_id: str) -> list[int]:
    """Abort the undecided checkpoints of other requests (earlier runs that died: with one active
    run per job, nobody else can still be working on them) -- Flink's abort on failover."""
    coordinator = coordinator_for(job, store, clock)
    aborted = []
    for checkpoint_id in coordinator.undecided_ids():
        if coordinator.pending_record(checkpoint_id).request_id != request_id:
            coordinator.abort(
                checkpoint_id, CheckpointFailureReason.JOB_FAILOVER, f"superseded by run {request_id}"
            )
            aborted.append(checkpoint_id)
    return aborted


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
) -> PendingRecord | None:
    """Step 1 (see module docstring). Returns None when no source has new input (and not forced)."""
    if not savepoint:
        ensure_running(job, store)
    coordinator = coordinator_for(job, store, clock, kill)
    notify_epoch_complete(job, store, clock, None, kill=kill)  # recover_and_commit after a crash
    for checkpoint_id in coordinator.undecided_ids():
        pending = coordinator.pending_record(checkpoint_id)
        if request_id and pending.request_id == request_id:
            return pending  # the retried trigger of the same run
        # Epochs are sequential: a new one (even forced, even a savepoint) would read the same input
        # range from the same base as the undecided one, and both could commit it.
        raise CheckpointException(
            CheckpointFailureReason.TOO_MANY_CONCURRENT_CHECKPOINTS,
            f"checkpoint {checkpoint_id} of job {job.job_id} is still undecided: let it complete, or "
            "abort it (a new run aborts the checkpoints of dead runs)",
        )
    latest = coordinator.latest_completed()
    base = latest.metadata.positions.get("ranges", {}) if latest else {}
    now = clock.now_ms()
    ranges: dict[str, list[int]] = {}
    for stage in _source_stages(job):
        source = stage.steps[0].spec["source"]
        uid = stage.steps[0].uid or source.uid
        available = source.end_offsets(now)
        for partition in source.partitions():
            key = topo.position_key(uid, partition)
            start = int(base.get(key, [0, 0])[1])
            end = max(start, min(int(available.get(partition, start)), start + job.max_records_per_epoch))
            if savepoint:
                end = start  # a savepoint cuts the stream where the latest checkpoint did
            ranges[key] = [start, end]
    has_new_input = any(end > start for start, end in ranges.values())
    props = (
        CheckpointProperties.savepoint_props()
        if savepoint
        else CheckpointProperties.forced_checkpoint()
        if force
        else CheckpointProperties.checkpoint()
    )
    try:
        return coordinator.trigger(
            expected_tasks(job),
            properties=props,
            positions={"ranges": ranges, "base": latest.checkpoint_id if latest else None},
            has_new_input=has_new_input,
            request_id=request_id,
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
) -> list[dict[str, Any]]:
    """Step 2: one new attempt of epoch n, restoring from the base recorded at trigger time."""
    store = open_store(store_uri)
    coordinator = coordinator_for(job, store, clock, kill)
    pending = coordinator.pending_record(checkpoint_id)
    attempt = coordinator.start_attempt(checkpoint_id)
    plan = EpochPlan(
        job=job,
        store_uri=store_uri,
        checkpoint_id=checkpoint_id,
        attempt=attempt.attempt,
        generation=pending.generation,
        trigger_ms=pending.trigger_ms,
        savepoint=pending.properties.savepoint,
        positions=dict(pending.positions.get("ranges", {})),
        restore_id=pending.positions.get("base"),
        drain=drain,
    )
    acks: list[AckBundleEntry] = []
    if executor == "spark":
        summaries = run_on_spark(spark, plan, acks)
    elif executor == "local":
        summaries = run_in_process(plan, acks)
    else:
        raise ValueError(f"executor {executor!r} is unknown: use 'local' or 'spark'")
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
            commit_pending_transactions(spec.create(store, job.job_id, uid), mine, checkpoint_id, kill=kill)


def complete_epoch(
    job: Job,
    store: ObjectStore,
    clock: Clock,
    checkpoint_id: int,
    *,
    gate: Gate | None = None,
    kill: KillSwitch = NO_KILL,
) -> CompletionResult:
    """Step 3."""
    return coordinator_for(job, store, clock, kill).complete(checkpoint_id, gate=gate)


def notify_epoch_complete(
    job: Job, store: ObjectStore, clock: Clock, checkpoint_id: int | None, *, kill: KillSwitch = NO_KILL
) -> dict[str, tuple[int, ...]]:
    """Step 4: commit the sink transactions of every completed checkpoint up to n (None: the
    latest) that is not committed yet, oldest first. Idempotent; finishes an interrupted commit."""
    coordinator = coordinator_for(job, store, clock)
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
            committed[uid] = commit_pending_transactions(sink, records, up_to, kill=kill).committed
            kill(killpoints.MID_SINK_COMMIT, up_to)  # committed, operators not yet notified
    return committed


def apply_job_retention(
    job: Job, store: ObjectStore, clock: Clock, *, kill: KillSwitch = NO_KILL
) -> RetentionPlan:
    """Step 5: checkpoint retention, then the sinks' orphan sweep (same grace period).

    The monitoring history archive is written first, so the rows of the checkpoints retention deletes
    outlive their folders; archiving is best effort: a failure is logged and retention runs anyway
    (see ``state_store.monitoring.archive``)."""
    import logging

    from spark_jobs.sinks.sweep import sweep_job_sinks
    from state_store.monitoring.archive import archive_history

    try:
        archive_history(store, job.job_id)
    except Exception as exc:  # monitoring must never fail or block retention
        logging.getLogger(__name__).warning("checkpoint history of job %s not archived: %s", job.job_id, exc)
    config = job.checkpoint_config()
    plan = apply_retention(store, job.job_id, config, clock, kill=kill)
    grace_ms = config.orphan_grace_ms
    sweep_job_sinks(store, job.job_id, sink_specs(job), now_ms=clock.now_ms(), grace_ms=grace_ms)
    return plan


@dataclass
class CycleReport:
    checkpoint_id: int | None
    status: str
    summaries: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""


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
) -> CycleReport:
    """Steps 1-5 once. A crashed previous run leaves an undecided checkpoint: it is retried here
    as a new attempt of the same checkpoint when the request id matches, else aborted (failover)."""
    store = open_store(store_uri)
    coordinator = coordinator_for(job, store, clock, kill)
    if not request_id:
        coordinator.failover()
    try:
        ensure_running(job, store)
    except JobStoppedError as exc:
        return CycleReport(None, "stopped", reason=str(exc))
    pending = trigger_epoch(job, store, clock, request_id=request_id, force=drain or force, kill=kill)
    if pending is None:
        return CycleReport(None, "skipped", reason="no new input")
    n = pending.checkpoint_id
    summaries = run_epoch(job, store_uri, n, clock, executor=executor, spark=spark, drain=drain, kill=kill)
    result = complete_epoch(job, store, clock, n, gate=gate, kill=kill)
    if result.status == "completed":
        notify_epoch_complete(job, store, clock, n, kill=kill)
    apply_job_retention(job, store, clock, kill=kill)
    return CycleReport(n, result.status, summaries, result.message)


def take_savepoint(
    job: Job,
    store_uri: str,
    clock: Clock,
    name: str,
    *,
    fmt: str = "parquet",
    executor: Executor = "local",
    spark: Any = None,
    request_id: str = "",
    stop: bool = False,
) -> dict[str, Any]:
    """Trigger a savepoint (forced, always aligned, at the latest checkpoint's positions), run its
    epoch, complete it, and write it self-contained to ``<root>/<job>/savepoints/<name>/``.
    Savepoints never move LATEST and are never deleted by retention. ``stop``: stop-with-savepoint
    -- no epoch runs after it until the job is restored (from this savepoint or another snapshot)."""
    from spark_jobs.snapshots import _from_metadata, savepoint_location, savepoint_store, write_savepoint

    location = savepoint_location(store_uri, job.job_id, name)  # a bad name is refused before any write
    store = open_store(store_uri)
    pending = trigger_epoch(job, store, clock, request_id=request_id or f"savepoint-{name}", savepoint=True)
    assert pending is not None  # forced: never skipped
    run_epoch(job, store_uri, pending.checkpoint_id, clock, executor=executor, spark=spark)
    result = complete_epoch(job, store, clock, pending.checkpoint_id)
    if result.status != "completed" or result.checkpoint is None:
        raise RuntimeError(
            f"savepoint {name!r} failed: checkpoint {pending.checkpoint_id} {result.status}: {result.message}"
        )
    snapshot = _from_metadata(
        store,
        result.checkpoint.metadata,
        job.max_parallelism,
        f"{store.uri} checkpoint {pending.checkpoint_id}",
    )
    body = write_savepoint(snapshot, savepoint_store(location), name, fmt=fmt, created_ms=clock.now_ms())
    if stop:
        marker = {"format_version": 1, "savepoint": name, "location": location, "stopped_ms": clock.now_ms()}
        store.put(stopped_marker(job.job_id), json.dumps(marker).encode())
    return {
        "stopped": stop,
        "name": name,
        "location": location,
        "checkpoint_id": pending.checkpoint_id,
        "operators": sorted(body["operators"]),
    }
