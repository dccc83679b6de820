"""CheckpointProperties: what kind of snapshot a trigger asks for (seed 002).

* ``forced`` -- skips the trigger pre-checks (max concurrent, min pause, no new input).
* ``savepoint`` -- a user-owned snapshot: never subsumed, never deleted by retention.
* ``retention`` -- what happens to the checkpoint when the job terminates (externalized policy).
* ``discard_on_subsumed`` -- delete the checkpoint's files once a newer one is retained instead.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RetentionPolicy(enum.Enum):
    RETAIN_ON_CANCELLATION = "retain_on_cancellation"
    RETAIN_ON_FAILURE = "retain_on_failure"
    NEVER_RETAIN_AFTER_TERMINATION = "never_retain_after_termination"


@dataclass(frozen=True, slots=True)
class CheckpointProperties:
    forced: bool = False
    savepoint: bool = False
    retention: RetentionPolicy = RetentionPolicy.RETAIN_ON_CANCELLATION
    discard_on_subsumed: bool = True

    @classmethod
    def checkpoint(cls) -> CheckpointProperties:
        """A periodic checkpoint: subject to the pre-checks, subsumed and retained per policy."""
        return cls()

    @classmethod
    def forced_checkpoint(cls) -> CheckpointProperties:
        """A checkpoint triggered by hand: bypasses the pre-checks, otherwise a checkpoint."""
        return cls(forced=True)

    @classmethod
    def savepoint_props(cls) -> CheckpointProperties:
        """A savepoint: forced, never subsumed and never deleted by retention."""
        return cls(forced=True, savepoint=True, discard_on_subsumed=False)

    @property
    def can_be_subsumed(self) -> bool:
        return not self.savepoint
