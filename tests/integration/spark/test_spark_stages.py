"""Spark-native stages on a real Spark session (one per module, the driver's ``driver_spark()``):

* a DataFrame stage (a filter and a join with a Parquet dimension table) gives the output of the
  same logic written as Python steps, fault-free and through a crash at every kill point, in
  process and on the Spark executor;
* ``SparkTableSource`` over a Parquet table that grows between epochs reads each row exactly once,
  through a crash mid-epoch and its replay, with ``max_rows_per_epoch`` respected;
* bad input (a stage of the wrong schema, a table or dimension table that does not exist) fails
  with one line naming it and the remedy, and commits nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from spark_jobs.api.graph import JobDefinitionError
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.windows import Aggregates, Count, Sum, TumblingEventTimeWindows
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.runtime.spark_stage_schema import SparkStageError
from spark_jobs.sinks import read_committed
from spark_jobs.sources.clickstream import CLICKSTREAM_SCHEMA
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from spark_jobs.sources.spark_table import SparkTableError, SparkTableSource
from state_store.core import CompletedCheckpointStore, JobLayout, killpoints
from state_store.faults import KillAt, SimulatedCrash
from state_store.storage import open_store
from state_store.testing import ManualClock

pytestmark = pytest.mark.integration

EPOCHS = 4
CRASH_AT = 3
STEP_MS = 10_000
SINK = "sections-out"
MIN_VALUE = 300
SECTIONS = {"/": "home", "/home": "home", "/search": "browse", "/product": "browse", "/cart": "buy"}
"""The dimension table: /checkout, /account and /help have no section (the inner join drops them)."""

ENRICHED = pa.schema([*CLICKSTREAM_SCHEMA, pa.field("section", pa.string())])


@pytest.fixture(scope="module")
def spark() -> Any:
    """The process's driver session (created once, reused by every epoch and test; not stopped:
    a later module may share it)."""
    from spark_jobs.runtime.spark_session import driver_spark

    session = driver_spark()
    session.sparkContext.setLogLevel("OFF")
    return session


@pytest.fixture(scope="module")
def dim_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("dim") / "sections.parquet"
    pq.write_table(pa.table({"page": list(SECTIONS), "section": list(SECTIONS.values())}), path)
    return str(path)


def clicks() -> GeneratorSource:
    return GeneratorSource(
        uid="clicks", partitions=2, seed=7, events_per_second=25, out_of_orderness_ms=500, keys=40
    )


def build(python_steps: bool, dim_path: str, stage: Callable[[Any], Any] | None = None) -> Job:
    """clicks -> (value > 300, inner join with the section dimension) -> per section 10 s
    count/sum -> Parquet; the middle as Python steps or as one DataFrame stage."""
    job = Job("sections", parallelism=2, max_parallelism=16, retained_checkpoints=2)
    stream = job.source(clicks(), uid="clicks", out_of_orderness_ms=500, idleness_ms=10_000)
    if python_steps:
        dim = pq.read_table(dim_path)
        stream = stream.filter(lambda b: pc.greater(b.column("value"), MIN_VALUE)).map(
            lambda b: pa.Table.from_batches([b]).join(dim, "page", join_type="inner")
        )
    else:
        stream = stream.spark(stage or sql_stage(dim_path), schema=ENRICHED, name="enrich")
    (
        stream.key_by("section")
        .window(TumblingEventTimeWindows(10_000), Aggregates(Count(), Sum("value")), uid="sections")
        .sink(ParquetSink(), uid=SINK)
    )
    return job


def sql_stage(dim_path: str) -> Callable[[Any], Any]:
    def enrich(df: Any) -> Any:
        from pyspark.sql import functions as F

        dim = df.sparkSession.read.parquet(dim_path)
        return df.where(F.col("value") > MIN_VALUE).join(dim, "page")

    return enrich


def committed(uri: str, job_id: str, sink: str = SINK) -> list[dict[str, Any]]:
    return sorted(read_committed(open_store(uri), job_id, sink).to_pylist(), key=repr)


def completed_ids(uri: str, job_id: str) -> list[int]:
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout(job_id), 10)
    return sorted(c.checkpoint_id for c in completed)


def run_job(job: Job, uri: str, point: str | None = None, **executor: Any) -> list[dict[str, Any]]:
    clock, crashed = ManualClock(DEFAULT_START_MS), 0
    for epoch in range(1, EPOCHS + 1):
        clock.advance(STEP_MS)
        kill = KillAt(point, CRASH_AT) if point is not None and epoch == CRASH_AT else None
        try:
            report = run_cycle(job, uri, clock, **({"kill": kill} if kill else {}), **executor)
            assert report.status == "completed", report.reason
        except SimulatedCrash as crash:
            assert crash.point == point
            crashed += 1
            run_cycle(job, uri, clock, **executor)  # the restarted process: failover, the epoch again
    assert crashed == (point is not None), f"kill point {point} was never reached"
    return committed(uri, job.job_id)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, dim_path: str) -> list[dict[str, Any]]:
    """The Python steps' output, fault-free, without Spark."""
    rows = run_job(build(True, dim_path), (tmp_path_factory.mktemp("ref") / "store").as_uri())
    assert len(rows) > 10 and {r["section"] for r in rows} == set(SECTIONS.values())
    return rows


