"""Epochs of a job whose state may live on disk (``Job(state_memory_mb=...)``), for the tests that
compare it with the same job in memory: run the epochs (a crash at a kill point, then the retry),
then read what they committed and the state of the latest completed checkpoint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spark_jobs.api.job import Job
from spark_jobs.chaos.observe import state_digest
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core import CompletedCheckpointStore, JobLayout
from state_store.storage import open_store
from state_store.testing import KillAt, ManualClock, SimulatedCrash


def run_epochs(
    job_of: Callable[[int, bool], Job],
    uri: str,
    scales: list[int],
    modes: list[bool],
    step_ms: int,
    kill: str | None = None,
) -> None:
    """One epoch per entry of ``scales`` (its parallelism) and ``modes`` (state on disk or not), each
    ``step_ms`` of the clock; with ``kill``, the first epoch from the second on that reaches the
    point crashes there and is retried (a run that never reaches it fails the test)."""
    clock = ManualClock(DEFAULT_START_MS)
    crashed = False
    for epoch, (parallelism, spill) in enumerate(zip(scales, modes, strict=True)):
        job = job_of(parallelism, spill)
        clock.advance(step_ms)
        if kill is not None and epoch >= 1 and not crashed:
            try:
                report = run_cycle(job, uri, clock, executor="local", kill=KillAt(kill))
            except SimulatedCrash:
                crashed = True
                assert run_cycle(job, uri, clock, executor="local").status in ("completed", "skipped")
                continue
        else:
            report = run_cycle(job, uri, clock, executor="local")
        assert report.status == "completed", report
    assert kill is None or crashed, f"no cycle reached kill point {kill}"


def latest_tasks(uri: str, job_id: str, uid: str) -> list[Any]:
    """The task snapshots of operator ``uid`` in the latest completed checkpoint."""
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout(job_id), 1)
    latest = completed.latest()
    assert latest is not None
    return [t for t in latest.metadata.tasks if t.task.uid == uid]


def outcome(
    uri: str, job_id: str, max_parallelism: int, sink: str = "out"
) -> tuple[list[str], dict[str, Any]]:
    """The committed rows of ``sink`` (sorted) and the state digest of the latest completed checkpoint."""
    store = open_store(uri)
    rows = read_committed(store, job_id, sink).to_pylist()
    completed, _ = CompletedCheckpointStore.recover(store, JobLayout(job_id), 1)
    latest = completed.latest()
    assert latest is not None
    return sorted(repr(sorted(r.items())) for r in rows), state_digest(
        store, latest.metadata, max_parallelism
    )
