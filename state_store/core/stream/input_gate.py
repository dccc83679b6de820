"""The checkpointed input gate: N channels in, one ordered stream out (Flink 1.11 ``CheckpointedInputGate``).

Each call of :meth:`CheckpointedInputGate.poll_next`:

1. Picks the next channel round-robin among the channels that are neither blocked by the barrier
   handler nor finished, and polls it; a channel with nothing available now is skipped. If no
   channel has anything, return ``None`` (poll again later; :meth:`is_finished` tells the end).
2. A record chunk, :class:`Watermark` or :class:`StreamStatus` is returned as is (and shown to the
   handler first if it collects in-flight data for an unaligned checkpoint).
3. A :class:`CheckpointBarrier` goes to ``handler.process_barrier`` -- which may trigger or abort a
   checkpoint through the listener, and block or release channels -- and is then returned, so the
   operator sees where the cut is.
4. A :class:`CancelCheckpointMarker` goes to ``handler.process_cancellation_barrier`` and is *not*
   returned: the loop goes on with the next item.
5. :class:`EndOfPartition` marks the channel finished, goes to ``handler.process_end_of_partition``
   and is returned.

Invariant: nothing is ever polled from a channel the handler reports blocked, so with the aligner
no item after barrier *n* in a channel is returned before *n* is triggered or aborted.

A :class:`Channel` is anything with ``poll() -> item | None`` (``None`` = nothing available now).
:class:`ScriptedChannel` is a deque that tests and benchmarks push to; :class:`IteratorChannel` wraps
an iterator (e.g. a Spark source partition yielding Arrow record batches with barriers at the
positions fixed by the coordinator) and ends with :data:`END_OF_PARTITION` when it is exhausted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, Protocol, cast, runtime_checkable

from state_store.core.stream.events import (
    END_OF_PARTITION,
    CancelCheckpointMarker,
    CheckpointBarrier,
    EndOfPartition,
)
from state_store.core.stream.handler import CheckpointBarrierHandler


@runtime_checkable
class Channel(Protocol):
    """One ordered input of a subtask. ``poll`` returns the next item, or None if none is available now.

    Items are record chunks (never None) or events from :mod:`state_store.core.stream.events`.
    After returning :data:`END_OF_PARTITION` a channel is not polled again.
    """

    def poll(self) -> object | None: ...


class ScriptedChannel:
    """A deque-backed channel: push items (possibly while the gate is running), poll them in order."""

    __slots__ = ("_queue",)

    def __init__(self, items: Iterable[object] = ()) -> None:
        self._queue: deque[object] = deque(items)

    def push(self, *items: object) -> None:
        """Append items; ``None`` is refused because it means "nothing available"."""
        for item in items:
            if item is None:
                raise ValueError("a channel item cannot be None (None means 'nothing available now')")
        self._queue.extend(items)

    def end(self) -> None:
        """Append :data:`END_OF_PARTITION`."""
        self._queue.append(END_OF_PARTITION)

    def poll(self) -> object | None:
        queue = self._queue
        return queue.popleft() if queue else None

    def __len__(self) -> int:
        return len(self._queue)


class IteratorChannel:
    """A channel over an iterator, ended by :data:`END_OF_PARTITION` once the iterator is exhausted.

    If the iterator yields :data:`END_OF_PARTITION` itself, nothing is added.
    """

    __slots__ = ("_ended", "_iterator")

    def __init__(self, items: Iterable[object]) -> None:
        self._iterator: Iterator[object] = iter(items)
        self._ended = False

    def poll(self) -> object | None:
        if self._ended:
            return None
        item = next(self._iterator, END_OF_PARTITION)
        if item is END_OF_PARTITION or type(item) is EndOfPartition:
            self._ended = True
        return item


class BufferOrEvent(NamedTuple):
    """What the gate hands out: the item and the index of the channel it came from."""

    channel: int
    item: object


_new_buffer_or_event = tuple.__new__
_CONTROL = frozenset((CheckpointBarrier, CancelCheckpointMarker, EndOfPartition))


class CheckpointedInputGate:
    """Polls N channels round-robin and routes control events to a barrier handler (module docstring)."""

    __slots__ = (
        "_active",
        "_channels",
        "_cursor",
        "_finished",
        "_handler",
        "_num_finished",
        "_observer",
        "_polls",
    )

    def __init__(self, channels: Sequence[Channel], handler: CheckpointBarrierHandler) -> None:
        if len(channels) != handler.num_channels:
            raise ValueError(
                f"the gate has {len(channels)} channels but the barrier handler was built for "
                f"{handler.num_channels}: build the handler with num_channels={len(channels)}"
            )
        self._channels = tuple(channels)
        self._polls = tuple(channel.poll for channel in self._channels)
        self._handler = handler
        self._finished = [False] * len(self._channels)
        self._num_finished = 0
        self._active: list[int] = list(range(len(self._channels)))
        self._cursor = 0
        self._observer = handler.data_observer()

    @property
    def handler(self) -> CheckpointBarrierHandler:
        return self._handler

    @property
    def num_channels(self) -> int:
        return len(self._channels)

    def poll_next(self) -> BufferOrEvent | None:
        """Return the next item for the operator, or None if no unblocked channel has one now."""
        while True:
            active = self._active
            n = len(active)
            pos = self._cursor
            polls = self._polls
            for _ in range(n):
                if pos >= n:
                    pos = 0
                channel = active[pos]
                item = polls[channel]()
                if item is not None:
                    break
                pos += 1
            else:
                return None

            kind = item.__class__
            if kind not in _CONTROL:
                self._cursor = pos + 1
                observer = self._observer
                if observer is not None:
                    observer(channel, item)
                # tuple.__new__ skips NamedTuple's Python-level __new__ (hot path)
                fast: BufferOrEvent = _new_buffer_or_event(BufferOrEvent, (channel, item))
                return fast
            if kind is CheckpointBarrier:
                self._handler.process_barrier(cast(CheckpointBarrier, item), channel)
                self._refresh(channel)
                return BufferOrEvent(channel, item)
            if kind is CancelCheckpointMarker:
                self._handler.process_cancellation_barrier(cast(CancelCheckpointMarker, item))
                self._refresh(channel)
                continue
            # end of partition
            if not self._finished[channel]:
                self._finished[channel] = True
                self._num_finished += 1
            self._handler.process_end_of_partition(channel)
            self._refresh(channel)
            return BufferOrEvent(channel, item)

    def __iter__(self) -> Iterator[BufferOrEvent]:
        """Yield items until none is available now (for finite channels: until the end of input)."""
        poll_next = self.poll_next
        while (polled := poll_next()) is not None:
            yield polled

    def _refresh(self, last_channel: int) -> None:
        """Recompute the pollable channels after the handler may have blocked or released some."""
        finished = self._finished
        is_blocked = self._handler.is_blocked
        active = [c for c in range(len(finished)) if not finished[c] and not is_blocked(c)]
        self._active = active
        # continue round-robin with the first pollable channel after the one just polled
        self._cursor = next((i for i, c in enumerate(active) if c > last_channel), 0)

    def is_finished(self) -> bool:
        """True once every channel delivered :data:`END_OF_PARTITION`."""
        return self._num_finished == len(self._channels)

    def is_blocked(self, channel: int) -> bool:
        return self._handler.is_blocked(channel)

    @property
    def latest_checkpoint_id(self) -> int:
        return self._handler.latest_checkpoint_id

    def alignment_duration_ns(self) -> int:
        return self._handler.alignment_duration_ns()

    @property
    def checkpoint_start_delay_ns(self) -> int:
        return self._handler.checkpoint_start_delay_ns

    def all_barriers_received(self, checkpoint_id: int) -> bool:
        return self._handler.all_barriers_received(checkpoint_id)

    def has_inflight_data(self, checkpoint_id: int, channel: int) -> bool:
        return self._handler.has_inflight_data(checkpoint_id, channel)
