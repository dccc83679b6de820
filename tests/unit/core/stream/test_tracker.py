"""CheckpointBarrierTracker: the at-least-once cases of seed 000 (Flink 1.11), one test per case."""

from __future__ import annotations

import pytest

from state_store.core.stream import (
    BarrierAbortReason,
    CancelCheckpointMarker,
    CheckpointBarrierTracker,
    CheckpointedInputGate,
    ScriptedChannel,
)

from .support import RecordingListener, StepClock, barrier, drain, items

DECLINED_CANCEL = BarrierAbortReason.CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER
DECLINED_EOS = BarrierAbortReason.CHECKPOINT_DECLINED_INPUT_END_OF_STREAM


def make(num_channels: int, max_tracked: int = 50) -> tuple[CheckpointBarrierTracker, RecordingListener]:
    listener = RecordingListener()
    return CheckpointBarrierTracker(num_channels, listener, max_tracked_checkpoints=max_tracked), listener


def pending(tracker: CheckpointBarrierTracker) -> tuple[int, ...]:
    return tracker.pending_checkpoint_ids


def test_tracker_single_channel_fast_path_triggers_every_barrier_immediately() -> None:
    tracker, listener = make(1)
    tracker.process_barrier(barrier(1), 0)
    tracker.process_barrier(barrier(2), 0)
    assert listener.triggered == [1, 2]
    assert pending(tracker) == ()


def test_tracker_triggers_once_every_channel_delivered_the_barrier() -> None:
    tracker, listener = make(3)
    tracker.process_barrier(barrier(1), 0)
    tracker.process_barrier(barrier(1), 2)
    assert listener.triggered == []
    assert pending(tracker) == (1,)
    tracker.process_barrier(barrier(1), 1)
    assert listener.triggered == [1]
    assert pending(tracker) == ()
    assert listener.events[0].metrics.alignment_duration_ns == 0  # type: ignore[union-attr]


def test_tracker_never_blocks_a_channel_so_records_after_the_barrier_pass() -> None:
    listener = RecordingListener()
    tracker = CheckpointBarrierTracker(2, listener)
    ch0 = ScriptedChannel([barrier(1), "a-after", "a-after-2"])
    ch1 = ScriptedChannel()
    gate = CheckpointedInputGate([ch0, ch1], tracker)
    out = items(drain(gate))
    assert out == [barrier(1), "a-after", "a-after-2"]  # epoch-2 records before checkpoint 1 triggers
    assert not tracker.is_blocked(0)
    assert listener.triggered == []
    ch1.push(barrier(1))
    drain(gate)
    assert listener.triggered == [1]


def test_tracker_completion_drops_older_pending_checkpoints_without_notifying() -> None:
    tracker, listener = make(2)
    tracker.process_barrier(barrier(1), 0)  # channel 1 lost barrier 1 (e.g. upstream skipped it)
    tracker.process_barrier(barrier(2), 0)
    tracker.process_barrier(barrier(2), 1)
    assert listener.events and listener.triggered == [2]
    assert listener.aborted == []  # subsumed silently, as in Flink 1.11
    assert pending(tracker) == ()


def test_tracker_ignores_first_barrier_not_newer_than_latest_pending() -> None:
    tracker, listener = make(2)
    tracker.process_barrier(barrier(5), 0)
    tracker.process_barrier(barrier(3), 1)  # older than 5: can never succeed
    assert pending(tracker) == (5,)
    tracker.process_barrier(barrier(5), 1)
    assert listener.triggered == [5]


def test_tracker_tracks_at_most_max_checkpoints_and_drops_the_oldest() -> None:
    tracker, listener = make(2, max_tracked=3)
    for checkpoint_id in (1, 2, 3, 4):
        tracker.process_barrier(barrier(checkpoint_id), 0)
    assert pending(tracker) == (2, 3, 4)
    tracker.process_barrier(barrier(1), 1)  # 1 was dropped: this is an old barrier now
    assert listener.events == []
    tracker.process_barrier(barrier(2), 1)
    assert listener.triggered == [2]
    assert pending(tracker) == (3, 4)


