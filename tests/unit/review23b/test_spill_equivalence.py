"""Review of issue 23 item 1 (commit c2f4266): value state kept on disk (``Job(state_memory_mb=...)``)
must give the same output and the same checkpointed state as the in-memory backend on inputs the
author's tests did not try: integer (int32, negative int64) and binary keys, a state schema of
int32, float, bool, list, nested struct and string fields with nulls, duplicate keys in one
``update_state`` table, keys cleared and re-set in one chunk, an empty state schema, many tiny epochs
that compact, and rescales 1 -> 8 -> 3 under max_parallelism 128."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.functions import BatchProcessFunction
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.chaos.observe import state_digest
from spark_jobs.runtime import warm
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import CompletedCheckpointStore, JobLayout
from state_store.storage import open_store
from state_store.testing import KillAt, ManualClock, SimulatedCrash

STEP = 2_000
MAXP = 128
JOB = "typed"
INNER = pa.struct([("a", pa.int16()), ("b", pa.float32())])
TYPED = pa.schema(
    [
        ("n", pa.int32()),
        ("amt", pa.float64()),
        ("seen", pa.int64()),
        ("odd", pa.bool_()),
        ("hist", pa.list_(pa.int64())),
        ("note", pa.string()),
        ("inner", INNER),
    ]
)


class Typed(BatchProcessFunction):
    """Every input row is one update (a key's rows repeat in the update table: the last wins); a
    running state per key of many types, with null fields; keys whose value is divisible by 11 are
    updated and then cleared in the same chunk; each row emits the key's state before it."""

    state_schema = TYPED

    def process(self, rows: pa.Table, state: pa.Table, ctx: Any) -> pa.Table:
        current = {r["key"]: {k: v for k, v in r.items() if k != "key"} for r in state.to_pylist()}
        updates: list[dict[str, Any]] = []
        cleared, out_key, out_before = [], [], []
        for r in rows.select(["key", "value", "_ts"]).to_pylist():
            key, value = r["key"], r["value"]
            old = current.get(key) or {}
            out_key.append(repr(key))
            out_before.append(repr(sorted(old.items())))
            hist = old.get("hist") or []
            new = {
                "n": (old.get("n") or 0) + 1,
                "amt": (old.get("amt") or 0.0) + value / 100,
                "seen": r["_ts"],
                "odd": bool(value % 2),
                "hist": None if value % 3 == 0 else [*hist[-2:], value],
                "note": None if value % 2 == 0 else f"v{value}",
                "inner": None if value % 5 == 0 else {"a": value % 300, "b": value / 8},
            }
            current[key] = new
            updates.append({"key": key, **new})
            if value % 11 == 0:
                cleared.append(key)
                current[key] = None
        if updates:
            keys = pa.array([u["key"] for u in updates], rows.column("key").type)
            table = pa.Table.from_pylist([{k: v for k, v in u.items() if k != "key"} for u in updates], TYPED)
            ctx.update_state(table.append_column("key", keys))
        if cleared:
            ctx.clear_state(pa.array(cleared, rows.column("key").type))
        return pa.table({"k": out_key, "before": out_before})

    def on_timers(self, timers: pa.Table, state: pa.Table, ctx: Any) -> pa.Table:  # no timers
        return pa.table({"k": pa.array([], pa.string()), "before": pa.array([], pa.string())})


class Seen(BatchProcessFunction):
    """An empty state schema: a key's presence is its state (a set of keys seen); a key is emitted
    once, the first time it is seen, and forgotten when its value is divisible by 7."""

    state_schema = pa.schema([])

    def __init__(self) -> None:
        self.known: dict[Any, bool] = {}

    def process(self, rows: pa.Table, state: pa.Table, ctx: Any) -> pa.Table:
        keys = pc.unique(rows.column("key"))
        ctx.update_state(pa.table({"key": keys}))
        forget = pc.unique(
            pc.filter(rows.column("key"), pc.equal(pc.bit_wise_and(rows.column("value"), 7), 0))
        )
        ctx.clear_state(forget)
        return pa.table({"k": pc.cast(keys, pa.string()), "before": pa.repeat("", len(keys))})

    def on_timers(self, timers: pa.Table, state: pa.Table, ctx: Any) -> pa.Table:
        return pa.table({"k": pa.array([], pa.string()), "before": pa.array([], pa.string())})


KEYS: dict[str, Callable[[pa.RecordBatch], Any]] = {
    "string": lambda b: b.column("user_id"),
    "int32": lambda b: pc.cast(pc.utf8_slice_codeunits(b.column("user_id"), 1), pa.int32()),
    "negative-int64": lambda b: pc.multiply(
        pc.cast(pc.utf8_slice_codeunits(b.column("user_id"), 1), pa.int64()), -1_000_000_007
    ),
    "binary": lambda b: pc.cast(b.column("user_id"), pa.binary()),
}


def job_of(
    parallelism: int,
    spill: bool,
    state_dir: Path,
    *,
    key: str = "string",
    fn: Callable[[], BatchProcessFunction] = Typed,
    keys: int = 3_000,
    local_recovery: bool = False,
    retained: int = 3,
    job_id: str = JOB,
) -> Job:
    job = Job(
        job_id,
        parallelism=parallelism,
        max_parallelism=MAXP,
        chunk_size=512,
        max_records_per_epoch=100_000,
        state_memory_mb=1 if spill else None,
        state_dir=str(state_dir),
        local_recovery=local_recovery,
        retained_checkpoints=retained,
    )
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=11, events_per_second=[300, 200], out_of_orderness_ms=[300, 100],
        keys=keys, start_ms=DEFAULT_START_MS,
    )  # fmt: skip
    (
        job.source(source, uid="clicks", out_of_orderness_ms=300)
        .key_by(KEYS[key])
        .process(fn(), uid="typed")
        .sink(ParquetSink(), uid="out")
    )  # fmt: skip
    return job


