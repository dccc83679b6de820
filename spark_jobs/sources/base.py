"""The replayable-source port: partitions of append-only records addressed by offset.

Why it exists (Flink's recovery rule, seed 003): on restore, every source is reset to the position
``S_k`` recorded in the latest completed checkpoint *k*, and the records after it are read again.
That is only exactly-once if reading a range twice yields the same records at the same offsets.

Offset invariants
-----------------
* A partition is an append-only, totally ordered sequence of records at offsets ``0, 1, 2, ...``.
  The record at an offset never changes once it can be read.
* A **position is an end offset**: "consumed up to 120" means offsets ``0..119`` are done and 120 is
  the first offset the next epoch reads. A checkpoint stores end offsets; restore resumes there.
* Every range is **half-open** ``[start, end)``: ``end`` is exclusive, ``end - start`` records,
  ``start == end`` is an empty read. ``[a, b)`` followed by ``[b, c)`` is exactly ``[a, c)`` (no
  record read twice, none skipped). Off-by-one traps: the *last* offset read is ``end - 1``; the
  position to store after reading ``[a, b)`` is ``b``, not ``b - 1``.
* :meth:`ReplayableSource.end_offsets` is the exclusive end of what is readable *now* (Kafka's
  "log end offset"), so ``read(p, pos, end_offsets()[p])`` reads everything new.
* A malformed record still **consumes its offset**: it goes to the dead-letter collector with its
  partition and offset, and the batch simply has no row for it. A replay sees the same offsets
  and the same dead letters.

Batches
-------
``read`` yields Arrow record batches whose schema is :func:`batch_schema` of the source schema: an
``_offset`` int64 column (first) followed by the source's columns. Rows are in increasing offset
order; offsets inside a batch may have holes only where records were dead-lettered. Each batch holds
at most ``chunk_size`` offsets' worth of records; where batches are cut is *not* part of the
contract (it may follow segment boundaries), only their concatenation is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from spark_jobs.sources.dead_letters import DeadLetters
from spark_jobs.sources.errors import InvalidPartitionError, OffsetOutOfRangeError

OFFSET_COLUMN: Final[str] = "_offset"
"""Name of the int64 column carrying each record's offset in its partition."""

DEFAULT_CHUNK_SIZE: Final[int] = 65_536
"""Default number of offsets per yielded batch."""

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=@+,-]*$")


@runtime_checkable
class ReplayableSource(Protocol):
    """A partitioned, append-only input that can be read again from any recorded position."""

    @property
    def uid(self) -> str:
        """Stable id of the source; checkpoint positions are keyed ``<uid>/<partition>``."""
        ...

    @property
    def schema(self) -> pa.Schema:
        """Schema of valid records (without the ``_offset`` column)."""
        ...

    @property
    def event_time_column(self) -> str:
        """The column holding each record's event time (a timestamp or int64 milliseconds)."""
        ...

    def partitions(self) -> list[str]:
        """Stable, safe partition ids (see :func:`validate_partition_id`), in a stable order."""
        ...

    def end_offsets(self, now_ms: int | None = None) -> dict[str, int]:
        """Exclusive end offset of every partition as of now (or as of ``now_ms`` for sources whose
        content is a function of time). Never decreases for a partition."""
        ...

    def read(
        self,
        partition: str,
        start: int,
        end: int,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        dead_letters: DeadLetters | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Yield the valid records of offsets ``[start, end)`` in offset order, in batches.

        Malformed records go to ``dead_letters``; without a collector the first one raises
        :class:`~spark_jobs.sources.errors.MalformedRecordError`. Deterministic: the same
        arguments always yield the same rows and the same dead letters.
        """
        ...


def validate_partition_id(partition: str) -> str:
    """Return ``partition`` if it is a safe id, else raise InvalidPartitionError.

    Safe ids start with a letter or digit and use only ``[A-Za-z0-9_.=@+,-]`` (they become one
    object-key segment; names starting with ``_`` or ``.`` are reserved for markers).
    """
    if not isinstance(partition, str) or not _SAFE_NAME.match(partition):
        raise InvalidPartitionError(
            f"partition id {partition!r} is invalid: use letters, digits and _.=@+,- and start with "
            "a letter or digit (for example 'p0' or 'date=2026-11-21')"
        )
    return partition


def validate_uid(uid: str) -> str:
    """Return ``uid`` if it is a safe source uid (same rules as a partition id)."""
    if not isinstance(uid, str) or not _SAFE_NAME.match(uid):
        raise ValueError(f"source uid {uid!r} is invalid: use letters, digits and _.=@+,- (e.g. 'clicks')")
    return uid


def check_range(partition: str, start: int, end: int, chunk_size: int) -> None:
    """Validate a read request ``[start, end)`` (end exclusive) and its chunk size."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    if start < 0 or end < start:
        raise OffsetOutOfRangeError(
            f"cannot read partition {partition!r} range [{start}, {end}): offsets are >= 0 and the "
            "end is exclusive and not before the start"
        )


def batch_schema(schema: pa.Schema) -> pa.Schema:
    """The schema of batches yielded by ``read``: ``_offset`` int64 then the source columns."""
    if OFFSET_COLUMN in schema.names:
        raise ValueError(f"a source schema must not have a column named {OFFSET_COLUMN!r}: it is reserved")
    return pa.schema([pa.field(OFFSET_COLUMN, pa.int64(), nullable=False), *schema])


def check_event_time_column(schema: pa.Schema, column: str) -> str:
    """Return ``column`` if it is a timestamp or integer column of ``schema``."""
    if column not in schema.names:
        raise ValueError(f"event time column {column!r} is not in the schema ({', '.join(schema.names)})")
    kind = schema.field(column).type
    if not (pa.types.is_timestamp(kind) or pa.types.is_integer(kind)):
        raise ValueError(f"event time column {column!r} has type {kind}: use timestamp[ms] or int64 ms")
    return column


def event_time_ms(batch: pa.RecordBatch, column: str) -> NDArray[np.int64]:
    """Event times of a batch in milliseconds since the Unix epoch, as an int64 numpy array.

    Timestamp columns of any unit are converted to ms (sub-millisecond parts truncated); integer
    columns are taken as milliseconds. A null event time becomes ``-2**63`` (Flink's "no timestamp").
    """
    values = batch.column(column)
    if pa.types.is_timestamp(values.type):
        values = pc.cast(values, pa.timestamp("ms", tz=values.type.tz), safe=False)
    ints = pc.fill_null(values.cast(pa.int64()), -(2**63))
    out: NDArray[np.int64] = np.asarray(ints.to_numpy(zero_copy_only=False), dtype=np.int64)
    return out


def read_table(
    source: ReplayableSource,
    partition: str,
    start: int,
    end: int,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    dead_letters: DeadLetters | None = None,
) -> pa.Table:
    """Read ``[start, end)`` of one partition into one table (tests, tools, small ranges)."""
    batches = list(source.read(partition, start, end, chunk_size=chunk_size, dead_letters=dead_letters))
    return pa.Table.from_batches(batches, schema=batch_schema(source.schema))
