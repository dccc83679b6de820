"""StatusWatermarkValve (seed 004) and the N-input watermark combination, one test per case."""

from __future__ import annotations

import pytest

from state_store.core.stream import (
    MIN_TIMESTAMP,
    InputChannelStatus,
    InputWatermarkCombiner,
    StatusWatermarkValve,
    StreamStatus,
    Watermark,
)

from .support import RecordingValveOutput

IDLE, ACTIVE = StreamStatus.IDLE, StreamStatus.ACTIVE


def make(num_channels: int) -> tuple[StatusWatermarkValve, RecordingValveOutput]:
    output = RecordingValveOutput()
    return StatusWatermarkValve(num_channels, output), output


def test_valve_starts_with_every_channel_active_aligned_at_min() -> None:
    valve, output = make(2)
    assert valve.input_channel_status(1) == InputChannelStatus(MIN_TIMESTAMP, ACTIVE, True)
    assert valve.last_output_watermark == MIN_TIMESTAMP
    assert valve.last_output_stream_status is ACTIVE
    assert output.emitted == []


def test_valve_emits_min_watermark_across_aligned_channels_only_when_it_advances() -> None:
    valve, output = make(3)
    valve.input_watermark(Watermark(10), 0)
    valve.input_watermark(Watermark(20), 1)
    assert output.emitted == []  # channel 2 is still at MIN
    valve.input_watermark(Watermark(15), 2)
    assert output.watermarks == [10]
    valve.input_watermark(Watermark(30), 1)  # min unchanged
    assert output.watermarks == [10]
    valve.input_watermark(Watermark(25), 0)
    assert output.watermarks == [10, 15]


def test_valve_ignores_watermark_not_above_the_channel_last_watermark() -> None:
    valve, output = make(1)
    valve.input_watermark(Watermark(10), 0)
    valve.input_watermark(Watermark(7), 0)
    valve.input_watermark(Watermark(10), 0)
    assert output.watermarks == [10]
    assert valve.input_channel_status(0).watermark == 10


def test_valve_ignores_watermarks_of_an_idle_channel() -> None:
    valve, output = make(2)
    valve.input_watermark(Watermark(5), 0)
    valve.input_stream_status(IDLE, 1)
    assert output.watermarks == [5]  # channel 1 (MIN) stopped holding the min
    valve.input_watermark(Watermark(50), 1)
    assert valve.input_channel_status(1).watermark == MIN_TIMESTAMP
    assert output.watermarks == [5]


def test_valve_idle_channel_holding_the_min_releases_the_next_min() -> None:
    valve, output = make(3)
    for channel, ts in ((0, 10), (1, 20), (2, 30)):
        valve.input_watermark(Watermark(ts), channel)
    assert output.watermarks == [10]
    valve.input_stream_status(IDLE, 0)
    assert output.emitted == [Watermark(10), Watermark(20)]
    assert not valve.input_channel_status(0).is_watermark_aligned


def test_valve_idle_channel_not_holding_the_min_changes_no_watermark() -> None:
    valve, output = make(2)
    valve.input_watermark(Watermark(10), 0)
    valve.input_watermark(Watermark(20), 1)
    valve.input_stream_status(IDLE, 1)
    assert output.emitted == [Watermark(10)]


def test_valve_all_channels_idle_flushes_max_watermark() -> None:
    valve, output = make(3)
    valve.input_watermark(Watermark(10), 0)
    valve.input_watermark(Watermark(40), 1)
    valve.input_watermark(Watermark(25), 2)
    valve.input_stream_status(IDLE, 1)
    valve.input_stream_status(IDLE, 2)
    assert output.watermarks == [10]
    valve.input_stream_status(IDLE, 0)  # the last active channel held the min (10)
    assert output.emitted == [Watermark(10), Watermark(40), IDLE]
    assert valve.last_output_stream_status is IDLE


def test_valve_all_idle_without_the_last_channel_holding_the_min_emits_idle_without_flush() -> None:
    valve, output = make(2)
    valve.input_watermark(Watermark(10), 0)
    valve.input_watermark(Watermark(5), 1)
    valve.input_stream_status(IDLE, 1)  # held the min: new min 10
    valve.input_stream_status(ACTIVE, 1)  # 5 < 10: active but unaligned
    valve.input_stream_status(IDLE, 0)
    valve.input_stream_status(IDLE, 1)  # last to go idle, at 5 != 10: no flush
    assert output.emitted == [Watermark(5), Watermark(10), IDLE]


