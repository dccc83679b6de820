"""Keyed counts with a controlled update rate (benchmarks and tests of incremental checkpoints).

Source ``updates`` (one partition): the first epoch touches every one of ``keys`` keys once; every
later epoch of ``step_ms`` touches ``fraction`` of the keys, chosen uniformly at random (seeded by
offset: replayable). ``counts`` keeps one value per key: how often it was seen, and emits the new
count of every key an epoch touched (``user``, ``count``) to the Parquet sink ``out``: the first
epoch writes one row per key, later ones about ``fraction`` of the keys. ``epochal run --job
keyed-counts`` runs it; ``epochal output --job keyed-counts`` prints what the sink committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from spark_jobs.api.functions import KeyedProcessFunction, ProcessContext
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core.state import ValueStateDescriptor


class KeyUpdates:
    uid = "updates"
    event_time_column = "event_time"
    schema = pa.schema([("user", pa.string()), ("event_time", pa.int64()), ("value", pa.int64())])

    def __init__(self, keys: int, per_epoch: int, step_ms: int, start_ms: int = DEFAULT_START_MS) -> None:
        self.keys, self.per_epoch, self.step_ms, self.start_ms = keys, per_epoch, step_ms, start_ms

    def partitions(self) -> list[str]:
        return ["p0"]

    def end_offsets(self, now_ms: int | None = None) -> dict[str, int]:
        epochs = max(0, ((now_ms or self.start_ms) - self.start_ms) // self.step_ms)
        return {"p0": 0 if epochs == 0 else self.keys + (epochs - 1) * self.per_epoch}

    def key_at(self, offsets: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        mixed = (offsets.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(17)
        return np.where(offsets < self.keys, offsets, (mixed % np.uint64(self.keys)).astype(np.int64))

    def read(
        self, partition: str, start: int, end: int, *, chunk_size: int = 65_536, dead_letters: Any = None
    ) -> Iterator[pa.RecordBatch]:
        for lo in range(start, end, chunk_size):
            offsets = np.arange(lo, min(end, lo + chunk_size), dtype=np.int64)
            yield pa.RecordBatch.from_pydict({
                "_offset": offsets,
                "user": [f"user-{k}" for k in self.key_at(offsets)],
                "event_time": self.start_ms + offsets // 100,
                "value": np.ones(len(offsets), dtype=np.int64),
            })  # fmt: skip


class CountPerKey(KeyedProcessFunction):
    count = ValueStateDescriptor[int]("count", default=0)
    state_descriptors = (count,)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: ProcessContext) -> None:
        state = ctx.state(self.count)
        count = (state.value() or 0) + len(rows)
        state.update(count)
        ctx.emit({"user": key, "count": count})


def build_job(
    job_id: str = "keyed-counts",
    *,
    keys: int = 100_000,
    fraction: float = 0.01,
    step_ms: int = 10_000,
    parallelism: int = 2,
    max_parallelism: int = 128,
) -> Job:
    job = Job(job_id, parallelism=parallelism, max_parallelism=max_parallelism, max_records_per_epoch=keys)
    source = KeyUpdates(keys, max(1, int(keys * fraction)), step_ms)
    job.source(source, uid="updates").key_by("user").process(CountPerKey(), uid="counts").sink(
        ParquetSink(), uid="out"
    )
    return job
