"""CheckpointBarrierAligner: the exactly-once cases of seed 000 (Flink 1.11), one test per case."""

from __future__ import annotations

import pytest

from state_store.core.stream import (
    END_OF_PARTITION,
    BarrierAbortReason,
    CancelCheckpointMarker,
    CheckpointBarrierAligner,
    CheckpointedInputGate,
    ScriptedChannel,
    StreamCorruptError,
)

from .support import RecordingListener, StepClock, Triggered, barrier, drain, items

SUBSUMED = BarrierAbortReason.CHECKPOINT_DECLINED_SUBSUMED
DECLINED_CANCEL = BarrierAbortReason.CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER
DECLINED_EOS = BarrierAbortReason.CHECKPOINT_DECLINED_INPUT_END_OF_STREAM


def make(
    num_channels: int, now_ns: StepClock | None = None
) -> tuple[CheckpointBarrierAligner, RecordingListener]:
    listener = RecordingListener()
    if now_ns is None:
        return CheckpointBarrierAligner(num_channels, listener), listener
    return CheckpointBarrierAligner(num_channels, listener, now_ns=now_ns), listener


def blocked(aligner: CheckpointBarrierAligner) -> list[int]:
    return [c for c in range(aligner.num_channels) if aligner.is_blocked(c)]


def test_aligner_single_channel_triggers_newer_barriers_and_never_blocks() -> None:
    aligner, listener = make(1)
    aligner.process_barrier(barrier(1), 0)
    assert not aligner.is_blocked(0)
    aligner.process_barrier(barrier(1), 0)  # not newer: ignored
    aligner.process_barrier(barrier(3), 0)
    assert listener.triggered == [1, 3]


def test_aligner_blocks_channels_that_delivered_the_barrier_until_all_did() -> None:
    aligner, listener = make(3)
    aligner.process_barrier(barrier(1), 0)
    assert blocked(aligner) == [0]
    aligner.process_barrier(barrier(1), 2)
    assert blocked(aligner) == [0, 2]
    assert listener.triggered == []
    aligner.process_barrier(barrier(1), 1)
    assert listener.triggered == [1]
    assert blocked(aligner) == []
    assert not aligner.is_checkpoint_pending()


def test_aligner_gate_holds_back_records_after_the_barrier_until_the_trigger() -> None:
    listener = RecordingListener()
    aligner = CheckpointBarrierAligner(2, listener)
    ch0 = ScriptedChannel([barrier(1), "a2"])
    ch1 = ScriptedChannel(["b1"])
    gate = CheckpointedInputGate([ch0, ch1], aligner)
    assert items(drain(gate)) == [barrier(1), "b1"]  # a2 waits behind the blocked channel
    assert listener.triggered == []
    ch1.push(barrier(1))
    assert items(drain(gate)) == [barrier(1), "a2"]
    assert listener.triggered == [1]


def test_aligner_repeated_barrier_on_blocked_channel_is_stream_corrupt() -> None:
    aligner, _ = make(2)
    aligner.process_barrier(barrier(1), 0)
    with pytest.raises(StreamCorruptError, match="repeated barrier for checkpoint 1 on input channel 0"):
        aligner.process_barrier(barrier(1), 0)


def test_aligner_newer_barrier_aborts_current_alignment() -> None:
    aligner, listener = make(3)
    aligner.process_barrier(barrier(1), 0)
    aligner.process_barrier(barrier(1), 1)
    aligner.process_barrier(barrier(2), 2)  # channel 2 skipped barrier 1: checkpoint 2 subsumes 1
    assert listener.aborted == [(1, SUBSUMED)]
    assert blocked(aligner) == [2]
    assert aligner.latest_checkpoint_id == 2
    aligner.process_barrier(barrier(2), 0)
    aligner.process_barrier(barrier(2), 1)
    assert listener.triggered == [2]


def test_aligner_older_barrier_is_ignored_while_aligning() -> None:
    aligner, listener = make(2)
    aligner.process_barrier(barrier(5), 0)
    aligner.process_barrier(barrier(4), 1)  # trailing barrier of an obsolete checkpoint
    assert blocked(aligner) == [0]
    assert listener.events == []
    aligner.process_barrier(barrier(5), 1)
    assert listener.triggered == [5]


def test_aligner_old_barrier_is_ignored_when_no_alignment_runs() -> None:
    aligner, listener = make(2)
    aligner.process_barrier(barrier(5), 0)
    aligner.process_barrier(barrier(5), 1)
    aligner.process_barrier(barrier(3), 0)
    assert blocked(aligner) == []
    assert listener.triggered == [5]