# -- the DataFrame stage -------------------------------------------------------------------------------
def test_dataframe_stage_gives_the_python_steps_output_in_process(
    spark: Any, dim_path: str, reference: list[dict[str, Any]], tmp_path: Path
) -> None:
    assert run_job(build(False, dim_path), (tmp_path / "store").as_uri()) == reference


def test_dataframe_stage_on_the_spark_executor_gives_the_same_output(
    spark: Any, dim_path: str, reference: list[dict[str, Any]], tmp_path: Path
) -> None:
    job = build(False, dim_path)
    assert run_job(job, (tmp_path / "store").as_uri(), executor="spark", spark=spark) == reference


@pytest.mark.parametrize("point", killpoints.ALL)
def test_a_crash_at_each_kill_point_then_restart_gives_the_python_steps_output(
    point: str, spark: Any, dim_path: str, reference: list[dict[str, Any]], tmp_path: Path
) -> None:
    assert run_job(build(False, dim_path), (tmp_path / "store").as_uri(), point) == reference


def test_a_stage_of_the_wrong_schema_fails_the_epoch_in_one_line_naming_it_and_commits_nothing(
    spark: Any, dim_path: str, tmp_path: Path
) -> None:
    def as_text(df: Any) -> Any:
        return sql_stage(dim_path)(df).withColumn("value", df["value"].cast("string"))

    uri = (tmp_path / "store").as_uri()
    with pytest.raises(SparkStageError) as error:
        run_job(build(False, dim_path, as_text), uri)
    message = str(error.value)
    assert "\n" not in message and "'enrich'" in message and "'value'" in message
    assert committed(uri, "sections") == [] and completed_ids(uri, "sections") == []


def test_a_stage_dropping_the_event_time_column_is_refused(spark: Any, dim_path: str, tmp_path: Path) -> None:
    job = Job("no-time", parallelism=1, max_parallelism=8)
    job.source(clicks(), uid="clicks").spark(lambda df: df.drop("event_time"), name="trim").key_by(
        "page"
    ).deduplicate(ttl_ms=1_000, uid="dedup").sink(ParquetSink(), uid="out")
    with pytest.raises(SparkStageError, match=r"'trim'.*'event_time'"):
        run_job(job, (tmp_path / "store").as_uri())


def test_a_dimension_table_that_does_not_exist_is_named_and_nothing_is_committed(
    spark: Any, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such-dim")
    uri = (tmp_path / "store").as_uri()
    with pytest.raises(SparkStageError) as error:
        run_job(build(False, missing), uri)
    assert "\n" not in str(error.value) and "no-such-dim" in str(error.value)
    assert committed(uri, "sections") == [] and completed_ids(uri, "sections") == []


def test_a_spark_step_must_follow_a_source() -> None:
    job = Job("misplaced", parallelism=1, max_parallelism=8)
    mapped = job.source(clicks(), uid="clicks").map(lambda b: b)
    with pytest.raises(JobDefinitionError, match=r"spark step 'late'.*right after job.source"):
        mapped.spark(lambda df: df, name="late")


# -- SparkTableSource -----------------------------------------------------------------------------------
ORDERS = pa.schema([("id", pa.int64()), ("event_time", pa.timestamp("ms", tz="UTC")), ("amount", pa.int64())])


def append_orders(folder: Path, first: int, count: int) -> None:
    """One new Parquet file with ids ``first .. first + count - 1`` (the table grows)."""
    ids = list(range(first, first + count))
    times = [DEFAULT_START_MS + 1_000 * i for i in ids]
    table = pa.table({"id": ids, "event_time": times, "amount": [i % 7 for i in ids]}, schema=ORDERS)
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / f"part-{first:06d}.parquet")