def test_tracker_cancellation_aborts_all_older_pending() -> None:
    tracker, listener = make(3)
    tracker.process_barrier(barrier(1), 0)
    tracker.process_barrier(barrier(2), 0)
    tracker.process_barrier(barrier(3), 0)
    tracker.process_cancellation_barrier(CancelCheckpointMarker(3))
    assert listener.aborted == [(1, DECLINED_CANCEL), (2, DECLINED_CANCEL), (3, DECLINED_CANCEL)]
    assert pending(tracker) == (3,)


def test_tracker_cancelled_pending_checkpoint_keeps_counting_and_never_triggers() -> None:
    tracker, listener = make(3)
    tracker.process_barrier(barrier(4), 0)
    tracker.process_cancellation_barrier(CancelCheckpointMarker(4))  # from channel 1
    tracker.process_cancellation_barrier(CancelCheckpointMarker(4))  # trailing, no second abort
    assert listener.aborted == [(4, DECLINED_CANCEL)]
    assert pending(tracker) == ()  # three of three seen: entry removed


def test_tracker_aborted_checkpoint_is_removed_without_trigger_when_all_barriers_arrive() -> None:
    tracker, listener = make(3)
    tracker.process_barrier(barrier(4), 0)
    tracker.process_cancellation_barrier(CancelCheckpointMarker(4))
    tracker.process_barrier(barrier(4), 2)
    assert listener.triggered == []
    assert pending(tracker) == ()


def test_tracker_cancellation_of_a_new_checkpoint_notifies_and_remembers_it_as_aborted() -> None:
    tracker, listener = make(2)
    tracker.process_barrier(barrier(1), 0)
    tracker.process_cancellation_barrier(CancelCheckpointMarker(7))
    assert listener.aborted == [(1, DECLINED_CANCEL), (7, DECLINED_CANCEL)]
    assert pending(tracker) == (7,)
    tracker.process_barrier(barrier(7), 1)  # the other channel's barrier of the cancelled checkpoint
    assert listener.triggered == []
    assert pending(tracker) == ()


def test_tracker_trailing_cancellation_of_an_already_cancelled_checkpoint_is_ignored() -> None:
    tracker, listener = make(2)
    tracker.process_cancellation_barrier(CancelCheckpointMarker(7))
    tracker.process_cancellation_barrier(CancelCheckpointMarker(7))
    tracker.process_cancellation_barrier(CancelCheckpointMarker(3))
    assert listener.aborted == [(7, DECLINED_CANCEL)]


def test_tracker_single_channel_cancellation_aborts_immediately() -> None:
    tracker, listener = make(1)
    tracker.process_cancellation_barrier(CancelCheckpointMarker(2))
    assert listener.aborted == [(2, DECLINED_CANCEL)]


def test_tracker_end_of_partition_aborts_every_pending_checkpoint() -> None:
    tracker, listener = make(3)
    tracker.process_barrier(barrier(1), 0)
    tracker.process_barrier(barrier(2), 0)
    tracker.process_end_of_partition(2)
    assert listener.aborted == [(1, DECLINED_EOS), (2, DECLINED_EOS)]
    assert pending(tracker) == ()
    tracker.process_barrier(barrier(2), 1)  # trailing barrier of an aborted checkpoint
    assert listener.triggered == []


def test_tracker_closed_channels_count_toward_later_checkpoints() -> None:
    tracker, listener = make(3)
    tracker.process_end_of_partition(2)
    tracker.process_barrier(barrier(1), 0)
    assert listener.triggered == []
    tracker.process_barrier(barrier(1), 1)
    assert listener.triggered == [1]


def test_tracker_start_delay_metric_uses_the_injected_wall_clock() -> None:
    listener = RecordingListener()
    tracker = CheckpointBarrierTracker(2, listener, now_ms=StepClock(1_250))
    tracker.process_barrier(barrier(1, timestamp=1_000), 0)
    tracker.process_barrier(barrier(1, timestamp=1_000), 1)
    assert listener.events[0].metrics.checkpoint_start_delay_ns == 250_000_000  # type: ignore[union-attr]


def test_tracker_rejects_a_bound_below_one() -> None:
    with pytest.raises(ValueError, match="max_tracked_checkpoints"):
        make(2, max_tracked=0)