def test_aligner_cancellation_before_first_barrier_skips_the_alignment() -> None:
    aligner, listener = make(2)
    aligner.process_cancellation_barrier(CancelCheckpointMarker(3))
    assert listener.aborted == [(3, DECLINED_CANCEL)]
    aligner.process_barrier(barrier(3), 0)  # barrier of the cancelled checkpoint: no alignment
    aligner.process_barrier(barrier(3), 1)
    assert blocked(aligner) == []
    assert listener.triggered == []
    assert aligner.latest_checkpoint_id == 3


def test_aligner_cancellation_while_aligning_releases_and_aborts() -> None:
    aligner, listener = make(3)
    aligner.process_barrier(barrier(2), 0)
    aligner.process_cancellation_barrier(CancelCheckpointMarker(2))
    assert listener.aborted == [(2, DECLINED_CANCEL)]
    assert blocked(aligner) == []
    aligner.process_barrier(barrier(2), 1)  # trailing: ignored
    assert blocked(aligner) == []
    assert listener.triggered == []


def test_aligner_cancellation_of_a_newer_checkpoint_stops_the_current_alignment() -> None:
    aligner, listener = make(3)
    aligner.process_barrier(barrier(2), 0)
    aligner.process_cancellation_barrier(CancelCheckpointMarker(3))
    assert listener.aborted == [(3, DECLINED_CANCEL)]  # Flink notifies only the cancelled id
    assert blocked(aligner) == []
    assert aligner.latest_checkpoint_id == 3
    assert aligner.alignment_duration_ns() == 0


def test_aligner_trailing_cancellation_is_ignored() -> None:
    aligner, listener = make(2)
    aligner.process_barrier(barrier(4), 0)
    aligner.process_cancellation_barrier(CancelCheckpointMarker(3))  # older than the alignment
    assert blocked(aligner) == [0]
    aligner.process_barrier(barrier(4), 1)
    aligner.process_cancellation_barrier(CancelCheckpointMarker(4))  # after completion
    assert listener.aborted == []
    assert listener.triggered == [4]


def test_aligner_single_channel_cancellation_aborts_newer_ids_only() -> None:
    aligner, listener = make(1)
    aligner.process_cancellation_barrier(CancelCheckpointMarker(2))
    aligner.process_cancellation_barrier(CancelCheckpointMarker(2))
    aligner.process_barrier(barrier(2), 0)
    assert listener.aborted == [(2, DECLINED_CANCEL)]
    assert listener.triggered == []


def test_aligner_closed_channels_count_toward_completion() -> None:
    aligner, listener = make(3)
    aligner.process_end_of_partition(1)
    aligner.process_barrier(barrier(1), 0)
    assert listener.triggered == []
    aligner.process_barrier(barrier(1), 2)
    assert listener.triggered == [1]
    assert aligner.num_closed_channels == 1


def test_aligner_end_of_partition_while_aligning_aborts_the_checkpoint() -> None:
    aligner, listener = make(3)
    aligner.process_barrier(barrier(1), 0)
    aligner.process_end_of_partition(2)
    assert listener.aborted == [(1, DECLINED_EOS)]
    assert blocked(aligner) == []
    aligner.process_barrier(barrier(1), 1)  # trailing
    assert listener.triggered == []
    aligner.process_barrier(barrier(2), 0)
    aligner.process_barrier(barrier(2), 1)  # 2 barriers + 1 closed channel
    assert listener.triggered == [2]


def test_aligner_alignment_duration_metric_spans_first_to_last_barrier() -> None:
    clock = StepClock(1_000)
    aligner, listener = make(2, now_ns=clock)
    aligner.process_barrier(barrier(1), 0)
    clock.now = 1_300
    assert aligner.alignment_duration_ns() == 300  # running alignment
    clock.now = 1_750
    aligner.process_barrier(barrier(1), 1)
    event = listener.events[0]
    assert isinstance(event, Triggered)
    assert event.metrics.alignment_duration_ns == 750
    clock.now = 9_999
    assert aligner.alignment_duration_ns() == 750  # last completed alignment


def test_aligner_abort_pending_checkpoint_only_for_a_newer_id() -> None:
    aligner, listener = make(2)
    aligner.process_barrier(barrier(3), 0)
    aligner.abort_pending_checkpoint(3, SUBSUMED)
    assert listener.aborted == []
    aligner.abort_pending_checkpoint(4, SUBSUMED)
    assert listener.aborted == [(3, SUBSUMED)]
    assert blocked(aligner) == []


def test_aligner_gate_ends_when_every_channel_ends() -> None:
    listener = RecordingListener()
    aligner = CheckpointBarrierAligner(2, listener)
    gate = CheckpointedInputGate(
        [
            ScriptedChannel(["a", barrier(1), END_OF_PARTITION]),
            ScriptedChannel([barrier(1), END_OF_PARTITION]),
        ],
        aligner,
    )
    out = items(drain(gate))
    assert out.count(END_OF_PARTITION) == 2
    assert gate.is_finished()
    assert listener.triggered == [1]
