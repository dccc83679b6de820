"""Watermark generation at the sources (Flink's ``WatermarkGenerator`` family).

A source channel owns one generator. The source loop, for each chunk it reads::

    generator.on_event(max event time of the chunk, now_ms, output)   # before emitting the chunk
    channel <- chunk
    ... every auto-watermark interval:
    generator.on_periodic_emit(now_ms, output)                          # may emit Watermark / IDLE

and ``output`` (:class:`StreamWatermarkOutput`) appends deduplicated :class:`Watermark` and
:class:`StreamStatus` items to the channel, where the downstream valve consumes them. Time is always
passed in (``now_ms``, ms since the epoch); nothing here reads a clock.

* :class:`BoundedOutOfOrdernessWatermarks`: watermark = max event time seen - bound - 1 (the ``- 1``
  because a watermark *w* promises no more events with time <= *w*, and an event exactly ``bound``
  late must still be on time). Before any event the watermark is :data:`MIN_TIMESTAMP`.
* :class:`MonotonousTimestampsWatermarks`: the same with bound 0 (event times never decrease).
* :class:`WatermarksWithIdleness`: wraps another generator; a channel with no event for more than
  ``idle_timeout_ms`` is marked IDLE (and emits no watermark while idle, so it cannot hold the
  downstream watermark back); the next event marks it ACTIVE again, before that event is emitted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from state_store.core.stream.events import MIN_TIMESTAMP, StreamStatus, Watermark


@runtime_checkable
class WatermarkOutput(Protocol):
    """Where a generator sends watermarks and idleness (Flink's ``WatermarkOutput``)."""

    def emit_watermark(self, watermark: Watermark) -> None: ...

    def mark_idle(self) -> None: ...

    def mark_active(self) -> None: ...


@runtime_checkable
class WatermarkGenerator(Protocol):
    """Generates watermarks from event times; ``now_ms`` is the caller's wall clock."""

    def on_event(self, timestamp: int, now_ms: int, output: WatermarkOutput) -> None:
        """Called for an event (or a chunk, with its max event time) before it is emitted."""
        ...

    def on_periodic_emit(self, now_ms: int, output: WatermarkOutput) -> None:
        """Called every auto-watermark interval."""
        ...


class BoundedOutOfOrdernessWatermarks:
    """Watermark = max timestamp - ``max_out_of_orderness_ms`` - 1, emitted periodically."""

    __slots__ = ("_bound", "_max_timestamp")

    def __init__(self, max_out_of_orderness_ms: int) -> None:
        if max_out_of_orderness_ms < 0:
            raise ValueError(f"max_out_of_orderness_ms must be >= 0, got {max_out_of_orderness_ms}")
        self._bound = max_out_of_orderness_ms
        # start so that the first watermark is MIN_TIMESTAMP, without underflow
        self._max_timestamp = MIN_TIMESTAMP + max_out_of_orderness_ms + 1

    def on_event(self, timestamp: int, now_ms: int, output: WatermarkOutput) -> None:
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp

    def on_periodic_emit(self, now_ms: int, output: WatermarkOutput) -> None:
        output.emit_watermark(Watermark(self.current_watermark))

    @property
    def current_watermark(self) -> int:
        return self._max_timestamp - self._bound - 1


class MonotonousTimestampsWatermarks(BoundedOutOfOrdernessWatermarks):
    """For event times that never decrease: watermark = max timestamp - 1."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0)


class WatermarksWithIdleness:
    """Marks the channel IDLE after ``idle_timeout_ms`` without events; ACTIVE again on the next event.

    Idle means ``now_ms - last activity > idle_timeout_ms`` at a periodic emit, where the last
    activity is the last event, or the first periodic emit if no event was seen yet.
    """

    __slots__ = ("_idle", "_inner", "_last_activity_ms", "_timeout")

    def __init__(self, inner: WatermarkGenerator, idle_timeout_ms: int) -> None:
        if idle_timeout_ms <= 0:
            raise ValueError(f"idle_timeout_ms must be > 0, got {idle_timeout_ms}")
        self._inner = inner
        self._timeout = idle_timeout_ms
        self._last_activity_ms: int | None = None
        self._idle = False

    def on_event(self, timestamp: int, now_ms: int, output: WatermarkOutput) -> None:
        self._last_activity_ms = now_ms
        if self._idle:
            self._idle = False
            output.mark_active()
        self._inner.on_event(timestamp, now_ms, output)

    def on_periodic_emit(self, now_ms: int, output: WatermarkOutput) -> None:
        if self._last_activity_ms is None:
            self._last_activity_ms = now_ms
        if now_ms - self._last_activity_ms > self._timeout:
            if not self._idle:
                self._idle = True
                output.mark_idle()
        else:
            self._inner.on_periodic_emit(now_ms, output)

    @property
    def is_idle(self) -> bool:
        return self._idle


class StreamWatermarkOutput:
    """A :class:`WatermarkOutput` that writes deduplicated time events into a channel.

    * A watermark is emitted only if it is above every watermark emitted before.
    * IDLE / ACTIVE are emitted only on a change; a watermark emitted while idle emits ACTIVE first
      (Flink's ``WatermarkToDataOutput``).
    """

    __slots__ = ("_emit", "_idle", "_max_watermark")

    def __init__(self, emit: Callable[[Watermark | StreamStatus], None]) -> None:
        self._emit = emit
        self._max_watermark = MIN_TIMESTAMP
        self._idle = False

    def emit_watermark(self, watermark: Watermark) -> None:
        if watermark.timestamp <= self._max_watermark:
            return
        self._max_watermark = watermark.timestamp
        if self._idle:
            self._idle = False
            self._emit(StreamStatus.ACTIVE)
        self._emit(watermark)

    def mark_idle(self) -> None:
        if not self._idle:
            self._idle = True
            self._emit(StreamStatus.IDLE)

    def mark_active(self) -> None:
        if self._idle:
            self._idle = False
            self._emit(StreamStatus.ACTIVE)

    @property
    def is_idle(self) -> bool:
        return self._idle

    @property
    def max_watermark(self) -> int:
        return self._max_watermark
