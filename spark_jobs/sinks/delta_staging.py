"""Staged files of a Delta sink transaction: names, Parquet writing, and the add actions that
publish them.

Names, relative to the table folder::

    [<col>=<value>/...]epochal-<uid>-c<n:010d>-s<subtask:05d>-g<gen>-a<attempt>-<k>-<token>.parquet

Append mode writes them where they stay (Hive-style partition folders, partition columns not in the
file, as every Delta writer does); the commit adds them. Merge mode writes the epoch's rows
unpartitioned under the same kind of name; the commit merges them into the table and deletes them.

No name is ever written twice: checkpoint, subtask, generation and attempt are in it, and a random
token per pre-commit makes a retry of one attempt write new files. So no zombie, retry or other
attempt can replace a file a record names (delta-rs's object store has no create-only put for data
files on S3; unique names do the same job). A file not in the log is invisible to every Delta
reader; abort deletes a transaction's files and VACUUM removes what a crash left (once older than
its retention).

Each file's footer carries the Delta schema it was written for (``epochal.delta_schema``: the full
schema, partition columns included) and its Delta statistics (``epochal.delta_stats``), so a commit
builds its add actions, and creates the table if needed, from the footers alone.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import Schema as DeltaSchema
from deltalake.transaction import AddAction

from spark_jobs.sinks.delta_location import TableFiles
from spark_jobs.sinks.delta_schema import conform
from state_store.core import checksums
from state_store.core.manifests import StateHandle
from state_store.core.twophase import SinkCommitError, TxnId

SCHEMA_KEY = b"epochal.delta_schema"
STATS_KEY = b"epochal.delta_stats"
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def name_prefix(txn: TxnId) -> str:
    """The file-name prefix of every file of one transaction (any partition folder)."""
    return (
        f"epochal-{txn.sink_uid}-c{txn.checkpoint_id:010d}-s{txn.subtask:05d}"
        f"-g{txn.generation}-a{txn.attempt}-"
    )


def belongs_to(key: str, txn: TxnId) -> bool:
    return key.rsplit("/", 1)[-1].startswith(name_prefix(txn))


def partition_value(value: Any, column: str, table: str) -> str | None:
    """A partition value as the Delta log spells it (``partitionValues`` are strings)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, str)):
        return str(value)
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    raise SinkCommitError(
        f"Delta table {table}: partition column {column!r} holds {type(value).__name__} values; "
        "partition by a string, integer, boolean or date column"
    )


def partition_folder(values: dict[str, str | None]) -> str:
    return "".join(
        f"{col}={NULL_PARTITION if v is None else quote(v, safe='')}/" for col, v in values.items()
    )


def partition_values_of(key: str, columns: Sequence[str]) -> dict[str, str | None]:
    """Inverse of :func:`partition_folder` for a staged file's key."""
    segments = dict(seg.split("=", 1) for seg in key.split("/")[:-1] if "=" in seg)
    return {
        c: None if segments.get(c, NULL_PARTITION) == NULL_PARTITION else unquote(segments[c])
        for c in columns
    }


def stats_of(data: pa.Table) -> dict[str, Any]:
    """Delta file statistics: row count, null counts of primitive columns, min/max of integers."""
    nulls: dict[str, int] = {}
    lows: dict[str, int] = {}
    highs: dict[str, int] = {}
    for field, column in zip(data.schema, data.columns):
        if pa.types.is_nested(field.type):
            continue
        nulls[field.name] = column.null_count
        if pa.types.is_integer(field.type) and column.null_count < len(column):
            bounds = pc.min_max(column)
            lows[field.name] = bounds["min"].as_py()
            highs[field.name] = bounds["max"].as_py()
    return {"numRecords": data.num_rows, "minValues": lows, "maxValues": highs, "nullCount": nulls}


@dataclass(frozen=True, slots=True)
class StagedFile:
    """A verified staged file: its record handle and what its footer says."""

    handle: StateHandle
    partition_values: dict[str, str | None]
    schema: DeltaSchema
    stats: str

    def add_action(self, now_ms: int) -> AddAction:
        # the raw relative path: delta-rs URI-encodes it into the log itself
        return AddAction(self.handle.key, self.handle.size, self.partition_values, now_ms, True, self.stats)


class StagedFileMissing(SinkCommitError):
    """A staged file of a record is gone. Two causes: a commit of the same checkpoint won a race,
    merged it and deleted it (merge mode) -- the caller reloads the ledger and finds the checkpoint
    committed -- or it was deleted (VACUUM, abort of a fenced generation, by hand) and the
    checkpoint cannot be committed any more."""

    def __init__(self, table: str, handle: StateHandle, checkpoint_id: int) -> None:
        super().__init__(
            f"Delta table {table}: cannot commit checkpoint {checkpoint_id}: staged file {handle.key} is "
            f"missing (the pre-commit recorded {handle.size} bytes; deleted by VACUUM, by an abort or "
            "by hand?); restore from an earlier checkpoint to write it again"
        )
        self.key = handle.key
        self.checkpoint_id = checkpoint_id


