"""GeneratorSource: a deterministic clickstream that appears at a fixed rate (demo, tests, benchmarks).

Purity
------
* The record at ``(partition, offset)`` is a pure function of ``(seed, partition, offset)`` and the
  constructor arguments (see :mod:`spark_jobs.sources.clickstream` for the columns). Reading any
  range, in any chunking, any number of times gives the same records.
* ``end_offsets(now_ms)`` is a pure function of ``now_ms``: partition *i* makes
  ``events_per_second[i]`` records per second of *active* time since ``start_ms``; idle windows
  ``[from_ms, to_ms)`` (``to_ms=None``: forever) are not active. Precisely,
  ``end(now) = min(max_records, active_ms(now) * events_per_second // 1000)`` where
  ``active_ms(now)`` counts the active milliseconds in ``[start_ms, now)`` -- so ``end`` is
  exclusive and the record at offset *o* becomes visible at the first ``now`` with ``end(now) > o``.

Time invariants (per partition)
-------------------------------
* ``appear(o)``, the time offset *o* becomes visible, never decreases with *o*.
* ``event_time(o) = appear(o) - jitter(o)`` with ``0 <= jitter <= out_of_orderness_ms``: event time
  never runs ahead of the wall clock, and every record's event time is at least the maximum event
  time of the earlier records minus ``out_of_orderness_ms`` (bounded out-of-orderness, the
  assumption behind a ``max_seen - bound`` watermark).
* An idle partition produces nothing during its windows; its watermark should be excluded then.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from spark_jobs.sources.base import DEFAULT_CHUNK_SIZE, check_range, validate_uid
from spark_jobs.sources.clickstream import (
    CLICKSTREAM_SCHEMA,
    DEFAULT_PAGES,
    ClickstreamShape,
    Column,
    PartitionRandom,
)
from spark_jobs.sources.dead_letters import DeadLetters
from spark_jobs.sources.errors import InvalidPartitionError, OffsetOutOfRangeError
from state_store.clocks import SystemClock
from state_store.core.ports import Clock

DEFAULT_START_MS = 1_700_000_000_000
"""2023-11-14T22:13:20Z: the default time the generator starts producing."""


@dataclass(frozen=True, slots=True)
class IdleWindow:
    """A partition produces nothing during ``[start_ms, end_ms)``; ``end_ms=None`` means forever."""

    start_ms: int
    end_ms: int | None = None

    def __post_init__(self) -> None:
        if self.end_ms is not None and self.end_ms <= self.start_ms:
            raise ValueError(
                f"idle window [{self.start_ms}, {self.end_ms}) is empty: end must be after start"
            )


@dataclass(frozen=True, slots=True)
class Timeline:
    """When the records of one partition appear: rate, idle windows (merged, from ``start_ms`` on)."""

    start_ms: int
    events_per_second: int
    idle: tuple[IdleWindow, ...]
    max_records: int | None = None

    @staticmethod
    def build(
        start_ms: int, events_per_second: int, idle: Sequence[IdleWindow], max_records: int | None
    ) -> Timeline:
        if events_per_second < 1:
            raise ValueError(f"events_per_second must be >= 1, got {events_per_second}; idle it instead")
        merged: list[IdleWindow] = []
        for window in sorted(idle, key=lambda w: w.start_ms):
            begin = max(window.start_ms, start_ms)
            if window.end_ms is not None and window.end_ms <= begin:
                continue
            last = merged[-1] if merged else None
            if last is not None and (last.end_ms is None or begin <= last.end_ms):
                end = (
                    None if last.end_ms is None or window.end_ms is None else max(last.end_ms, window.end_ms)
                )
                merged[-1] = IdleWindow(last.start_ms, end)
            else:
                merged.append(IdleWindow(begin, window.end_ms))
        return Timeline(start_ms, events_per_second, tuple(merged), max_records)

    def active_ms(self, now_ms: int) -> int:
        """Active (non-idle) milliseconds in ``[start_ms, now_ms)``."""
        if now_ms <= self.start_ms:
            return 0
        idle = 0
        for window in self.idle:
            end = now_ms if window.end_ms is None else min(window.end_ms, now_ms)
            idle += max(0, end - window.start_ms)
        return now_ms - self.start_ms - idle

    def end_offset(self, now_ms: int) -> int:
        """Exclusive end offset of what is visible at ``now_ms``."""
        count = self.active_ms(now_ms) * self.events_per_second // 1000
        return count if self.max_records is None else min(count, self.max_records)

    def appear_ms(self, offsets: NDArray[np.int64]) -> NDArray[np.int64]:
        """The first ``now`` at which each offset is visible (``end_offset(now) > offset``)."""
        eps = self.events_per_second
        needed = ((offsets + 1) * 1000 + eps - 1) // eps  # active ms needed: ceil((o + 1) * 1000 / eps)
        active_at_start = []  # active ms elapsed when each idle window begins
        before = [0]  # idle ms elapsed before window k
        for window in self.idle:
            active_at_start.append(window.start_ms - self.start_ms - before[-1])
            if window.end_ms is not None:
                before.append(before[-1] + window.end_ms - window.start_ms)
        crossed = np.searchsorted(np.asarray(active_at_start, dtype=np.int64), needed, side="left")
        idle_forever = bool(self.idle) and self.idle[-1].end_ms is None
        never = crossed == len(active_at_start)
        if idle_forever and never.any():
            raise OffsetOutOfRangeError(
                f"offsets from {int(offsets[never][0])} never appear: the partition is idle forever "
                f"from {self.idle[-1].start_ms} ms; read below end_offsets()"
            )
        out: NDArray[np.int64] = self.start_ms + needed + np.asarray(before, dtype=np.int64)[crossed]
        return out


def _per_partition(value: int | Sequence[int], partitions: int, name: str) -> list[int]:
    values = [value] * partitions if isinstance(value, int) else list(value)
    if len(values) != partitions:
        raise ValueError(f"{name} has {len(values)} values for {partitions} partitions")
    if any(v < 0 for v in values):
        raise ValueError(f"{name} must be >= 0, got {values}")
    return values


class GeneratorSource:
    """A replayable clickstream of ``partitions`` partitions named ``p0, p1, ...``."""

    event_time_column = "event_time"

    def __init__(
        self,
        uid: str = "clicks",
        *,
        partitions: int = 4,
        seed: int = 0,
        events_per_second: int | Sequence[int] = 1000,
        out_of_orderness_ms: int | Sequence[int] = 0,
        idle_partitions: Mapping[int, Sequence[IdleWindow | tuple[int, int | None]]] | None = None,
        keys: int = 1000,
        key_skew: float = 1.0,
        pages: Sequence[str] = DEFAULT_PAGES,
        duplicate_fraction: float = 0.0,
        duplicate_max_distance: int = 100,
        start_ms: int = DEFAULT_START_MS,
        max_records: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        if not 1 <= keys < 2**32 or not pages or key_skew <= 0:
            raise ValueError("keys must be in [1, 2**32), pages non-empty and key_skew > 0")
        if not 0.0 <= duplicate_fraction < 1.0 or duplicate_max_distance < 1:
            raise ValueError("duplicate_fraction must be in [0, 1) and duplicate_max_distance >= 1")
        unknown = sorted(set(idle_partitions or {}) - set(range(partitions)))
        if unknown:
            raise InvalidPartitionError(
                f"idle_partitions names partitions {unknown} out of range(0, {partitions})"
            )
        self._uid = validate_uid(uid)
        self._ids = [f"p{i}" for i in range(partitions)]
        rates = _per_partition(events_per_second, partitions, "events_per_second")
        self._bounds = _per_partition(out_of_orderness_ms, partitions, "out_of_orderness_ms")
        idle = {
            i: [w if isinstance(w, IdleWindow) else IdleWindow(*w) for w in ws]
            for i, ws in (idle_partitions or {}).items()
        }
        self._timelines = [
            Timeline.build(start_ms, rates[i], idle.get(i, []), max_records) for i in range(partitions)
        ]
        self._randoms = [PartitionRandom(seed, i) for i in range(partitions)]
        self._shapes = [
            ClickstreamShape(
                self._uid,
                self._ids[i],
                self._randoms[i],
                keys,
                key_skew,
                tuple(pages),
                duplicate_fraction,
                duplicate_max_distance,
            )
            for i in range(partitions)
        ]
        self._clock: Clock = clock if clock is not None else SystemClock()

    @property
    def uid(self) -> str:
        return self._uid

    @property
    def schema(self) -> pa.Schema:
        return CLICKSTREAM_SCHEMA

    def partitions(self) -> list[str]:
        return list(self._ids)

    def timeline(self, partition: str) -> Timeline:
        return self._timelines[self._index(partition)]

    def end_offsets(self, now_ms: int | None = None) -> dict[str, int]:
        """Exclusive end offsets visible at ``now_ms`` (default: the injected clock's now)."""
        now = self._clock.now_ms() if now_ms is None else now_ms
        return {pid: timeline.end_offset(now) for pid, timeline in zip(self._ids, self._timelines)}

    def read(
        self,
        partition: str,
        start: int,
        end: int,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        dead_letters: DeadLetters | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Yield records ``[start, end)`` in batches of ``chunk_size``; generated records are never
        malformed, so ``dead_letters`` stays empty. Offsets past ``end_offsets(now)`` may be read
        (they are the records that will appear) except where a partition is idle forever."""
        index = self._index(partition)
        check_range(partition, start, end, chunk_size)
        limit = self._timelines[index].max_records
        if limit is not None and end > limit:
            raise OffsetOutOfRangeError(
                f"partition {partition!r} of {self._uid!r} holds {limit} records: "
                f"cannot read [{start}, {end})"
            )
        return self._batches(index, start, end, chunk_size)

    def _batches(self, index: int, start: int, end: int, chunk_size: int) -> Iterator[pa.RecordBatch]:
        for lo in range(start, end, chunk_size):
            offsets = np.arange(lo, min(lo + chunk_size, end), dtype=np.int64)
            yield self._shapes[index].batch(offsets, self.event_ms(index, offsets))

    def event_ms(self, index: int, offsets: NDArray[np.int64]) -> NDArray[np.int64]:
        """Event times of partition ``index`` at ``offsets``: appearance time minus bounded jitter."""
        jitter = self._randoms[index].below(Column.JITTER, offsets, self._bounds[index] + 1)
        out: NDArray[np.int64] = self._timelines[index].appear_ms(offsets) - jitter
        return out

    def _index(self, partition: str) -> int:
        try:
            return self._ids.index(partition)
        except ValueError:
            raise InvalidPartitionError(
                f"source {self._uid!r} has no partition {partition!r}; it has {', '.join(self._ids)}"
            ) from None
