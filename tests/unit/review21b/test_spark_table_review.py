"""Adversarial review of ``SparkTableSource`` (issue 21 item 6) on one real Spark session.

Each test states what "each row exactly once" needs from a high-water-mark source: ties at the
mark never stall or split, the mark means the same instant in every session time zone, and rows
the mark can never reach (null or negative ``order_by``) are refused loudly instead of skipped."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS
from spark_jobs.sources.spark_table import PARTITION, SparkTableError, SparkTableSource
from state_store.core import CompletedCheckpointStore, JobLayout
from state_store.storage import open_store
from state_store.testing import ManualClock

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def spark() -> Any:
    from spark_jobs.runtime.spark_session import driver_spark

    session = driver_spark()
    session.sparkContext.setLogLevel("OFF")
    return session


@pytest.fixture
def new_york(spark: Any) -> Iterator[None]:
    """The session time zone of a cluster in New York (restored to UTC afterwards)."""
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        yield
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")


def write(folder: Path, name: str, table: pa.Table) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / f"{name}.parquet")


def ids(source: SparkTableSource, start: int, end: int) -> list[int]:
    return sorted(r["id"] for b in source.read(PARTITION, start, end) for r in b.to_pylist())


def test_ntz_mark_taken_in_one_session_time_zone_reads_every_row_in_another(
    spark: Any, tmp_path: Path, new_york: None
) -> None:
    """The trigger (Airflow's local session, UTC) fixes the mark; the epoch runs on a cluster
    session in New York. The same mark must cut the same rows in both, or the rows between the
    two readings of the mark are never read (the next epoch starts at the mark)."""
    base = dt.datetime(2026, 11, 1, 12, 0)
    times = [base + dt.timedelta(hours=h) for h in range(8)]
    write(tmp_path, "ntz", pa.table({"id": list(range(8)), "at": pa.array(times, pa.timestamp("us"))}))
    source = SparkTableSource("ntz", path=str(tmp_path), order_by="at")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    end = source.end_offsets()[PARTITION]
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    assert source.end_offsets()[PARTITION] == end
    assert ids(source, 0, end) == list(range(8))


def test_ntz_spring_forward_hour_keeps_order_and_every_row(
    spark: Any, tmp_path: Path, new_york: None
) -> None:
    """02:30 does not exist in New York on 2026-03-08: a session-zone cast moves it onto 03:30,
    ties it with a later row and puts it in the wrong cut. The mark must not depend on the zone."""
    times = [dt.datetime(2026, 3, 8, 2, 30), dt.datetime(2026, 3, 8, 3, 30)]
    write(tmp_path, "dst", pa.table({"id": [0, 1], "at": pa.array(times, pa.timestamp("us"))}))
    source = SparkTableSource("dst", path=str(tmp_path), order_by="at", max_rows_per_epoch=1)
    end = source.end_offsets()[PARTITION]
    first = source.epoch_end(PARTITION, 0, end, 1)
    assert ids(source, 0, first) == [0] and ids(source, first, end) == [1]


@pytest.mark.parametrize(("seq", "count"), [([1, None, 3], "1 row "), ([None, None], "2 rows")])
def test_rows_with_a_null_order_by_are_refused_in_one_line_not_skipped(
    spark: Any, tmp_path: Path, seq: list[int | None], count: str
) -> None:
    write(tmp_path, "nulls", pa.table({"id": list(range(len(seq))), "seq": pa.array(seq, pa.int64())}))
    source = SparkTableSource("nulls", path=str(tmp_path), order_by="seq")
    with pytest.raises(SparkTableError) as error:
        source.end_offsets()
    message = str(error.value)
    assert "\n" not in message and "'seq'" in message and count in message and "null" in message


def test_rows_with_a_negative_order_by_are_refused_in_one_line_not_skipped(
    spark: Any, tmp_path: Path
) -> None:
    before_1970 = [dt.datetime(1969, 12, 31, tzinfo=dt.UTC), dt.datetime(2026, 1, 1, tzinfo=dt.UTC)]
    write(
        tmp_path, "old", pa.table({"id": [1, 2], "at": pa.array(before_1970, pa.timestamp("us", tz="UTC"))})
    )
    source = SparkTableSource("old", path=str(tmp_path), order_by="at")
    with pytest.raises(SparkTableError) as error:
        source.end_offsets()
    message = str(error.value)
    assert "\n" not in message and "'at'" in message and "below" in message


@pytest.mark.parametrize("kind", [pa.string(), pa.decimal128(10, 2), pa.float64()])
def test_an_order_by_spark_cannot_encode_as_a_position_is_named_in_one_line(
    spark: Any, tmp_path: Path, kind: pa.DataType
) -> None:
    write(tmp_path, "odd", pa.table({"id": [1], "k": pa.array(["1"]).cast(kind)}))
    with pytest.raises(SparkTableError, match=r"order_by column 'k' .*order by an integer"):
        SparkTableSource("odd", path=str(tmp_path), order_by="k").end_offsets()


def completed_end(uri: str, job_id: str) -> int:
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout(job_id), 10)
    latest = completed.latest()
    assert latest is not None
    return latest.metadata.barrier.end(f"{job_id}/{PARTITION}")


def test_ties_at_the_mark_larger_than_the_cap_are_taken_whole_and_never_stall(
    spark: Any, tmp_path: Path
) -> None:
    """Five rows share value 0 and three share value 1, with a cap of 2 rows per epoch: the first
    epoch takes all of value 0 (a cut never splits one value), the next all of value 1, and every
    row reaches the sink once; then the job is idle, not stuck re-reading a value."""
    seq = [0, 0, 0, 0, 0, 1, 1, 1, 2]
    write(tmp_path / "t", "ties", pa.table({"id": list(range(9)), "seq": seq, "ts": [DEFAULT_START_MS] * 9}))
    job = Job("ties", parallelism=1, max_parallelism=8)
    source = SparkTableSource(
        "ties", path=str(tmp_path / "t"), order_by="seq", event_time_column="ts", max_rows_per_epoch=2
    )
    job.source(source, uid="ties").sink(ParquetSink(), uid="out")
    uri, clock, ends = (tmp_path / "store").as_uri(), ManualClock(DEFAULT_START_MS), []
    for _ in range(4):
        clock.advance(10_000)
        run_cycle(job, uri, clock)
        ends.append(completed_end(uri, "ties"))
    assert ends == [1, 2, 3, 3]
    out = sorted(r["id"] for r in read_committed(open_store(uri), "ties", "out").to_pylist())
    assert out == list(range(9))
