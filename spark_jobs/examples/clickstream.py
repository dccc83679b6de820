"""The clickstream example: one chain exercising every kind of step.

::

    clicks (generator, 4 partitions, out-of-order, duplicates)
      -> key_by(event_id).deduplicate(ttl 1 h)                      uid "dedup"
      -> key_by(user_id).process(UserActivity)                      uid "user-activity"
           running total of ``value`` per user, and sessions (30 min gap, event-time timer)
      -> async_enrich(page -> section)                               (ordered, capacity 64)
      -> key_by(page).window(tumbling 10 s, count / sum / max)       uid "page-counts"
      -> sink ParquetSink (two-phase commit)                         uid "page-counts-sink"
"""

from __future__ import annotations

import asyncio
from typing import Any

from spark_jobs.api.functions import KeyedProcessFunction, ProcessContext
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.windows import Aggregates, Count, Max, Sum, TumblingEventTimeWindows
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core.state import ValueStateDescriptor

SESSION_GAP_MS = 30 * 60 * 1000
SECTIONS = {
    "/": "home", "/home": "home", "/search": "discovery", "/product": "discovery",
    "/cart": "purchase", "/checkout": "purchase", "/account": "account", "/help": "account",
}  # fmt: skip


class UserActivity(KeyedProcessFunction):
    """Per user: running total of ``value``; session number (a new session after 30 min idle)."""

    total = ValueStateDescriptor[int]("total", default=0)
    session = ValueStateDescriptor[list[int]]("session")  # [session number, last event time]
    state_descriptors = (total, session)

    def process_element(self, row: dict[str, Any], ctx: ProcessContext) -> None:
        total = ctx.state(self.total)
        running = (total.value() or 0) + row["value"]
        total.update(running)
        session = ctx.state(self.session)
        number, last = session.value() or [0, None]
        ts = row["_ts"]
        if last is None or ts - last > SESSION_GAP_MS:
            number += 1
        last = ts if last is None else max(last, ts)
        session.update([number, last])
        ctx.register_event_time_timer(last + SESSION_GAP_MS)
        ctx.emit({**row, "user_total": running, "session": number})

    def on_timer(self, timestamp: int, ctx: ProcessContext) -> None:
        session = ctx.state(self.session)
        current = session.value()
        if current is not None and current[1] + SESSION_GAP_MS <= timestamp:
            session.update([current[0], None])  # session closed; the count survives


async def page_section(row: dict[str, Any]) -> dict[str, Any]:
    """Stands in for a lookup service: yields to the event loop like a real I/O call."""
    await asyncio.sleep(0)
    return {**row, "section": SECTIONS.get(row["page"], "other")}


def build_job(
    job_id: str = "clickstream",
    *,
    parallelism: int = 2,
    partitions: int = 4,
    events_per_second: int | list[int] = 200,
    mode: str = "exactly_once",
    seed: int = 7,
    start_ms: int = DEFAULT_START_MS,
    max_records_per_epoch: int = 100_000,
    idle_partitions: dict[int, Any] | None = None,
    max_parallelism: int = 128,
    chunk_size: int = 65_536,
) -> Job:
    job = Job(
        job_id, parallelism=parallelism, max_parallelism=max_parallelism, mode=mode,
        retained_checkpoints=3, max_records_per_epoch=max_records_per_epoch, chunk_size=chunk_size,
    )  # fmt: skip
    clicks = GeneratorSource(
        uid="clicks",
        partitions=partitions,
        seed=seed,
        events_per_second=events_per_second,
        out_of_orderness_ms=2_000,
        duplicate_fraction=0.05,
        keys=200,
        start_ms=start_ms,
        idle_partitions=idle_partitions,
    )
    (
        job.source(clicks, uid="clicks", out_of_orderness_ms=2_000, idleness_ms=10_000)
        .key_by("event_id")
        .deduplicate(ttl_ms=3_600_000, uid="dedup")
        .key_by("user_id")
        .process(UserActivity(), uid="user-activity")
        .async_enrich(page_section, ordered=True, capacity=64)
        .key_by("page")
        .window(
            TumblingEventTimeWindows(10_000),
            Aggregates(Count(), Sum("value"), Max("user_total")),
            uid="page-counts",
        )
        .sink(ParquetSink(unique_key=("page", "window_start")), uid="page-counts-sink")
    )
    return job
