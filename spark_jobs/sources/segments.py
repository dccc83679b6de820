"""Segment files of a file-log partition and the index that maps offsets to them.

Layout (like Kafka log segments)::

    <prefix>/<partition>/<base_offset:020d>.<ndjson|parquet>

A segment holds the records ``base_offset .. base_offset + count - 1``; its *end offset* is
``base_offset + count`` (exclusive). Segments are immutable and written create-only.

Index invariants (checked every time an index is built, errors name the segment)
--------------------------------------------------------------------------------
* Segments tile the partition: each segment's ``base_offset`` equals the previous one's end
  offset. ``base > previous end`` is a **gap** (records missing); ``base < previous end`` is an
  **overlap** (records at two places). Both make replay ambiguous, so both are errors.
* Every segment holds at least one record (an empty one would share its base offset with the next).
* Counting a segment means fetching it, so an index may *infer* the count of a segment from the next
  segment's base offset (``verified=False``); such a count is checked when the segment is read, and
  :meth:`FileLogSource.verify` counts every segment.
* The partition's start offset is its first segment's base (older segments may have been deleted
  by retention); its end offset is the last segment's end, or 0 for a partition with no segments.
* Objects whose name starts with ``_`` or ``.`` are markers and ignored; any other object that is
  not ``<20 digits>.<extension>`` of the source's format is an error.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from spark_jobs.sources.errors import OffsetOutOfRangeError, SegmentLayoutError

_SEGMENT_NAME = re.compile(r"^(\d{20})\.([A-Za-z0-9]+)$")


def partition_prefix(prefix: str, partition: str) -> str:
    """The listing prefix of a partition's segments (always ends with '/')."""
    return f"{prefix}/{partition}/" if prefix else f"{partition}/"


def segment_key(prefix: str, partition: str, base_offset: int, extension: str) -> str:
    """The object key of the segment of ``partition`` starting at ``base_offset``."""
    if base_offset < 0:
        raise ValueError(f"a base offset is >= 0, got {base_offset}")
    return f"{partition_prefix(prefix, partition)}{base_offset:020d}.{extension}"


def is_marker(name: str) -> bool:
    """Names starting with '_' or '.' (``_SUCCESS``, ``.tmp``) are not segments and are skipped."""
    return name.startswith(("_", "."))


def parse_segment_name(partition: str, key: str, name: str, extension: str) -> int:
    """Return the base offset encoded in a segment file name, or raise SegmentLayoutError."""
    match = _SEGMENT_NAME.match(name)
    if match is None:
        raise SegmentLayoutError(
            f"object {key!r} in partition {partition!r} is not a segment: segment names are "
            f"<base offset as 20 digits>.{extension}; move it out of the source prefix or rename "
            "it with a leading '_' to mark it as ignored",
            partition=partition,
            key=key,
        )
    if match.group(2) != extension:
        raise SegmentLayoutError(
            f"segment {key!r} in partition {partition!r} is .{match.group(2)} but the source reads "
            f".{extension}: open the source with the matching format or move the file",
            partition=partition,
            key=key,
        )
    return int(match.group(1))


@dataclass(frozen=True, slots=True)
class Segment:
    """One segment object: records ``[base_offset, base_offset + count)``.

    ``verified`` is False when ``count`` was inferred from the next segment's base offset instead of
    read from the segment itself; the reader checks it when it fetches the segment.
    """

    partition: str
    key: str
    base_offset: int
    count: int
    verified: bool = True

    @property
    def end_offset(self) -> int:
        """Exclusive end: the base offset the next segment must have."""
        return self.base_offset + self.count


@dataclass(frozen=True, slots=True)
class PartitionIndex:
    """The validated, ordered segments of one partition."""

    partition: str
    segments: tuple[Segment, ...]

    @property
    def start_offset(self) -> int:
        return self.segments[0].base_offset if self.segments else 0

    @property
    def end_offset(self) -> int:
        return self.segments[-1].end_offset if self.segments else 0

    def covering(self, start: int, end: int) -> tuple[Segment, ...]:
        """The segments holding offsets ``[start, end)``, in order; raises if any is unavailable."""
        if start == end:
            return ()
        if end > self.end_offset:
            raise OffsetOutOfRangeError(
                f"cannot read partition {self.partition!r} range [{start}, {end}): it ends at offset "
                f"{self.end_offset} (exclusive); plan epochs from end_offsets()"
            )
        if start < self.start_offset:
            raise OffsetOutOfRangeError(
                f"cannot read partition {self.partition!r} range [{start}, {end}): offsets before "
                f"{self.start_offset} are no longer stored (deleted by retention?); restore from a "
                "newer checkpoint or restore the deleted segments"
            )
        return tuple(s for s in self.segments if s.base_offset < end and s.end_offset > start)


def build_index(partition: str, segments: Iterable[Segment]) -> PartitionIndex:
    """Order the segments by base offset and check that they tile the partition (see module doc)."""
    ordered = sorted(segments, key=lambda s: s.base_offset)
    for segment in ordered:
        if segment.verified and segment.count < 1:
            raise SegmentLayoutError(
                f"segment {segment.key!r} of partition {partition!r} holds no records: delete it "
                "(an empty segment would collide with the next append)",
                partition=partition,
                key=segment.key,
            )
    for previous, current in itertools.pairwise(ordered):
        if current.base_offset > previous.end_offset:
            raise SegmentLayoutError(
                f"partition {partition!r} has a gap: segment {previous.key!r} ends at offset "
                f"{previous.end_offset} but the next segment {current.key!r} starts at "
                f"{current.base_offset}, so offsets [{previous.end_offset}, {current.base_offset}) are "
                "missing; restore the missing segment before reading",
                partition=partition,
                key=current.key,
            )
        if current.base_offset < previous.end_offset:
            raise SegmentLayoutError(
                f"partition {partition!r} has an overlap: segment {previous.key!r} holds offsets "
                f"[{previous.base_offset}, {previous.end_offset}) but segment {current.key!r} starts at "
                f"{current.base_offset}; offsets [{current.base_offset}, {previous.end_offset}) are in "
                "both: remove the wrongly written segment",
                partition=partition,
                key=current.key,
            )
    return PartitionIndex(partition, tuple(ordered))