def orders_job(folder: Path, max_rows: int | None = 7) -> Job:
    """orders -> sink, nothing between: a row read twice would be committed twice."""
    job = Job("orders", parallelism=2, max_parallelism=16)
    source = SparkTableSource(
        "orders", path=str(folder), order_by="id", event_time_column="event_time", max_rows_per_epoch=max_rows
    )
    job.source(source, uid="orders").sink(ParquetSink(), uid="orders-out")
    return job


@pytest.mark.parametrize("point", [None, killpoints.AFTER_STATE_UPLOAD, killpoints.BEFORE_METADATA])
def test_spark_table_source_over_a_growing_table_reads_each_row_exactly_once(
    point: str | None, spark: Any, tmp_path: Path
) -> None:
    """Rows arrive between epochs (one file of 10 per epoch); each epoch reads at most 7 rows
    ([last high-water mark, new one) fixed at the trigger); a crash mid-epoch 3 and the replay
    read the same rows. Every id reaches the sink exactly once."""
    folder, uri = tmp_path / "orders", (tmp_path / "store").as_uri()
    job, clock, crashed, ends = orders_job(folder), ManualClock(DEFAULT_START_MS), 0, []
    for epoch in range(1, 7):
        if epoch <= 3:
            append_orders(folder, (epoch - 1) * 10, 10)
        clock.advance(STEP_MS)
        kill = KillAt(point, 3) if point is not None and epoch == 3 else None
        try:
            run_cycle(job, uri, clock, **({"kill": kill} if kill else {}))
        except SimulatedCrash:
            crashed += 1
            run_cycle(job, uri, clock)
        ends.append(position(uri, "orders"))
    assert crashed == (point is not None)
    ids = [r["id"] for r in read_committed(open_store(uri), "orders", "orders-out").to_pylist()]
    assert sorted(ids) == list(range(30))
    assert ends[-1] == 30  # the high-water mark: max(id) + 1
    if point is None:  # at most 7 rows per epoch, the rest waits for the next one
        assert ends == [7, 14, 21, 28, 30, 30]


def test_spark_table_source_reads_no_row_twice_without_a_dedup_step(spark: Any, tmp_path: Path) -> None:
    """Source straight into the sink: a second read of any row would be a second committed row."""
    folder, uri = tmp_path / "orders", (tmp_path / "store").as_uri()
    job = Job("plain", parallelism=1, max_parallelism=8)
    source = SparkTableSource("orders", path=str(folder), order_by="event_time", max_rows_per_epoch=4)
    job.source(source, uid="orders").sink(ParquetSink(), uid="out")
    clock, counted = ManualClock(DEFAULT_START_MS), []
    for epoch in range(5):
        append_orders(folder, epoch * 3, 3)
        clock.advance(STEP_MS)
        epoch_crashing_after_ack(job, uri, clock, crash=epoch == 2)
        counted.append(records_metric(uri, "plain"))
    ids = sorted(r["id"] for r in read_committed(open_store(uri), "plain", "out").to_pylist())
    assert ids == list(range(15))
    # the ack's records are rows delivered, not the width of the mark's range (1,000 ms per row here)
    assert sum(counted) == 15 and max(counted) <= 4, counted


def epoch_crashing_after_ack(job: Job, uri: str, clock: ManualClock, *, crash: bool) -> None:
    """One epoch; with ``crash``, the process dies after the acks of checkpoint 3 and the epoch runs again."""
    kill = KillAt(killpoints.AFTER_ACK, 3) if crash else None
    try:
        run_cycle(job, uri, clock, **({"kill": kill} if kill else {}))
    except SimulatedCrash:
        run_cycle(job, uri, clock)


