"""Event time: out-of-order and idle partitions produce the same window results as a pandas
oracle computed over the whole input (no record is late: the watermark bound covers the disorder)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.windows import (
    Aggregates,
    Count,
    Max,
    SlidingEventTimeWindows,
    Sum,
    TumblingEventTimeWindows,
)
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.storage import open_store
from state_store.testing import ManualClock

STEP = 10_000
EPOCHS = 8


def source() -> GeneratorSource:
    return GeneratorSource(
        uid="clicks", partitions=3, seed=11, events_per_second=[60, 25, 40],
        out_of_orderness_ms=[3_000, 500, 1_500],
        idle_partitions={1: [(DEFAULT_START_MS + 20_000, DEFAULT_START_MS + 55_000)]},
        start_ms=DEFAULT_START_MS,
    )  # fmt: skip


def window_job(assigner: object, parallelism: int = 2) -> Job:
    job = Job("windows", parallelism=parallelism, max_parallelism=32, chunk_size=64)
    (
        job.source(source(), uid="clicks", out_of_orderness_ms=3_000, idleness_ms=5_000)
        .key_by("page")
        .window(assigner, Aggregates(Count(), Sum("value"), Max("value")), uid="page-windows")
        .sink(ParquetSink(), uid="out")
    )
    return job


def whole_input(job_source: GeneratorSource, ends: dict[str, int]) -> pd.DataFrame:
    parts = [pa.Table.from_batches(list(job_source.read(p, 0, end))) for p, end in ends.items() if end]
    table = pa.concat_tables(parts)
    frame = table.to_pandas()
    frame["ts"] = pc.cast(table["event_time"], pa.int64()).to_numpy()  # timestamp[ms] -> ms
    return frame


def oracle(frame: pd.DataFrame, size: int, slide: int) -> pd.DataFrame:
    rows = []
    for k in range(size // slide):
        starts = frame["ts"] - (frame["ts"] % slide) - k * slide
        rows.append(frame.assign(window_start=starts))
    assigned = pd.concat(rows)
    grouped = assigned.groupby(["page", "window_start"]).agg(
        count=("value", "size"), sum_value=("value", "sum"), max_value=("value", "max")
    )
    return grouped.reset_index().sort_values(["page", "window_start"]).reset_index(drop=True)


@pytest.mark.parametrize(
    ("assigner", "size", "slide"),
    [
        (TumblingEventTimeWindows(10_000), 10_000, 10_000),
        (SlidingEventTimeWindows(10_000, 5_000), 10_000, 5_000),
    ],
    ids=["tumbling", "sliding"],
)
def test_windows_over_out_of_order_and_idle_partitions_match_a_pandas_oracle(
    assigner: object, size: int, slide: int, tmp_path: Path
) -> None:
    uri = tmp_path.as_uri()
    job, clock = window_job(assigner), ManualClock(DEFAULT_START_MS)
    for _ in range(EPOCHS):
        clock.advance(STEP)
        run_cycle(job, uri, clock)
    final = run_cycle(job, uri, clock, drain=True)  # end of input: MAX watermark fires every window
    assert final.status == "completed"
    ends = source().end_offsets(clock.now_ms())
    expected = oracle(whole_input(source(), ends), size, slide)
    got = read_committed(open_store(uri), "windows", "out").to_pandas()
    got = got[["page", "window_start", "count", "sum_value", "max_value"]]
    got = got.sort_values(["page", "window_start"]).reset_index(drop=True)
    assert len(got) == len(expected) > 20
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)


def test_idle_partition_does_not_hold_back_windows(tmp_path: Path) -> None:
    """While partition 1 is idle, windows still fire on the other partitions' watermarks."""
    uri = tmp_path.as_uri()
    job, clock = window_job(TumblingEventTimeWindows(10_000)), ManualClock(DEFAULT_START_MS)
    fired_during_idleness = []
    for epoch in range(6):
        clock.advance(STEP)
        run_cycle(job, uri, clock)
        if epoch >= 3:  # partition 1 has been idle since +20 s
            fired_during_idleness.append(read_committed(open_store(uri), "windows", "out").num_rows)
    assert fired_during_idleness == sorted(fired_during_idleness)
    assert fired_during_idleness[-1] > fired_during_idleness[0]
