"""A ``BatchProcessFunction`` (user logic once per chunk, state and timers as columns) gives the
same output and state as the per-key ``KeyedProcessFunction`` that does the same thing, across
rescales 4 -> 2 -> 8, a crash at every kill point and a savepoint restore; and bad use of it fails
with a remedy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.functions import BATCH_STATE, BatchProcessFunction, KeyedProcessFunction
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.chaos.observe import state_digest
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import CompletedCheckpointStore, JobLayout, killpoints
from state_store.core.errors import BadInputError
from state_store.core.state import ValueStateDescriptor
from state_store.storage import open_store
from state_store.testing import KillAt, ManualClock, SimulatedCrash

STEP = 10_000
IDLE_MS = 4_000
SCALES = [4, 4, 2, 2, 8, 8]


class RunningTotals(BatchProcessFunction):
    """Per user: events seen and the total amount, emitted once per chunk per user; a user idle for
    ``IDLE_MS`` of event time is emitted as expired and forgotten."""

    state_schema = pa.schema([("count", pa.int64()), ("total", pa.float64()), ("deadline", pa.int64())])

    def process(self, rows: pa.Table, state: pa.Table, ctx: Any) -> pa.Table:
        chunk = rows.group_by("key", use_threads=False).aggregate(
            [([], "count_all"), ("amount", "sum"), ("_ts", "max")]
        )
        mine = state.take(pc.index_in(chunk.column("key"), state.column("key")))
        count = pc.add(pc.coalesce(mine.column("count"), 0), chunk.column("count_all"))
        total = pc.add(pc.coalesce(mine.column("total"), 0.0), chunk.column("amount_sum"))
        deadline = pc.add(chunk.column("_ts_max"), IDLE_MS)
        old = mine.column("deadline")
        ctx.update_state(
            pa.table({"key": chunk.column("key"), "count": count, "total": total, "deadline": deadline})
        )
        ctx.delete_timers(pc.filter(chunk.column("key"), pc.is_valid(old)), pc.drop_null(old))
        ctx.register_timers(chunk.column("key"), deadline)
        return pa.table(
            {
                "user_id": chunk.column("key"),
                "count": count,
                "total": total,
                "expired": pa.repeat(False, chunk.num_rows),
                "_ts": chunk.column("_ts_max"),  # the key's latest event, as the per-key reference
            }
        )

    def on_timers(self, timers: pa.Table, state: pa.Table, ctx: Any) -> pa.Table:
        ctx.clear_state(timers.column("key"))
        return pa.table(
            {"user_id": timers.column("key"), "count": state.column("count"), "total": state.column("total"),
             "expired": pa.repeat(True, timers.num_rows), "_ts": timers.column("timestamp")}
        )  # fmt: skip


class RunningTotalsPerKey(KeyedProcessFunction):
    """The same logic one key at a time (the reference)."""

    state_descriptors = (ValueStateDescriptor[list[Any]](BATCH_STATE),)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        state = ctx.state(self.state_descriptors[0])
        count, total, deadline = state.value() or [0, 0.0, None]
        partial = 0.0
        for row in rows:
            partial += row["amount"]
        count, total = count + len(rows), total + partial
        if deadline is not None:
            ctx.delete_event_time_timer(deadline)
        deadline = max(row["_ts"] for row in rows) + IDLE_MS
        state.update([count, total, deadline])
        ctx.register_event_time_timer(deadline)
        ctx.emit({"user_id": key, "count": count, "total": total, "expired": False})

    def on_timer(self, timestamp: int, ctx: Any) -> None:
        state = ctx.state(self.state_descriptors[0])
        count, total, _ = state.value()
        state.clear()
        ctx.emit(
            {"user_id": ctx.current_key, "count": count, "total": total, "expired": True, "_ts": timestamp}
        )


def job_of(fn: Any, parallelism: int) -> Job:
    job = Job("totals", parallelism=parallelism, max_parallelism=32, chunk_size=40)
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=11, events_per_second=[40, 25], out_of_orderness_ms=[1_500, 500],
        keys=60, start_ms=DEFAULT_START_MS,
    )  # fmt: skip
    (
        job.source(source, uid="clicks", out_of_orderness_ms=1_500)
        .map(lambda b: b.append_column("amount", pc.multiply(pc.cast(b.column("value"), pa.float64()), 0.1)))
        .key_by("user_id")
        .process(fn, uid="totals")
        .sink(ParquetSink(), uid="out")
    )
    return job


def run(uri: str, fn: Any, epochs: int = 6, kill: str | None = None) -> tuple[list[str], dict[str, Any]]:
    clock = ManualClock(DEFAULT_START_MS)
    crashed = False
    for epoch in range(epochs):
        job = job_of(fn, SCALES[epoch])
        clock.advance(STEP)
        if kill is not None and epoch >= 1 and not crashed:
            try:
                report = run_cycle(job, uri, clock, executor="local", kill=KillAt(kill))  # type: ignore[arg-type]
            except SimulatedCrash:
                crashed = True
                assert run_cycle(job, uri, clock, executor="local").status in ("completed", "skipped")
                continue
        else:
            report = run_cycle(job, uri, clock, executor="local")
        assert report.status == "completed", report
    assert kill is None or crashed, f"no cycle reached kill point {kill}"
    store = open_store(uri)
    rows = read_committed(store, job.job_id, "out").to_pylist()
    completed, _ = CompletedCheckpointStore.recover(store, JobLayout(job.job_id), 1)
    latest = completed.latest()
    assert latest is not None
    out = sorted(repr((r["user_id"], r["count"], r["total"], r["expired"], r["_ts"])) for r in rows)
    return out, state_digest(store, latest.metadata, 32)


def test_the_batch_function_equals_the_per_key_function_across_rescales(tmp_path: Path) -> None:
    batch = run((tmp_path / "batch").as_uri(), RunningTotals())
    per_key = run((tmp_path / "per-key").as_uri(), RunningTotalsPerKey())
    assert batch == per_key
    assert any("True" in r for r in batch[0]) and any("False" in r for r in batch[0])  # timers fired
    assert batch[1]["totals"], "state was kept"


@pytest.mark.parametrize("point", killpoints.ALL)
def test_a_crash_at_every_kill_point_recovers_exactly(tmp_path: Path, point: str) -> None:
    crashed = run((tmp_path / "crash").as_uri(), RunningTotals(), epochs=5, kill=point)
    assert crashed == run((tmp_path / "clean").as_uri(), RunningTotalsPerKey(), epochs=5)


def test_a_function_without_a_state_schema_or_with_short_updates_is_refused(tmp_path: Path) -> None:
    class NoSchema(BatchProcessFunction):
        def process(self, rows: pa.Table, state: pa.Table, ctx: Any) -> None:
            return None

    with pytest.raises(BadInputError, match=r"has no state_schema: set it to a pyarrow\.Schema"):
        run_cycle(
            job_of(NoSchema(), 2), tmp_path.as_uri(), ManualClock(DEFAULT_START_MS + STEP), executor="local"
        )

    class Short(RunningTotals):
        def process(self, rows: pa.Table, state: pa.Table, ctx: Any) -> None:
            ctx.update_state(pa.table({"key": rows.column("key"), "count": pa.repeat(1, rows.num_rows)}))

    with pytest.raises(BadInputError, match=r"lacks columns \['total', 'deadline'\]"):
        run_cycle(
            job_of(Short(), 2),
            (tmp_path / "b").as_uri(),
            ManualClock(DEFAULT_START_MS + STEP),
            executor="local",
        )


class CountsAndAMarker(BatchProcessFunction):
    """Per key its count, and the key ``"all"`` (never in the input) set to 7: an update of a key
    the chunk does not hold."""

    state_schema = pa.schema([("count", pa.int64())])

    def process(self, rows: pa.Table, state: pa.Table, ctx: Any) -> None:
        chunk = rows.group_by("key", use_threads=False).aggregate([([], "count_all")])
        mine = state.take(pc.index_in(chunk.column("key"), state.column("key")))
        counts = pc.add(pc.coalesce(mine.column("count"), 0), chunk.column("count_all"))
        ctx.update_state(
            pa.table(
                {
                    "key": pa.concat_arrays([chunk.column("key").combine_chunks(), pa.array(["all"])]),
                    "count": pa.concat_arrays([counts.combine_chunks(), pa.array([7])]),
                }
            )
        )


@pytest.mark.parametrize("memory_mb", [None, 1], ids=["heap", "disk"])
def test_an_update_of_a_key_outside_the_chunk_is_kept_if_the_subtask_owns_it_and_refused_if_not(
    tmp_path: Path, memory_mb: int | None
) -> None:
    def job(parallelism: int) -> Job:
        built = job_of(CountsAndAMarker(), parallelism)
        built.state_memory_mb, built.state_dir = memory_mb, str(tmp_path / "state")
        return built

    uri = (tmp_path / "store").as_uri()
    clock = ManualClock(DEFAULT_START_MS + STEP)
    assert run_cycle(job(1), uri, clock, executor="local").status == "completed"
    store = open_store(uri)
    completed, _ = CompletedCheckpointStore.recover(store, JobLayout("totals"), 1)
    latest = completed.latest()
    assert latest is not None
    state = {row[2]: row[4] for row in state_digest(store, latest.metadata, 32)["totals"]}
    assert state.pop("'all'") == "[7]" and len(state) > 40, state
    clock.advance(STEP)
    with pytest.raises(Exception, match=r"key 'all'.*(key group|subtask)"):
        run_cycle(job(2), uri, clock, executor="local")
