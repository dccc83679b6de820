"""Readers of a transactional sink: committed transactions only, verified, in checkpoint order.

Steps of :func:`read_committed`:

1. list ``_commits/`` and decode every entry (a torn or edited entry is a ManifestError);
2. for each checkpoint in ascending id, each subtask in ascending order, each file in order:
   read it and verify its byte size and checksum against the entry (CorruptSinkFileError naming
   the file otherwise);
3. concatenate the Parquet tables.

Staged files that no entry lists (pre-committed but uncommitted, aborted, zombie attempts) are
never opened, so readers never see them.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.sinks.commit_log import CommitLog
from state_store.core import checksums
from state_store.core.manifests import StateHandle
from state_store.core.ports import ObjectNotFound, ObjectStore
from state_store.formats.arrow_bytes import read_parquet


class SinkReadError(RuntimeError):
    """A committed file that cannot be read as committed (missing or different)."""


class CorruptSinkFileError(SinkReadError):
    """A committed file whose size or checksum differs from the commit log."""


@dataclass(frozen=True, slots=True)
class ExportResult:
    path: str
    rows: int
    files: int
    checkpoints: tuple[int, ...]


def read_committed(store: ObjectStore, job_id: str, uid: str, *, up_to: int | None = None) -> Any:
    """The sink's committed output as one ``pyarrow.Table`` (checkpoints ``<= up_to`` if given)."""
    table, _, _ = _read(store, job_id, uid, up_to)
    return table


def read_committed_pandas(store: ObjectStore, job_id: str, uid: str, *, up_to: int | None = None) -> Any:
    """:func:`read_committed` as a ``pandas.DataFrame``."""
    return read_committed(store, job_id, uid, up_to=up_to).to_pandas()


def read_committed_spark(
    spark: Any, store: ObjectStore, job_id: str, uid: str, *, up_to: int | None = None
) -> Any:
    """:func:`read_committed` as a Spark DataFrame (verified on the driver, then distributed)."""
    table = read_committed(store, job_id, uid, up_to=up_to)
    return spark.createDataFrame(
        table.to_pandas(), schema=None if table.num_rows else _spark_schema(spark, table)
    )


def _spark_schema(spark: Any, table: Any) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(table.schema)


def export_committed(
    store: ObjectStore, job_id: str, uid: str, out_path: str | os.PathLike[str], *, up_to: int | None = None
) -> ExportResult:
    """Write the committed output to one local Parquet file (atomically: temp file + rename)."""
    table, files, checkpoints = _read(store, job_id, uid, up_to)
    target = Path(out_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return ExportResult(str(target), table.num_rows, files, checkpoints)


def _read(store: ObjectStore, job_id: str, uid: str, up_to: int | None) -> tuple[Any, int, tuple[int, ...]]:
    tables: list[Any] = []
    checkpoints: list[int] = []
    for entry in CommitLog(store, job_id, uid).entries(up_to):
        checkpoints.append(entry.checkpoint_id)
        for handle in entry.files:
            tables.append(read_parquet(_verified(store, uid, entry.checkpoint_id, handle)))
    if not tables:
        return pa.table({}), 0, tuple(checkpoints)
    return pa.concat_tables(tables, promote_options="default"), len(tables), tuple(checkpoints)


def _verified(store: ObjectStore, uid: str, checkpoint_id: int, handle: StateHandle) -> bytes:
    where = f"sink {uid} committed file {handle.key} (checkpoint {checkpoint_id})"
    remedy = "the file was altered or lost after commit; restore it from a backup of the store"
    try:
        data = store.get(handle.key).data
    except ObjectNotFound:
        raise SinkReadError(f"{where} is missing; {remedy}") from None
    if len(data) != handle.size:
        raise CorruptSinkFileError(
            f"{where} has {len(data)} bytes, the commit log says {handle.size}; {remedy}"
        )
    actual = checksums.mismatch(handle.checksum, data)
    if actual is not None:
        raise CorruptSinkFileError(
            f"{where} has checksum {actual}, the commit log says {handle.checksum}; {remedy}"
        )
    return data
