"""Sink specs used in job definitions (the runtime builds the transactional sink per subtask)."""

from __future__ import annotations

from dataclasses import dataclass

from spark_jobs.sinks import ParquetTransactionalSink
from state_store.core.ports import ObjectStore


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
