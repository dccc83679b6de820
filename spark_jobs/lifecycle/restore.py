"""Restore a job from a checkpoint or a savepoint (Flink's ``-s`` with uid mapping and rescaling).

Steps (nothing is written before step 3, so a refused or dry-run restore changes nothing; the
caller holds the job's lease for steps 3-6):

1. read and verify the snapshot (a completed checkpoint of this job, or a savepoint folder at any
   location -- refused if it belongs to another job, unless ``allow_foreign``);
2. plan (pure, ``state_store.core.restore``): uid matches and renames, new operators,
   dropped state (refused unless ``allow_non_restored_state``), parallelism change, state kind and
   schema compatibility; ``dry_run`` stops here and returns the plan. A job whose latest
   checkpoint does not verify is refused here too, unless ``force`` (then step 5 retracts);
3. abort in-flight checkpoints (failover), then *import* the snapshot as a new completed
   checkpoint n of the job: every kept operator's key groups re-split for the new parallelism,
   timers per key group, source positions and watermark state;
4. **commit** n: one fenced compare-and-swap of the job record makes n the chain head, starts a
   new generation restored from n (an epoch triggered before it can never complete after it;
   zombies of the old generation are fenced; sinks are fenced too) and records the parallelism,
   which sticks for the epochs after it;
5. a forced restore past a damaged latest checkpoint retracts the sink output committed after the
   restored checkpoint, so reprocessing replaces it instead of doubling it;
6. NO_CLAIM (default) pins a restored checkpoint of this job so retention never deletes it; CLAIM
   lets the job own it. A savepoint's folder is never modified or deleted either way.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import posixpath
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from spark_jobs.api.job import Job
from spark_jobs.api.specs import SOURCE_STATE, SourceSpec
from spark_jobs.lifecycle.pins import pin
from spark_jobs.lifecycle.snapshots import Snapshot, SnapshotError, from_checkpoint, read_savepoint
from spark_jobs.runtime import plan as topo
from spark_jobs.runtime.cycle import coordinator_for, expected_tasks, sink_specs
from spark_jobs.runtime.state_io import STATE_FILES, timers_to_json
from state_store.core.completed import ChainHeadError
from state_store.core.coordinator import RestoreCommit
from state_store.core.failures import CheckpointFailureReason
from state_store.core.keygroups import KeyGroupRange, check_parallelism, key_group_range_for_subtask
from state_store.core.layout import JobLayout
from state_store.core.manifests import AckRecord, JobRecord, StateHandle, TaskId
from state_store.core.ports import NO_KILL, Clock, KillSwitch, ObjectStore
from state_store.core.positions import BarrierPositions, RestoreFollowUp
from state_store.core.properties import CheckpointProperties
from state_store.core.responder import TaskCheckpointResponder
from state_store.core.restore import (
    JobShape,
    OperatorShape,
    RestoreOptions,
    RestorePlan,
    SnapshotShape,
    plan_restore,
)
from state_store.formats.keyed import encode_key_groups
from state_store.lease_keeper import HeldLease
from state_store.storage import open_store


@dataclass
class RestoreRequest:
    source: str = "latest"  # "latest" | checkpoint id | savepoint location URI
    allow_non_restored_state: bool = False
    uid_map: dict[str, str] = field(default_factory=dict)
    claim_mode: str = "NO_CLAIM"
    allow_foreign: bool = False
    dry_run: bool = False
    force: bool = False  # restore even if the snapshot's validation failed
    # Snapshot roots: when given (the entry points pass EPOCHAL_SNAPSHOT_ROOTS: comma-separated URIs), a
    # savepoint location must lie under one of them or under the job's store, unless allow_outside_roots.
    roots: tuple[str, ...] = ()
    allow_outside_roots: bool = False


def roots_from_text(text: str) -> tuple[str, ...]:
    """The snapshot roots of an ``EPOCHAL_SNAPSHOT_ROOTS`` value (comma-separated storage URIs)."""
    return tuple(r.strip() for r in text.split(",") if r.strip())


def configured_roots(request: RestoreRequest) -> tuple[str, ...]:
    return tuple(request.roots)


def _under(location: str, root: str) -> bool:
    loc, base = urlsplit(location), urlsplit(root)
    if (loc.scheme, loc.netloc, loc.query) != (base.scheme, base.netloc, base.query):
        return False
    if ".." in loc.path.split("/") or "\0" in location:
        return False
    path, prefix = posixpath.normpath(loc.path or "/"), posixpath.normpath(base.path or "/")
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def check_location(store_uri: str, source: str, request: RestoreRequest) -> None:
    """Refuse a savepoint location outside the configured roots (see ``RestoreRequest.roots``)."""
    roots = configured_roots(request)
    if source == "latest" or source.isdigit() or not roots or request.allow_outside_roots:
        return
    if not any(_under(source, root) for root in (store_uri, *roots)):
        raise SnapshotError(
            f"snapshot location {source!r} is outside the configured snapshot roots "
            f"({', '.join(roots)}) and the job's store: move it under one of them, add its root to "
            "EPOCHAL_SNAPSHOT_ROOTS, or allow it explicitly (allow_outside_roots)"
        )


def commit_lineage(
    job: Job, store: ObjectStore, checkpoint_id: int, coordinator: Any, kill: KillSwitch = NO_KILL
) -> dict[str, tuple[int, ...]]:
    """Commit the sink transactions of checkpoint ``checkpoint_id`` and of its ancestors (by their
    ``base`` links: never a checkpoint the job fell back from) that a sink has not committed yet (a
    run that died between its completion and its notify). A restore does this before it fences the
    sinks with the new generation: the restored checkpoint's output belongs to the lineage it
    continues, and after the fence it could never be committed."""
    from spark_jobs.runtime.cycle import sink_specs
    from state_store.core.completed import lineage, load_completed
    from state_store.core.twophase import commit_pending_transactions, records_from_metadata

    layout = JobLayout(job.job_id)
    restored = load_completed(store, layout, checkpoint_id)
    metas = [c.metadata for c in reversed(lineage(store, layout, restored, 10**9, False))]
    committed: dict[str, tuple[int, ...]] = {}
    for uid, spec in sink_specs(job).items():
        sink = spec.create(store, job.job_id, uid)
        done = sink.committed_checkpoint_ids()
        records = [r for m in metas if m.checkpoint_id not in done for r in records_from_metadata(m, uid)]
        if records:
            coordinator.fence()
            committed[uid] = commit_pending_transactions(sink, records, checkpoint_id, kill=kill).committed
    return committed


def load_snapshot(job: Job, store: ObjectStore, store_uri: str, source: str, clock: Clock) -> Snapshot:
    if source == "latest":
        latest = coordinator_for(job, store, clock).latest_completed()
        if latest is None:
            raise SnapshotError(f"job {job.job_id} has no completed checkpoint to restore from")
        return from_checkpoint(store, job.job_id, latest.checkpoint_id, job.max_parallelism)
    if source.isdigit():
        return from_checkpoint(store, job.job_id, int(source), job.max_parallelism)
    return read_savepoint(source)


def damaged_head(job: Job, store: ObjectStore, clock: Clock) -> ChainHeadError | None:
    """Why the job's latest completed checkpoint cannot be used (None: it verifies, or its commit
    was only interrupted: the restore rolls it forward under the job's lease)."""
    try:
        coordinator_for(job, store, clock).latest_completed()
    except ChainHeadError as exc:
        return None if exc.interrupted else exc
    return None


