"""What a restore plan loses or changes for good: the reasons a person must approve it first.

Presentation-free and pure: it reads a :class:`~state_store.core.restore.RestorePlan` (and what the
caller knows of the job: its latest completed checkpoint, its sinks that withdraw output on a
rewind) and decides nothing else. The Airflow ``epochal_restore`` DAG waits for a human approval
when :func:`restore_losses` is not empty; an empty tuple means the plan restores every piece of
state where it was, at the same parallelism, from the job's own chain head or a newer cut.

A plan is lossy when it (one reason per item, in row order, rewind last):

* drops state -- a snapshot operator nobody takes, or states a kept operator no longer registers
  (only a plan with ``allow_non_restored_state`` gets that far; without it the plan is refused);
* rescales an operator (keyed state is re-split by key group and the new parallelism sticks);
* maps a snapshot uid onto another job uid (``uid_map``);
* rewinds the job to a checkpoint older than its latest completed one: the epochs after it are
  reprocessed, and sinks with ``on_rewind="overwrite"`` withdraw the output committed after it;
* replaces the state of a job that has a completed checkpoint with a snapshot whose place in the
  job's chain is unknown -- another job's (``allow_foreign``), or a savepoint that names no
  checkpoint: it may rewind the job, or carry state the job never had.

New operators and new states that start empty lose nothing and are not reasons.
"""

from __future__ import annotations

from collections.abc import Sequence

from state_store.core.restore import RestorePlan


def restore_losses(
    plan: RestorePlan, *, latest_checkpoint_id: int | None = None, retracting_sinks: Sequence[str] = ()
) -> tuple[str, ...]:
    """Every reason ``plan`` needs approval (see the module docstring); ``()``: it loses nothing.

    ``latest_checkpoint_id``: the job's latest completed checkpoint when the plan was made (None:
    none, so no rewind); ``retracting_sinks``: uids of the job's sinks whose ``on_rewind`` is
    ``"overwrite"``."""
    reasons: list[str] = []
    for row in plan.rows:
        if row.action == "dropped" and row.dropped_states:
            reasons.append(
                f"drops the state of operator {row.uid!r} ({_names(row.dropped_states)}): "
                "no operator of the job takes it"
            )
            continue
        if row.dropped_states:
            reasons.append(
                f"drops state {_names(row.dropped_states)} of operator {row.uid!r}: "
                "the job no longer registers it"
            )
        if row.action == "rescale":
            reasons.append(
                f"rescales operator {row.uid!r} from {row.old_parallelism} to {row.new_parallelism} "
                "subtasks (state re-split by key group; the new parallelism sticks)"
            )
        if row.old_uid is not None and row.old_uid != row.uid and row.action in ("restore", "rescale"):
            reasons.append(f"maps snapshot operator {row.old_uid!r} onto job operator {row.uid!r}")
    restored = plan.snapshot.checkpoint_id
    if latest_checkpoint_id is not None and (plan.snapshot.job_id != plan.job_id or restored is None):
        origin = (
            f"a snapshot of another job ({plan.snapshot.job_id!r})"
            if plan.snapshot.job_id != plan.job_id
            else f"a {plan.snapshot.kind} that names no checkpoint of the job"
        )
        reasons.append(
            f"replaces the state of job {plan.job_id!r} (latest checkpoint {latest_checkpoint_id}) with "
            f"{origin}: its place in the job's chain is unknown, so it may rewind the job"
        )
    if (
        plan.snapshot.job_id == plan.job_id
        and restored is not None
        and latest_checkpoint_id is not None
        and restored < latest_checkpoint_id
    ):
        rewind = (
            f"rewinds the job from checkpoint {latest_checkpoint_id} to {restored}: the epochs after "
            f"{restored} are reprocessed"
        )
        if retracting_sinks:
            rewind += (
                f"; sink{'s' if len(retracting_sinks) > 1 else ''} {_names(retracting_sinks)} "
                f"(on_rewind=overwrite) withdraw the output committed after checkpoint {restored}"
            )
        reasons.append(rewind)
    return tuple(reasons)


def _names(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names)
