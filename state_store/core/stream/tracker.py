"""At-least-once barrier handling: count barriers, never block (Flink 1.11 ``CheckpointBarrierTracker``).

The tracker keeps a deque of pending checkpoints, ordered by id (oldest left), each with a barrier
count and an aborted flag::

    pending: [ #7 count=2 ] [ #8 count=1, aborted ] [ #9 count=1 ]     latest_pending_id = 9

Barrier *n* from a channel:

1. One input channel: trigger *n* at once (fast path) and stop.
2. *n* is pending: increment its count. When every live channel delivered it (count + closed ==
   channels), drop *n* and every older entry (silently: they are subsumed) and trigger *n* unless it
   was aborted.
3. *n* is not pending and newer than ``latest_pending_id``: append a new entry (the first barrier
   of *n*; it marks the checkpoint start). If more than ``max_tracked_checkpoints`` entries are
   pending, drop the oldest (silently).
4. Otherwise *n* is older than a pending or finished checkpoint: ignore it (it can never succeed).

Cancellation marker for *n*: abort (notify once) and drop every pending entry older than *n*; if *n*
is pending mark it aborted but keep counting its barriers so the entry can be dropped once all
arrived; if *n* is newer than everything, notify the abort and remember *n* as an aborted entry.

End of a channel: abort every pending checkpoint (reason ``CHECKPOINT_DECLINED_INPUT_END_OF_STREAM``)
and count the channel as closed for the checkpoints that follow.

Channels are never blocked -- neither kept by the tracker nor at the gate: ``blocks_on_barrier`` is
False and the tracker never resumes a channel (seed 000: its ``processBarrier`` does nothing with the
channel but log it) -- so records after barrier *n* may be processed before *n* is triggered:
after a restore from *n* they are replayed (at-least-once). The tracker assumes that newer
checkpoints have higher ids and that a channel never repeats a barrier: a repeated barrier is
counted again (it cannot be detected without per-channel state, exactly as in Flink).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from state_store.core.stream.events import CancelCheckpointMarker, CheckpointBarrier
from state_store.core.stream.handler import (
    BarrierAbortReason,
    CheckpointBarrierHandler,
    CheckpointBarrierListener,
    TimeSource,
    zero_time,
)

MAX_CHECKPOINTS_TO_TRACK = 50
"""Flink's default bound on the number of concurrently pending checkpoints in the tracker."""


@dataclass(slots=True)
class _BarrierCount:
    """Mutable per-checkpoint counter of the tracker (Flink's ``CheckpointBarrierCount``)."""

    checkpoint_id: int
    barrier_count: int = 0
    aborted: bool = False

    def mark_aborted(self) -> bool:
        """Mark aborted; True if this call changed it (so the abort is notified exactly once)."""
        first = not self.aborted
        self.aborted = True
        return first


