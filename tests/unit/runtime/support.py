"""Builders for runtime tests: a small clickstream job run in process on a manual clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from spark_jobs.api.job import Job
from spark_jobs.chaos.observe import state_digest
from spark_jobs.examples.clickstream import build_job
from spark_jobs.runtime.cycle import CycleReport, run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core import CompletedCheckpointStore, JobLayout
from state_store.core.ports import NO_KILL, KillSwitch
from state_store.storage import open_store
from state_store.testing import ManualClock

STEP_MS = 10_000
SINK = "page-counts-sink"


def small_job(**overrides: Any) -> Job:
    options: dict[str, Any] = {
        "partitions": 2,
        "events_per_second": 40,
        "max_parallelism": 16,
        "parallelism": 2,
    }
    options.update(overrides)
    return build_job(**options)


def new_clock() -> ManualClock:
    return ManualClock(DEFAULT_START_MS)


def cycle(job: Job, uri: str, clock: ManualClock, kill: KillSwitch = NO_KILL, **kw: Any) -> CycleReport:
    return run_cycle(job, uri, clock, kill=kill, **kw)


def epochs_with_one_crash(jobs: Any, uri: str, step_ms: int, kill: str | None, crash_here: Any) -> None:
    """Run one cycle per job of ``jobs`` (one per epoch, e.g. at changing parallelism) on a manual
    clock advanced ``step_ms`` per epoch; the first epoch whose job ``crash_here(job)`` accepts is
    first run with ``KillAt(kill)`` (when given) and then again. Fails when no epoch reached it."""
    from state_store.testing import KillAt, SimulatedCrash

    clock = ManualClock(DEFAULT_START_MS)
    crashed = False
    for job in jobs:
        clock.advance(step_ms)
        if kill is not None and not crashed and crash_here(job):
            try:
                run_cycle(job, uri, clock, executor="local", kill=KillAt(kill))  # type: ignore[arg-type]
            except SimulatedCrash:
                crashed = True
        assert run_cycle(job, uri, clock, executor="local").status in ("completed", "skipped")
    assert kill is None or crashed, f"no cycle reached kill point {kill}"


def committed_rows(uri: str, job: Job, sink: str = SINK) -> list[tuple[Any, ...]]:
    table = read_committed(open_store(uri), job.job_id, sink)
    rows = [tuple(r.values()) for r in table.to_pylist()]
    return sorted(rows, key=repr)


def latest_metadata(uri: str, job: Job) -> Any:
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout(job.job_id), 1)
    latest = completed.latest()
    assert latest is not None
    return latest.metadata


def final_state(uri: str, job: Job) -> dict[str, Any]:
    """Every stateful operator's entries (key group, state, key, namespace, value, expiry) merged
    from its file chains, the source positions and watermark state, and the timers of the latest
    completed checkpoint -- independent of checkpoint ids and parallelism (the chaos harness's
    ``state_digest``, which checks invariant 2 the same way)."""
    return state_digest(open_store(uri), latest_metadata(uri, job), job.max_parallelism)


def store_uri(path: Path) -> str:
    return path.as_uri()


def assert_acks_bundled(uri: str, job: Job) -> int:
    """Every ack of every checkpoint still stored is vouched for by an ack bundle of its epoch
    run at the version the listing reports (so completion read none of them one by one); returns
    the number of acks checked."""
    from state_store.core import documents
    from state_store.core.manifests import AckBundleRecord

    store, layout = open_store(uri), JobLayout(job.job_id)
    ids = {layout.checkpoint_id_of(i.key) for i in store.list(layout.checkpoints_prefix)} - {None}
    checked = 0
    for n in sorted(i for i in ids if i is not None):
        listed = {info.key: info.version for info in store.list(layout.acks_prefix(n))}
        bundles = [
            documents.read(store, i.key, AckBundleRecord) for i in store.list(layout.ack_bundles_prefix(n))
        ]
        covered = {e.key for b in bundles for e in b.acks if listed.get(e.key) == e.version}
        assert covered == set(listed), (n, sorted(set(listed) - covered))
        checked += len(listed)
    assert checked > 0
    return checked


class Collect:
    """An operator's output in a test: emitted rows, side outputs by tag, watermarks."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.side_rows: dict[str, list[dict[str, Any]]] = {}
        self.watermarks: list[int] = []

    @property
    def late(self) -> list[dict[str, Any]]:
        """Rows of the ``late`` side output (window operators)."""
        return self.side_rows.get("late", [])

    def emit(self, batch: pa.RecordBatch) -> None:
        self.rows.extend(batch.to_pylist())

    def emit_watermark(self, timestamp: int) -> None:
        self.watermarks.append(timestamp)

    def side(self, tag: str, batch: pa.RecordBatch) -> None:
        self.side_rows.setdefault(tag, []).extend(batch.to_pylist())
