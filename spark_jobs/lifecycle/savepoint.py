"""Savepoints (DESIGN section 3, seed 001): a forced, always-aligned checkpoint at the latest
checkpoint's positions, written self-contained and relocatable to ``<root>/<job>/savepoints/<name>/``.

Invariants: a savepoint never moves LATEST, never joins the chain and is never deleted by retention;
it is written only after its checkpoint completed and the caller's lease was checked again
(``fence``); ``stop=True`` (stop-with-savepoint) writes ``_stopped.json`` after the savepoint, so no
epoch runs until the job is restored.
"""

from __future__ import annotations

from typing import Any

from spark_jobs.api.job import Job
from spark_jobs.lifecycle.snapshots import from_metadata, savepoint_location, savepoint_store, write_savepoint
from spark_jobs.runtime.cycle import Executor, complete_epoch, coordinator_for, run_epoch, trigger_epoch
from state_store.core import documents
from state_store.core.layout import JobLayout
from state_store.core.manifests import StoppedRecord
from state_store.core.ports import NO_KILL, Clock, KillSwitch
from state_store.core.status import CheckpointStatus
from state_store.storage import open_store


def take_savepoint(
    job: Job,
    store_uri: str,
    clock: Clock,
    name: str,
    *,
    fmt: str = "parquet",
    executor: Executor = "local",
    spark: Any = None,
    request_id: str = "",
    stop: bool = False,
    lease_token: int | None = None,
    kill: KillSwitch = NO_KILL,
) -> dict[str, Any]:
    """Trigger a savepoint (forced, always aligned, at the latest checkpoint's positions), run its
    epoch, complete it, and write it self-contained to ``<root>/<job>/savepoints/<name>/``.
    Savepoints never move LATEST and are never deleted by retention. ``stop``: stop-with-savepoint
    -- no epoch runs after it until the job is restored (from this savepoint or another snapshot)."""
    location = savepoint_location(store_uri, job.job_id, name)  # a bad name is refused before any write
    store = open_store(store_uri)
    request = request_id or f"savepoint-{name}"
    pending = trigger_epoch(
        job, store, clock, request_id=request, savepoint=True, lease_token=lease_token, kill=kill
    )
    assert pending is not None  # forced: never skipped
    n = pending.checkpoint_id
    run_epoch(job, store_uri, n, clock, executor=executor, spark=spark, lease_token=lease_token, kill=kill)
    result = complete_epoch(job, store, clock, n, lease_token=lease_token, kill=kill)
    if result.status is not CheckpointStatus.COMPLETED or result.checkpoint is None:
        raise RuntimeError(
            f"savepoint {name!r} failed: checkpoint {pending.checkpoint_id} {result.status}: {result.message}"
        )
    snapshot = from_metadata(
        store,
        result.checkpoint.metadata,
        job.max_parallelism,
        f"{store.uri} checkpoint {pending.checkpoint_id}",
    )
    coordinator_for(job, store, clock, lease_token=lease_token).fence()
    body = write_savepoint(snapshot, savepoint_store(location), name, fmt=fmt, created_ms=clock.now_ms())
    if stop:
        marker = StoppedRecord(job.job_id, name, location, clock.now_ms())
        store.put(JobLayout(job.job_id).stopped, documents.encode(marker))
    return {
        "stopped": stop,
        "name": name,
        "location": location,
        "checkpoint_id": pending.checkpoint_id,
        "operators": sorted(body["operators"]),
    }
