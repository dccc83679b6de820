"""The barrier-handler seam: what every handler shares, and what it tells the task.

The input gate hands every control event it polls to one handler (Flink 1.11 semantics)::

    CheckpointedInputGate.poll_next()
      |-- chunk / Watermark / StreamStatus --------------------------> returned to the operator
      |-- CheckpointBarrier(n) ---> handler.process_barrier(b, ch) ---> returned to the operator
      |-- CancelCheckpointMarker -> handler.process_cancellation_barrier(m)    (swallowed)
      '-- EndOfPartition --------> handler.process_end_of_partition(ch) -----> returned to the operator

    handler --trigger_checkpoint_on_barrier(id, ts, options, metrics)--> CheckpointBarrierListener
            '-abort_checkpoint_on_barrier(id, reason)------------------> (the subtask: snapshot / decline)

Blocking and resuming a channel (seed 000: ``CheckpointedInputGate.pollNext`` and the aligner)::

    gate polls barrier n from ch --> handler.blocks_on_barrier(n)? --yes--> gate blocks ch   (BLOCKED ch)
                                 --> handler.process_barrier(n, ch)
                                       '-- handler._resume_consumption(c) --> gate.resume_consumption(c)
                                                                                            (RESUMED c)

The block is the gate's, as the network stack's is in Flink: an aligned barrier stops its channel at
the moment it is handed out, whatever the handler's state. The handler then either keeps the channel
blocked (it aligns on the barrier) or resumes it (a barrier it does not align on), and later resumes
every channel it kept once the alignment ends. Invariants:

* a channel is blocked at the gate iff it delivered a barrier for which ``blocks_on_barrier`` was True
  and has not been resumed since; nothing is read from a blocked channel;
* a handler whose ``blocks_on_barrier`` can be True resumes, on every path, each such channel it does
  not keep blocked (``is_blocked``), so no channel stays blocked once no checkpoint is pending;
* a handler never resumes a channel it still reports blocked (the gate checks it, see
  :meth:`CheckpointedInputGate.resume_consumption`).

The tracker and the unaligner never block (``blocks_on_barrier`` is False) and never resume.

A handler never does I/O and never reads the clock: ``now_ns`` (a monotonic nanosecond counter, for
the alignment duration) and ``now_ms`` (wall-clock ms since the epoch, for the start delay measured
against ``CheckpointBarrier.timestamp``) are injected; both default to a clock stuck at 0, which makes
every duration metric 0.

Channels are numbered ``0 .. num_channels - 1`` (Flink's flattened ``InputChannelInfo``).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from state_store.core.stream.events import CancelCheckpointMarker, CheckpointBarrier, CheckpointOptions


class BarrierAbortReason(enum.Enum):
    """Why a handler aborts a checkpoint at this subtask (Flink's ``CheckpointFailureReason`` names).

    The subtask turns an abort into a decline with this reason; the coordinator then aborts the
    checkpoint. Values are the lower-case names, stable for JSON.
    """

    CHECKPOINT_DECLINED_SUBSUMED = "checkpoint_declined_subsumed"
    """A barrier of a newer checkpoint arrived before the current one was aligned."""

    CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER = "checkpoint_declined_on_cancellation_barrier"
    """An input sent a :class:`CancelCheckpointMarker` for this checkpoint (an upstream declined it)."""

    CHECKPOINT_DECLINED_INPUT_END_OF_STREAM = "checkpoint_declined_input_end_of_stream"
    """An input channel ended while this checkpoint was being aligned."""


class StreamCorruptError(RuntimeError):
    """A channel broke the barrier protocol (e.g. delivered the same barrier twice).

    Not recoverable inside the subtask: fail the task; the epoch is retried from the latest completed
    checkpoint.
    """


@dataclass(frozen=True, slots=True)
class CheckpointMetrics:
    """Metrics reported with a trigger.

    ``alignment_duration_ns``: time from the first to the last barrier of an aligned checkpoint
    (0 for the tracker and the unaligner, which never block). ``checkpoint_start_delay_ns``: how long
    after the coordinator's trigger timestamp the first barrier of this checkpoint reached the
    subtask (never negative).
    """

    alignment_duration_ns: int = 0
    checkpoint_start_delay_ns: int = 0


@runtime_checkable
class CheckpointBarrierListener(Protocol):
    """The subtask side of a handler (Flink's ``AbstractInvokable``)."""

    def trigger_checkpoint_on_barrier(
        self, checkpoint_id: int, timestamp: int, options: CheckpointOptions, metrics: CheckpointMetrics
    ) -> None:
        """Snapshot now: every record before barrier ``checkpoint_id`` has been handed out (aligned)."""
        ...

    def abort_checkpoint_on_barrier(self, checkpoint_id: int, reason: BarrierAbortReason) -> None:
        """Decline ``checkpoint_id`` at this subtask; it will not be triggered here any more."""
        ...


@runtime_checkable
class ChannelStateWriter(Protocol):
    """Receives the in-flight data of an unaligned checkpoint (Flink's ``ChannelStateWriter``).

    For checkpoint *n* triggered at the first barrier, every item a channel delivers after the
    trigger and before its own barrier *n* is handed to :meth:`add_input_data`, in channel order;
    on restore those items are replayed before the channel's live data. :meth:`finish_input` is called
    once every open channel delivered barrier *n*: the channel state of *n* is then complete.
    """

    def add_input_data(self, checkpoint_id: int, channel: int, item: object) -> None: ...

    def finish_input(self, checkpoint_id: int) -> None: ...


def zero_time() -> int:
    """The default time source: always 0, so every duration metric is 0 (no clock is read)."""
    return 0


TimeSource = Callable[[], int]
"""An injected time source returning an int (ns or ms, as the parameter name says)."""

ResumeListener = Callable[[int], None]
"""Called with a channel index each time a handler resumes consumption of that channel (Flink's
``resumeConsumption(channelInfo)``); the input gate registers one to unblock the channel."""


class CheckpointBarrierHandler(abc.ABC):
    """Base of the four handlers: notification helpers and the default (non-blocking) answers.

    Subclasses implement the three ``process_*`` methods. Invariant shared by all: a checkpoint id
    is triggered at most once per handler, and never after it was aborted by that handler.
    """

    __slots__ = ("_listener", "_now_ms", "_now_ns", "_resume_listeners", "_start_delay_ns", "num_channels")

    def __init__(
        self,
        num_channels: int,
        listener: CheckpointBarrierListener,
        *,
        now_ns: TimeSource = zero_time,
        now_ms: TimeSource = zero_time,
    ) -> None:
        if num_channels < 1:
            raise ValueError(f"a barrier handler needs at least one input channel, got {num_channels}")
        self.num_channels = num_channels
        self._listener = listener
        self._now_ns = now_ns
        self._now_ms = now_ms
        self._start_delay_ns = 0
        self._resume_listeners: tuple[ResumeListener, ...] = ()

    # ------------------------------------------------------------------ the three inputs
    @abc.abstractmethod
    def process_barrier(self, barrier: CheckpointBarrier, channel: int) -> None:
        """Handle barrier ``barrier`` polled from ``channel``."""

    @abc.abstractmethod
    def process_cancellation_barrier(self, marker: CancelCheckpointMarker) -> None:
        """Handle a cancellation marker (from any channel)."""

    @abc.abstractmethod
    def process_end_of_partition(self, channel: int) -> None:
        """Handle the end of ``channel``: it will deliver nothing more."""

    # ------------------------------------------------------------------ queries
    @property
    def listener(self) -> CheckpointBarrierListener:
        return self._listener

    def is_blocked(self, channel: int) -> bool:
        """True if this handler holds ``channel`` blocked for a running alignment (only the aligner does).

        The gate's own block (:meth:`blocks_on_barrier`) covers every channel this returns True for;
        right after each ``process_*`` call the two agree.
        """
        return False

    # ------------------------------------------------------------------ block / resume at the gate
    def blocks_on_barrier(self, barrier: CheckpointBarrier) -> bool:
        """True if the gate must block the channel that delivers ``barrier`` before handing it over.

        Asked once per barrier, before :meth:`process_barrier`. A handler answering True must resume
        that channel (:meth:`_resume_consumption`) on every path that does not keep it blocked.
        Default: False (the tracker and the unaligner never block a channel).
        """
        return False

    def add_resume_listener(self, listener: ResumeListener) -> None:
        """Call ``listener(channel)`` on every resume of a channel (the gate registers itself here)."""
        self._resume_listeners = (*self._resume_listeners, listener)

    def _resume_consumption(self, channel: int) -> None:
        """Tell the gate that ``channel`` may be read again (Flink's ``resumeConsumption``)."""
        for listener in self._resume_listeners:
            listener(channel)

    @property
    @abc.abstractmethod
    def latest_checkpoint_id(self) -> int:
        """The newest checkpoint id this handler has seen a barrier or marker of (-1: none)."""

    def alignment_duration_ns(self) -> int:
        """Duration of the running alignment, else of the last one; 0 for non-aligning handlers."""
        return 0

    @property
    def checkpoint_start_delay_ns(self) -> int:
        return self._start_delay_ns

    def has_inflight_data(self, checkpoint_id: int, channel: int) -> bool:
        """True iff ``channel`` still has data of ``checkpoint_id`` to persist (unaligned only)."""
        return False

    def all_barriers_received(self, checkpoint_id: int) -> bool:
        """False while the unaligner still waits for barriers of ``checkpoint_id``; else True."""
        return True

    def data_observer(self) -> Callable[[int, object], None] | None:
        """What the gate must call with ``(channel, item)`` for every non-control item, or None.

        Only unaligned handlers with a :class:`ChannelStateWriter` observe data (to persist in-flight
        items); the gate asks once, at construction, so the aligned hot path pays nothing.
        """
        return None

    def release_blocks_and_reset_barriers(self) -> None:
        """Resume every channel this handler holds blocked and forget the running alignment (if any)."""
        return None

    def abort_pending_checkpoint(self, checkpoint_id: int, reason: BarrierAbortReason) -> None:
        """Abort the pending checkpoint if it is older than ``checkpoint_id`` (used when switching)."""
        return None

    @abc.abstractmethod
    def is_checkpoint_pending(self) -> bool:
        """True while a checkpoint has some but not all of its barriers."""

    # ------------------------------------------------------------------ helpers for subclasses
    def _notify_checkpoint(self, barrier: CheckpointBarrier, alignment_duration_ns: int) -> None:
        metrics = CheckpointMetrics(alignment_duration_ns, self._start_delay_ns)
        self._listener.trigger_checkpoint_on_barrier(
            barrier.checkpoint_id, barrier.timestamp, barrier.options, metrics
        )

    def _notify_abort(self, checkpoint_id: int, reason: BarrierAbortReason) -> None:
        self._listener.abort_checkpoint_on_barrier(checkpoint_id, reason)

    def _notify_abort_on_cancellation_barrier(self, checkpoint_id: int) -> None:
        self._notify_abort(checkpoint_id, BarrierAbortReason.CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)

    def _mark_checkpoint_start(self, checkpoint_timestamp_ms: int) -> None:
        self._start_delay_ns = 1_000_000 * max(0, self._now_ms() - checkpoint_timestamp_ms)
