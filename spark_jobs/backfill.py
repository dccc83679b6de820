"""Backfill: fork a job from a savepoint into a new job id and reprocess its sources from the
savepoint's positions into the new job's own sinks -- fenced from production by construction
(another job root: its own checkpoints, generation and sink commit logs)."""

from __future__ import annotations

import copy
from typing import Any

from spark_jobs.api.job import Job
from spark_jobs.restore import RestoreRequest, restore
from spark_jobs.runtime.cycle import run_cycle, sink_specs
from spark_jobs.snapshots import read_savepoint
from state_store.core.layout import validate_name
from state_store.testing import ManualClock


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
) -> dict[str, Any]:
    """Restore ``savepoint`` into job ``new_job_id`` (same pipeline) and run up to ``epochs``
    epochs of ``step_ms`` simulated time, stopping once the clock reaches ``until_ms``."""
    validate_name("job id", new_job_id)
    if new_job_id == job.job_id:
        raise ValueError(
            f"backfill job id {new_job_id!r} must differ from the production job's: choose a new id"
        )
    snapshot = read_savepoint(savepoint)
    fork = copy.copy(job)
    fork.job_id = new_job_id
    start = max([int(e.get("max_ts") or 0) for entries in snapshot.sources.values() for e in entries] + [0])
    clock = ManualClock(start)
    restore(
        fork,
        store_uri,
        clock,
        RestoreRequest(source=savepoint, allow_foreign=True),
        request_id=f"backfill-{new_job_id}",
    )
    ran = 0
    for _ in range(epochs):
        if until_ms is not None and clock.now_ms() >= until_ms:
            break
        clock.advance(step_ms)
        run_cycle(fork, store_uri, clock, executor=executor)
        ran += 1
    return {
        "new_job": new_job_id,
        "epochs": ran,
        "sinks": sorted(sink_specs(fork)),
        "clock_ms": clock.now_ms(),
    }
