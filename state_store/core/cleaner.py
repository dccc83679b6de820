"""The cleaner: gather retention inputs from storage, plan (pure), delete in plan order.

Deleting is separate from deciding (as Flink's CheckpointsCleaner): the plan is computed first and
can be printed (dry run); execution deletes keys one by one, so a crash leaves a prefix of the
plan done and the next run finishes it (``mid_retention`` kill point after the first delete).
"""

from __future__ import annotations

from state_store.core import documents, killpoints
from state_store.core.codec import ManifestError
from state_store.core.config import CheckpointConfig
from state_store.core.layout import JobLayout
from state_store.core.manifests import AckRecord, CompletedMetadata, DecisionRecord, LatestPointer, Outcome
from state_store.core.ports import NO_KILL, Clock, KillSwitch, ObjectNotFound, ObjectStore
from state_store.core.retention import CheckpointFacts, RetentionInputs, RetentionPlan, plan_retention


def _facts(store: ObjectStore, layout: JobLayout, checkpoint_id: int, names: set[str]) -> CheckpointFacts:
    base = layout.checkpoint_dir(checkpoint_id)
    quarantined = "_quarantined.json" in names
    try:
        if "_metadata.json" in names:
            meta = documents.read(store, base + "_metadata.json", CompletedMetadata)
            return CheckpointFacts(
                checkpoint_id,
                "completed",
                frozenset(h.key for h in meta.handles),
                meta.properties.savepoint,
                quarantined,
                meta.completed_ms,
            )
        if "_decision.json" in names:
            decision = documents.read(store, base + "_decision.json", DecisionRecord)
            if decision.outcome is Outcome.ABORT:
                return CheckpointFacts(checkpoint_id, "aborted", decided_ms=decision.decided_ms)
            return CheckpointFacts(checkpoint_id, "in_flight", _ack_refs(store, layout, checkpoint_id))
        if "_pending.json" in names:
            return CheckpointFacts(checkpoint_id, "in_flight", _ack_refs(store, layout, checkpoint_id))
    except (ManifestError, ObjectNotFound):
        return CheckpointFacts(checkpoint_id, "unreadable")
    return CheckpointFacts(checkpoint_id, "orphan")


def _ack_refs(store: ObjectStore, layout: JobLayout, checkpoint_id: int) -> frozenset[str]:
    refs: set[str] = set()
    for info in store.list(layout.acks_prefix(checkpoint_id)):
        try:
            refs |= {h.key for h in documents.read(store, info.key, AckRecord).handles}
        except (ManifestError, ObjectNotFound):
            continue
    return frozenset(refs)


def gather_inputs(
    store: ObjectStore,
    layout: JobLayout,
    config: CheckpointConfig,
    clock: Clock,
    pinned: frozenset[int] = frozenset(),
) -> RetentionInputs:
    objects = tuple(store.list(layout.root))
    names: dict[int, set[str]] = {}
    for obj in objects:
        checkpoint_id = layout.checkpoint_id_of(obj.key)
        if checkpoint_id is not None:
            names.setdefault(checkpoint_id, set()).add(obj.key.rsplit("/", 1)[1])
    try:
        pointer_doc = documents.read_optional(store, layout.latest, LatestPointer)
        pointer = pointer_doc.checkpoint_id if pointer_doc else None
    except ManifestError:
        pointer = None
    stored_pins = {p for o in objects if (p := layout.pinned_id_of(o.key)) is not None}
    return RetentionInputs(
        job_root=layout.root,
        objects=objects,
        checkpoints=tuple(_facts(store, layout, i, n) for i, n in sorted(names.items())),
        retained_count=config.retained_checkpoints,
        now_ms=clock.now_ms(),
        grace_ms=config.orphan_grace_ms,
        pinned=frozenset(pinned) | frozenset(stored_pins),
        pointer=pointer,
    )


def execute(store: ObjectStore, plan: RetentionPlan, *, kill: KillSwitch = NO_KILL) -> int:
    """Delete the plan's keys in order; return how many were deleted."""
    newest_retained = max(plan.retained, default=None)  # ``mid_retention@n``: retention after n
    for count, key in enumerate(plan.delete, start=1):
        store.delete(key)
        if count == 1:
            kill(killpoints.MID_RETENTION, newest_retained)
    return len(plan.delete)


def apply_retention(
    store: ObjectStore,
    job_id: str,
    config: CheckpointConfig,
    clock: Clock,
    *,
    pinned: frozenset[int] = frozenset(),
    kill: KillSwitch = NO_KILL,
    dry_run: bool = False,
) -> RetentionPlan:
    """Plan retention for ``job_id`` and (unless ``dry_run``) carry it out."""
    plan = plan_retention(gather_inputs(store, JobLayout(job_id), config, clock, pinned))
    if not dry_run:
        execute(store, plan, kill=kill)
    return plan
