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
