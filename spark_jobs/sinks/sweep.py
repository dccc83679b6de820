"""Orphan sweep of a transactional sink's staged files (``epochal_maintenance``).

A staged file is an orphan, and may be deleted, iff all of:

1. no commit entry lists it (committed files are never deleted);
2. it does not belong to a transaction of a listed pending record (``pending``: records of
   in-flight or completed-but-not-yet-committed checkpoints, which may still be committed);
3. it was last modified at or before ``now_ms - grace_ms`` (a transaction still being
   pre-committed, whose record nobody knows yet, is younger than the grace period).

Time is passed in; planning deletes nothing (:func:`sweep_orphans` executes a plan).
"""

from __future__ import annotations

from collections.abc import Iterable

from spark_jobs.sinks.commit_log import CommitLog
from state_store.core import documents
from state_store.core.codec import ManifestError
from state_store.core.layout import JobLayout
from state_store.core.manifests import AckRecord, CompletedMetadata
from state_store.core.ports import ObjectNotFound, ObjectStore
from state_store.core.twophase import PreCommittedTxn, records_from_metadata, records_from_snapshot


def plan_orphan_sweep(
    store: ObjectStore,
    job_id: str,
    uid: str,
    *,
    now_ms: int,
    grace_ms: int,
    pending: Iterable[PreCommittedTxn] = (),
) -> list[str]:
    """Keys of orphaned staged files (see module docstring), in ascending order."""
    if grace_ms < 0:
        raise ValueError(f"grace_ms must not be negative, got {grace_ms}")
    log = CommitLog(store, job_id, uid)
    committed = {h.key for entry in log.entries(include_retracted=True) for h in entry.files}
    protected = tuple(
        log.layout.txn_file_prefix(r.checkpoint_id, r.subtask, r.attempt, r.generation)
        for r in pending
        if r.sink_uid == uid
    )
    expired = now_ms - grace_ms
    return [
        info.key
        for info in store.list(log.layout.staged_prefix)
        if info.key not in committed
        and not info.key.startswith(protected or ("\0",))
        and info.modified_ms <= expired
    ]


def sweep_orphans(
    store: ObjectStore,
    job_id: str,
    uid: str,
    *,
    now_ms: int,
    grace_ms: int,
    pending: Iterable[PreCommittedTxn] = (),
    dry_run: bool = False,
) -> list[str]:
    """Plan and (unless ``dry_run``) delete the orphans; return their keys."""
    keys = plan_orphan_sweep(store, job_id, uid, now_ms=now_ms, grace_ms=grace_ms, pending=pending)
    if not dry_run:
        for key in keys:
            store.delete(key)
    return keys


def sweep_job_sinks(
    store: ObjectStore, job_id: str, sink_uids: Iterable[str], *, now_ms: int, grace_ms: int
) -> list[str]:
    """The retention step's sink part (run after checkpoint retention): sweep every sink's orphans,
    protecting the transactions named by every ``_metadata.json`` still stored and by the acks of
    checkpoints that have none (in flight, or committed but not yet written) -- those the sink may
    still commit. The acks of a completed checkpoint protect nothing: its metadata names the one
    attempt it completed with, and other attempts' (a zombie's) staged files are orphans, even in a
    folder retention keeps (a pinned checkpoint)."""
    layout = JobLayout(job_id)
    keys = [info.key for info in store.list(layout.checkpoints_prefix)]
    completed = {layout.checkpoint_id_of(key) for key in keys if key.endswith("/_metadata.json")}
    pending: list[PreCommittedTxn] = []
    for key in keys:
        try:
            if "/acks/" in key and layout.checkpoint_id_of(key) not in completed:
                pending.extend(records_from_snapshot(documents.read(store, key, AckRecord).snapshot))
            elif key.endswith("/_metadata.json"):
                pending.extend(records_from_metadata(documents.read(store, key, CompletedMetadata)))
        except (ManifestError, ObjectNotFound, ValueError):
            continue  # unreadable: retention keeps such a checkpoint; its files are then orphans later
    return [
        key
        for uid in sink_uids
        for key in sweep_orphans(store, job_id, uid, now_ms=now_ms, grace_ms=grace_ms, pending=pending)
    ]
