"""CheckpointConfig: the coordinator's knobs, validated with one-line errors."""

from __future__ import annotations

from dataclasses import dataclass


class InvalidConfigError(ValueError):
    """A configuration value out of range; the message names the key and the allowed range."""


@dataclass(frozen=True, slots=True)
class CheckpointConfig:
    """
    * ``max_concurrent_checkpoints`` -- pending (undecided) checkpoints allowed at once (>= 1).
    * ``min_pause_ms`` -- least time between the last completion and the next trigger (>= 0).
    * ``timeout_ms`` -- a checkpoint not fully acknowledged by trigger + timeout is aborted (> 0).
    * ``tolerable_failures`` -- consecutive failed checkpoints tolerated before the job fails (>= 0).
    * ``retained_checkpoints`` -- completed checkpoints kept by retention (>= 1).
    * ``orphan_grace_ms`` -- age before unreferenced files (aborted attempts, shared) are removed.
    * ``verify_sha256`` -- recompute every state file's SHA-256 before completing (else size only).
    * ``read_concurrency`` -- most reads (acks, state-file checks) in flight at once while
      completing (>= 1; 1 reads one at a time). Only stores that declare ``max_concurrent_reads``
      are read concurrently (see ``state_store.core.parallel``).
    """

    max_concurrent_checkpoints: int = 1
    min_pause_ms: int = 0
    timeout_ms: int = 10 * 60 * 1000
    tolerable_failures: int = 3
    retained_checkpoints: int = 3
    orphan_grace_ms: int = 60 * 60 * 1000
    verify_sha256: bool = True
    read_concurrency: int = 16

    def __post_init__(self) -> None:
        checks = (
            ("max_concurrent_checkpoints", self.max_concurrent_checkpoints, 1),
            ("min_pause_ms", self.min_pause_ms, 0),
            ("timeout_ms", self.timeout_ms, 1),
            ("tolerable_failures", self.tolerable_failures, 0),
            ("retained_checkpoints", self.retained_checkpoints, 1),
            ("orphan_grace_ms", self.orphan_grace_ms, 0),
            ("read_concurrency", self.read_concurrency, 1),
        )
        for name, value, low in checks:
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidConfigError(
                    f"checkpoint config {name}={value!r} is invalid: use an integer >= {low}"
                )
