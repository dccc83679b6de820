"""Deterministic event generator shared by Epochal and the Spark Structured Streaming peer.

Invariants:
  * ``epoch_events(spec, e)`` depends only on ``(spec, e)``: the same records on every call, in
    every process (a seeded ``numpy`` generator per epoch).
  * Epoch ``e`` holds ``spec.events_per_epoch`` records split evenly over ``spec.partitions``
    partitions (partition ``p`` gets rows ``p::partitions``); event times grow with the record
    index, plus a jitter in ``[0, jitter_ms)`` -- so no record is ever more than ``jitter_ms``
    behind the maximum event time seen before it, and a watermark delay >= ``jitter_ms`` drops
    nothing on either engine (identical closed windows).
  * On disk: one Parquet segment per (epoch, partition) in the file-log source layout (base offset
    = ``e * per_partition``), and one Parquet file per (epoch, partition) for the peer, with the
    modification time ``T0 + e`` seconds so the peer's file source orders them by epoch and
    ``maxFilesPerTrigger = partitions`` makes its micro-batch ``e`` exactly our epoch ``e``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_jobs.sources.file_log import FileLogSource
from state_store.core.ports import ObjectStore

SCHEMA = pa.schema([("user_id", pa.int64()), ("event_time", pa.int64()), ("value", pa.int64())])
START_MS = 1_700_000_000_000


@dataclass(frozen=True)
class EventSpec:
    events_per_epoch: int
    keys: int
    epochs: int
    partitions: int = 2
    ms_per_event: float = 0.1
    """Event-time spacing: 0.1 ms/event = 10,000 events per second of event time."""
    jitter_ms: int = 2_000
    seed: int = 42

    def __post_init__(self) -> None:
        for name in ("events_per_epoch", "keys", "epochs", "partitions"):
            if getattr(self, name) < 1:
                raise ValueError(f"EventSpec.{name}={getattr(self, name)} is invalid: use >= 1")
        if self.events_per_epoch % self.partitions:
            raise ValueError(
                f"events_per_epoch={self.events_per_epoch} is not a multiple of partitions="
                f"{self.partitions}: pick a multiple so every partition gets the same share"
            )

    @property
    def per_partition(self) -> int:
        return self.events_per_epoch // self.partitions

    @property
    def total(self) -> int:
        return self.events_per_epoch * self.epochs


def epoch_events(spec: EventSpec, epoch: int) -> pa.Table:
    """All records of epoch ``epoch`` (0-based) in record order."""
    if not 0 <= epoch < spec.epochs:
        raise ValueError(f"epoch {epoch} is outside 0..{spec.epochs - 1}: generate a spec with more epochs")
    n = spec.events_per_epoch
    rng = np.random.default_rng([spec.seed, epoch])
    index = np.arange(epoch * n, (epoch + 1) * n, dtype=np.int64)
    times = START_MS + (index * spec.ms_per_event).astype(np.int64)
    times += rng.integers(0, spec.jitter_ms, n, dtype=np.int64)
    users = rng.integers(0, spec.keys, n, dtype=np.int64)
    values = rng.integers(1, 100, n, dtype=np.int64)
    return pa.table([users, times, values], schema=SCHEMA)


def partition_rows(table: pa.Table, partition: int, partitions: int) -> pa.Table:
    return table.take(pa.array(np.arange(partition, table.num_rows, partitions)))


def partition_names(spec: EventSpec) -> list[str]:
    return [f"p{p}" for p in range(spec.partitions)]


def file_log_source(store: ObjectStore, prefix: str = "input") -> FileLogSource:
    return FileLogSource(store, prefix, uid="events", schema=SCHEMA, format="parquet")


def write_inputs(spec: EventSpec, store: ObjectStore, peer_dir: Path) -> dict[str, float]:
    """Write every epoch to the file-log source (``input/`` in ``store``) and to ``peer_dir``."""
    began = time.perf_counter()
    source = file_log_source(store)
    peer_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time() - spec.epochs - 60
    for e in range(spec.epochs):
        table = epoch_events(spec, e)
        for p, name in enumerate(partition_names(spec)):
            part = partition_rows(table, p, spec.partitions)
            source.append(name, part, base_offset=e * spec.per_partition)
            path = peer_dir / f"epoch-{e:05d}-{name}.parquet"
            pq.write_table(part, path)
            os.utime(path, (t0 + e, t0 + e))
    return {"write_inputs_s": time.perf_counter() - began}


# -- typed inputs of the workload matrix (``bench/matrix.py``) ---------------------------------------
KEY_TYPES = ("int64", "string")
VALUE_TYPES = ("int64", "float64")


@dataclass(frozen=True)
class Shape:
    """What an input of the matrix looks like, on top of ``epoch_events``' records (the same users,
    times and values, so every shape has the same key-window structure):

    * ``key_type`` -- ``int64`` user ids, or ``string`` ``"user-<n>"``;
    * ``value_type`` -- ``int64`` values ``n`` in 1..99, or ``float64`` ``n * 0.01 + 0.001`` (not
      exact in binary: sums depend on the order of additions);
    * ``lag_ms`` -- the last partition's event times are ``lag_ms`` behind the others' (a watermark
      that is the minimum over partitions trails the maximum event time by ``lag_ms`` more);
    * ``duplicate_share`` -- an ``event_id`` column (the record index); this share of the records of
      odd index (they go to the other partition than the even ones) are replaced by an exact copy of
      an even record at most 99 records before (a redelivery), for deduplication.
    """

    key_type: str = "int64"
    value_type: str = "int64"
    lag_ms: int = 0
    duplicate_share: float = 0.0

    def __post_init__(self) -> None:
        if self.key_type not in KEY_TYPES or self.value_type not in VALUE_TYPES:
            raise ValueError(
                f"Shape({self.key_type!r}, {self.value_type!r}) is invalid: key_type in {KEY_TYPES}, "
                f"value_type in {VALUE_TYPES}"
            )
        if self.lag_ms < 0 or not 0.0 <= self.duplicate_share <= 1.0:
            raise ValueError(
                f"lag_ms={self.lag_ms} >= 0 and 0 <= duplicate_share={self.duplicate_share} <= 1"
            )

    def schema(self) -> pa.Schema:
        fields = [
            ("user_id", pa.string() if self.key_type == "string" else pa.int64()),
            ("event_time", pa.int64()),
            ("value", pa.float64() if self.value_type == "float64" else pa.int64()),
        ]
        if self.duplicate_share:
            fields.insert(0, ("event_id", pa.int64()))
        return pa.schema(fields)


def shaped_events(spec: EventSpec, shape: Shape, epoch: int) -> pa.Table:
    """``epoch_events(spec, epoch)`` in ``shape`` (deterministic: a function of its arguments)."""
    table = epoch_events(spec, epoch)
    n = table.num_rows
    users = table.column("user_id")
    if shape.key_type == "string":
        users = pc.binary_join_element_wise("user-", pc.cast(users, pa.string()), "")
    values = table.column("value")
    if shape.value_type == "float64":
        values = pa.array(values.to_numpy() * 0.01 + 0.001, pa.float64())
    times = table.column("event_time").to_numpy().copy()
    if shape.lag_ms:
        times[spec.partitions - 1 :: spec.partitions] -= shape.lag_ms
    columns: dict[str, Any] = {"user_id": users, "event_time": pa.array(times, pa.int64()), "value": values}
    if shape.duplicate_share:
        ids = np.arange(epoch * n, (epoch + 1) * n, dtype=np.int64)
        rng = np.random.default_rng([spec.seed, epoch, 7])
        odd = np.arange(1, n, 2, dtype=np.int64)
        copies = odd[rng.random(len(odd)) < shape.duplicate_share]
        back = 2 * rng.integers(0, 50, len(copies), dtype=np.int64) + 1  # odd: the original is even
        originals = copies - np.minimum(back, copies)  # odd - odd: an even record, never a copy
        take = np.arange(n, dtype=np.int64)
        take[copies] = originals
        columns = {"event_id": pa.array(ids[take], pa.int64())} | {
            k: (v if isinstance(v, pa.Array) else v.combine_chunks()).take(pa.array(take))
            for k, v in columns.items()
        }
    return pa.Table.from_pydict(columns, schema=shape.schema())


def shaped_source(store: ObjectStore, shape: Shape, prefix: str = "input") -> FileLogSource:
    return FileLogSource(store, prefix, uid="events", schema=shape.schema(), format="parquet")


def write_shaped_inputs(
    spec: EventSpec, shape: Shape, store: ObjectStore, peer_dir: Path
) -> dict[str, float]:
    """``write_inputs`` for a ``Shape``: the same files, epochs, partitions and modification times."""
    began = time.perf_counter()
    source = shaped_source(store, shape)
    peer_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time() - spec.epochs - 60
    for e in range(spec.epochs):
        table = shaped_events(spec, shape, e)
        for p, name in enumerate(partition_names(spec)):
            part = partition_rows(table, p, spec.partitions)
            source.append(name, part, base_offset=e * spec.per_partition)
            path = peer_dir / f"epoch-{e:05d}-{name}.parquet"
            pq.write_table(part, path)
            os.utime(path, (t0 + e, t0 + e))
    return {"write_inputs_s": time.perf_counter() - began}
