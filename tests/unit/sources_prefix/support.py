"""Helpers for the prefix-source tests: a landing zone on the memory or the local-disk store whose
files carry modification times of a manual clock, so settling is tested without sleeping."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from spark_jobs.sources import parquet
from spark_jobs.sources.base import read_table
from spark_jobs.sources.dead_letters import DeadLetters
from spark_jobs.sources.prefix import PrefixSource
from state_store.core.ports import ObjectStore
from state_store.storage import LocalObjectStore
from state_store.testing import ManualClock

SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("event_time", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("value", pa.int64(), nullable=True),
    ]
)
T0 = 1_700_000_000_000
SETTLE_MS = 1_000


def rows(first: int, count: int) -> list[dict[str, Any]]:
    """Records whose id says which one they are: ``r<n>``."""
    return [{"id": f"r{n}", "event_time": T0 + n, "value": n} for n in range(first, first + count)]


def encode(fmt: str, records: Sequence[dict[str, Any]]) -> bytes:
    """The records as one file of ``fmt`` (timestamps as ISO text in JSON and CSV)."""
    if fmt == "parquet":
        return parquet.encode_table(pa.Table.from_pylist(list(records), schema=SCHEMA))
    texts = [
        {
            **r,
            "event_time": pa.scalar(r["event_time"], pa.timestamp("ms", tz="UTC"))
            .as_py()
            .isoformat(timespec="milliseconds"),
        }
        for r in records
    ]
    if fmt == "jsonl":
        return "".join(json.dumps(r) + "\n" for r in texts).encode()
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["id", "event_time", "value"])
    writer.writeheader()
    writer.writerows(texts)
    return out.getvalue().encode()


class Landing:
    """A landing zone in ``store`` whose files are stamped with ``clock``'s time (memory and disk)."""

    def __init__(self, store: ObjectStore | None, clock: ManualClock) -> None:
        self.store: ObjectStore = store  # type: ignore[assignment]  # the memory fixture sets it after
        self.clock = clock
        self.behind_ms = 0
        """How far the producer's clock is behind (memory stores stamp with ``stamp_ms``)."""

    def stamp_ms(self) -> int:
        return self.clock.now_ms() - self.behind_ms

    def put(self, key: str, data: bytes, *, behind_ms: int = 0) -> None:
        """Write ``key``; its modification time is the clock's now minus ``behind_ms``."""
        self.behind_ms = behind_ms
        try:
            self.store.put(key, data)
        finally:
            self.behind_ms = 0
        if isinstance(self.store, LocalObjectStore):
            ns = (self.clock.now_ms() - behind_ms) * 1_000_000
            os.utime(self.store.root / key, ns=(ns, ns))

    def drop(self, key: str, records: Sequence[dict[str, Any]], fmt: str = "jsonl") -> None:
        self.put(key, encode(fmt, records))

    def delete(self, key: str) -> None:
        self.store.delete(key)


def make_source(landing: Landing, **options: Any) -> PrefixSource:
    """A source over ``landing/`` of the landing store, its manifest in the same store (job ``j``)."""
    settings: dict[str, Any] = {
        "job_id": "j",
        "schema": SCHEMA,
        "format": "jsonl",
        "partitions": 2,
        "settle_ms": SETTLE_MS,
        "clock": landing.clock,
    }
    settings.update(options)
    uid = settings.pop("uid", "files")
    prefix = settings.pop("prefix", "landing")
    return PrefixSource(uid, landing.store, prefix, **settings)


def settle(landing: Landing, source: PrefixSource, rounds: int = 2) -> dict[str, int]:
    """Let time pass the settle time and list ``rounds`` times (the half-written rule needs two)."""
    ends: dict[str, int] = {}
    for _ in range(rounds):
        landing.clock.advance(SETTLE_MS)
        ends = source.end_offsets()
    return ends


def read_ids(
    source: PrefixSource, partition: str, start: int, end: int, dead: DeadLetters | None = None
) -> list[str]:
    table = read_table(source, partition, start, end, chunk_size=3, dead_letters=dead)
    return [str(x) for x in table.column("id").to_pylist()]


def read_all(source: PrefixSource, ends: dict[str, int], starts: dict[str, int] | None = None) -> list[str]:
    """Every id of ``[starts, ends)`` over all partitions."""
    out: list[str] = []
    for partition, end in sorted(ends.items()):
        out += read_ids(source, partition, (starts or {}).get(partition, 0), end)
    return out
