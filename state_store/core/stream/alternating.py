"""Unaligned checkpoints, aligned savepoints (Flink 1.11 ``AlternatingCheckpointBarrierHandler``).

Mode ``unaligned`` wraps both handlers and picks one per barrier::

    barrier n ──> n < last seen id? ──yes──> ignore
                     │ no
                     v
              checkpoint? ──yes──> active = unaligner      savepoint ──> active = aligner
                     │
           active changed? ──yes──> previous.abort_pending_checkpoint(n, CHECKPOINT_DECLINED_SUBSUMED)
                     v
              active.process_barrier(barrier, channel)

Cancellation markers go to the active handler only; the end of a channel goes to both (each keeps its
own count of closed channels). Blocking and the alignment duration are the active handler's;
in-flight data is always the unaligner's. A savepoint is therefore always a consistent cut of the
channels (no channel state), which is what makes it relocatable.

Block and resume at the gate: a savepoint barrier (routed to the aligner) blocks its channel at the
gate, a checkpoint barrier (routed to the unaligner) does not (:meth:`blocks_on_barrier`). The aligner
resumes what it does not keep, as on its own; the resumes of both inner handlers reach every resume
listener registered here. A savepoint barrier dropped here as older than the last seen id never
reaches the aligner, so this handler resumes its channel itself. Switching from the aligner to the
unaligner aborts the pending alignment, which resumes every channel the aligner kept. Invariant: a
channel is blocked at the gate iff the aligner keeps it blocked for a running savepoint alignment.
"""

from __future__ import annotations

from collections.abc import Callable

from state_store.core.stream.aligner import CheckpointBarrierAligner
from state_store.core.stream.events import CancelCheckpointMarker, CheckpointBarrier
from state_store.core.stream.handler import BarrierAbortReason, CheckpointBarrierHandler, ResumeListener
from state_store.core.stream.unaligner import CheckpointBarrierUnaligner


class AlternatingCheckpointBarrierHandler(CheckpointBarrierHandler):
    """Routes checkpoints to an unaligner and savepoints to an aligner (both share one listener).

    Invariant: barriers older than the last seen id reach neither handler.
    """

    __slots__ = ("_active", "_aligned", "_last_seen_id", "_unaligned")

    def __init__(self, aligned: CheckpointBarrierAligner, unaligned: CheckpointBarrierUnaligner) -> None:
        if aligned.num_channels != unaligned.num_channels:
            raise ValueError(
                f"aligner has {aligned.num_channels} channels but unaligner has {unaligned.num_channels}: "
                "build both for the same input gate"
            )
        super().__init__(aligned.num_channels, aligned.listener)
        self._aligned = aligned
        self._unaligned = unaligned
        self._active: CheckpointBarrierHandler = aligned
        self._last_seen_id = 0

    @property
    def active_handler(self) -> CheckpointBarrierHandler:
        return self._active

    def blocks_on_barrier(self, barrier: CheckpointBarrier) -> bool:
        """True for a savepoint barrier (aligned by the aligner), False for a checkpoint barrier."""
        return not barrier.is_checkpoint

    def add_resume_listener(self, listener: ResumeListener) -> None:
        """Register ``listener`` here and on both inner handlers (their resumes reach the gate too)."""
        super().add_resume_listener(listener)
        self._aligned.add_resume_listener(listener)
        self._unaligned.add_resume_listener(listener)

    def process_barrier(self, barrier: CheckpointBarrier, channel: int) -> None:
        barrier_id = barrier.checkpoint_id
        if barrier_id < self._last_seen_id:
            if self.blocks_on_barrier(barrier):
                # the gate blocked on it, but it reaches no aligner that would resume it
                self._resume_consumption(channel)
            return
        self._last_seen_id = barrier_id
        previous = self._active
        self._active = self._unaligned if barrier.is_checkpoint else self._aligned
        if previous is not self._active:
            previous.abort_pending_checkpoint(barrier_id, BarrierAbortReason.CHECKPOINT_DECLINED_SUBSUMED)
        self._active.process_barrier(barrier, channel)

    def process_cancellation_barrier(self, marker: CancelCheckpointMarker) -> None:
        self._active.process_cancellation_barrier(marker)

    def process_end_of_partition(self, channel: int) -> None:
        self._aligned.process_end_of_partition(channel)
        self._unaligned.process_end_of_partition(channel)

    def release_blocks_and_reset_barriers(self) -> None:
        self._active.release_blocks_and_reset_barriers()

    def is_blocked(self, channel: int) -> bool:
        return self._active.is_blocked(channel)

    def is_checkpoint_pending(self) -> bool:
        return self._active.is_checkpoint_pending()

    @property
    def latest_checkpoint_id(self) -> int:
        return self._active.latest_checkpoint_id

    def alignment_duration_ns(self) -> int:
        return self._active.alignment_duration_ns()

    @property
    def checkpoint_start_delay_ns(self) -> int:
        return self._active.checkpoint_start_delay_ns

    def has_inflight_data(self, checkpoint_id: int, channel: int) -> bool:
        return self._unaligned.has_inflight_data(checkpoint_id, channel)

    def all_barriers_received(self, checkpoint_id: int) -> bool:
        return self._active.all_barriers_received(checkpoint_id)

    def data_observer(self) -> Callable[[int, object], None] | None:
        return self._unaligned.data_observer()