def latest_metadata(uri: str, job_id: str = JOB) -> Any:
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout(job_id), 1)
    latest = completed.latest()
    assert latest is not None
    return latest.metadata


def result(uri: str, job_id: str = JOB) -> tuple[list[str], dict[str, Any]]:
    store = open_store(uri)
    rows = read_committed(store, job_id, "out").to_pylist()
    out = sorted(repr((r["k"], r["before"], r["_ts"])) for r in rows)
    return out, state_digest(store, latest_metadata(uri, job_id), MAXP)


def run(
    uri: str,
    spill: bool,
    state_dir: Path,
    scales: list[int],
    *,
    kill: tuple[int, str] | None = None,
    between: Callable[[int], None] | None = None,
    **kwargs: Any,
) -> tuple[list[str], dict[str, Any]]:
    """One cycle per entry of ``scales`` (the parallelism); ``kill``: crash that epoch's first try
    at that kill point, then run it again; ``between(epoch)`` runs before each epoch."""
    warm.clear()
    clock = ManualClock(DEFAULT_START_MS)
    for epoch, parallelism in enumerate(scales):
        job = job_of(parallelism, spill, state_dir, **kwargs)
        clock.advance(STEP)
        if between is not None:
            between(epoch)
        if kill is not None and epoch == kill[0]:
            with pytest.raises(SimulatedCrash):
                run_cycle(job, uri, clock, executor="local", kill=KillAt(kill[1]))  # type: ignore[arg-type]
            assert run_cycle(job, uri, clock, executor="local").status in ("completed", "skipped")
            continue
        report = run_cycle(job, uri, clock, executor="local")
        assert report.status == "completed", report
    warm.clear()
    return result(uri, kwargs.get("job_id", JOB))


RESCALES = [1, 1, 8, 8, 3, 3, 3, 3, 3]


@pytest.mark.parametrize("key", sorted(KEYS))
def test_typed_state_with_nulls_equals_in_memory_across_rescales_1_8_3(tmp_path: Path, key: str) -> None:
    heap = run((tmp_path / "heap").as_uri(), False, tmp_path / "hs", RESCALES, key=key)
    disk = run((tmp_path / "disk").as_uri(), True, tmp_path / "ds", RESCALES, key=key)
    assert heap[0] and heap[1]["typed"], "the case was not exercised"
    assert disk[0] == heap[0], "the same output"
    assert disk[1] == heap[1], "the same checkpointed state"


def test_an_empty_state_schema_equals_in_memory(tmp_path: Path) -> None:
    scales = [2, 2, 4, 1, 1]
    heap = run((tmp_path / "heap").as_uri(), False, tmp_path / "hs", scales, fn=Seen, keys=200)
    disk = run((tmp_path / "disk").as_uri(), True, tmp_path / "ds", scales, fn=Seen, keys=200)
    assert heap[1]["typed"], "the case was not exercised"
    assert disk == heap