def import_snapshot(
    job: Job,
    store: ObjectStore,
    clock: Clock,
    snapshot: Snapshot,
    request: RestoreRequest,
    request_id: str,
    *,
    declared_parallelism: int | None = None,
    lease_token: int | None = None,
    retract_after: int | None = None,
    kill: KillSwitch = NO_KILL,
) -> int:
    """Steps 3-6 of the module docstring; returns the id of the imported checkpoint.

    ``declared_parallelism``: the job definition's parallelism (``job`` may be rescaled);
    ``retract_after``: withdraw the sinks' commits above this checkpoint (step 5)."""
    coordinator = coordinator_for(job, store, clock, kill, lease_token=lease_token)
    responder = TaskCheckpointResponder(store, job.job_id, kill=kill)
    coordinator.abort_undecided(CheckpointFailureReason.JOB_FAILOVER, f"restore {request_id}")
    if snapshot.kind == "checkpoint" and snapshot.checkpoint_id is not None and snapshot.job_id == job.job_id:
        commit_lineage(job, store, snapshot.checkpoint_id, coordinator, kill)
    renamed = {request.uid_map.get(uid, uid): op for uid, op in snapshot.operators.items()}
    ranges = {k: (end, end) for k, end in snapshot.positions.items()}
    acks: list[tuple[TaskId, tuple[StateHandle, ...], dict[str, Any]]] = []
    for stage in job.graph.stages():
        width = topo.width(stage, job)
        for step in stage.steps:
            if not (step.stateful and step.uid):
                continue
            if isinstance(step.spec, SourceSpec):
                entries = {e.get("partition"): e for e in snapshot.sources.get(step.uid, [])}
                for i, partition in enumerate(topo.source_partitions(stage)):
                    entry = dict(entries.get(partition, {"partition": partition, "max_ts": None}))
                    entry["position"] = snapshot.positions.get(topo.position_key(step.uid, partition), 0)
                    acks.append((TaskId(step.uid, i), (), {"source": entry}))
                continue
            if not step.spec.restorable or step.uid not in renamed:
                continue  # sinks restore nothing; a new operator starts empty
            op = renamed[step.uid]
            for subtask in range(width):
                owned = key_group_range_for_subtask(job.max_parallelism, job.parallelism, subtask)
                files: dict[str, Any] = {}
                written: list[StateHandle] = []
                if op.keyed is not None:
                    for kg in owned:
                        part = op.keyed.part(KeyGroupRange(kg, kg))
                        if part.key_groups:
                            data = encode_key_groups(part, "arrow")
                            handle = responder.upload_shared(step.uid, data, "arrow")
                            files[str(kg)] = handle.to_json()
                            written.append(handle)
                timers = {kg: doms for kg, doms in op.timers.items() if kg in owned}
                snap = {STATE_FILES: files, "timers": timers_to_json(timers), "extra": {}}
                acks.append((TaskId(step.uid, subtask), tuple(written), snap))
    declared = declared_parallelism if declared_parallelism is not None else job.parallelism
    expected = [task for task, _, _ in acks] or expected_tasks(job)
    pending = coordinator.trigger(
        expected,
        properties=CheckpointProperties.forced_checkpoint(),
        positions=BarrierPositions(
            ranges,
            base=None,
            restored_from=snapshot.location,
            # what the restore does after its commit, rolled forward by whoever holds the job next
            # if the restore dies in between (``finish_restore``)
            follow_up=RestoreFollowUp(
                retract_after=retract_after,
                rewound_to=snapshot.checkpoint_id if snapshot.job_id == job.job_id else None,
                pin=snapshot.checkpoint_id
                if snapshot.kind == "checkpoint" and request.claim_mode == "NO_CLAIM"
                else None,
            ),
        ).to_json(),
        request_id=request_id,
        parallelism=job.parallelism,
        declared_parallelism=declared,
        restoring=True,
    )
    n = pending.checkpoint_id
    attempt = coordinator.start_attempt(n).attempt
    for task, handles, snap in acks:
        responder.acknowledge(AckRecord(n, task, pending.generation, attempt, handles, snapshot=snap))
    result = coordinator.complete(n, restore=RestoreCommit(job.parallelism, declared))
    if result.status != "completed":
        raise SnapshotError(
            f"importing the snapshot as checkpoint {n} failed: {result.status} {result.message}"
        )
    finish_restore(job, store, coordinator)
    return n


