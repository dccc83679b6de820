"""CheckpointedInputGate: polling order, routing of control events, channels."""

from __future__ import annotations

import pytest

from state_store.core.stream import (
    END_OF_PARTITION,
    CancelCheckpointMarker,
    Channel,
    CheckpointBarrierAligner,
    CheckpointBarrierTracker,
    CheckpointedInputGate,
    IteratorChannel,
    ScriptedChannel,
    StreamStatus,
    Watermark,
    is_event,
)

from .support import RecordingListener, barrier, drain, items


def test_gate_polls_available_channels_round_robin() -> None:
    channels = [ScriptedChannel(["a1", "a2"]), ScriptedChannel([]), ScriptedChannel(["c1", "c2", "c3"])]
    gate = CheckpointedInputGate(channels, CheckpointBarrierTracker(3, RecordingListener()))
    polled = drain(gate)
    assert [(p.channel, p.item) for p in polled] == [(0, "a1"), (2, "c1"), (0, "a2"), (2, "c2"), (2, "c3")]


def test_gate_returns_none_when_nothing_is_available_and_resumes_later() -> None:
    channel = ScriptedChannel()
    gate = CheckpointedInputGate([channel], CheckpointBarrierAligner(1, RecordingListener()))
    assert gate.poll_next() is None
    channel.push("x")
    polled = gate.poll_next()
    assert polled is not None and polled.item == "x"
    assert not gate.is_finished()


def test_gate_never_polls_a_blocked_channel() -> None:
    ch0 = ScriptedChannel([barrier(1), "after-0", "after-1"])
    ch1 = ScriptedChannel(["b0", "b1", "b2"])
    gate = CheckpointedInputGate([ch0, ch1], CheckpointBarrierAligner(2, RecordingListener()))
    polled = drain(gate)
    assert [p.item for p in polled] == [barrier(1), "b0", "b1", "b2"]
    assert len(ch0) == 2  # untouched while blocked
    assert gate.is_blocked(0)


def test_gate_swallows_cancellation_markers_and_returns_barriers_and_end_of_partition() -> None:
    listener = RecordingListener()
    ch0 = ScriptedChannel([CancelCheckpointMarker(1), "a", END_OF_PARTITION])
    gate = CheckpointedInputGate([ch0], CheckpointBarrierAligner(1, listener))
    assert items(drain(gate)) == ["a", END_OF_PARTITION]
    assert [a[0] for a in listener.aborted] == [1]
    assert gate.is_finished()
    assert gate.poll_next() is None


def test_gate_passes_time_events_through_in_channel_order() -> None:
    ch0 = ScriptedChannel(["r", Watermark(5), StreamStatus.IDLE])
    gate = CheckpointedInputGate([ch0], CheckpointBarrierTracker(1, RecordingListener()))
    out = items(drain(gate))
    assert out == ["r", Watermark(5), StreamStatus.IDLE]
    assert [is_event(i) for i in out] == [False, True, True]


def test_gate_refuses_a_handler_built_for_another_channel_count() -> None:
    with pytest.raises(ValueError, match="num_channels=2"):
        CheckpointedInputGate(
            [ScriptedChannel(), ScriptedChannel()], CheckpointBarrierAligner(3, RecordingListener())
        )


def test_scripted_channel_refuses_none_items() -> None:
    with pytest.raises(ValueError, match="cannot be None"):
        ScriptedChannel().push("a", None)


def test_iterator_channel_ends_with_end_of_partition_once() -> None:
    channel = IteratorChannel(iter(["batch-1", barrier(1), "batch-2"]))
    assert isinstance(channel, Channel)
    polled = [channel.poll() for _ in range(5)]
    assert polled == ["batch-1", barrier(1), "batch-2", END_OF_PARTITION, None]


def test_iterator_channel_does_not_duplicate_an_explicit_end_of_partition() -> None:
    channel = IteratorChannel(["x", END_OF_PARTITION, "never"])
    assert [channel.poll() for _ in range(3)] == ["x", END_OF_PARTITION, None]


def test_gate_exposes_handler_metrics() -> None:
    listener = RecordingListener()
    gate = CheckpointedInputGate(
        [ScriptedChannel([barrier(4)]), ScriptedChannel([barrier(4)])], CheckpointBarrierAligner(2, listener)
    )
    drain(gate)
    assert gate.latest_checkpoint_id == 4
    assert gate.alignment_duration_ns() == 0
    assert gate.checkpoint_start_delay_ns == 0
    assert gate.all_barriers_received(4)
    assert not gate.has_inflight_data(4, 0)
    assert gate.num_channels == 2


def test_gate_iterates_arrow_like_batches_from_iterator_channels_to_the_end() -> None:
    listener = RecordingListener()
    partitions = [IteratorChannel(["p0-b0", barrier(1), "p0-b1"]), IteratorChannel(["p1-b0", barrier(1)])]
    gate = CheckpointedInputGate(partitions, CheckpointBarrierAligner(2, listener))
    out = [(p.channel, p.item) for p in gate]
    assert out == [
        (0, "p0-b0"),
        (1, "p1-b0"),
        (0, barrier(1)),
        (1, barrier(1)),
        (0, "p0-b1"),
        (1, END_OF_PARTITION),
        (0, END_OF_PARTITION),
    ]
    assert listener.triggered == [1]
    assert gate.is_finished()
