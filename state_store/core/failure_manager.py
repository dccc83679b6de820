"""The checkpoint failure manager (Flink's ``CheckpointFailureManager``): when has a job failed?

A job fails once more than ``tolerable_failures`` checkpoints *in a row* failed. Counted, newest
first, until the newest completed checkpoint: the aborted checkpoints of the job's current
generation, except savepoints and the reasons that say nothing about the job's health (a newer
checkpoint subsumed it; the job failed over). Pre-flight refusals never reach storage, so they are
never counted. The count is read from the stored decisions: any process gets the same answer.
"""

from __future__ import annotations

from collections.abc import Callable

from state_store.core.failures import CheckpointFailureReason
from state_store.core.manifests import DecisionRecord, Outcome, PendingRecord

#: Aborts that say nothing about the job's health (as Flink's CheckpointFailureManager ignores them).
NOT_COUNTED = frozenset(
    {CheckpointFailureReason.CHECKPOINT_SUBSUMED.name, CheckpointFailureReason.JOB_FAILOVER.name}
)


def consecutive_failures(
    ids_newest_first: list[int],
    generation: int,
    decision: Callable[[int], DecisionRecord | None],
    pending: Callable[[int], PendingRecord],
) -> int:
    """Failed checkpoints since the newest completed one (see module docstring)."""
    count = 0
    for checkpoint_id in ids_newest_first:
        decided = decision(checkpoint_id)
        if decided is None:
            continue
        if decided.outcome is Outcome.COMPLETE:
            break
        record = pending(checkpoint_id)
        if record.generation != generation or record.properties.savepoint:
            continue
        if decided.reason not in NOT_COUNTED:
            count += 1
    return count


__all__ = ["NOT_COUNTED", "consecutive_failures"]
