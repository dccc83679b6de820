"""Replayable sources: partitioned, append-only inputs read by offset ranges ``[start, end)``.

On recovery every source is reset to the end offsets stored in the latest completed checkpoint and
read again from there (seed 003), so reading a range must be deterministic and repeatable. See
:mod:`spark_jobs.sources.base` for the offset invariants and the off-by-one traps.

* :class:`ReplayableSource` -- the port; :func:`plan_epoch` fixes an epoch's barrier positions.
* :class:`FileLogSource` -- NDJSON or Parquet segment files in an ObjectStore (disk, S3, memory).
* :class:`PrefixSource` -- Parquet, JSON-lines or CSV files others drop under a folder or S3 prefix.
* :class:`GeneratorSource` -- a deterministic clickstream appearing at a fixed rate.
* :class:`DeadLetters` -- where malformed records go (they still consume their offsets).
"""

from spark_jobs.sources.base import (
    DEFAULT_CHUNK_SIZE,
    OFFSET_COLUMN,
    ReplayableSource,
    batch_schema,
    event_time_ms,
    read_table,
    validate_partition_id,
)
from spark_jobs.sources.clickstream import CLICKSTREAM_SCHEMA, DEFAULT_PAGES
from spark_jobs.sources.dead_letters import DEAD_LETTER_SCHEMA, DeadLetter, DeadLetterReason, DeadLetters
from spark_jobs.sources.errors import (
    InvalidPartitionError,
    MalformedRecordError,
    OffsetOutOfRangeError,
    SegmentExistsError,
    SegmentLayoutError,
    SourceError,
)
from spark_jobs.sources.file_log import FileLogSource, SegmentFormat
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource, IdleWindow, Timeline
from spark_jobs.sources.plan import plan_epoch
from spark_jobs.sources.prefix import CsvOptions, PrefixSource
from spark_jobs.sources.segments import PartitionIndex, Segment

__all__ = [
    "CLICKSTREAM_SCHEMA",
    "DEAD_LETTER_SCHEMA",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_PAGES",
    "DEFAULT_START_MS",
    "OFFSET_COLUMN",
    "CsvOptions",
    "DeadLetter",
    "DeadLetterReason",
    "DeadLetters",
    "FileLogSource",
    "GeneratorSource",
    "IdleWindow",
    "InvalidPartitionError",
    "MalformedRecordError",
    "OffsetOutOfRangeError",
    "PartitionIndex",
    "PrefixSource",
    "ReplayableSource",
    "Segment",
    "SegmentExistsError",
    "SegmentFormat",
    "SegmentLayoutError",
    "SourceError",
    "Timeline",
    "batch_schema",
    "event_time_ms",
    "plan_epoch",
    "read_table",
    "validate_partition_id",
]