class CheckpointBarrierTracker(CheckpointBarrierHandler):
    """Tracks barriers per checkpoint id and triggers once all live channels delivered one.

    Invariants: ``pending`` is strictly increasing by id; ``len(pending) <= max_tracked_checkpoints``
    (after each call); a checkpoint is triggered or aborted at most once.
    """

    __slots__ = ("_latest_pending_id", "_max_tracked", "_num_closed", "_pending")

    def __init__(
        self,
        num_channels: int,
        listener: CheckpointBarrierListener,
        *,
        max_tracked_checkpoints: int = MAX_CHECKPOINTS_TO_TRACK,
        now_ns: TimeSource = zero_time,
        now_ms: TimeSource = zero_time,
    ) -> None:
        super().__init__(num_channels, listener, now_ns=now_ns, now_ms=now_ms)
        if max_tracked_checkpoints < 1:
            raise ValueError(f"max_tracked_checkpoints must be >= 1, got {max_tracked_checkpoints}")
        self._pending: deque[_BarrierCount] = deque()
        self._latest_pending_id = -1
        self._max_tracked = max_tracked_checkpoints
        self._num_closed = 0

    # ------------------------------------------------------------------ barriers
    def process_barrier(self, barrier: CheckpointBarrier, channel: int) -> None:
        barrier_id = barrier.checkpoint_id
        if self.num_channels == 1:
            self._notify_checkpoint(barrier, 0)
            return

        pos, count = self._find(barrier_id)
        if count is not None:
            count.barrier_count += 1
            self._complete_if_all_arrived(pos, count, barrier)
        elif barrier_id > self._latest_pending_id:
            # first barrier of a newer checkpoint
            self._mark_checkpoint_start(barrier.timestamp)
            self._latest_pending_id = barrier_id
            count = _BarrierCount(barrier_id, barrier_count=1)
            self._pending.append(count)
            if len(self._pending) > self._max_tracked:
                self._pending.popleft()
            # with closed channels a single barrier may already be all of them
            self._complete_if_all_arrived(len(self._pending) - 1, count, barrier)
        # else: an old barrier of a checkpoint that cannot succeed any more: ignore

    def _complete_if_all_arrived(self, pos: int, count: _BarrierCount, barrier: CheckpointBarrier) -> None:
        if count.barrier_count + self._num_closed < self.num_channels:
            return
        # drop this checkpoint and all older ones (they are subsumed)
        for _ in range(pos + 1):
            self._pending.popleft()
        if not count.aborted:
            self._notify_checkpoint(barrier, 0)

    def _find(self, checkpoint_id: int) -> tuple[int, _BarrierCount | None]:
        for pos, count in enumerate(self._pending):
            if count.checkpoint_id == checkpoint_id:
                return pos, count
        return -1, None

    # ------------------------------------------------------------------ cancellation
    def process_cancellation_barrier(self, marker: CancelCheckpointMarker) -> None:
        checkpoint_id = marker.checkpoint_id
        if self.num_channels == 1:
            self._notify_abort_on_cancellation_barrier(checkpoint_id)
            return

        # drop and abort every older pending checkpoint
        while self._pending and self._pending[0].checkpoint_id < checkpoint_id:
            older = self._pending.popleft()
            if older.mark_aborted():
                self._notify_abort_on_cancellation_barrier(older.checkpoint_id)

        head = self._pending[0] if self._pending else None
        if head is not None and head.checkpoint_id == checkpoint_id:
            if head.mark_aborted():
                self._notify_abort_on_cancellation_barrier(checkpoint_id)
            # keep counting so that the entry is dropped once all barriers/markers have been seen
            head.barrier_count += 1
            if head.barrier_count + self._num_closed >= self.num_channels:
                self._pending.popleft()
        elif checkpoint_id > self._latest_pending_id:
            self._notify_abort_on_cancellation_barrier(checkpoint_id)
            self._latest_pending_id = checkpoint_id
            # the marker counts as this channel's barrier; every other entry was older and is gone
            if 1 + self._num_closed < self.num_channels:
                self._pending.appendleft(_BarrierCount(checkpoint_id, barrier_count=1, aborted=True))
        # else: trailing marker of a checkpoint that was already cancelled

    # ------------------------------------------------------------------ end of partition
    def process_end_of_partition(self, channel: int) -> None:
        self._num_closed += 1
        while self._pending:
            count = self._pending.popleft()
            if count.mark_aborted():
                self._notify_abort(
                    count.checkpoint_id, BarrierAbortReason.CHECKPOINT_DECLINED_INPUT_END_OF_STREAM
                )

    # ------------------------------------------------------------------ queries
    @property
    def latest_checkpoint_id(self) -> int:
        return self._pending[-1].checkpoint_id if self._pending else -1

    def is_checkpoint_pending(self) -> bool:
        return bool(self._pending)

    @property
    def pending_checkpoint_ids(self) -> tuple[int, ...]:
        """Ids of the pending entries, oldest first (aborted markers included)."""
        return tuple(c.checkpoint_id for c in self._pending)
