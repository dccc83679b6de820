"""The Spark executor runs the same subtasks as the in-process one: same committed output and
state, on the local disk and on SeaweedFS S3 (executors open the store from its URI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from state_store.testing.seaweedfs import SeaweedFSServer
from tests.unit.runtime.support import (
    STEP_MS,
    assert_acks_bundled,
    committed_rows,
    cycle,
    final_state,
    new_clock,
    small_job,
)

pytestmark = pytest.mark.integration
EPOCHS = 4


def run(uri: str, executor: str, spark: object = None) -> tuple[list, dict]:  # type: ignore[type-arg]
    job, clock = small_job(), new_clock()
    for _ in range(EPOCHS):
        clock.advance(STEP_MS)
        assert cycle(job, uri, clock, executor=executor, spark=spark).status == "completed"
    assert_acks_bundled(uri, job)  # gathered by the accumulator on Spark, in a list in process
    return committed_rows(uri, job), final_state(uri, job)


def test_spark_executor_matches_in_process_on_local_disk(spark: object, tmp_path: Path) -> None:
    assert run((tmp_path / "spark").as_uri(), "spark", spark) == run((tmp_path / "local").as_uri(), "local")


def test_spark_executor_on_seaweedfs_s3(spark: object, seaweedfs: SeaweedFSServer, tmp_path: Path) -> None:
    seaweedfs.make_store("epochal-spark")
    uri = seaweedfs.uri("epochal-spark", "jobs")
    rows, state = run(uri, "spark", spark)
    assert (rows, state) == run((tmp_path / "local").as_uri(), "local")
    assert len(rows) > 10


def test_committed_output_as_a_spark_dataframe(spark: object, tmp_path: Path) -> None:
    from spark_jobs.sinks import read_committed, read_committed_spark
    from state_store.storage import open_store

    uri = (tmp_path / "df").as_uri()
    run(uri, "local")
    store = open_store(uri)
    frame = read_committed_spark(spark, store, "clickstream", "page-counts-sink")
    assert frame.count() == read_committed(store, "clickstream", "page-counts-sink").num_rows > 0
    assert {"page", "window_start", "count"} <= set(frame.columns)


def test_local_recovery_is_off_inside_spark_tasks_and_changes_nothing(spark: object, tmp_path: Path) -> None:
    """``Job(local_recovery=True)`` on the Spark executor: the tasks keep nothing (a subtask's next
    task may run in another Python worker), every epoch reads the store, the output is the same."""
    from spark_jobs.runtime.cycle import run_cycle
    from tests.unit.runtime.test_local_recovery import _recovery, job_of

    def epochs(uri: str, executor: str) -> tuple[list[tuple[object, ...]], list[set[str]]]:
        job, clock, how = job_of("dedup", 2, local_recovery=True, shape="steady"), new_clock(), []
        for _ in range(3):
            clock.advance(STEP_MS)
            assert run_cycle(job, uri, clock, executor=executor, spark=spark).status == "completed"
            how.append(_recovery(uri, job.job_id))
        return committed_rows(uri, job, "out"), how

    on_spark, in_process = (
        epochs((tmp_path / "spark").as_uri(), "spark"),
        epochs((tmp_path / "local").as_uri(), "local"),
    )
    assert on_spark[0] == in_process[0] and on_spark[0]
    assert on_spark[1] == [{"None"}] * 3  # no local_recovery metric: nothing kept or adopted
    assert in_process[1] == [{"store"}, {"adopted"}, {"adopted"}]


@pytest.mark.parametrize("function", ["batch", "per_key"])
def test_state_on_disk_in_spark_executors_on_s3_equals_state_in_memory(
    function: str, spark: object, seaweedfs: SeaweedFSServer, tmp_path: Path
) -> None:
    """``Job(state_memory_mb=1)`` on the Spark executor against SeaweedFS S3, for a
    ``BatchProcessFunction`` (value state) and a ``KeyedProcessFunction`` (value, list and map
    state, timers): each epoch's tasks fetch their subtask's run files from S3 into a directory of
    their own, rescale 4 -> 2 included, write back only new runs, and leave no local files; output
    and state equal the in-process run with the state in memory."""
    from spark_jobs.runtime.cycle import run_cycle
    from spark_jobs.sources.generator import DEFAULT_START_MS
    from state_store.testing import ManualClock
    from tests.unit.runtime import spill_epochs, test_spill_keyed_state, test_spill_state

    suite = test_spill_state if function == "batch" else test_spill_keyed_state
    job_id, uid = ("wide", "totals") if function == "batch" else ("visits", "visits")

    def epochs(uri: str, executor: str, spill: bool) -> tuple[list[tuple[object, ...]], dict]:  # type: ignore[type-arg]
        clock = ManualClock(DEFAULT_START_MS)
        for parallelism in (4, 2, 2):
            clock.advance(suite.STEP)
            job = suite.job_of(parallelism, spill, tmp_path / "state")
            assert run_cycle(job, uri, clock, executor=executor, spark=spark).status == "completed"
        return committed_rows(uri, job, "out"), final_state(uri, job)

    bucket = f"epochal-spill-{function.replace('_', '-')}"
    seaweedfs.make_store(bucket)
    uri = seaweedfs.uri(bucket, "jobs")
    on_spark = epochs(uri, "spark", True)
    assert on_spark == epochs((tmp_path / "heap").as_uri(), "local", False)
    assert on_spark[0] and on_spark[1]
    parts = [
        t.snapshot["spill"] for t in spill_epochs.latest_tasks(uri, job_id, uid) if "spill" in t.snapshot
    ]
    assert len(parts) == 2  # both subtasks' state is in run files on S3
    assert all(p.get("form") == ("rows" if function == "per_key" else None) for p in parts), parts
    assert not list((tmp_path / "state").rglob("*.arrow")), "a Spark task left its spill directory"
