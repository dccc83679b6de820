"""Exactly-once sinks: the two-phase-commit protocol over an ObjectStore (Parquet output) and into a
Delta Lake table (``spark_jobs.sinks.delta``).

Writers pre-commit staged files per checkpoint; the coordinator commits them (one create-only
commit-log entry, or one Delta commit, per checkpoint); readers see committed checkpoints only.
"""

from spark_jobs.sinks.commit_log import CommitLog, SinkCommitEntry, SinkFence, SinkLayout
from spark_jobs.sinks.delta import DeltaTransactionalSink
from spark_jobs.sinks.delta_location import DeltaLocation, DeltaStorageError, InvalidDeltaLocation
from spark_jobs.sinks.delta_options import DeltaSinkOptions, InvalidDeltaSinkOptions
from spark_jobs.sinks.delta_rewind import RewindRefused
from spark_jobs.sinks.delta_schema import DeltaSchemaMismatch
from spark_jobs.sinks.parquet import ParquetTransactionalSink
from spark_jobs.sinks.reader import (
    CorruptSinkFileError,
    ExportResult,
    SinkReadError,
    export_committed,
    read_committed,
    read_committed_pandas,
    read_committed_spark,
)
from spark_jobs.sinks.sweep import plan_orphan_sweep, sweep_orphans

__all__ = [
    "CommitLog",
    "CorruptSinkFileError",
    "DeltaLocation",
    "DeltaSchemaMismatch",
    "DeltaSinkOptions",
    "DeltaStorageError",
    "DeltaTransactionalSink",
    "ExportResult",
    "InvalidDeltaLocation",
    "InvalidDeltaSinkOptions",
    "ParquetTransactionalSink",
    "RewindRefused",
    "SinkCommitEntry",
    "SinkFence",
    "SinkLayout",
    "SinkReadError",
    "export_committed",
    "plan_orphan_sweep",
    "read_committed",
    "read_committed_pandas",
    "read_committed_spark",
    "sweep_orphans",
]
