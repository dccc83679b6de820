"""Exactly-once barrier alignment (Flink 1.11 ``CheckpointBarrierAligner``).

A channel that delivered barrier *n* is blocked until every live channel delivered it; only then is
*n* triggered, so the snapshot contains exactly the records before the cut::

    ch0: a a | B5 .  .  .  (blocked) .  .  .  | b b          records after B5 wait in the channel
    ch1: a a a a a  B5 (blocked) .  .  .  .  | b b
    ch2: a a a a a a a a a B5 --> trigger(5), release ch0..ch2
         ^ alignment starts at the first B5   ^ alignment ends: duration = now_ns() difference

Every barrier blocks its channel at the gate before it reaches the aligner (:meth:`blocks_on_barrier`
is always True, seed 000: the gate stops consuming a channel when it yields a barrier). The aligner
keeps the block only when it aligns on the barrier; on every other path it calls
``_resume_consumption(c)`` (the gate unblocks *c*), and :meth:`release_blocks_and_reset_barriers`
resumes each channel it kept, in channel order (seed 000 does not show the aligner's release; it
resumes each blocked channel in Flink 1.11, in map order, which we fix to channel order).

Barrier *n* from channel *c* -- what the aligner does, and the block/resume events the gate sees
(``block c`` always comes first, from the gate):

0. One input channel (fast path): ``resume c``; then trigger *n* if it is newer than the last seen id,
   else ignore it. Nothing is ever kept blocked.
1. Alignment of *m* running:
   * *n == m*: keep *c* blocked; if *c* is already kept blocked the stream is corrupt
     (:class:`StreamCorruptError`, raised with nothing resumed: the task fails).
   * *n > m*: abort *m* (``CHECKPOINT_DECLINED_SUBSUMED``), ``resume`` every kept channel, start
     aligning *n* with *c* kept blocked.
   * *n < m*: a trailing barrier of an older checkpoint: ``resume c`` and ignore it.
2. No alignment running: if *n* is newer than the last seen id start aligning *n* (keep *c*);
   otherwise ``resume c`` and ignore it (an old barrier, or one of a checkpoint that was cancelled or
   aborted, which leaves no barriers pending).
3. If kept channels + closed channels == all channels: ``resume`` every kept channel, then trigger *n*.

Cancellation marker for *n*: a running alignment of *n* or of an older checkpoint is released
(``resume`` every kept channel); *n* is aborted (``CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER``) once,
and becomes the current id with no barriers, so later barriers of *n* are resumed and ignored.
Markers of older checkpoints are ignored. (Markers never block: they are not barriers.)

End of a channel: counted as closed for every later alignment; a running alignment is aborted
(``CHECKPOINT_DECLINED_INPUT_END_OF_STREAM``) and released, because the closed channel's data after
the cut has already been processed. (A blocked channel cannot end: it is not polled.) Seed 000 does
not show this method; the behaviour is Flink 1.11's and the resumes follow from the release.

Invariant after every call: a channel is blocked at the gate iff the aligner keeps it blocked, iff it
delivered the barrier of the running alignment; with no alignment running no channel is blocked.
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
    """Keeps channels that delivered the current barrier blocked until all live channels did.

    Invariants: ``num_barriers_received == number of kept (blocked) channels``; a checkpoint is
    pending iff that number is > 0; ``current_checkpoint_id`` never decreases; every barrier the gate
    blocked on is either kept (counted above) or resumed before :meth:`process_barrier` returns, and
    every kept channel is resumed when the alignment completes, is subsumed, cancelled or aborted.
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
            # fast path: nothing to align with, so the gate's block is lifted at once
            self._resume_consumption(channel)
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
            else:
                # trailing barrier of an earlier (now obsolete) checkpoint
                self._resume_consumption(channel)
        elif barrier_id > self._current_id:
            self._begin_new_alignment(barrier, channel)
        else:
            # the current checkpoint was cancelled or aborted, or this barrier is from a subsumed one
            self._resume_consumption(channel)

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
        """Resume every kept channel (in channel order) and forget the running alignment.

        The state is reset before the first resume, so a resume listener sees no channel kept.
        """
        blocked = self._blocked
        released = [channel for channel in range(self.num_channels) if blocked[channel]]
        for channel in released:
            blocked[channel] = False
        # the next barrier that comes must assume it is the first
        self._num_barriers_received = 0
        if self._alignment_start_ns is not None:
            self._latest_alignment_duration_ns = self._now_ns() - self._alignment_start_ns
            self._alignment_start_ns = None
        for channel in released:
            self._resume_consumption(channel)

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
    def blocks_on_barrier(self, barrier: CheckpointBarrier) -> bool:
        """Always True: every barrier blocks its channel at the gate until the aligner resumes it."""
        return True

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
