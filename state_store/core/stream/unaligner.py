"""Unaligned checkpoints: snapshot at the first barrier (Flink 1.11 ``CheckpointBarrierUnaligner``).

Nothing is blocked: ``blocks_on_barrier`` is False, so the gate never blocks a channel for this
handler, and it never resumes one. (Seed 000 describes the unaligner only as triggering at the first
barrier and tracking received and consumed barriers -- no block, no alignment -- so we keep it
non-blocking.) The first barrier of checkpoint *n* triggers *n* at once; from then on every
item a channel delivers before its own barrier *n* is *in-flight data* of *n*: it is processed
normally, and also handed to the :class:`ChannelStateWriter` so that a restore from *n* replays it::

    ch0: a a B7 b b b                    trigger(7) at B7 of ch0 (first barrier)
    ch1: a a a a a B7 b b         ->     ch1's "a" items polled after the trigger -> channel state of 7
    ch2: a a a a a a a a B7 b            ch2's likewise; finish_input(7) after the last B7

Barrier *n* from channel *c*:

1. *n* is older than the current id, or equals it while nothing is pending (cancelled, aborted or
   already complete): ignore.
2. *n* is newer: if the current checkpoint is still pending abort it (``CHECKPOINT_DECLINED_SUBSUMED``);
   every open channel now has in-flight data of *n*; trigger *n* (alignment duration 0).
3. If *c* still had in-flight data of *n*: it has none any more; when the last open channel
   delivered *n*, call ``finish_input(n)``: *n* is complete and no longer pending.

Cancellation marker for *n* (newer than the current id, or equal while pending): stop collecting
in-flight data, make *n* current and abort it (``CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER``).

End of a channel: one open channel fewer; a pending checkpoint is aborted
(``CHECKPOINT_DECLINED_INPUT_END_OF_STREAM``).

Single-threaded: Flink 1.11 splits this handler into a "received" half (network thread, barriers
overtaking buffers) and a "consumed" half (task thread). Here the gate polls each channel in order,
so a barrier is received when it is consumed and one counter serves both.
"""

from __future__ import annotations

from collections.abc import Callable

from state_store.core.stream.events import CancelCheckpointMarker, CheckpointBarrier
from state_store.core.stream.handler import (
    BarrierAbortReason,
    ChannelStateWriter,
    CheckpointBarrierHandler,
    CheckpointBarrierListener,
    TimeSource,
    zero_time,
)


class CheckpointBarrierUnaligner(CheckpointBarrierHandler):
    """Triggers at the first barrier and tracks which channels still have in-flight data.

    Invariants: a checkpoint is pending iff ``0 < barriers received < open channels``;
    ``has_inflight_data(current, c)`` is True exactly for the open channels that have not delivered
    the current barrier while it is pending; ``current_checkpoint_id`` never decreases.
    """

    __slots__ = ("_closed", "_current_id", "_in_flight", "_num_barriers_received", "_num_open", "_writer")

    def __init__(
        self,
        num_channels: int,
        listener: CheckpointBarrierListener,
        *,
        channel_state_writer: ChannelStateWriter | None = None,
        now_ns: TimeSource = zero_time,
        now_ms: TimeSource = zero_time,
    ) -> None:
        super().__init__(num_channels, listener, now_ns=now_ns, now_ms=now_ms)
        self._writer = channel_state_writer
        self._in_flight = [False] * num_channels
        self._closed = [False] * num_channels
        self._num_open = num_channels
        self._num_barriers_received = 0
        self._current_id = -1

    # ------------------------------------------------------------------ barriers
    def process_barrier(self, barrier: CheckpointBarrier, channel: int) -> None:
        barrier_id = barrier.checkpoint_id
        if barrier_id < self._current_id or (
            barrier_id == self._current_id and not self.is_checkpoint_pending()
        ):
            return  # old, cancelled, aborted or complete
        if barrier_id > self._current_id:
            if self.is_checkpoint_pending():
                self._notify_abort(self._current_id, BarrierAbortReason.CHECKPOINT_DECLINED_SUBSUMED)
            self._mark_checkpoint_start(barrier.timestamp)
            self._current_id = barrier_id
            self._num_barriers_received = 0
            closed = self._closed
            self._in_flight = [not closed[c] for c in range(self.num_channels)]
            self._notify_checkpoint(barrier, 0)
        if self._in_flight[channel]:
            self._in_flight[channel] = False
            self._num_barriers_received += 1
            if self._num_barriers_received == self._num_open:
                self._num_barriers_received = 0  # complete: no longer pending
                if self._writer is not None:
                    self._writer.finish_input(barrier_id)

    def on_data(self, channel: int, item: object) -> None:
        """Hand ``item`` to the writer if ``channel`` still has in-flight data of the current checkpoint."""
        if self._in_flight[channel] and self._writer is not None:
            self._writer.add_input_data(self._current_id, channel, item)

    def data_observer(self) -> Callable[[int, object], None] | None:
        return self.on_data if self._writer is not None else None

    # ------------------------------------------------------------------ cancellation
    def process_cancellation_barrier(self, marker: CancelCheckpointMarker) -> None:
        cancelled_id = marker.checkpoint_id
        if cancelled_id < self._current_id or (
            cancelled_id == self._current_id and not self.is_checkpoint_pending()
        ):
            return  # trailing marker
        self._reset_pending()
        self._current_id = cancelled_id
        self._notify_abort_on_cancellation_barrier(cancelled_id)

    def _reset_pending(self) -> bool:
        if not self.is_checkpoint_pending():
            return False
        self._in_flight = [False] * self.num_channels
        self._num_barriers_received = 0
        return True

    # ------------------------------------------------------------------ end of partition
    def process_end_of_partition(self, channel: int) -> None:
        if self._closed[channel]:
            return
        self._closed[channel] = True
        self._num_open -= 1
        if self._reset_pending():
            self._notify_abort(self._current_id, BarrierAbortReason.CHECKPOINT_DECLINED_INPUT_END_OF_STREAM)

    def abort_pending_checkpoint(self, checkpoint_id: int, reason: BarrierAbortReason) -> None:
        if checkpoint_id > self._current_id and self._reset_pending():
            self._notify_abort(self._current_id, reason)

    # ------------------------------------------------------------------ queries
    def is_checkpoint_pending(self) -> bool:
        return self._num_barriers_received > 0

    @property
    def latest_checkpoint_id(self) -> int:
        return self._current_id

    def has_inflight_data(self, checkpoint_id: int, channel: int) -> bool:
        if checkpoint_id < self._current_id:
            return False
        if checkpoint_id > self._current_id:
            return True
        return self._in_flight[channel]

    def all_barriers_received(self, checkpoint_id: int) -> bool:
        if checkpoint_id < self._current_id:
            return True
        if checkpoint_id > self._current_id:
            return False
        return not self.is_checkpoint_pending()

    @property
    def num_open_channels(self) -> int:
        return self._num_open
