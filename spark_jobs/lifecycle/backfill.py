"""Backfill: fork a job from a savepoint into a new job id and reprocess its sources from the
savepoint's positions into the new job's own sinks -- fenced from production by construction
(another job root: its own checkpoints, generation and sink commit logs).

The new job id must be new: a job that already has state there is refused (it would be restored
from the savepoint and its sinks would commit the reprocessed output again), unless ``replace``,
which is a restore of that job -- fenced like one: the backfill holds the new job's lease for the
restore and every epoch after it.
"""

from __future__ import annotations

import copy
from typing import Any

from spark_jobs.api.job import Job
from spark_jobs.lifecycle.restore import RestoreRequest, restore
from spark_jobs.lifecycle.snapshots import read_savepoint
from spark_jobs.runtime.cycle import EpochCycle, sink_specs
from state_store.clocks import ManualClock
from state_store.core.layout import JobLayout, validate_name
from state_store.core.ports import NO_KILL, KillSwitch, ObjectStore
from state_store.lease_keeper import HeldLease, holder_id
from state_store.storage import open_store


class BackfillTargetExists(ValueError):
    """The backfill's new job id already has state in the store."""


def _refuse_existing(store: ObjectStore, job_id: str) -> None:
    """BackfillTargetExists if ``job_id`` has any state (its bare job record, which taking the
    lease creates, does not count)."""
    layout = JobLayout(job_id)
    if any(info.key != layout.job_record for info in store.list(layout.root)):
        raise BackfillTargetExists(
            f"backfill job id {job_id!r} already has state in {store.uri}: choose a new id, or pass "
            "--replace to restore that job from the savepoint (its sinks then commit the reprocessed output)"
        )


def backfill(
    job: Job,
    store_uri: str,
    savepoint: str,
    new_job_id: str,
    *,
    until_ms: int | None = None,
    epochs: int = 10,
    step_ms: int = 10_000,
    executor: str = "local",
    replace: bool = False,
    wait_s: float = 0.0,
    holder: str = "",
    kill: KillSwitch = NO_KILL,
    roots: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Restore ``savepoint`` into job ``new_job_id`` (same pipeline) and run up to ``epochs``
    epochs of ``step_ms`` simulated time, stopping once the clock reaches ``until_ms``. ``kill``
    and ``roots`` are what the entry point read (``EPOCHAL_FAULT``, ``EPOCHAL_SNAPSHOT_ROOTS``): the
    restore and every epoch get the kill switch; a savepoint outside the roots is refused."""
    validate_name("job id", new_job_id)
    if new_job_id == job.job_id:
        raise ValueError(
            f"backfill job id {new_job_id!r} must differ from the production job's: choose a new id"
        )
    if epochs < 1:
        raise ValueError(f"backfill epochs={epochs} is invalid: run at least 1 epoch")
    store = open_store(store_uri)
    if not replace:
        _refuse_existing(store, new_job_id)
    snapshot = read_savepoint(savepoint)
    fork = copy.copy(job)
    fork.job_id = new_job_id
    start = max([int(e.get("max_ts") or 0) for entries in snapshot.sources.values() for e in entries] + [0])
    clock = ManualClock(start)
    lease = HeldLease(
        store,
        new_job_id,
        holder or holder_id("cli"),
        "epochal backfill",
        max_parallelism=job.max_parallelism,
        wait_s=wait_s,
    )
    with lease:
        if not replace:  # again under the lease: another backfill may have filled it meanwhile
            _refuse_existing(store, new_job_id)
        restore(
            fork,
            store_uri,
            clock,
            RestoreRequest(source=savepoint, allow_foreign=True, roots=roots),
            request_id=f"backfill-{new_job_id}",
            lease_token=lease.token,
            kill=kill,
        )
        cycle = EpochCycle(fork, store_uri, clock, executor=executor, lease_token=lease.token, kill=kill)
        ran = 0
        for _ in range(epochs):
            if until_ms is not None and clock.now_ms() >= until_ms:
                break
            clock.advance(step_ms)
            cycle.run_once()
            ran += 1
    return {
        "new_job": new_job_id,
        "epochs": ran,
        "sinks": sorted(sink_specs(fork)),
        "clock_ms": clock.now_ms(),
    }
