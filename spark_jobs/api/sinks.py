"""Sink specs used in job definitions (the runtime builds the transactional sink per subtask)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_jobs.sinks import DeltaSinkOptions, DeltaTransactionalSink, ParquetTransactionalSink
from spark_jobs.sinks.iceberg import IcebergSink
from spark_jobs.sinks.postgres import PostgresSink
from state_store.core.ports import ObjectStore

__all__ = ["DeltaSink", "IcebergSink", "ParquetSink", "PostgresSink"]


@dataclass(frozen=True)
class ParquetSink:
    """Transactional Parquet files under ``<job>/sinks/<uid>/`` (two-phase commit, see
    ``spark_jobs.sinks``). Read the committed output with ``spark_jobs.sinks.read_committed``."""

    max_rows_per_file: int = 1_000_000
    unique_key: tuple[str, ...] = ()
    """Columns that identify a row across all committed output (e.g. a window's key and start);
    validation checks that no committed transaction repeats a key (no duplicates end to end)."""

    def create(self, store: ObjectStore, job_id: str, uid: str) -> ParquetTransactionalSink:
        return ParquetTransactionalSink(store, job_id, uid, max_rows_per_file=self.max_rows_per_file)


@dataclass(frozen=True)
class DeltaSink:
    """Exactly-once output into a Delta Lake table at ``table_uri`` (a folder path or
    ``s3://bucket/prefix``; delta-rs ``storage_options`` for credentials and endpoint). One Delta
    commit per checkpoint, with the job's application transaction; see ``spark_jobs.sinks.delta``
    and the "Delta Lake sink" section of ``docs/writing-jobs.md``.

    ``mode="append"`` adds every checkpoint's rows; ``mode="merge"`` upserts them by ``unique_key``.
    ``partition_by``: partition columns. ``schema_evolution="merge"`` lets new columns into the
    table. ``on_rewind``: on a restore to an older checkpoint, ``"keep"`` the rows the rewound run
    committed after it, or ``"overwrite"`` (withdraw them in one commit). Invalid options raise
    at construction, one line each."""

    table_uri: str
    mode: str = "append"
    unique_key: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    schema_evolution: str | None = None
    on_rewind: str = "keep"
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    max_rows_per_file: int = 1_000_000

    def __post_init__(self) -> None:
        options = self.options()  # validates every option
        object.__setattr__(self, "unique_key", options.unique_key)
        object.__setattr__(self, "partition_by", options.partition_by)

    def options(self) -> DeltaSinkOptions:
        return DeltaSinkOptions(
            self.table_uri,
            self.mode,
            self.unique_key,
            self.partition_by,
            self.schema_evolution,
            self.on_rewind,
            self.max_rows_per_file,
        )

    def create(self, store: ObjectStore, job_id: str, uid: str) -> DeltaTransactionalSink:
        options = self.options()
        return DeltaTransactionalSink(store, job_id, uid, options, storage_options=self.storage_options)
