"""CheckpointBarrierUnaligner and AlternatingCheckpointBarrierHandler (Flink 1.11), and mode selection."""

from __future__ import annotations

import pytest

from state_store.core.stream import (
    AlternatingCheckpointBarrierHandler,
    BarrierAbortReason,
    CancelCheckpointMarker,
    CheckpointBarrierAligner,
    CheckpointBarrierHandler,
    CheckpointBarrierTracker,
    CheckpointBarrierUnaligner,
    CheckpointedInputGate,
    CheckpointingMode,
    ScriptedChannel,
    create_barrier_handler,
    parse_checkpointing_mode,
)

from .support import RecordingChannelState, RecordingListener, barrier, drain, items

SUBSUMED = BarrierAbortReason.CHECKPOINT_DECLINED_SUBSUMED
DECLINED_CANCEL = BarrierAbortReason.CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER
DECLINED_EOS = BarrierAbortReason.CHECKPOINT_DECLINED_INPUT_END_OF_STREAM


def make(
    num_channels: int, writer: RecordingChannelState | None = None
) -> tuple[CheckpointBarrierUnaligner, RecordingListener]:
    listener = RecordingListener()
    return CheckpointBarrierUnaligner(num_channels, listener, channel_state_writer=writer), listener


def active(handler: AlternatingCheckpointBarrierHandler) -> CheckpointBarrierHandler:
    return handler.active_handler


def test_unaligner_triggers_at_the_first_barrier_without_blocking() -> None:
    unaligner, listener = make(3)
    unaligner.process_barrier(barrier(1), 1)
    assert listener.triggered == [1]
    assert not any(unaligner.is_blocked(c) for c in range(3))
    unaligner.process_barrier(barrier(1), 0)
    unaligner.process_barrier(barrier(1), 2)
    assert listener.triggered == [1]  # once


def test_unaligner_reports_inflight_data_until_each_channel_delivers_its_barrier() -> None:
    unaligner, _ = make(3)
    assert unaligner.has_inflight_data(1, 0)  # not started yet: everything is in flight
    unaligner.process_barrier(barrier(1), 1)
    assert [unaligner.has_inflight_data(1, c) for c in range(3)] == [True, False, True]
    assert not unaligner.all_barriers_received(1)
    unaligner.process_barrier(barrier(1), 0)
    assert [unaligner.has_inflight_data(1, c) for c in range(3)] == [False, False, True]
    unaligner.process_barrier(barrier(1), 2)
    assert [unaligner.has_inflight_data(1, c) for c in range(3)] == [False, False, False]
    assert unaligner.all_barriers_received(1)
    assert not unaligner.is_checkpoint_pending()
    assert not unaligner.has_inflight_data(0, 0)  # older checkpoint


def test_unaligner_gate_persists_items_overtaken_by_the_first_barrier() -> None:
    writer = RecordingChannelState()
    unaligner, listener = make(2, writer)
    ch0 = ScriptedChannel([barrier(1), "a-epoch2"])
    ch1 = ScriptedChannel()
    gate = CheckpointedInputGate([ch0, ch1], unaligner)
    drain(gate)
    ch1.push("b-epoch1", "b-epoch1'", barrier(1), "b-epoch2")
    assert items(drain(gate)) == ["b-epoch1", "b-epoch1'", barrier(1), "b-epoch2"]
    assert listener.triggered == [1]
    assert writer.data == {1: [(1, "b-epoch1"), (1, "b-epoch1'")]}  # not a-epoch2, not b-epoch2
    assert writer.finished == [1]


def test_unaligner_newer_barrier_aborts_the_pending_checkpoint() -> None:
    unaligner, listener = make(2)
    unaligner.process_barrier(barrier(1), 0)
    unaligner.process_barrier(barrier(2), 0)
    assert listener.events[1:] and listener.aborted == [(1, SUBSUMED)]
    assert listener.triggered == [1, 2]


def test_unaligner_completed_checkpoint_is_not_aborted_by_a_newer_barrier() -> None:
    unaligner, listener = make(2)
    unaligner.process_barrier(barrier(1), 0)
    unaligner.process_barrier(barrier(1), 1)
    unaligner.process_barrier(barrier(2), 1)
    assert listener.aborted == []
    assert listener.triggered == [1, 2]


def test_unaligner_ignores_old_duplicate_and_cancelled_barriers() -> None:
    unaligner, listener = make(3)
    unaligner.process_barrier(barrier(2), 0)
    unaligner.process_barrier(barrier(2), 0)  # duplicate on the same channel: not counted twice
    assert unaligner.has_inflight_data(2, 1)
    unaligner.process_barrier(barrier(1), 1)  # old
    unaligner.process_cancellation_barrier(CancelCheckpointMarker(3))
    unaligner.process_barrier(barrier(3), 1)  # of a cancelled checkpoint
    assert listener.triggered == [2]
    assert listener.aborted == [(3, DECLINED_CANCEL)]


