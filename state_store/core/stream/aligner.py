"""Exactly-once barrier alignment (Flink 1.11 ``CheckpointBarrierAligner``).

A channel that delivered barrier *n* is blocked until every live channel delivered it; only then is
*n* triggered, so the snapshot contains exactly the records before the cut::

    ch0: a a | B5 .  .  .  (blocked) .  .  .  | b b          records after B5 wait in the channel
    ch1: a a a a a  B5 (blocked) .  .  .  .  | b b
    ch2: a a a a a a a a a B5 --> trigger(5), release ch0..ch2
         ^ alignment starts at the first B5   ^ alignment ends: duration = now_ns() difference

Barrier *n* from channel *c* (several channels):

1. Alignment of *m* running:
   * *n == m*: block *c*; if *c* is already blocked the stream is corrupt (:class:`StreamCorruptError`).
   * *n > m*: abort *m* (``CHECKPOINT_DECLINED_SUBSUMED``), release all channels, start aligning *n*.
   * *n < m*: a trailing barrier of an older checkpoint: ignore it.
2. No alignment running: if *n* is newer than the last seen id start aligning *n*; otherwise ignore
   (an old barrier, or one of a checkpoint that was cancelled before any barrier arrived).
3. If blocked channels + closed channels == all channels: release all and trigger *n*.

With a single channel nothing is ever blocked: a newer barrier triggers at once.

Cancellation marker for *n*: a running alignment of *n* or of an older checkpoint is released;
*n* is aborted (``CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER``) once, and becomes the current id with
no barriers, so later barriers of *n* are ignored. Markers of older checkpoints are ignored.

End of a channel: counted as closed for every later alignment; a running alignment is aborted
(``CHECKPOINT_DECLINED_INPUT_END_OF_STREAM``) and released, because the closed channel's data after
the cut has already been processed. (A blocked channel cannot end: it is not polled.)
"""

from __future__ import annotations

from state_store.core.stream.events import CancelCheckpointMarker, CheckpointBarrier
from state_store.core.stream.handler import (
    BarrierAbortReason,
    CheckpointBarrierHandler,
    CheckpointBarrierListener,
    StreamCorruptError,
    TimeSource,
    zero_time,
)


