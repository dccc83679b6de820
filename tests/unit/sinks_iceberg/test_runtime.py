"""Exactly-once end to end through the job runtime (local executor, manual clock) into an Iceberg
table: a crash at each protocol kill point, then the restarted process, leaves the table equal to a
fault-free run row for row -- read back with pyiceberg and with plain pyarrow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.windows import Aggregates, Count, Sum, TumblingEventTimeWindows
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks.iceberg import IcebergSink
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import killpoints
from state_store.core.ports import NO_KILL
from state_store.faults import KillAt, SimulatedCrash
from state_store.testing import ManualClock
from tests.unit.sinks_iceberg.support import both_readers, epochal_summaries

EPOCHS = 6
CRASH_AT = 4
STEP_MS = 10_000
TABLE = "lake.page_counts"


def catalog_in(root: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}", "warehouse": (root / "wh").as_uri()}


def page_counts(catalog: dict[str, str], mode: str) -> Job:
    """Clicks (duplicates, out of order) -> dedup -> per page tumbling 10 s count/sum -> Iceberg."""
    job = Job("iceberg-clicks", parallelism=2, max_parallelism=16, retained_checkpoints=3)
    clicks = GeneratorSource(
        uid="clicks", partitions=2, seed=3, events_per_second=30, out_of_orderness_ms=1_000,
        duplicate_fraction=0.05, keys=50, start_ms=DEFAULT_START_MS,
    )  # fmt: skip
    key = ("page", "window_start") if mode == "upsert" else ()
    sink = IcebergSink(catalog=catalog, table=TABLE, mode=mode, unique_key=key)
    (
        job.source(clicks, uid="clicks", out_of_orderness_ms=1_000, idleness_ms=10_000)
        .key_by("event_id")
        .deduplicate(ttl_ms=3_600_000, uid="dedup")
        .key_by("page")
        .window(TumblingEventTimeWindows(10_000), Aggregates(Count(), Sum("value")), uid="page-counts")
        .sink(sink, uid="page-counts-iceberg")
    )
    return job


def run(root: Path, mode: str, point: str | None = None) -> list[dict[str, Any]]:
    catalog = catalog_in(root)
    job, clock, uri = page_counts(catalog, mode), ManualClock(DEFAULT_START_MS), (root / "store").as_uri()
    crashed = 0
    for epoch in range(EPOCHS):
        clock.advance(STEP_MS)
        kill = KillAt(point, CRASH_AT) if point is not None and epoch == CRASH_AT - 1 else NO_KILL
        try:
            run_cycle(job, uri, clock, executor="local", kill=kill)
        except SimulatedCrash as crash:
            assert crash.point == point
            crashed += 1
            run_cycle(job, uri, clock, executor="local")  # the restarted process: failover, then the epoch
    if point is not None:
        assert crashed == 1, f"kill point {point} was never reached"
    if mode == "append":
        commits = [s["checkpoint_id"] for s in epochal_summaries(catalog, TABLE) if s["kind"] == "data"]
        assert len(commits) == len(set(commits)), f"a checkpoint was committed twice: {commits}"
    return both_readers(catalog, TABLE)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    rows = run(tmp_path_factory.mktemp("reference"), "append")
    assert len(rows) > 10 and len({(r["page"], r["window_start"]) for r in rows}) == len(rows)
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("point", killpoints.ALL)
def test_a_crash_at_each_kill_point_then_restart_leaves_the_table_equal_to_the_fault_free_run(
    point: str, tmp_path: Path, reference: list[dict[str, Any]]
) -> None:
    assert run(tmp_path, "append", point) == reference


def test_upsert_mode_through_the_runtime_gives_the_same_rows_as_append(
    tmp_path: Path, reference: list[dict[str, Any]]
) -> None:
    assert run(tmp_path, "upsert", killpoints.MID_SINK_COMMIT) == reference
