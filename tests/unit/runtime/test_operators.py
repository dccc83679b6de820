"""Operators in isolation: session windows, allowed lateness, deduplication TTL, async I/O order
and timeouts, process-function timers -- fed batches and watermarks directly."""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
import pytest

from spark_jobs.api.functions import KeyedProcessFunction, ProcessContext
from spark_jobs.api.graph import JobDefinitionError
from spark_jobs.api.job import Job
from spark_jobs.api.windows import Count, EventTimeSessionWindows, Sum, TumblingEventTimeWindows
from spark_jobs.runtime.operators.async_io import AsyncEnrichOperator, AsyncTimeoutError
from spark_jobs.runtime.operators.base import Operator, OperatorContext
from spark_jobs.runtime.operators.dedup import DeduplicateOperator
from spark_jobs.runtime.operators.process import ProcessOperator
from spark_jobs.runtime.operators.window import WindowOperator
from spark_jobs.sources.generator import GeneratorSource
from state_store.core.keygroups import KeyGroupRange
from state_store.core.state import ValueStateDescriptor
from tests.unit.runtime.support import Collect


def opened(op: Operator, now_ms: int = 0) -> Collect:
    out = Collect()
    op.output = out
    op.open(OperatorContext("job", 0, 1, 8, KeyGroupRange(0, 7), now_ms, 1), None)
    return out


def batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows)


def test_session_windows_merge_overlapping_sessions_per_key() -> None:
    op = WindowOperator("s", "k", EventTimeSessionWindows(gap_ms=100), Count(), allowed_lateness_ms=0)
    out = opened(op)
    op.process_batch(batch([{"k": "a", "_ts": 0}, {"k": "a", "_ts": 250}, {"k": "b", "_ts": 10}]))
    op.process_batch(batch([{"k": "a", "_ts": 120}]))  # [120,220): touches neither [0,100) nor [250,350)
    op.process_batch(batch([{"k": "a", "_ts": 180}]))  # [180,280) bridges [120,220) and [250,350)
    op.process_watermark(1_000)
    got = sorted((r["k"], r["window_start"], r["window_end"], r["count"]) for r in out.rows)
    assert got == [("a", 0, 100, 1), ("a", 120, 350, 3), ("b", 10, 110, 1)]


def test_late_records_go_to_the_side_output_and_lateness_refires_the_window() -> None:
    op = WindowOperator("w", "k", TumblingEventTimeWindows(100), Sum("v"), allowed_lateness_ms=50)
    out = opened(op)
    op.process_batch(batch([{"k": "a", "_ts": 10, "v": 1}, {"k": "a", "_ts": 90, "v": 2}]))
    op.process_watermark(120)  # window [0,100) fires: sum 3
    op.process_batch(batch([{"k": "a", "_ts": 50, "v": 10}]))  # within lateness: re-fires with 13
    op.process_watermark(160)  # cleanup at 99 + 50
    op.process_batch(batch([{"k": "a", "_ts": 60, "v": 100}]))  # too late: side output
    assert [(r["window_start"], r["sum_v"]) for r in out.rows] == [(0, 3), (0, 13)]
    assert [r["v"] for r in out.side_rows["late"]] == [100]
    assert op.metrics()["late_records"] == 1


def test_deduplicate_keeps_the_first_record_and_forgets_keys_after_the_ttl() -> None:
    op = DeduplicateOperator("d", "id", ttl_ms=1_000)
    out = opened(op, now_ms=0)
    op.process_batch(batch([{"id": "x", "n": 1}, {"id": "y", "n": 2}, {"id": "x", "n": 3}]))
    op.process_batch(batch([{"id": "y", "n": 4}, {"id": "z", "n": 5}]))
    assert [r["n"] for r in out.rows] == [1, 2, 5]
    op._now = 1_001  # the next epoch, past the TTL of x and y
    op.process_batch(batch([{"id": "x", "n": 6}]))
    assert [r["n"] for r in out.rows] == [1, 2, 5, 6]
    assert op.metrics()["duplicates_dropped"] == 2


async def slow_upper(row: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep((10 - row["n"]) / 1000)  # later rows finish first
    return {**row, "u": row["s"].upper()}


@pytest.mark.parametrize(("ordered", "in_order"), [(True, True), (False, False)])
def test_async_enrichment_ordered_and_unordered(ordered: bool, in_order: bool) -> None:
    op = AsyncEnrichOperator(slow_upper, ordered=ordered, capacity=10, timeout_ms=1_000, on_timeout="fail")
    out = opened(op)
    op.process_batch(batch([{"n": i, "s": f"r{i}"} for i in range(10)]))
    op.process_watermark(5)  # the segment ends: nothing may be left in flight
    assert sorted(r["n"] for r in out.rows) == list(range(10))
    assert ([r["n"] for r in out.rows] == list(range(10))) == in_order
    assert all(r["u"] == r["s"].upper() for r in out.rows)
    assert out.watermarks == [5]


async def never(row: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(10)
    return row


def test_async_timeouts_go_to_the_side_output_or_fail() -> None:
    op = AsyncEnrichOperator(never, ordered=True, capacity=4, timeout_ms=20, on_timeout="side_output")
    out = opened(op)
    op.process_batch(batch([{"n": 1}, {"n": 2}]))
    assert [r["n"] for r in out.side_rows["async-timeout"]] == [1, 2] and not out.rows
    failing = AsyncEnrichOperator(never, ordered=True, capacity=4, timeout_ms=20, on_timeout="fail")
    opened(failing)
    with pytest.raises(AsyncTimeoutError, match="raise timeout_ms"):
        failing.process_batch(batch([{"n": 1}]))


class Timers(KeyedProcessFunction):
    seen = ValueStateDescriptor[int]("seen", default=0)
    state_descriptors = (seen,)

    def process_element(self, row: dict[str, Any], ctx: ProcessContext) -> None:
        state = ctx.state(self.seen)
        state.update((state.value() or 0) + 1)
        ctx.register_event_time_timer(row["_ts"] + 100)

    def on_timer(self, timestamp: int, ctx: ProcessContext) -> None:
        ctx.emit({"k": ctx.current_key, "fired": timestamp, "seen": ctx.state(self.seen).value()})


def test_process_function_timers_fire_once_in_order_with_the_keyed_state() -> None:
    op = ProcessOperator("p", "k", Timers())
    out = opened(op)
    op.process_batch(batch([{"k": "a", "_ts": 5}, {"k": "b", "_ts": 1}, {"k": "a", "_ts": 5}]))
    op.process_watermark(104)
    op.process_watermark(105)
    op.process_watermark(500)
    assert [(r["k"], r["fired"], r["seen"]) for r in out.rows] == [("b", 101, 1), ("a", 105, 2)]
    snapshot = op.snapshot(1)
    assert snapshot.keyed is not None and snapshot.keyed.num_rows == 2


def test_stateful_steps_without_uid_and_duplicate_uids_are_refused() -> None:
    job = Job("j")
    source = GeneratorSource(uid="clicks", partitions=1)
    stream = job.source(source, uid="clicks").key_by("user_id").process(Timers(), uid="")
    stream.sink(object(), uid="out")
    with pytest.raises(JobDefinitionError, match="has no uid: pass uid="):
        job.graph.stages()
    job2 = Job("j2")
    job2.source(source, uid="clicks").key_by("user_id").process(Timers(), uid="clicks").sink(
        object(), uid="o"
    )
    with pytest.raises(JobDefinitionError, match="uid 'clicks' is used by both"):
        job2.graph.stages()