class CheckpointBarrierAligner(CheckpointBarrierHandler):
    """Blocks channels that delivered the current barrier until all live channels did.

    Invariants: ``num_barriers_received == number of blocked channels``; a checkpoint is pending iff
    that number is > 0; ``current_checkpoint_id`` never decreases.
    """

    __slots__ = (
        "_alignment_start_ns",
        "_blocked",
        "_current_id",
        "_latest_alignment_duration_ns",
        "_num_barriers_received",
        "_num_closed",
    )

    def __init__(
        self,
        num_channels: int,
        listener: CheckpointBarrierListener,
        *,
        now_ns: TimeSource = zero_time,
        now_ms: TimeSource = zero_time,
    ) -> None:
        super().__init__(num_channels, listener, now_ns=now_ns, now_ms=now_ms)
        self._blocked = [False] * num_channels
        self._num_barriers_received = 0
        self._num_closed = 0
        self._current_id = -1
        self._alignment_start_ns: int | None = None
        self._latest_alignment_duration_ns = 0

    # ------------------------------------------------------------------ barriers
    def process_barrier(self, barrier: CheckpointBarrier, channel: int) -> None:
        barrier_id = barrier.checkpoint_id
        if self.num_channels == 1:
            if barrier_id > self._current_id:
                self._current_id = barrier_id
                self._notify_checkpoint(barrier, self._latest_alignment_duration_ns)
            return

        if self.is_checkpoint_pending():
            if barrier_id == self._current_id:
                self._on_barrier(channel)
            elif barrier_id > self._current_id:
                # another checkpoint started before the current one completed
                self._notify_abort(self._current_id, BarrierAbortReason.CHECKPOINT_DECLINED_SUBSUMED)
                self.release_blocks_and_reset_barriers()
                self._begin_new_alignment(barrier, channel)
            # else: trailing barrier of an earlier (now obsolete) checkpoint
        elif barrier_id > self._current_id:
            self._begin_new_alignment(barrier, channel)
        # else: the current checkpoint was cancelled, or this barrier is from a subsumed one

        if self._num_barriers_received + self._num_closed == self.num_channels:
            self.release_blocks_and_reset_barriers()
            self._notify_checkpoint(barrier, self._latest_alignment_duration_ns)

    def _begin_new_alignment(self, barrier: CheckpointBarrier, channel: int) -> None:
        self._mark_checkpoint_start(barrier.timestamp)
        self._current_id = barrier.checkpoint_id
        self._on_barrier(channel)
        self._alignment_start_ns = self._now_ns()

    def _on_barrier(self, channel: int) -> None:
        if self._blocked[channel]:
            raise StreamCorruptError(
                f"stream corrupt: repeated barrier for checkpoint {self._current_id} on input channel "
                f"{channel}; the upstream of this channel must send each barrier once: fail the task "
                "and restart the epoch from the latest completed checkpoint"
            )
        self._blocked[channel] = True
        self._num_barriers_received += 1

    def release_blocks_and_reset_barriers(self) -> None:
        blocked = self._blocked
        for channel in range(self.num_channels):
            blocked[channel] = False
        # the next barrier that comes must assume it is the first
        self._num_barriers_received = 0
        if self._alignment_start_ns is not None:
            self._latest_alignment_duration_ns = self._now_ns() - self._alignment_start_ns
            self._alignment_start_ns = None

    # ------------------------------------------------------------------ cancellation
    def process_cancellation_barrier(self, marker: CancelCheckpointMarker) -> None:
        barrier_id = marker.checkpoint_id
        if self.num_channels == 1:
            if barrier_id > self._current_id:
                self._current_id = barrier_id
                self._notify_abort_on_cancellation_barrier(barrier_id)
            return

        if self.is_checkpoint_pending():
            if barrier_id == self._current_id:
                self.release_blocks_and_reset_barriers()
                self._notify_abort_on_cancellation_barrier(barrier_id)
            elif barrier_id > self._current_id:
                # cancelling the next checkpoint also cancels the current one
                self.release_blocks_and_reset_barriers()
                self._start_cancelled(barrier_id)
            # else: trailing marker of an earlier checkpoint
        elif barrier_id > self._current_id:
            # the first event of a new checkpoint is its cancellation: with zero barriers and
            # current id = n, no barrier of n can start an alignment any more
            self._start_cancelled(barrier_id)
        # else: trailing marker of a subsumed checkpoint, or of the current one already cancelled

    def _start_cancelled(self, checkpoint_id: int) -> None:
        self._current_id = checkpoint_id
        self._alignment_start_ns = None
        self._latest_alignment_duration_ns = 0
        self._notify_abort_on_cancellation_barrier(checkpoint_id)

    # ------------------------------------------------------------------ end of partition
    def process_end_of_partition(self, channel: int) -> None:
        self._num_closed += 1
        if self.is_checkpoint_pending():
            self._notify_abort(self._current_id, BarrierAbortReason.CHECKPOINT_DECLINED_INPUT_END_OF_STREAM)
            self.release_blocks_and_reset_barriers()

    def abort_pending_checkpoint(self, checkpoint_id: int, reason: BarrierAbortReason) -> None:
        if checkpoint_id > self._current_id and self.is_checkpoint_pending():
            self.release_blocks_and_reset_barriers()
            self._notify_abort(self._current_id, reason)

    # ------------------------------------------------------------------ queries
    def is_blocked(self, channel: int) -> bool:
        return self._blocked[channel]

    def is_checkpoint_pending(self) -> bool:
        return self._num_barriers_received > 0

    @property
    def latest_checkpoint_id(self) -> int:
        return self._current_id

    @property
    def num_closed_channels(self) -> int:
        return self._num_closed

    def alignment_duration_ns(self) -> int:
        if self._alignment_start_ns is None:
            return self._latest_alignment_duration_ns
        return self._now_ns() - self._alignment_start_ns