class Stager:
    """Writes and reads one table's staged files (paths relative to the table folder)."""

    def __init__(self, files: TableFiles, table: str, partition_by: Sequence[str], compression: str) -> None:
        self.files = files
        self.fs = files.fs
        self.table = table
        self.partition_by = tuple(partition_by)
        self.compression = compression

    def write(
        self,
        txn: TxnId,
        data: pa.Table,
        schema: DeltaSchema,
        *,
        split_partitions: bool,
        max_rows_per_file: int,
        on_key: Callable[[str], None],
    ) -> list[StateHandle]:
        """Write ``data`` (already in ``schema``'s Arrow types) as staged files; ``on_key`` hears
        each key before its file is written (so an abort after a failure deletes it)."""
        token = secrets.token_hex(4)
        handles: list[StateHandle] = []
        groups = self._partitions(data) if split_partitions else [({}, data)]
        k = 0
        for values, part in groups:
            for i in range(max(1, math.ceil(part.num_rows / max_rows_per_file))):
                chunk = part.slice(i * max_rows_per_file, max_rows_per_file)
                key = f"{partition_folder(values)}{name_prefix(txn)}{k}-{token}.parquet"
                on_key(key)
                handles.append(self._write_file(key, chunk, schema))
                k += 1
        return handles

    def _partitions(self, data: pa.Table) -> list[tuple[dict[str, str | None], pa.Table]]:
        if not self.partition_by:
            return [({}, data)]
        combos = data.select(list(self.partition_by)).group_by(list(self.partition_by)).aggregate([])
        out = []
        for row in combos.to_pylist():
            mask = None
            for col in self.partition_by:
                value = row[col]
                cond = pc.is_null(data[col]) if value is None else pc.equal(data[col], value)
                cond = pc.fill_null(cond, False)
                mask = cond if mask is None else pc.and_(mask, cond)
            values = {c: partition_value(row[c], c, self.table) for c in self.partition_by}
            out.append((values, data.filter(mask).drop_columns(list(self.partition_by))))
        return out

    def _write_file(self, key: str, chunk: pa.Table, schema: DeltaSchema) -> StateHandle:
        meta = {SCHEMA_KEY: schema.to_json().encode(), STATS_KEY: json.dumps(stats_of(chunk)).encode()}
        sink = pa.BufferOutputStream()
        pq.write_table(chunk.replace_schema_metadata(meta), sink, compression=self.compression)
        data = sink.getvalue().to_pybytes()
        self.files.put(key, data)
        return StateHandle(key, len(data), checksums.checksum_of(data))

    def inspect(self, handles: Sequence[StateHandle], checkpoint_id: int) -> list[StagedFile]:
        """Every staged file exists with its recorded size; its footer read. :class:`StagedFileMissing`
        if one is gone, SinkCommitError if one has another size."""
        if not handles:
            return []
        infos = self.fs.get_file_info([h.key for h in handles])
        staged = []
        for handle, info in zip(handles, infos):
            if info.type != pafs.FileType.File:
                raise StagedFileMissing(self.table, handle, checkpoint_id)
            if info.size != handle.size:
                raise SinkCommitError(
                    f"Delta table {self.table}: cannot commit checkpoint {checkpoint_id}: staged file "
                    f"{handle.key} has {info.size} bytes, the pre-commit recorded {handle.size} bytes "
                    "(overwritten by hand?); restore from an earlier checkpoint to write it again"
                )
            with self._missing_as(handle, checkpoint_id):
                meta = pq.read_metadata(handle.key, filesystem=self.fs).metadata or {}
            staged.append(
                StagedFile(
                    handle,
                    partition_values_of(handle.key, self.partition_by),
                    DeltaSchema.from_json(meta[SCHEMA_KEY].decode()),
                    meta[STATS_KEY].decode(),
                )
            )
        return staged

    def read(self, files: Sequence[StagedFile], schema: pa.Schema, checkpoint_id: int) -> pa.Table:
        """The rows of merge-mode staged files, in order, in ``schema`` (for a merge source);
        :class:`StagedFileMissing` if one is gone (a racing commit of the same checkpoint merged and
        deleted it: the caller decides again)."""
        parts = []
        for f in files:
            with self._missing_as(f.handle, checkpoint_id):
                parts.append(conform(pq.read_table(f.handle.key, filesystem=self.fs), schema, self.table))
        return pa.concat_tables(parts) if parts else schema.empty_table()

    @contextmanager
    def _missing_as(self, handle: StateHandle, checkpoint_id: int) -> Iterator[None]:
        """A file deleted between two reads surfaces as :class:`StagedFileMissing`."""
        try:
            yield
        except OSError as exc:
            if isinstance(exc, FileNotFoundError) or _not_found(exc):
                raise StagedFileMissing(self.table, handle, checkpoint_id) from exc
            raise

    def delete(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` (missing ones are fine: every delete may be retried)."""
        for key in keys:
            try:
                self.fs.delete_file(key)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if not _not_found(exc):
                    raise


def _not_found(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "not found" in text or "no such file" in text


def now_ms() -> int:
    return int(time.time() * 1000)
