"""CheckpointConfig: the coordinator's knobs, validated with one-line errors."""

from __future__ import annotations

import warnings
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
    * ``deep_verify`` -- completion reads every state file back and checks its bytes against the
      checksum its writer recorded before deciding (the audit of ``epochal validate --deep``, before
      every commit). Default False: completion checks that every file is present with its recorded
      size (from the folder listing) and takes the writer's checksum from the ack -- the writer
      checksummed the bytes while writing them and the store verified them on upload where it can
      (``state_store.core.checksums``); restores still verify every byte, and
      ``epochal validate --deep`` (the maintenance DAG) re-reads the retained checkpoints.
    * ``verify_sha256`` -- the old name of ``deep_verify``, still accepted: ``True`` turns the
      read-back on (each file is then checked with the algorithm its handle names: BLAKE3 for new
      files, SHA-256 for files written before format 2), ``False`` leaves it off. It no longer means
      "SHA-256"; giving both names with different values is an error. Read ``deep_verify``: the old
      name's value is moved there (``verify_sha256`` is then None).
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
    deep_verify: bool = False
    read_concurrency: int = 16
    verify_sha256: bool | None = None

    def __post_init__(self) -> None:
        for name, flag, optional in (
            ("deep_verify", self.deep_verify, False),
            ("verify_sha256", self.verify_sha256, True),
        ):
            if not isinstance(flag, bool) and not (optional and flag is None):
                raise InvalidConfigError(f"checkpoint config {name}={flag!r} is invalid: use True or False")
        if self.verify_sha256 is not None:
            warnings.warn(
                "checkpoint config verify_sha256 is the old name of deep_verify (completion reads every "
                "state file back; default off): use deep_verify",
                DeprecationWarning,
                stacklevel=3,
            )
            if self.deep_verify and not self.verify_sha256:
                raise InvalidConfigError(
                    "checkpoint config deep_verify=True and verify_sha256=False contradict each other: "
                    "verify_sha256 is the old name of deep_verify; give deep_verify only"
                )
            # absorbed: ``deep_verify`` is the one setting read (and ``replace`` can change it)
            object.__setattr__(self, "deep_verify", self.verify_sha256 or self.deep_verify)
            object.__setattr__(self, "verify_sha256", None)
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