def test_valve_channel_back_from_idle_is_unaligned_until_it_catches_up() -> None:
    valve, output = make(2)
    valve.input_watermark(Watermark(10), 0)
    valve.input_watermark(Watermark(3), 1)
    valve.input_stream_status(IDLE, 1)
    valve.input_stream_status(ACTIVE, 1)
    assert not valve.input_channel_status(1).is_watermark_aligned
    valve.input_watermark(Watermark(30), 0)
    assert output.watermarks == [3, 10, 30]  # channel 1 does not hold the valve back
    valve.input_watermark(Watermark(20), 1)  # still behind 30
    assert not valve.input_channel_status(1).is_watermark_aligned
    valve.input_watermark(Watermark(35), 1)
    assert valve.input_channel_status(1).is_watermark_aligned
    valve.input_watermark(Watermark(50), 0)
    assert output.watermarks == [3, 10, 30, 35]


def test_valve_channel_back_from_idle_ahead_of_output_is_aligned_at_once() -> None:
    valve, _ = make(2)
    valve.input_watermark(Watermark(10), 0)
    valve.input_watermark(Watermark(20), 1)
    valve.input_stream_status(IDLE, 1)
    valve.input_stream_status(ACTIVE, 1)
    assert valve.input_channel_status(1).is_watermark_aligned


def test_valve_reactivation_after_all_idle_emits_active_once() -> None:
    valve, output = make(2)
    valve.input_stream_status(IDLE, 0)
    valve.input_stream_status(IDLE, 1)
    valve.input_stream_status(ACTIVE, 0)
    valve.input_stream_status(ACTIVE, 1)
    valve.input_stream_status(ACTIVE, 1)
    assert output.emitted == [IDLE, ACTIVE]


def test_valve_input_dispatches_either_time_event() -> None:
    valve, output = make(1)
    valve.input(Watermark(3), 0)
    valve.input(IDLE, 0)
    assert output.emitted == [Watermark(3), IDLE]


def test_valve_rejects_bad_sizes_and_indexes() -> None:
    with pytest.raises(ValueError):
        make(0)
    valve, _ = make(2)
    with pytest.raises(IndexError, match="2 channels"):
        valve.input_channel_status(2)


def test_multi_input_combined_watermark_is_min_and_emitted_only_when_advancing() -> None:
    combiner = InputWatermarkCombiner(3)
    assert combiner.report_watermark(Watermark(10), 0) is None  # others still at MIN
    assert combiner.report_watermark(Watermark(5), 1) is None
    assert combiner.report_watermark(Watermark(7), 2) == Watermark(5)
    assert combiner.report_watermark(Watermark(6), 1) == Watermark(6)
    assert combiner.report_watermark(Watermark(20), 0) is None  # min is still 6
    assert combiner.report_watermark(Watermark(30), 1) == Watermark(7)
    assert combiner.combined_watermark == 7
    assert combiner.input_watermarks == (20, 30, 7)


def test_two_input_combination_never_goes_backwards() -> None:
    combiner = InputWatermarkCombiner(2)
    combiner.report_watermark(Watermark(10), 0)
    combiner.report_watermark(Watermark(10), 1)
    assert combiner.report_watermark(Watermark(4), 0) is None  # an input regressed: no new output
    assert combiner.combined_watermark == 10


def test_valve_reactivated_aligned_channel_does_not_advance_the_output_until_its_next_watermark() -> None:
    valve, output = make(3)
    valve.input_stream_status(IDLE, 0)
    valve.input_watermark(Watermark(0), 1)
    valve.input_watermark(Watermark(1), 2)  # output 0
    valve.input_stream_status(IDLE, 2)
    valve.input_stream_status(ACTIVE, 0)  # at MIN: active but unaligned
    valve.input_stream_status(IDLE, 1)  # held the min, but no aligned channel is left: output stays 0
    valve.input_stream_status(ACTIVE, 2)  # 1 >= 0: aligned again, yet no recomputation (as in Flink)
    assert output.watermarks == [0]
    valve.input_watermark(Watermark(2), 2)
    assert output.watermarks == [0, 2]
