"""Retention planning and the cleaner: never delete what a kept checkpoint references."""

from __future__ import annotations

from state_store.core import (
    AckRecord,
    CheckpointConfig,
    CheckpointFailureReason,
    CheckpointProperties,
    TaskId,
    checksums,
    load_completed,
)
from state_store.core.cleaner import apply_retention
from tests.unit.core.helpers import TASKS, Job, make_job

CONFIG = CheckpointConfig(timeout_ms=60_000, retained_checkpoints=2, orphan_grace_ms=10_000)


def keys(job: Job) -> set[str]:
    return {i.key for i in job.store.list("")}


def retain(job: Job, **kw: object):  # type: ignore[no-untyped-def]
    return apply_retention(job.store, job.job_id, job.coordinator.config, job.clock, **kw)  # type: ignore[arg-type]


def incremental_cycle(job: Job, shared_payload: bytes) -> int:
    """A checkpoint whose sink subtask references a shared (incremental) file."""
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    job.ack(n, TASKS[0])
    job.ack(n, TASKS[1])
    shared = job.responder.upload_shared("sink", shared_payload, fmt="bin")
    job.responder.acknowledge(
        AckRecord(n, TASKS[2], job.coordinator.pending_record(n).generation, 1, (shared,))
    )
    assert job.coordinator.complete(n).status == "completed"
    return n


def test_keeps_the_newest_n_and_deletes_older_checkpoint_folders() -> None:
    job = make_job(CONFIG)
    ids = [job.cycle() for _ in range(4)]
    plan = retain(job)
    assert plan.retained == (3, 4) and plan.discarded == (1, 2)
    layout = job.coordinator.layout
    assert not any(
        k.startswith(layout.checkpoint_dir(1)) or k.startswith(layout.checkpoint_dir(2)) for k in keys(job)
    )
    for n in ids[-2:]:
        load_completed(job.store, layout, n, deep=True)


def test_shared_file_survives_while_a_retained_checkpoint_references_it() -> None:
    job = make_job(CONFIG)
    shared_key = job.coordinator.layout.shared_file("sink", checksums.hex_of(b"S1"), "bin")
    for _ in range(3):
        incremental_cycle(job, b"S1")  # unchanged key group: same shared file every time
    job.clock.advance(60_000)
    retain(job)
    assert shared_key in keys(job)
    for _ in range(2):
        incremental_cycle(job, b"S2")  # changed: the old shared file is no longer referenced
    retain(job)
    assert shared_key not in keys(job)


def test_unreferenced_shared_file_younger_than_grace_is_kept() -> None:
    job = make_job(CONFIG)
    job.cycle()
    handle = job.responder.upload_shared("sink", b"about to be acked", fmt="bin")
    retain(job)
    assert handle.key in keys(job)
    job.clock.advance(10_001)
    retain(job)
    assert handle.key not in keys(job)


def test_in_flight_checkpoint_and_the_shared_files_its_acks_reference_are_never_deleted() -> None:
    job = make_job(CONFIG)
    first = incremental_cycle(job, b"S1")
    for _ in range(2):
        incremental_cycle(job, b"S2")
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    old_shared = load_completed(job.store, job.coordinator.layout, first).metadata.tasks[-1].handles[0]
    job.responder.acknowledge(AckRecord(n, TASKS[2], 1, 1, (old_shared,)))  # reuses an old file
    job.clock.advance(1_000_000)
    before = {k for k in keys(job) if k.startswith(job.coordinator.layout.checkpoint_dir(n))}
    plan = retain(job)
    assert old_shared.key in keys(job) and old_shared.key in plan.protected
    assert before <= keys(job)


def test_aborted_checkpoint_is_removed_only_after_the_grace_period() -> None:
    job = make_job(CONFIG)
    job.cycle()
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    job.ack(n, TASKS[0])
    job.coordinator.abort(n, CheckpointFailureReason.TASK_CHECKPOINT_FAILURE)
    job.cycle()
    retain(job)
    assert job.store.head(job.coordinator.layout.ack(n, "counter", 0, 1, 1)) is not None
    job.clock.advance(10_001)
    plan = retain(job)
    assert n in plan.discarded
    assert job.store.head(job.coordinator.layout.ack(n, "counter", 0, 1, 1)) is None


def test_savepoints_and_pinned_checkpoints_are_never_deleted() -> None:
    job = make_job(CONFIG)
    pinned = job.cycle()
    sp = job.coordinator.trigger(list(TASKS), properties=CheckpointProperties.savepoint_props()).checkpoint_id
    job.coordinator.start_attempt(sp)
    job.ack_all(sp)
    job.coordinator.complete(sp)
    for _ in range(4):
        job.cycle()
    job.clock.advance(1_000_000)
    retain(job, pinned=frozenset({pinned}))
    load_completed(job.store, job.coordinator.layout, pinned, deep=True)
    load_completed(job.store, job.coordinator.layout, sp, deep=True)


def test_unreadable_metadata_is_not_deleted() -> None:
    job = make_job(CONFIG)
    first = job.cycle()
    key = job.coordinator.layout.metadata(first)
    for _ in range(3):
        job.cycle()
    job.store.put(key, b"garbage")  # an old checkpoint: the head still verifies
    job.clock.advance(1_000_000)
    retain(job)
    assert job.store.get(key).data == b"garbage"
    assert any(k.startswith(job.coordinator.layout.checkpoint_dir(first) + "state/") for k in keys(job))


def test_checkpoint_ids_are_never_reused_after_retention() -> None:
    job = make_job(CONFIG)
    job.cycle()
    job.cycle()
    doomed = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.abort(doomed, CheckpointFailureReason.MANUALLY_ABORTED)
    job.clock.advance(1_000_000)
    retain(job)
    assert job.coordinator.trigger(list(TASKS)).checkpoint_id == doomed + 1


def test_plan_deletes_pending_record_first_and_metadata_last() -> None:
    job = make_job(CONFIG)
    for _ in range(3):
        job.cycle()
    plan = retain(job, dry_run=True)
    folder = [k for k in plan.delete if "chk-0000000001/" in k]
    assert folder[0].endswith("/_pending.json") and folder[-1].endswith("/_metadata.json")
    assert len(keys(job)) > 0 and all(k in keys(job) for k in plan.delete)  # dry run deleted nothing


def test_retention_interrupted_midway_is_finished_by_the_next_run() -> None:
    from state_store.testing import KillAt, SimulatedCrash

    job = make_job(CONFIG)
    for _ in range(4):
        job.cycle()
    try:
        retain(job, kill=KillAt("mid_retention"))
    except SimulatedCrash:
        pass
    completed, report = job.new_coordinator().recover(deep=True)
    assert report.chosen == 4
    plan = retain(job)
    assert plan.retained == (3, 4)
    assert not any("chk-0000000001/" in k or "chk-0000000002/" in k for k in keys(job))
    assert TaskId("sink", 0) in {t.task for t in completed.latest().metadata.tasks}  # type: ignore[union-attr]