def records_metric(uri: str, job_id: str) -> int:
    """The ``records`` metric of the latest completed checkpoint's source acks."""
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout(job_id), 10)
    latest = completed.latest()
    assert latest is not None
    return sum(int(t.metrics["records"]) for t in latest.metadata.tasks if t.task.uid == "orders")


def position(uri: str, job_id: str) -> int:
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout(job_id), 10)
    latest = completed.latest()
    assert latest is not None
    return latest.metadata.barrier.end("orders/p0")


def test_a_table_that_does_not_exist_is_named_in_one_line_and_nothing_is_committed(
    spark: Any, tmp_path: Path
) -> None:
    uri = (tmp_path / "store").as_uri()
    job = orders_job(tmp_path / "no-such-table")
    with pytest.raises(SparkTableError) as error:
        run_cycle(job, uri, ManualClock(DEFAULT_START_MS))
    message = str(error.value)
    assert "\n" not in message and "no-such-table" in message and "'orders'" in message
    assert completed_ids(uri, "orders") == []


def test_an_order_by_column_the_table_lacks_is_named(spark: Any, tmp_path: Path) -> None:
    append_orders(tmp_path / "orders", 0, 3)
    job = Job("typo", parallelism=1, max_parallelism=8)
    source = SparkTableSource("orders", path=str(tmp_path / "orders"), order_by="created_at")
    job.source(source, uid="orders").sink(ParquetSink(), uid="out")
    with pytest.raises(SparkTableError, match=r"no column 'created_at' \(order_by\)"):
        run_cycle(job, (tmp_path / "store").as_uri(), ManualClock(DEFAULT_START_MS))


def test_spark_table_source_over_a_catalog_table_that_grows_reads_each_row_exactly_once(
    spark: Any, tmp_path: Path
) -> None:
    """A table of Spark's catalog (``table=``), filled by ``INSERT INTO`` between epochs, read
    5 rows per epoch by its id, with a crash after the acks of epoch 2 and the replay: each row is
    committed once."""
    name = f"orders_{tmp_path.name.replace('-', '_')}"
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT, event_time TIMESTAMP, amount BIGINT) USING parquet "
        f"LOCATION '{tmp_path / 'warehouse'}'"
    )
    try:
        uri = (tmp_path / "store").as_uri()
        job = Job("catalog-orders", parallelism=1, max_parallelism=8)
        source = SparkTableSource(
            "orders", table=name, order_by="id", event_time_column="event_time", max_rows_per_epoch=5
        )
        job.source(source, uid="orders").sink(ParquetSink(), uid="out")
        clock = ManualClock(DEFAULT_START_MS)
        for epoch in range(5):
            if epoch < 3:
                rows = ", ".join(
                    f"({i}, TIMESTAMP_MILLIS({DEFAULT_START_MS + i}), {i % 3})"
                    for i in range(epoch * 4, epoch * 4 + 4)
                )
                spark.sql(f"INSERT INTO {name} VALUES {rows}")
            clock.advance(STEP_MS)
            epoch_crashing_after_ack(job, uri, clock, crash=epoch == 2)
        ids = sorted(r["id"] for r in read_committed(open_store(uri), "catalog-orders", "out").to_pylist())
        assert ids == list(range(12))
        assert position(uri, "catalog-orders") == 12
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_a_catalog_that_does_not_exist_is_named_in_one_line_and_nothing_is_committed(
    spark: Any, tmp_path: Path
) -> None:
    uri = (tmp_path / "store").as_uri()
    job = Job("no-catalog", parallelism=1, max_parallelism=8)
    source = SparkTableSource("orders", table="lakehouse.sales.orders", order_by="id")
    job.source(source, uid="orders").sink(ParquetSink(), uid="out")
    with pytest.raises(SparkTableError) as error:
        run_cycle(job, uri, ManualClock(DEFAULT_START_MS))
    message = str(error.value)
    assert (
        "\n" not in message and "table lakehouse.sales.orders" in message and "create it, or fix" in message
    )
    assert completed_ids(uri, "no-catalog") == []
