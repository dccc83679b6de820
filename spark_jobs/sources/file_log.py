"""A replayable source over segment files in an object store (a directory or an S3 prefix).

Layout and offsets: see :mod:`spark_jobs.sources.segments`. Each partition is a folder of
immutable, create-only segments; the record at offset *o* lives in the segment whose
``[base_offset, base_offset + count)`` contains *o*, at row/line ``o - base_offset``.

How a call works
----------------
1. List the partition's objects once per call (``end_offsets``, ``read``, ``append``). Record counts
   come from the segments themselves (NDJSON: lines; Parquet: footer ``num_rows``) and are cached
   per ``(key, version)``, which is safe because segments never change once written. Counting means
   fetching, so a fresh process fetches only the *last* segment of a partition to learn its end
   offset; a middle segment's count is inferred from the next base offset and checked when read
   (``verify`` checks them all, e.g. in maintenance).
2. Check that the segments tile the offsets (no gap, no overlap; errors name the segment).
3. ``read(p, start, end)`` fetches only the segments overlapping ``[start, end)`` (end exclusive)
   and yields their valid records in chunks of at most ``chunk_size`` offsets; batches never span
   two segments. Malformed records go to the dead-letter collector and keep their offsets.

``append`` writes the next segment create-only at the partition's end offset: of two producers
racing for the same offset one wins and the other gets :class:`SegmentExistsError` (re-read the end
and retry). Retrying an append whose response was lost, with the same records and ``base_offset``,
succeeds without writing twice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import pyarrow as pa

from spark_jobs.sources import ndjson, parquet
from spark_jobs.sources.base import (
    DEFAULT_CHUNK_SIZE,
    batch_schema,
    check_event_time_column,
    check_range,
    validate_partition_id,
    validate_uid,
)
from spark_jobs.sources.conform import Conformed, Where
from spark_jobs.sources.dead_letters import DeadLetters
from spark_jobs.sources.errors import (
    InvalidPartitionError,
    MalformedRecordError,
    OffsetOutOfRangeError,
    SegmentExistsError,
    SegmentLayoutError,
)
from spark_jobs.sources.segments import (
    PartitionIndex,
    Segment,
    build_index,
    is_marker,
    parse_segment_name,
    partition_prefix,
    segment_key,
)
from state_store.core.ports import (
    ObjectAlreadyExists,
    ObjectData,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    validate_key,
)

SegmentFormat = Literal["ndjson", "parquet"]
Records: TypeAlias = "pa.Table | pa.RecordBatch | Sequence[Mapping[str, Any]]"


class FileLogSource:
    """Partitions of NDJSON or Parquet segment files under ``prefix`` in an ObjectStore."""

    def __init__(
        self,
        store: ObjectStore,
        prefix: str,
        *,
        uid: str,
        schema: pa.Schema,
        format: SegmentFormat = "ndjson",
        event_time_column: str = "event_time",
        partitions: Sequence[str] | None = None,
    ) -> None:
        if format not in ("ndjson", "parquet"):
            raise ValueError(f"segment format {format!r} is not supported: use 'ndjson' or 'parquet'")
        self._prefix = prefix.strip("/")
        if self._prefix:
            validate_key(self._prefix)
        self._store = store
        self._uid = validate_uid(uid)
        batch_schema(schema)
        self._schema = schema
        self._format: SegmentFormat = format
        self._event_time_column = check_event_time_column(schema, event_time_column)
        self._fixed = None if partitions is None else [validate_partition_id(p) for p in partitions]
        self._counts: dict[str, tuple[str, int]] = {}

    # -- the ReplayableSource protocol ------------------------------------------------------------
    @property
    def uid(self) -> str:
        return self._uid

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    @property
    def event_time_column(self) -> str:
        return self._event_time_column

    @property
    def format(self) -> SegmentFormat:
        return self._format

    @property
    def extension(self) -> str:
        return ndjson.EXTENSION if self._format == "ndjson" else parquet.EXTENSION

    def partitions(self) -> list[str]:
        """The partitions given at construction, else every partition folder found, sorted."""
        if self._fixed is not None:
            return list(self._fixed)
        return sorted(self._list_all())

    def end_offsets(self, now_ms: int | None = None) -> dict[str, int]:
        """Exclusive end offset of every partition (``now_ms`` is ignored: the listing is "now")."""
        listed = self._list_all()
        names = self._fixed if self._fixed is not None else sorted(listed)
        return {p: self._build(p, listed.get(p, []), {}).end_offset for p in names}

    def read(
        self,
        partition: str,
        start: int,
        end: int,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        dead_letters: DeadLetters | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Yield the valid records of ``[start, end)`` (see :class:`ReplayableSource`).

        The listing and range checks happen at the call, so a bad range raises immediately.
        """
        validate_partition_id(partition)
        self._check_known(partition)
        check_range(partition, start, end, chunk_size)
        fetched: dict[str, ObjectData] = {}
        segments = self.index(partition, fetched).covering(start, end)
        return self._read_segments(segments, fetched, start, end, chunk_size, dead_letters)

    # -- producers -------------------------------------------------------------------------------
    def append(self, partition: str, records: Records, *, base_offset: int | None = None) -> Segment:
        """Write ``records`` as the next segment of ``partition`` (create-only); return it."""
        return self._append(partition, self._encode(records), base_offset)

    def append_lines(
        self, partition: str, lines: Sequence[str | bytes], *, base_offset: int | None = None
    ) -> Segment:
        """Write raw NDJSON lines as the next segment (producers that already hold JSON text)."""
        if self._format != "ndjson":
            raise ValueError(f"append_lines writes NDJSON but source {self._uid!r} reads {self._format}")
        return self._append(partition, ndjson.encode_lines(lines), base_offset)

    # -- index -----------------------------------------------------------------------------------
    def index(self, partition: str, fetched: dict[str, ObjectData] | None = None) -> PartitionIndex:
        """List the segments of one partition (one listing) and check that they tile its offsets.

        Only the last segment (for the end offset) and segments never counted before are fetched;
        a middle segment not yet counted gets its count from the next base offset and is checked
        when read. Fetched segments are left in ``fetched`` for the caller to reuse.
        """
        validate_partition_id(partition)
        infos = list(self._store.list(partition_prefix(self._prefix, partition)))
        return self._build(partition, infos, {} if fetched is None else fetched)

    def verify(self, partition: str) -> PartitionIndex:
        """Count every segment of ``partition`` (fetching each one not yet counted) and check the
        layout; raises SegmentLayoutError naming the first gap, overlap or bad segment."""
        validate_partition_id(partition)
        infos = list(self._store.list(partition_prefix(self._prefix, partition)))
        return self._build(partition, infos, {}, verify=True)

    def _list_all(self) -> dict[str, list[ObjectInfo]]:
        """One listing of the whole prefix, grouped by partition folder (markers skipped)."""
        root = f"{self._prefix}/" if self._prefix else ""
        grouped: dict[str, list[ObjectInfo]] = defaultdict(list)
        for info in self._store.list(root):
            folder, _, rest = info.key[len(root) :].partition("/")
            if is_marker(folder) or not rest:
                continue
            grouped[validate_partition_id(folder)].append(info)
        return dict(grouped)

    def _build(
        self,
        partition: str,
        infos: Sequence[ObjectInfo],
        fetched: dict[str, ObjectData],
        *,
        verify: bool = False,
    ) -> PartitionIndex:
        base = partition_prefix(self._prefix, partition)
        parsed: list[tuple[int, ObjectInfo]] = []
        for info in infos:
            name = info.key[len(base) :]
            if not is_marker(name):
                parsed.append((parse_segment_name(partition, info.key, name, self.extension), info))
        parsed.sort(key=lambda item: item[0])
        segments = []
        for i, (offset, info) in enumerate(parsed):
            cached = self._counts.get(info.key)
            if verify or i == len(parsed) - 1 or (cached is not None and cached[0] == info.version):
                segments.append(Segment(partition, info.key, offset, self._count(partition, info, fetched)))
            else:
                segments.append(
                    Segment(partition, info.key, offset, parsed[i + 1][0] - offset, verified=False)
                )
        return build_index(partition, segments)

    def _count(self, partition: str, info: ObjectInfo, fetched: dict[str, ObjectData]) -> int:
        """Records in a segment: cached per (key, version), else fetched and counted."""
        cached = self._counts.get(info.key)
        if cached is not None and cached[0] == info.version:
            return cached[1]
        try:
            data = self._store.get(info.key)
        except ObjectNotFound:
            raise SegmentLayoutError(
                f"segment {info.key!r} of partition {partition!r} vanished while indexing: retry the call",
                partition=partition,
                key=info.key,
            ) from None
        fetched[info.key] = data
        count = self._count_bytes(partition, info.key, data.data)
        self._counts[info.key] = (data.version, count)
        return count

    def _count_bytes(self, partition: str, key: str, data: bytes) -> int:
        if self._format == "ndjson":
            return ndjson.count_records(data)
        try:
            return parquet.count_records(data)
        except (pa.ArrowException, OSError) as exc:
            raise SegmentLayoutError(
                f"segment {key!r} of partition {partition!r} is not a readable Parquet file ({exc}): "
                "restore it from the producer or remove it together with every later segment",
                partition=partition,
                key=key,
            ) from exc

    def _check_known(self, partition: str) -> None:
        if self._fixed is not None and partition not in self._fixed:
            raise InvalidPartitionError(
                f"source {self._uid!r} has no partition {partition!r}; it has {', '.join(self._fixed)}"
            )

    # -- reading ---------------------------------------------------------------------------------
    def _read_segments(
        self,
        segments: Sequence[Segment],
        fetched: dict[str, ObjectData],
        start: int,
        end: int,
        chunk_size: int,
        dead_letters: DeadLetters | None,
    ) -> Iterator[pa.RecordBatch]:
        for segment in segments:
            data = fetched.pop(segment.key, None) or self._store.get(segment.key)
            first = max(start, segment.base_offset) - segment.base_offset
            stop = min(end, segment.end_offset) - segment.base_offset
            for conformed in self._decode(segment, data, first, stop, chunk_size):
                self._route(conformed, dead_letters)
                if conformed.batch.num_rows:
                    yield conformed.batch

    def _decode(
        self, segment: Segment, data: ObjectData, first: int, stop: int, chunk: int
    ) -> Iterator[Conformed]:
        where = Where(self._uid, segment.partition)
        if self._format == "ndjson":
            lines = ndjson.split_lines(data.data)
            self._check_count(segment, data.version, len(lines))
            for lo in range(first, stop, chunk):
                yield ndjson.decode(
                    lines, lo, min(lo + chunk, stop), segment.base_offset, self._schema, where
                )
        else:
            table = parquet.read_segment(data.data)
            self._check_count(segment, data.version, table.num_rows)
            for lo in range(first, stop, chunk):
                yield parquet.decode(
                    table, lo, min(lo + chunk, stop), segment.base_offset, self._schema, where
                )

    def _check_count(self, segment: Segment, version: str, count: int) -> None:
        """Check a fetched segment against its index entry (see ``Segment.verified``)."""
        if count == segment.count:
            self._counts[segment.key] = (version, count)
            return
        if not segment.verified:
            self.verify(segment.partition)  # raises the gap or overlap, naming both segments
        raise SegmentLayoutError(
            f"segment {segment.key!r} of partition {segment.partition!r} was indexed with "
            f"{segment.count} records but now holds {count}: segments are immutable; find who "
            "rewrote it, restore the original and retry",
            partition=segment.partition,
            key=segment.key,
        )

    def _route(self, conformed: Conformed, dead_letters: DeadLetters | None) -> None:
        if not conformed.rejected:
            return
        if dead_letters is None:
            first = conformed.rejected[0]
            raise MalformedRecordError(
                f"record at offset {first.offset} of partition {first.partition!r} of source "
                f"{self._uid!r} is malformed ({first.reason.value}: {first.detail}); pass a "
                "DeadLetters collector to read() to set malformed records aside and continue"
            )
        dead_letters.extend(conformed.rejected)

    # -- appending -------------------------------------------------------------------------------
    def _encode(self, records: Records) -> bytes:
        if isinstance(records, pa.Table | pa.RecordBatch):
            table = records
            if self._format == "ndjson":
                return ndjson.encode_table(table)
            return parquet.encode_table(table)
        rows: list[Mapping[str, Any]] = list(records)
        if self._format == "ndjson":
            return ndjson.encode_records(rows)
        return parquet.encode_table(pa.Table.from_pylist(rows, schema=self._schema))

    def _append(self, partition: str, data: bytes, base_offset: int | None) -> Segment:
        validate_partition_id(partition)
        self._check_known(partition)
        count = self._count_bytes(partition, "<new segment>", data)
        if count < 1:
            raise ValueError("cannot append zero records: an empty segment would block the next append")
        end = self.index(partition).end_offset
        base = end if base_offset is None else base_offset
        key = segment_key(self._prefix, partition, base, self.extension)
        if base > end or (base < end and self._store.head(key) is None):
            raise OffsetOutOfRangeError(
                f"cannot append to partition {partition!r} at offset {base}: it ends at {end} and a "
                f"segment there would leave {'a gap' if base > end else 'an overlap'}; append at {end}"
            )
        try:
            version = self._store.put_if_absent(key, data)
        except ObjectAlreadyExists:
            raise SegmentExistsError(
                f"segment {key!r} already exists with other records: another producer appended at "
                f"offset {base} first; re-read end_offsets() and append again",
                partition=partition,
                key=key,
            ) from None
        self._counts[key] = (version, count)
        return Segment(partition, key, base, count)