def finish_restore(job: Job, store: ObjectStore, coordinator: Any) -> bool:
    """Steps after a restore's commit point, idempotent, for the job's chain head when it is a
    restore's import: the stopped job resumes, the sinks are fenced with the new generation, the
    output committed after the restored checkpoint is retracted (a forced restore past a damaged
    latest checkpoint), the restored checkpoint is pinned (NO_CLAIM). The restore runs them itself;
    if it died after its commit, the next holder of the job's lease does (``recover_chain``).
    The steps run once per import (``JobRecord.restore_finished``), so a stop or an unpin made
    after the restore stands. Returns whether they ran now."""
    record = coordinator.job()
    head = record.head if record.chained else None
    if head is None or head.base is not None or record.restore_finished == head.checkpoint_id:
        return False
    pending = coordinator.pending_record(head.checkpoint_id)
    follow_up = pending.barrier.follow_up
    if follow_up is None:
        return False
    n = head.checkpoint_id
    coordinator.fence()
    store.delete(JobLayout(job.job_id).stopped)  # a stopped job resumes after a restore
    retract_after = follow_up.retract_after
    for uid, spec in sink_specs(job).items():
        sink = spec.create(store, job.job_id, uid)
        sink.fence(record.generation)
        if isinstance(retract_after, int):
            reason = f"restore into checkpoint {n} resumed from checkpoint {retract_after}"
            sink.retract_after(retract_after, record.generation, reason, before=n)
        elif isinstance(follow_up.rewound_to, int) and getattr(spec, "on_rewind", "keep") == "overwrite":
            # the sink's documented policy: the rewound run's output after the restored cut goes
            reason = f"restore into checkpoint {n} rewound to checkpoint {follow_up.rewound_to}"
            sink.retract_after(follow_up.rewound_to, record.generation, reason, before=n)
    pinned = follow_up.pin
    if isinstance(pinned, int):
        pin(store, job.job_id, pinned, f"restored NO_CLAIM into checkpoint {n}")

    def done(current: JobRecord) -> JobRecord:
        return dataclasses.replace(current, restore_finished=n)

    coordinator.records.fenced_update(coordinator.lease_token, done)  # once: later stops/unpins stand
    return True


