"""Regressions found in review: channel state of a stateless keyed stage, forced triggers over an
undecided checkpoint, and Spark re-running a finished task."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.runtime.cycle import run_cycle, trigger_epoch
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import AckRecord, CheckpointException, StateHandle, TaskCheckpointResponder, TaskId
from state_store.core.ports import ObjectAlreadyExists
from state_store.storage import LocalObjectStore, open_store
from state_store.testing import ManualClock
from tests.unit.runtime.support import STEP_MS, new_clock, small_job


def passthrough(mode: str) -> Job:
    job = Job("pass", parallelism=2, max_parallelism=16, chunk_size=20, mode=mode)
    source = GeneratorSource(
        uid="clicks", partitions=2, events_per_second=[100, 10], start_ms=DEFAULT_START_MS
    )
    job.source(source, uid="clicks").key_by("page").sink(ParquetSink(), uid="out")
    return job


def test_unaligned_stage_without_stateful_steps_keeps_its_in_flight_records(tmp_path: Path) -> None:
    counts = {}
    for mode in ("exactly_once", "unaligned"):
        uri, clock = (tmp_path / mode).as_uri(), ManualClock(DEFAULT_START_MS)
        for _ in range(4):
            clock.advance(STEP_MS)
            assert run_cycle(passthrough(mode), uri, clock).status == "completed"
        run_cycle(passthrough(mode), uri, clock, force=True)  # no new input: replays the in-flight data
        counts[mode] = read_committed(open_store(uri), "pass", "out").num_rows
    total = sum(
        GeneratorSource(uid="clicks", partitions=2, events_per_second=[100, 10])
        .end_offsets(DEFAULT_START_MS + 4 * STEP_MS)
        .values()
    )
    assert counts == {"exactly_once": total, "unaligned": total}


def test_a_forced_trigger_never_overlaps_an_undecided_checkpoint(tmp_path: Path) -> None:
    uri, job, clock = tmp_path.as_uri(), small_job(), new_clock()
    clock.advance(STEP_MS)
    store = open_store(uri)
    first = trigger_epoch(job, store, clock, request_id="run-1")
    assert first is not None
    assert trigger_epoch(job, store, clock, request_id="run-1") == first  # the same run retried
    with pytest.raises(CheckpointException, match="still undecided"):
        trigger_epoch(job, store, clock, request_id="run-2", force=True)


def test_a_re_run_of_the_same_task_attempt_may_write_its_ack_again(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    responder = TaskCheckpointResponder(store, "job")
    handle = StateHandle("job/shared/op/aa" + "0" * 62 + ".arrow", 3, "blake3:" + "0" * 64)
    responder.acknowledge(AckRecord(1, TaskId("op", 0), 1, 1, (handle,), metrics={"bytes_written": 3}))
    responder.acknowledge(AckRecord(1, TaskId("op", 0), 1, 1, (handle,), metrics={"bytes_written": 0}))
    other = StateHandle("job/shared/op/bb" + "0" * 62 + ".arrow", 3, "blake3:" + "0" * 64)
    with pytest.raises(ObjectAlreadyExists):
        responder.acknowledge(AckRecord(1, TaskId("op", 0), 1, 1, (other,)))
