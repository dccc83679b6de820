"""The checkpointed input gate: N channels in, one ordered stream out (Flink 1.11 ``CheckpointedInputGate``).

Each call of :meth:`CheckpointedInputGate.poll_next`:

1. Picks the next channel round-robin among the channels that are neither blocked at the gate nor
   finished, and polls it; a channel with nothing available now is skipped. If no channel has
   anything, return ``None`` (poll again later; :meth:`is_finished` tells the end).
2. A record chunk, :class:`Watermark` or :class:`StreamStatus` is returned as is (and shown to the
   handler first if it collects in-flight data for an unaligned checkpoint).
3. A :class:`CheckpointBarrier`: if ``handler.blocks_on_barrier(barrier)`` the gate first blocks the
   channel (event ``BLOCKED``); then the barrier goes to ``handler.process_barrier`` -- which may
   trigger or abort a checkpoint through the listener, and resume channels -- and is returned, so the
   operator sees where the cut is.
4. A :class:`CancelCheckpointMarker` goes to ``handler.process_cancellation_barrier`` and is *not*
   returned: the loop goes on with the next item.
5. :class:`EndOfPartition` marks the channel finished, goes to ``handler.process_end_of_partition``
   and is returned.

Block and resume (seed 000, ``CheckpointedInputGate.pollNext`` and the aligner): the gate registers
:meth:`CheckpointedInputGate.resume_consumption` as the handler's resume listener; each call unblocks
one channel (event ``RESUMED``). An optional ``consumption_listener(event, channel)`` sees every
``BLOCKED`` and ``RESUMED`` event in order. Invariants:

* a channel is blocked at the gate iff it delivered a barrier the handler blocks on and has not been
  resumed since; nothing is ever polled from a blocked channel, so with the aligner no item after
  barrier *n* in a channel is returned before *n* is triggered or aborted;
* every channel the handler reports blocked (``handler.is_blocked``) is blocked at the gate, and a
  resume of a channel the handler still reports blocked is refused (the seed checks, on every poll,
  that the polled channel is not blocked by the handler; a channel can only become pollable through a
  resume, so the check is made there);
* the tracker and the unaligner never block, so with them no event is ever seen.

A :class:`Channel` is anything with ``poll() -> item | None`` (``None`` = nothing available now).
:class:`ScriptedChannel` is a deque that tests and benchmarks push to; :class:`IteratorChannel` wraps
an iterator (e.g. a Spark source partition yielding Arrow record batches with barriers at the
positions fixed by the coordinator) and ends with :data:`END_OF_PARTITION` when it is exhausted.
"""

from __future__ import annotations

import bisect
import enum
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
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


class ConsumptionEvent(enum.Enum):
    """What happened to a channel's consumption at the gate (for a ``consumption_listener``)."""

    BLOCKED = "blocked"
    """The channel delivered a barrier the handler blocks on: nothing more is read from it."""

    RESUMED = "resumed"
    """The handler resumed the channel (Flink's ``resumeConsumption``): it is read again."""


ConsumptionListener = Callable[[ConsumptionEvent, int], None]
"""Called with ``(event, channel)`` for every block and every resume at the gate, in order."""


class _GateResumer:
    """The resume listener a gate registers on its handler.

    Holds the gate weakly, so that the handler (which the gate holds) does not close a reference cycle
    with it: both are freed by reference counting even while the garbage collector is paused.
    """

    __slots__ = ("_gate",)

    def __init__(self, gate: CheckpointedInputGate) -> None:
        self._gate = weakref.ref(gate)

    def __call__(self, channel: int) -> None:
        gate = self._gate()
        if gate is not None:
            gate.resume_consumption(channel)


_new_buffer_or_event = tuple.__new__
_CONTROL = frozenset((CheckpointBarrier, CancelCheckpointMarker, EndOfPartition))


