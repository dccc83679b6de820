"""Every way a restore loses something is reported (issue 22 review): a snapshot whose place in the
job's chain is unknown (another job's, or a savepoint naming no checkpoint) replaces the job's state
and must wait for a person; a changed max_parallelism is refused outright; a plan of the job's own
latest checkpoint stays lossless (never held with auto_approve)."""

from __future__ import annotations

from spark_jobs.lifecycle.restore_losses import restore_losses
from state_store.core.restore import (
    JobShape,
    OperatorShape,
    RestoreOptions,
    RestorePlan,
    SnapshotShape,
    plan_restore,
)


def op(uid: str = "a", parallelism: int = 2) -> OperatorShape:
    return OperatorShape(uid, True, True, parallelism, {"acc": "value"})


def plan(
    *,
    snap_job: str = "j",
    kind: str = "checkpoint",
    checkpoint_id: int | None = 5,
    snap_max_p: int = 16,
    **opts: object,
) -> RestorePlan:
    job = JobShape("j", 16, (op(),))
    snapshot = SnapshotShape(snap_job, snap_max_p, kind, checkpoint_id, "file:///sp", (op(),))
    return plan_restore(job, snapshot, RestoreOptions(**opts))  # type: ignore[arg-type]


def test_another_jobs_snapshot_replacing_a_running_jobs_state_is_a_loss() -> None:
    foreign = plan(snap_job="other", checkpoint_id=9, allow_foreign=True)
    assert foreign.ok
    assert restore_losses(foreign, latest_checkpoint_id=5) == (
        "replaces the state of job 'j' (latest checkpoint 5) with a snapshot of another job ('other'): "
        "its place in the job's chain is unknown, so it may rewind the job",
    )
    assert restore_losses(foreign, latest_checkpoint_id=None) == ()  # a new job loses nothing


def test_a_savepoint_that_names_no_checkpoint_is_a_loss_for_a_job_with_history() -> None:
    anonymous = plan(kind="savepoint", checkpoint_id=None)
    assert anonymous.ok
    assert restore_losses(anonymous, latest_checkpoint_id=5) == (
        "replaces the state of job 'j' (latest checkpoint 5) with a savepoint that names no checkpoint "
        "of the job: its place in the job's chain is unknown, so it may rewind the job",
    )


def test_an_own_savepoint_older_than_latest_is_a_rewind_and_the_latest_is_lossless() -> None:
    assert restore_losses(plan(kind="savepoint", checkpoint_id=3), latest_checkpoint_id=5) == (
        "rewinds the job from checkpoint 5 to 3: the epochs after 3 are reprocessed",
    )
    assert restore_losses(plan(checkpoint_id=5), latest_checkpoint_id=5) == ()


def test_a_changed_max_parallelism_is_refused_not_merely_reported() -> None:
    changed = plan(snap_max_p=32)
    assert not changed.ok
    assert "max_parallelism changed from 32 (snapshot) to 16 (job)" in changed.refusals[0]
