"""Errors raised by replayable sources; each message says what a human should do about it."""

from __future__ import annotations


class SourceError(Exception):
    """Base class of every error a replayable source raises."""


class InvalidPartitionError(SourceError, ValueError):
    """A partition id that is not a safe name, or a partition the source does not have."""


class OffsetOutOfRangeError(SourceError, ValueError):
    """A read asked for offsets the partition does not hold (before its start or past its end)."""


class SegmentLayoutError(SourceError):
    """The segments of a partition do not tile its offsets: a gap, an overlap, an empty or
    unreadable segment, or an object whose name is not a segment name.

    ``partition`` and ``key`` name the offending partition and segment object.
    """

    def __init__(self, message: str, *, partition: str, key: str) -> None:
        super().__init__(message)
        self.partition = partition
        self.key = key


class SegmentExistsError(SourceError):
    """A create-only append found its segment already written (another producer won the race)."""

    def __init__(self, message: str, *, partition: str, key: str) -> None:
        super().__init__(message)
        self.partition = partition
        self.key = key


class MalformedRecordError(SourceError):
    """A malformed record was read without a dead-letter collector to send it to."""