class CheckpointedInputGate:
    """Polls N channels round-robin and routes control events to a barrier handler (module docstring)."""

    __slots__ = (
        "__weakref__",
        "_active",
        "_blocked",
        "_channels",
        "_consumption_listener",
        "_cursor",
        "_finished",
        "_handler",
        "_num_finished",
        "_observer",
        "_polls",
    )

    def __init__(
        self,
        channels: Sequence[Channel],
        handler: CheckpointBarrierHandler,
        *,
        consumption_listener: ConsumptionListener | None = None,
    ) -> None:
        """Build the gate over ``channels`` and register it as ``handler``'s resume listener.

        One gate per handler: the handler's resumes go to every gate built over it.
        """
        if len(channels) != handler.num_channels:
            raise ValueError(
                f"the gate has {len(channels)} channels but the barrier handler was built for "
                f"{handler.num_channels}: build the handler with num_channels={len(channels)}"
            )
        self._channels = tuple(channels)
        self._polls = tuple(channel.poll for channel in self._channels)
        self._handler = handler
        self._finished = [False] * len(self._channels)
        self._blocked = [False] * len(self._channels)
        self._consumption_listener = consumption_listener
        self._num_finished = 0
        self._active: list[int] = list(range(len(self._channels)))
        self._cursor = 0
        self._observer = handler.data_observer()
        handler.add_resume_listener(_GateResumer(self))

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
                barrier = cast(CheckpointBarrier, item)
                handler = self._handler
                if handler.blocks_on_barrier(barrier):
                    self._block(channel)
                handler.process_barrier(barrier, channel)
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
        """Recompute the pollable channels after a control event (channels blocked, resumed, ended)."""
        finished = self._finished
        blocked = self._blocked
        active = [c for c in range(len(finished)) if not finished[c] and not blocked[c]]
        self._active = active
        # continue round-robin with the first pollable channel after the one just polled
        self._cursor = next((i for i, c in enumerate(active) if c > last_channel), 0)

    # ------------------------------------------------------------------ block / resume
    def _block(self, channel: int) -> None:
        """Stop reading ``channel``: it just delivered a barrier the handler blocks on."""
        self._blocked[channel] = True
        listener = self._consumption_listener
        if listener is not None:
            listener(ConsumptionEvent.BLOCKED, channel)
        # ``_refresh`` after the handler returns drops the channel from the pollable ones

    def resume_consumption(self, channel: int) -> None:
        """Read ``channel`` again (the handler's resume listener; Flink's ``resumeConsumption``).

        Raises RuntimeError if the handler still reports ``channel`` blocked: reading it would hand out
        items after a barrier that is still being aligned. Resuming a channel that is not blocked at the
        gate only reports the event.
        """
        if self._handler.is_blocked(channel):
            raise RuntimeError(
                f"channel {channel} was resumed while the barrier handler still holds it blocked for "
                f"checkpoint {self._handler.latest_checkpoint_id}: only the handler that blocks a channel "
                "may resume it, once its alignment is over"
            )
        blocked = self._blocked
        was_blocked = blocked[channel]
        blocked[channel] = False
        listener = self._consumption_listener
        if listener is not None:
            listener(ConsumptionEvent.RESUMED, channel)
        if was_blocked and not self._finished[channel]:
            # make it pollable now (a resume may come from outside poll_next); keep the round-robin
            # cursor on the channel it pointed at
            active = self._active
            pos = bisect.bisect_left(active, channel)
            if pos == len(active) or active[pos] != channel:
                active.insert(pos, channel)
                if pos < self._cursor:
                    self._cursor += 1

    def is_finished(self) -> bool:
        """True once every channel delivered :data:`END_OF_PARTITION`."""
        return self._num_finished == len(self._channels)

    def is_blocked(self, channel: int) -> bool:
        """True iff ``channel`` is blocked at the gate (delivered a barrier not resumed since)."""
        return self._blocked[channel]

    @property
    def blocked_channels(self) -> tuple[int, ...]:
        """The channels blocked at the gate now, in channel order."""
        blocked = self._blocked
        return tuple(c for c in range(len(blocked)) if blocked[c])

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
