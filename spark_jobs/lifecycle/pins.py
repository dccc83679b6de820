"""Pins: checkpoints an operator (or a NO_CLAIM restore) keeps from retention.

A pin is the checksummed document ``<job>/pins/<n>.json`` (``PinRecord``); retention keeps every
pinned checkpoint, whatever its age (``state_store.core.retention``). Pinning and unpinning change
the job, so the caller holds the job's lease and passes its coordinator as the fence.
"""

from __future__ import annotations

from collections.abc import Iterable

from state_store.core import documents
from state_store.core.completed import completed_ids
from state_store.core.coordinator import CheckpointCoordinator
from state_store.core.errors import EpochalError
from state_store.core.layout import JobLayout
from state_store.core.manifests import PinRecord
from state_store.core.ports import ObjectStore


class PinError(ValueError, EpochalError):
    """A pin or unpin of a checkpoint that cannot be pinned or is not pinned."""


def pin(store: ObjectStore, job_id: str, checkpoint_id: int, reason: str) -> None:
    """Keep checkpoint ``checkpoint_id`` from retention (idempotent)."""
    store.put(JobLayout(job_id).pin(checkpoint_id), documents.encode(PinRecord(checkpoint_id, reason)))


def pinned_ids(store: ObjectStore, job_id: str) -> list[int]:
    layout = JobLayout(job_id)
    return sorted(
        i for info in store.list(layout.pins_prefix) if (i := layout.pinned_id_of(info.key)) is not None
    )


def pin_checkpoints(
    store: ObjectStore, job_id: str, ids: Iterable[int], fence: CheckpointCoordinator
) -> list[int]:
    """Pin each completed checkpoint of ``ids``; PinError (nothing written) if one is not one."""
    wanted = sorted(set(ids))
    if not wanted:
        return []
    existing = set(completed_ids(store, JobLayout(job_id)))
    missing = [n for n in wanted if n not in existing]
    if missing:
        raise PinError(
            f"cannot pin checkpoint(s) {', '.join(map(str, missing))} of job {job_id}: no completed "
            "checkpoint has that id (retention may have removed it): see `epochal checkpoints list`"
        )
    fence.fence()
    for n in wanted:
        pin(store, job_id, n, "pinned by an operator (epochal retention --pin)")
    return wanted


def unpin_checkpoints(
    store: ObjectStore, job_id: str, ids: Iterable[int], fence: CheckpointCoordinator
) -> list[int]:
    """Remove the pins of ``ids``; PinError (nothing removed) if one is not pinned."""
    wanted = sorted(set(ids))
    if not wanted:
        return []
    pinned = set(pinned_ids(store, job_id))
    missing = [n for n in wanted if n not in pinned]
    if missing:
        raise PinError(
            f"cannot unpin checkpoint(s) {', '.join(map(str, missing))} of job {job_id}: not pinned "
            f"(pinned: {sorted(pinned) or 'none'})"
        )
    fence.fence()
    for n in wanted:
        store.delete(JobLayout(job_id).pin(n))
    return wanted