def job_shape(job: Job) -> JobShape:
    """Every step with a uid as the job declares it: whether a restore maps state onto it, keyed
    or not, its parallelism and the states its spec keeps (``StepSpec.state_kinds``)."""
    operators = []
    for stage in job.graph.stages():
        width = topo.width(stage, job)
        for step in stage.steps:
            if step.uid:
                spec = step.spec
                operators.append(
                    OperatorShape(step.uid, spec.restorable, spec.keyed, width, spec.state_kinds())
                )
    return JobShape(job.job_id, job.max_parallelism, tuple(operators))


def snapshot_shape(snapshot: Snapshot) -> SnapshotShape:
    operators = [
        OperatorShape(uid, True, True, op.parallelism, op.kinds)
        for uid, op in sorted(snapshot.operators.items())
    ]
    operators += [
        OperatorShape(uid, True, False, len(entries), dict(SOURCE_STATE))
        for uid, entries in sorted(snapshot.sources.items())
    ]
    return SnapshotShape(
        snapshot.job_id,
        snapshot.max_parallelism,
        snapshot.kind,
        snapshot.checkpoint_id,
        snapshot.location,
        tuple(operators),
    )


@dataclass
class RestoreReport:
    plan: RestorePlan
    checkpoint_id: int | None = None  # the imported checkpoint (None for a dry run)


@dataclass
class _Prepared:
    job: Job
    declared: int
    snapshot: Snapshot
    plan: RestorePlan
    damaged: ChainHeadError | None


def _prepare(
    job: Job,
    store: ObjectStore,
    store_uri: str,
    clock: Clock,
    request: RestoreRequest,
    parallelism: int | None,
) -> _Prepared:
    """Steps 1-2 (read only): the snapshot, the plan, and why the latest checkpoint is unusable."""
    damaged = damaged_head(job, store, clock)
    if damaged is not None and request.source == "latest":
        raise damaged
    if damaged is not None and not request.force:
        raise ChainHeadError(
            f"{damaged} (pass --force to restore from {request.source} anyway)",
            damaged.checkpoint_id,
            damaged.key,
            damaged.base,
        )
    snapshot = load_snapshot(job, store, store_uri, request.source, clock)
    if snapshot.kind == "checkpoint" and snapshot.checkpoint_id is not None and snapshot.job_id == job.job_id:
        _refuse_retracted_lineage(job, store, snapshot.checkpoint_id)
    declared = job.parallelism
    if parallelism is not None and parallelism != job.parallelism:
        job = copy.copy(job)
        check_parallelism(job.max_parallelism, parallelism)
        job.parallelism = parallelism
    options = RestoreOptions(
        allow_non_restored_state=request.allow_non_restored_state,
        uid_map=dict(request.uid_map),
        parallelism=None,
        claim_mode=request.claim_mode,
        allow_foreign=request.allow_foreign,
    )
    plan = plan_restore(job_shape(job), snapshot_shape(snapshot), options)
    return _Prepared(job, declared, snapshot, plan, damaged)


def _refuse_retracted_lineage(job: Job, store: ObjectStore, checkpoint_id: int) -> None:
    """A checkpoint whose own output, or an ancestor's, a sink retracted (an earlier forced restore
    resumed before it) cannot be restored: its state says that output was emitted, the sink says it
    was withdrawn, so resuming from it would lose it."""
    from state_store.core.completed import lineage, load_completed

    layout = JobLayout(job.job_id)
    ids = {
        c.checkpoint_id
        for c in lineage(store, layout, load_completed(store, layout, checkpoint_id), 10**9, False)
    }
    for uid, spec in sink_specs(job).items():
        sink = spec.create(store, job.job_id, uid)
        retracted = sorted(
            ids & getattr(sink, "retracted_ids", frozenset)()
        )  # sinks that never retract: none
        if retracted:
            raise SnapshotError(
                f"the output of checkpoint(s) {retracted} (checkpoint {checkpoint_id} and the ones it "
                f"continues) was retracted from sink {uid} by a forced restore that resumed before "
                f"them: restoring checkpoint {checkpoint_id} would lose it; restore from a checkpoint "
                f"older than {retracted[0]}, or from a savepoint"
            )


