"""Two-input connect of keyed streams: shared keyed state, and timers driven by the combined
watermark (the min of both inputs) -- per-user window counts of both inputs equal a pandas oracle,
although one input's watermark lags far behind the other's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.functions import CoProcessFunction, ProcessContext
from spark_jobs.api.graph import JobDefinitionError
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core.state import MapStateDescriptor
from state_store.storage import open_store
from state_store.testing import ManualClock

WINDOW = 10_000


class CountBothInputs(CoProcessFunction):
    counts = MapStateDescriptor[int, list[int]]("counts")  # window start -> [input 1, input 2]
    state_descriptors = (counts,)

    def _add(self, row: dict[str, Any], ctx: ProcessContext, side: int) -> None:
        start = row["_ts"] - row["_ts"] % WINDOW
        state = ctx.state(self.counts)
        current = state.get(start) or [0, 0]
        current[side] += 1
        state.put(start, current)
        ctx.register_event_time_timer(start + WINDOW - 1)

    def process_element1(self, row: dict[str, Any], ctx: ProcessContext) -> None:
        self._add(row, ctx, 0)

    def process_element2(self, row: dict[str, Any], ctx: ProcessContext) -> None:
        self._add(row, ctx, 1)

    def on_timer(self, timestamp: int, ctx: ProcessContext) -> None:
        start = timestamp + 1 - WINDOW
        state = ctx.state(self.counts)
        a, b = state.get(start) or [0, 0]
        state.remove(start)
        ctx.emit({"user_id": ctx.current_key, "window_start": start, "first": a, "second": b})


def clicks() -> GeneratorSource:
    return GeneratorSource(
        uid="clicks",
        partitions=2,
        seed=3,
        events_per_second=30,
        out_of_orderness_ms=1_000,
        keys=15,
        start_ms=DEFAULT_START_MS,
    )


def orders() -> GeneratorSource:
    return GeneratorSource(
        uid="orders",
        partitions=1,
        seed=4,
        events_per_second=8,
        out_of_orderness_ms=4_000,
        keys=15,
        start_ms=DEFAULT_START_MS,
    )


def build(parallelism: int = 2) -> Job:
    job = Job("joined", parallelism=parallelism, max_parallelism=16, chunk_size=10)
    first = job.source(clicks(), uid="clicks", out_of_orderness_ms=1_000).key_by("user_id")
    second = job.source(orders(), uid="orders", out_of_orderness_ms=500).key_by("user_id")
    first.connect(second).process(CountBothInputs(), uid="both").sink(ParquetSink(), uid="out")
    return job


def counts(source: GeneratorSource, end: dict[str, int], column: str) -> pd.DataFrame:
    table = pa.concat_tables(pa.Table.from_batches(list(source.read(p, 0, e))) for p, e in end.items())
    frame = pd.DataFrame(
        {"user_id": table["user_id"].to_pylist(), "ts": pc.cast(table["event_time"], pa.int64()).to_numpy()}
    )
    frame["window_start"] = frame["ts"] - frame["ts"] % WINDOW
    return frame.groupby(["user_id", "window_start"]).size().rename(column)


def test_connected_streams_count_both_inputs_per_window_like_a_pandas_oracle(tmp_path: Path) -> None:
    uri, job, clock = tmp_path.as_uri(), build(), ManualClock(DEFAULT_START_MS)
    for _ in range(6):
        clock.advance(WINDOW)
        assert run_cycle(job, uri, clock).status == "completed"
    assert run_cycle(job, uri, clock, drain=True).status == "completed"
    now = clock.now_ms()
    expected = (
        pd.concat(
            [
                counts(clicks(), clicks().end_offsets(now), "first"),
                counts(orders(), orders().end_offsets(now), "second"),
            ],
            axis=1,
        )
        .fillna(0)
        .astype(int)
    )
    expected = expected.reset_index().sort_values(["user_id", "window_start"]).reset_index(drop=True)
    got = read_committed(open_store(uri), "joined", "out").to_pandas()[
        ["user_id", "window_start", "first", "second"]
    ]
    got = got.sort_values(["user_id", "window_start"]).reset_index(drop=True)
    assert len(got) > 50
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)


def test_connect_refuses_unaligned_mode() -> None:
    job = Job("joined", mode="unaligned")
    first = job.source(clicks(), uid="clicks").key_by("user_id")
    second = job.source(orders(), uid="orders").key_by("user_id")
    with pytest.raises(JobDefinitionError, match="unaligned checkpoints of two-input steps"):
        first.connect(second).process(CountBothInputs(), uid="both")
