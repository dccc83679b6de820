"""PrefixSource through the epoch cycle (in process): files dropped between epochs come out of the
sink exactly once, also when the process dies mid-epoch and the epoch runs again."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.prefix import PrefixSource
from state_store.core import killpoints
from state_store.faults import SimulatedCrash, kill_switch_from_env
from state_store.storage import MemoryObjectStore, open_store
from state_store.testing import ManualClock
from tests.unit.sources_prefix.support import SCHEMA, SETTLE_MS, T0, Landing, rows

JOB = "prefix-e2e"


def build(landing: Landing, uri: str, partitions: int | str) -> Job:
    source = PrefixSource(
        "files",
        landing.store,
        "landing",
        job_id=JOB,
        schema=SCHEMA,
        format="jsonl",
        partitions=partitions,  # type: ignore[arg-type]
        settle_ms=SETTLE_MS,
        clock=landing.clock,
        state_store=uri,
    )
    job = Job(JOB, parallelism=2, max_parallelism=8, max_records_per_epoch=7)  # epochs end mid-file
    job.source(source, uid="files").sink(ParquetSink(), uid="out")
    return job


def drop_batch(landing: Landing, epoch: int) -> list[str]:
    """Three files of 4 records per epoch, in two folders, names sorting before earlier ones."""
    made = []
    for i in range(3):
        n = (epoch * 3 + i) * 4
        landing.drop(f"landing/day={i % 2}/part-{99 - epoch}-{i}.jsonl", rows(n, 4))
        made += [f"r{k}" for k in range(n, n + 4)]
    return made


def output(uri: str) -> list[str]:
    table = read_committed(open_store(uri), JOB, "out")
    if "id" not in table.column_names:  # nothing committed yet
        return []
    return sorted(str(x) for x in table.column("id").to_pylist())


def drain(job: Job, uri: str, clock: ManualClock, idle_rounds: int = 2) -> None:
    idle = 0
    while idle < idle_rounds:
        clock.advance(SETTLE_MS)
        idle = idle + 1 if run_cycle(job, uri, clock).status == "skipped" else 0


@pytest.mark.parametrize("partitions", ["folder", 3])
def test_files_dropped_between_epochs_come_out_exactly_once(
    landing: Landing, tmp_path: Path, partitions: int | str
) -> None:
    uri = (tmp_path / "job").as_uri()
    job = build(landing, uri, partitions)
    dropped: list[str] = []
    statuses = []
    for epoch in range(3):
        dropped += drop_batch(landing, epoch)
        landing.clock.advance(SETTLE_MS)
        statuses.append(run_cycle(job, uri, landing.clock).status)
        assert set(output(uri)) <= set(dropped)
    assert statuses[1:] == ["completed", "completed"]
    drain(job, uri, landing.clock)
    assert output(uri) == sorted(dropped)  # every record once: none lost, none twice


@pytest.mark.parametrize(
    "point", [killpoints.AFTER_STATE_UPLOAD, killpoints.AFTER_ACK, killpoints.BEFORE_METADATA]
)
def test_a_crash_mid_epoch_then_a_restart_still_gives_every_record_once(tmp_path: Path, point: str) -> None:
    clock = ManualClock(T0)
    landing = Landing(None, clock)
    landing.store = MemoryObjectStore(now_ms=landing.stamp_ms)
    uri = (tmp_path / "job").as_uri()
    job = build(landing, uri, "folder")
    dropped: list[str] = []
    crashed = 0
    for epoch in range(3):
        dropped += drop_batch(landing, epoch)
        clock.advance(SETTLE_MS)
        try:
            run_cycle(job, uri, clock, kill=kill_switch_from_env({"EPOCHAL_FAULT": f"{point}@2"}))
        except SimulatedCrash:
            crashed += 1
            landing.drop("landing/day=0/part-0-during-crash.jsonl", rows(1_000, 4))  # arrives meanwhile
            dropped += [f"r{k}" for k in range(1_000, 1_004)]
            fresh = build(landing, uri, "folder")  # the restarted process: new source instances
            run_cycle(fresh, uri, clock)
    assert crashed == 1
    drain(job, uri, clock)
    assert output(uri) == sorted(dropped)
