"""One status model for a checkpoint, used by every reader: the coordinator's completion result,
the job's history (CLI), retention, monitoring and the Airflow trigger.

A checkpoint's status follows from its documents alone (:func:`status_of`)::

    _pending.json only                          -> IN_PROGRESS   (acks outstanding)
    _decision.json COMMIT, no _metadata.json    -> COMPLETING    (committed in the job record; the
                                                                  metadata write is rolled forward)
    _metadata.json                              -> COMPLETED
    _decision.json ABORT                        -> ABORTED
    a document that cannot be read              -> UNREADABLE

``SKIPPED`` and ``STOPPED`` are not a checkpoint's status but a cycle's: no new input, so nothing was
triggered; the job is stopped (stop-with-savepoint) until it is restored.

Members are ``StrEnum`` values, so they serialise as the words the documents and the JSON outputs
have always used. Monitoring labels ABORTED ``failed``, the word of Flink's web UI (:meth:`label`).
"""

from __future__ import annotations

import enum


class CheckpointStatus(enum.StrEnum):
    IN_PROGRESS = "in_progress"
    COMPLETING = "completing"
    COMPLETED = "completed"
    ABORTED = "aborted"
    UNREADABLE = "unreadable"
    SKIPPED = "skipped"
    STOPPED = "stopped"

    @property
    def decided(self) -> bool:
        """Whether the checkpoint's fate is fixed (COMPLETING is: it will complete)."""
        return self in (CheckpointStatus.COMPLETING, CheckpointStatus.COMPLETED, CheckpointStatus.ABORTED)

    def label(self) -> str:
        """The word the Checkpoints view and its REST API show (Flink's UI says FAILED for aborted)."""
        return "failed" if self is CheckpointStatus.ABORTED else self.value


def status_of(*, has_metadata: bool, decided: bool, aborted: bool) -> CheckpointStatus:
    """The status of a readable checkpoint folder: ``has_metadata`` (``_metadata.json`` exists),
    ``decided`` (``_decision.json`` exists) and ``aborted`` (its outcome is ABORT)."""
    if has_metadata:
        return CheckpointStatus.COMPLETED
    if decided:
        return CheckpointStatus.ABORTED if aborted else CheckpointStatus.COMPLETING
    return CheckpointStatus.IN_PROGRESS
