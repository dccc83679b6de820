"""Helpers for Delta sink tests: run epochs through the sink, read the table back two ways."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable

from spark_jobs.sinks import DeltaSinkOptions, DeltaTransactionalSink
from state_store.core.ports import NO_KILL, KillSwitch, ObjectStore
from state_store.core.twophase import PreCommittedTxn
from state_store.faults import SimulatedCrash

JOB = "job-1"
UID = "orders-sink"


def make_sink(
    store: ObjectStore, table: str | Path, *, kill: KillSwitch = NO_KILL, uid: str = UID, **options: Any
) -> DeltaTransactionalSink:
    storage = options.pop("storage_options", None)
    waits = {"claim_wait_s": options.pop("claim_wait_s")} if "claim_wait_s" in options else {}
    return DeltaTransactionalSink(
        store, JOB, uid, DeltaSinkOptions(str(table), **options), storage_options=storage, kill=kill, **waits
    )


def batch(ids: Sequence[int], *, epoch: int, subtask: int = 0, **extra: Sequence[Any]) -> pa.RecordBatch:
    columns: dict[str, Any] = {
        "id": pa.array(ids, pa.int64()),
        "value": pa.array([f"e{epoch}-s{subtask}-{i}" for i in ids], pa.string()),
    }
    columns.update(extra)
    return pa.RecordBatch.from_pydict(columns)


def epoch_rows(epoch: int, subtask: int, per: int = 3) -> pa.RecordBatch:
    """Deterministic rows of one subtask in one epoch: ids epoch*100 + subtask*10 + i."""
    return batch([epoch * 100 + subtask * 10 + i for i in range(per)], epoch=epoch, subtask=subtask)


def pre_commit_epoch(
    sink: DeltaTransactionalSink,
    checkpoint_id: int,
    batches: dict[int, list[pa.RecordBatch]],
    *,
    generation: int = 1,
    attempt: int = 0,
) -> list[PreCommittedTxn]:
    """Subtask side of one epoch: begin, write, pre-commit per subtask; the records of the acks."""
    records = []
    for subtask, items in sorted(batches.items()):
        txn = sink.begin_transaction(checkpoint_id, subtask, attempt, generation)
        for b in items:
            sink.write(txn, b)
        records.append(sink.pre_commit(txn))
    return records


def standard_epoch(
    sink: DeltaTransactionalSink, epoch: int, checkpoint_id: int | None = None, *, generation: int = 1
) -> list[PreCommittedTxn]:
    """Two subtasks with three rows each, content decided by ``epoch`` (not by the checkpoint id)."""
    n = epoch if checkpoint_id is None else checkpoint_id
    return pre_commit_epoch(sink, n, {s: [epoch_rows(epoch, s)] for s in range(2)}, generation=generation)


def table_rows(table: str | Path, storage_options: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Reader 1: delta-rs."""
    if not DeltaTable.is_deltatable(str(table), storage_options):
        return []
    rows = DeltaTable(str(table), storage_options=storage_options).to_pyarrow_table().to_pylist()
    return sorted(rows, key=repr)


def dataset_rows(table: str | Path) -> list[dict[str, Any]]:
    """Reader 2: plain pyarrow.dataset over the files the table lists (local tables), with Hive
    partition columns typed as the table types them."""
    if not DeltaTable.is_deltatable(str(table)):
        return []
    dt = DeltaTable(str(table))
    schema = pa.schema(dt.schema().to_arrow())
    parts = dt.metadata().partition_columns
    partitioning = (
        ds.partitioning(pa.schema([schema.field(c) for c in parts]), flavor="hive") if parts else None
    )
    files = dt.file_uris()
    if not files:
        return []
    dataset = ds.dataset(
        files, schema=schema, format="parquet", partitioning=partitioning, partition_base_dir=str(table)
    )
    return sorted(dataset.to_table().to_pylist(), key=repr)


def both_readers(table: str | Path) -> list[dict[str, Any]]:
    """The rows, after asserting both readers agree."""
    rows = table_rows(table)
    assert dataset_rows(table) == rows
    return rows


def version(table: str | Path) -> int:
    return DeltaTable(str(table)).version()


def staged_parquet(table: str | Path) -> set[str]:
    """Every Parquet file under the table folder (committed or not), relative."""
    root = Path(table)
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet")}


class CrashAt:
    """A kill switch for the Delta sink's own kill points (``spark_jobs.sinks.delta.KILL_POINTS``,
    not protocol-wide ones): raise SimulatedCrash once at ``point`` (of ``checkpoint_id`` if given)."""

    def __init__(self, point: str, checkpoint_id: int | None = None) -> None:
        self.point, self.checkpoint_id, self.fired = point, checkpoint_id, False

    def __call__(self, point: str, checkpoint_id: int | None = None) -> None:
        if self.fired or point != self.point:
            return
        if self.checkpoint_id is not None and checkpoint_id != self.checkpoint_id:
            return
        self.fired = True
        raise SimulatedCrash(point, checkpoint_id)