def test_unaligner_cancellation_while_pending_stops_collecting_inflight_data() -> None:
    writer = RecordingChannelState()
    unaligner, listener = make(2, writer)
    unaligner.process_barrier(barrier(1), 0)
    unaligner.process_cancellation_barrier(CancelCheckpointMarker(1))
    assert listener.aborted == [(1, DECLINED_CANCEL)]
    assert not unaligner.has_inflight_data(1, 1)
    unaligner.on_data(1, "x")
    assert writer.data == {}
    unaligner.process_cancellation_barrier(CancelCheckpointMarker(1))  # trailing
    assert len(listener.aborted) == 1


def test_unaligner_end_of_partition_aborts_the_pending_checkpoint() -> None:
    unaligner, listener = make(3)
    unaligner.process_barrier(barrier(1), 0)
    unaligner.process_end_of_partition(2)
    assert listener.aborted == [(1, DECLINED_EOS)]
    assert unaligner.num_open_channels == 2
    unaligner.process_barrier(barrier(2), 0)
    unaligner.process_barrier(barrier(2), 1)
    assert unaligner.all_barriers_received(2)  # the closed channel is not waited for
    assert not unaligner.has_inflight_data(2, 2)


def test_alternating_routes_checkpoints_to_unaligner_and_savepoints_to_aligner() -> None:
    listener = RecordingListener()
    aligner = CheckpointBarrierAligner(2, listener)
    unaligner = CheckpointBarrierUnaligner(2, listener)
    handler = AlternatingCheckpointBarrierHandler(aligner, unaligner)
    handler.process_barrier(barrier(1), 0)
    assert active(handler) is unaligner
    assert listener.triggered == [1]  # unaligned: at the first barrier
    assert not handler.is_blocked(0)
    handler.process_barrier(barrier(1), 1)
    handler.process_barrier(barrier(2, savepoint=True), 0)
    assert active(handler) is aligner
    assert handler.is_blocked(0)  # savepoints are aligned
    assert listener.triggered == [1]
    handler.process_barrier(barrier(2, savepoint=True), 1)
    assert listener.triggered == [1, 2]


def test_alternating_switch_aborts_the_pending_checkpoint_of_the_previous_handler() -> None:
    listener = RecordingListener()
    aligner = CheckpointBarrierAligner(2, listener)
    handler = AlternatingCheckpointBarrierHandler(aligner, CheckpointBarrierUnaligner(2, listener))
    handler.process_barrier(barrier(1, savepoint=True), 0)  # aligning savepoint 1
    handler.process_barrier(barrier(2), 1)  # checkpoint 2 overtakes it
    assert listener.aborted == [(1, SUBSUMED)]
    assert not aligner.is_blocked(0)
    assert listener.triggered == [2]


def test_alternating_ignores_barriers_older_than_the_last_seen() -> None:
    listener = RecordingListener()
    handler = AlternatingCheckpointBarrierHandler(
        CheckpointBarrierAligner(2, listener), CheckpointBarrierUnaligner(2, listener)
    )
    handler.process_barrier(barrier(5), 0)
    handler.process_barrier(barrier(4, savepoint=True), 1)
    assert not handler.is_blocked(1)
    assert listener.triggered == [5]


def test_alternating_end_of_partition_reaches_both_handlers() -> None:
    listener = RecordingListener()
    aligner = CheckpointBarrierAligner(2, listener)
    unaligner = CheckpointBarrierUnaligner(2, listener)
    handler = AlternatingCheckpointBarrierHandler(aligner, unaligner)
    handler.process_end_of_partition(1)
    assert aligner.num_closed_channels == 1
    assert unaligner.num_open_channels == 1
    handler.process_barrier(barrier(1, savepoint=True), 0)
    assert listener.triggered == [1]


def test_handler_selection_by_mode() -> None:
    listener = RecordingListener()
    assert isinstance(create_barrier_handler("exactly_once", 2, listener), CheckpointBarrierAligner)
    assert isinstance(
        create_barrier_handler(CheckpointingMode.AT_LEAST_ONCE, 2, listener), CheckpointBarrierTracker
    )
    assert isinstance(create_barrier_handler("unaligned", 2, listener), AlternatingCheckpointBarrierHandler)
    assert isinstance(
        create_barrier_handler(CheckpointingMode.EXACTLY_ONCE, 2, listener, unaligned=True),
        AlternatingCheckpointBarrierHandler,
    )
    assert parse_checkpointing_mode("Exactly-Once") == (CheckpointingMode.EXACTLY_ONCE, False)


def test_unaligned_with_at_least_once_is_rejected_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="cannot use unaligned checkpoints with at_least_once"):
        create_barrier_handler("at_least_once", 2, RecordingListener(), unaligned=True)


def test_unknown_mode_names_the_valid_spellings() -> None:
    with pytest.raises(ValueError, match=r"'exactly_once'.*'at_least_once'.*'unaligned'"):
        parse_checkpointing_mode("exactly-twice")
