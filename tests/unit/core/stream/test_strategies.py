"""Watermark generators: bounded out-of-orderness, monotonous timestamps, idleness."""

from __future__ import annotations

import pytest

from state_store.core.stream import (
    MIN_TIMESTAMP,
    BoundedOutOfOrdernessWatermarks,
    MonotonousTimestampsWatermarks,
    StreamStatus,
    StreamWatermarkOutput,
    Watermark,
    WatermarkGenerator,
    WatermarksWithIdleness,
)

IDLE, ACTIVE = StreamStatus.IDLE, StreamStatus.ACTIVE


def make_output() -> tuple[StreamWatermarkOutput, list[Watermark | StreamStatus]]:
    emitted: list[Watermark | StreamStatus] = []
    return StreamWatermarkOutput(emitted.append), emitted


def test_bounded_out_of_orderness_watermark_is_max_minus_bound_minus_one() -> None:
    generator = BoundedOutOfOrdernessWatermarks(100)
    output, emitted = make_output()
    assert generator.current_watermark == MIN_TIMESTAMP
    generator.on_periodic_emit(0, output)
    assert emitted == []  # MIN is never emitted
    for ts in (1_000, 1_500, 1_200):  # out of order: 1_200 does not lower the max
        generator.on_event(ts, 0, output)
    generator.on_periodic_emit(0, output)
    assert emitted == [Watermark(1_399)]


def test_monotonous_timestamps_watermark_is_max_minus_one() -> None:
    generator = MonotonousTimestampsWatermarks()
    output, emitted = make_output()
    generator.on_event(10, 0, output)
    generator.on_periodic_emit(0, output)
    assert emitted == [Watermark(9)]
    assert isinstance(generator, WatermarkGenerator)


def test_idleness_marks_idle_only_after_more_than_the_timeout_without_events() -> None:
    generator = WatermarksWithIdleness(MonotonousTimestampsWatermarks(), idle_timeout_ms=1_000)
    output, emitted = make_output()
    generator.on_event(50, now_ms=10_000, output=output)
    generator.on_periodic_emit(11_000, output)  # exactly the timeout: still active
    assert emitted == [Watermark(49)]
    generator.on_periodic_emit(11_001, output)
    generator.on_periodic_emit(12_000, output)
    assert emitted == [Watermark(49), IDLE]
    assert generator.is_idle


def test_idleness_reactivates_the_channel_on_the_next_event_before_it_is_emitted() -> None:
    generator = WatermarksWithIdleness(MonotonousTimestampsWatermarks(), idle_timeout_ms=10)
    output, emitted = make_output()
    generator.on_periodic_emit(0, output)  # starts the inactivity clock
    generator.on_periodic_emit(11, output)
    assert emitted == [IDLE]
    generator.on_event(70, now_ms=12, output=output)
    assert emitted == [IDLE, ACTIVE]
    generator.on_periodic_emit(13, output)
    assert emitted == [IDLE, ACTIVE, Watermark(69)]


def test_stream_output_deduplicates_and_reactivates_before_a_watermark() -> None:
    output, emitted = make_output()
    output.emit_watermark(Watermark(5))
    output.emit_watermark(Watermark(5))
    output.emit_watermark(Watermark(3))
    output.mark_idle()
    output.mark_idle()
    output.emit_watermark(Watermark(9))
    output.mark_active()
    assert emitted == [Watermark(5), IDLE, ACTIVE, Watermark(9)]
    assert output.max_watermark == 9
    assert not output.is_idle


def test_generators_reject_invalid_bounds() -> None:
    with pytest.raises(ValueError):
        BoundedOutOfOrdernessWatermarks(-1)
    with pytest.raises(ValueError):
        WatermarksWithIdleness(MonotonousTimestampsWatermarks(), 0)
