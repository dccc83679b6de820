"""Why a checkpoint failed: one enum of reasons, one exception type carrying it (as Flink).

Pre-flight reasons are refusals at trigger time (nothing was started); they never count toward
``tolerable_failures``. Every other reason is a failed checkpoint attempt.
"""

from __future__ import annotations

import enum


class CheckpointFailureReason(enum.Enum):
    """A failure reason with the human message and whether it is a pre-flight refusal."""

    # pre-flight (trigger refused)
    COORDINATOR_SHUTDOWN = ("the checkpoint coordinator is shut down", True)
    JOB_FAILED = ("the job has failed: too many consecutive checkpoint failures; restore it", True)
    TOO_MANY_CONCURRENT_CHECKPOINTS = ("the maximum number of concurrent checkpoints is pending", True)
    MINIMUM_TIME_BETWEEN_CHECKPOINTS = ("the minimum pause since the last checkpoint has not elapsed", True)
    NOT_ALL_REQUIRED_TASKS_RUNNING = ("not all tasks that must acknowledge can run", True)
    NO_NEW_INPUT = ("no new input since the last checkpoint; the epoch is skipped", True)
    ID_ALLOCATION_FAILED = ("could not allocate a checkpoint id (another coordinator kept winning)", True)
    # failures of a started checkpoint
    CHECKPOINT_EXPIRED = ("the checkpoint expired before all tasks acknowledged", False)
    CHECKPOINT_DECLINED = ("a task declined the checkpoint", False)
    CHECKPOINT_SUBSUMED = ("a newer checkpoint completed first", False)
    TASK_CHECKPOINT_FAILURE = ("a task failed while taking its snapshot", False)
    CHECKSUM_MISMATCH = (
        "a state file named in an ack is missing or has another size (or, read back with deep_verify, "
        "other bytes than its checksum)",
        False,
    )
    VALIDATION_FAILED = ("state validation (Great Expectations gate) failed", False)
    FENCED_BY_NEWER_GENERATION = ("the job was restored since this checkpoint was triggered", False)
    BASE_SUPERSEDED = (
        "another checkpoint completed from the same base first (two actors ran epochs at once)",
        False,
    )
    FINALIZE_FAILED = ("writing the checkpoint metadata failed", False)
    MANUALLY_ABORTED = ("aborted by an operator", False)
    JOB_FAILOVER = ("the job restarted (failover) while the checkpoint was in flight", False)

    def __init__(self, message: str, pre_flight: bool) -> None:
        self.message = message
        self.pre_flight = pre_flight


class CheckpointException(Exception):
    """A checkpoint could not be triggered or did not complete, for ``reason``."""

    def __init__(self, reason: CheckpointFailureReason, detail: str = "", checkpoint_id: int | None = None):
        self.reason = reason
        self.detail = detail
        self.checkpoint_id = checkpoint_id
        what = f"checkpoint {checkpoint_id}" if checkpoint_id is not None else "checkpoint"
        super().__init__(
            f"{what} failed ({reason.name}): {reason.message}" + (f": {detail}" if detail else "")
        )


class JobFailedError(Exception):
    """The job exceeded its tolerable consecutive checkpoint failures; it must be restored."""