def _accept(prepared: _Prepared, request: RestoreRequest) -> None:
    """Refuse a plan that loses state, or a snapshot that fails validation (unless forced)."""
    prepared.plan.raise_if_refused()
    if not request.force:
        from spark_jobs.lifecycle.checks import validate_snapshot_of

        result = validate_snapshot_of(prepared.job, prepared.snapshot)
        if not result.passed:
            raise SnapshotError(
                f"the snapshot at {prepared.snapshot.location} fails validation ({result.summary_line()}): "
                "restore from another snapshot, or pass --force to restore it anyway"
            )


def restore(
    job: Job,
    store_uri: str,
    clock: Clock,
    request: RestoreRequest,
    *,
    parallelism: int | None = None,
    request_id: str = "",
    lease_token: int | None = None,
    hold: HeldLease | None = None,
    kill: KillSwitch = NO_KILL,
) -> RestoreReport:
    """Plan, then (unless ``dry_run`` or refused) import the snapshot -- see the module docstring.

    The caller holds the job's lease (``lease_token``), or passes ``hold``: the lease is then taken
    only once the plan is accepted, so a refused restore changes nothing at all; and since the job
    may have moved on while it waited for the lease, ``latest`` is read again under the lease (the
    restore imports the latest checkpoint at the time it commits, never an older one it saw first).
    """
    check_location(store_uri, request.source, request)
    store = open_store(store_uri)
    with contextlib.ExitStack() as stack:
        held: HeldLease | None = None
        try:
            if _interrupted_head(job, store, clock):
                raise ChainHeadError("", 0, "", interrupted=True)
            prepared = _prepare(job, store, store_uri, clock, request, parallelism)
        except ChainHeadError as exc:
            if not exc.interrupted or request.dry_run:
                raise
            # a commit not written yet (in progress, or its writer died): finish it under the lease
            # -- a running commit holds the lease, so this waits (--wait) or says who is busy
            held = stack.enter_context(hold) if hold is not None else None
            _finish_interrupted(job, store, clock, held.token if held is not None else lease_token, kill)
            prepared = _prepare(job, store, store_uri, clock, request, parallelism)
        if request.dry_run:
            return RestoreReport(prepared.plan)
        _accept(prepared, request)
        if held is None and hold is not None:
            held = stack.enter_context(hold)
        token = held.token if held is not None else lease_token
        _finish_interrupted(job, store, clock, token, kill)
        if held is not None and request.source == "latest":
            seen = prepared.snapshot.checkpoint_id
            prepared = _prepare(job, store, store_uri, clock, request, parallelism)
            if prepared.snapshot.checkpoint_id != seen:
                _accept(prepared, request)
        retract_after = None
        if prepared.damaged is not None:  # at least the damaged checkpoint's output: it is reprocessed
            snapshot = prepared.snapshot
            # the checkpoint whose cut the snapshot holds (a savepoint of this job names the one
            # it was taken as; its cut is its base's): every output committed after it is redone
            known = snapshot.checkpoint_id if snapshot.job_id == job.job_id else None
            retract_after = known if known is not None else prepared.damaged.checkpoint_id - 1
        n = import_snapshot(
            prepared.job,
            store,
            clock,
            prepared.snapshot,
            request,
            request_id or f"restore-{clock.now_ms()}",
            declared_parallelism=prepared.declared,
            lease_token=token,
            retract_after=retract_after,
            kill=kill,
        )
    return RestoreReport(prepared.plan, n)


def _interrupted_head(job: Job, store: ObjectStore, clock: Clock) -> bool:
    """Whether the job's latest checkpoint was committed but its commit was interrupted."""
    try:
        coordinator_for(job, store, clock).latest_completed()
    except ChainHeadError as exc:
        return exc.interrupted
    return False


def _finish_interrupted(
    job: Job, store: ObjectStore, clock: Clock, token: int | None, kill: KillSwitch
) -> None:
    """Under the job's lease: finish an interrupted commit, and the follow-up of a restore that died
    after its own commit, before this restore reads the job."""
    coordinator = coordinator_for(job, store, clock, kill, lease_token=token)
    coordinator.roll_forward()
    finish_restore(job, store, coordinator)
