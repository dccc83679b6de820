"""Adversarial review of the DataFrame stage (``.spark``, issue 21 item 6) on one real session.

Each test states what the stage owes the rest of the job: the rows it returns reach the keyed
steps in an order that does not make them late, a stage returning nothing still moves the
position, a non-deterministic stage commits exactly one attempt's rows (never both, never a
mix), and reserved or unusable columns are refused in one line instead of silently lost."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.windows import Aggregates, Count, Sum, TumblingEventTimeWindows
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.runtime.spark_stage_schema import SparkStageError
from spark_jobs.sinks import read_committed
from spark_jobs.sources.clickstream import CLICKSTREAM_SCHEMA
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import CompletedCheckpointStore, JobLayout, killpoints
from state_store.faults import KillAt, SimulatedCrash
from state_store.storage import open_store
from state_store.testing import ManualClock

pytestmark = pytest.mark.integration

EPOCHS = 3


@pytest.fixture(scope="module")
def spark() -> Any:
    from spark_jobs.runtime.spark_session import driver_spark

    session = driver_spark()
    session.sparkContext.setLogLevel("OFF")
    return session


def clicks() -> GeneratorSource:
    return GeneratorSource(uid="clicks", partitions=1, seed=3, events_per_second=40, keys=8)


def run(job: Job, uri: str, point: str | None = None, epochs: int = EPOCHS) -> list[dict[str, Any]]:
    clock, crashed = ManualClock(DEFAULT_START_MS), 0
    for epoch in range(1, epochs + 1):
        clock.advance(10_000)
        kill = KillAt(point, 2) if point is not None and epoch == 2 else None
        try:
            report = run_cycle(job, uri, clock, **({"kill": kill} if kill else {}))
            assert report.status == "completed", report.reason
        except SimulatedCrash:
            crashed += 1
            run_cycle(job, uri, clock)
    assert crashed == (point is not None)
    return sorted(read_committed(open_store(uri), job.job_id, "out").to_pylist(), key=repr)


def windowed(stage: Callable[[Any], Any] | None) -> Job:
    """clicks -> [stage] -> per page 10 s count/sum, read in chunks of 16 rows (many watermarks
    per epoch)."""
    job = Job("pages", parallelism=1, max_parallelism=8, chunk_size=16)
    stream = job.source(clicks(), uid="clicks", out_of_orderness_ms=0)
    if stage is not None:
        stream = stream.spark(stage, name="stage")
    stream.key_by("page").window(
        TumblingEventTimeWindows(10_000), Aggregates(Count(), Sum("value")), uid="w"
    ).sink(ParquetSink(), uid="out")
    return job


def test_a_stage_that_drops_offset_and_reorders_rows_makes_none_of_them_late(
    spark: Any, tmp_path: Path
) -> None:
    """A projection that drops ``_offset`` after a shuffle returns the cut in any order. The
    subtask emits a watermark after every chunk: newest rows first would make the rest of the
    epoch late and silently dropped by the window. The windows must count every row."""

    def newest_first(df: Any) -> Any:
        from pyspark.sql import functions as F

        return df.select(*CLICKSTREAM_SCHEMA.names).orderBy(F.desc("event_time"))

    reference = run(windowed(None), (tmp_path / "ref").as_uri())
    assert run(windowed(newest_first), (tmp_path / "stage").as_uri()) == reference


def completed_end(uri: str, job_id: str) -> int:
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout(job_id), 10)
    latest = completed.latest()
    assert latest is not None
    return latest.metadata.barrier.end("clicks/p0")


def passthrough(stage: Callable[[Any], Any], job_id: str) -> Job:
    """clicks -> stage -> sink (the stage's inferred schema is per job: one job id per test)."""
    job = Job(job_id, parallelism=1, max_parallelism=8, max_records_per_epoch=150)
    job.source(clicks(), uid="clicks").spark(stage, name="stage").sink(ParquetSink(), uid="out")
    return job


def test_a_stage_returning_no_rows_completes_the_epoch_and_moves_the_position(
    spark: Any, tmp_path: Path
) -> None:
    uri = (tmp_path / "store").as_uri()
    assert run(passthrough(lambda df: df.where("false"), "empty"), uri, epochs=2) == []
    assert completed_end(uri, "empty") == 300


@pytest.mark.parametrize("point", [killpoints.BEFORE_METADATA, killpoints.AFTER_METADATA])
def test_a_random_stage_commits_one_attempt_of_each_epoch_never_both(
    point: str, spark: Any, tmp_path: Path
) -> None:
    """``rand()`` draws again on a replay: the replayed epoch keeps other rows than the crashed
    attempt. Exactly one attempt's rows are committed per epoch: no row twice, none from outside
    the epoch's cut, and the epoch's share is a sample of it (the documented behaviour)."""

    def sample(df: Any) -> Any:
        from pyspark.sql import functions as F

        return df.where(F.rand() < 0.5)

    everything = run(passthrough(lambda df: df, "all"), (tmp_path / "all").as_uri(), point)
    every = {r["event_id"] for r in everything}  # the same cuts: positions do not depend on fn
    rows = run(passthrough(sample, "sample"), (tmp_path / "store").as_uri(), point)
    ids = [r["event_id"] for r in rows]
    assert len(ids) == len(set(ids)), "a row was committed twice"
    assert set(ids) < every and 0.3 < len(ids) / len(every) < 0.7


def test_a_stage_output_column_named_partition_is_refused_not_dropped(spark: Any, tmp_path: Path) -> None:
    def tag(df: Any) -> Any:
        from pyspark.sql import functions as F

        return df.withColumn("_partition", F.lit("eu-west"))

    with pytest.raises(SparkStageError) as error:
        run(passthrough(tag, "tagged"), (tmp_path / "store").as_uri(), epochs=1)
    assert "\n" not in str(error.value) and "'_partition'" in str(error.value)


def test_a_stage_turning_the_event_time_into_text_is_refused_in_one_line(spark: Any, tmp_path: Path) -> None:
    """Without ``schema=`` the first epoch's output is the schema; an event time that is no
    longer a time (or an integer of ms) cannot give watermarks and must be named, not crash a
    subtask later."""

    def as_text(df: Any) -> Any:
        return df.withColumn("event_time", df["event_time"].cast("string"))

    with pytest.raises(SparkStageError) as error:
        run(passthrough(as_text, "texted"), (tmp_path / "store").as_uri(), epochs=1)
    message = str(error.value)
    assert "\n" not in message and "'event_time'" in message and "timestamp" in message
