"""TimerService: firing order, deduplication, re-entrancy, snapshot/restore per key group."""

from __future__ import annotations

import json

import pytest

from state_store.core.stream import InternalTimer, TimerRestoreError, TimerService

from .support import RecordingTarget


def key_group_of(key: object) -> int:
    """A stable toy key-group function (4 groups) for string and tuple keys."""
    return sum(ord(ch) for ch in repr(key)) % 4


def make() -> tuple[TimerService[object, object], RecordingTarget]:
    target = RecordingTarget()
    return TimerService(target, key_group_of), target


def test_event_timers_fire_up_to_the_watermark_inclusive_in_timestamp_order() -> None:
    timers, target = make()
    timers.register_event_time_timer("k", "w", 30)
    timers.register_event_time_timer("k", "w", 10)
    timers.register_event_time_timer("k", "w", 20)
    assert timers.advance_watermark(20) == 2
    assert target.fired == [("event", 10, "k", "w"), ("event", 20, "k", "w")]
    assert timers.current_watermark == 20
    assert timers.num_event_time_timers() == 1


def test_timers_with_equal_timestamps_fire_by_key_then_namespace() -> None:
    timers, target = make()
    for key, namespace in (("b", "x"), ("a", "y"), ("a", "x"), ("c", "a")):
        timers.register_event_time_timer(key, namespace, 5)
    timers.advance_watermark(5)
    assert [(k, n) for _, _, k, n in target.fired] == [("a", "x"), ("a", "y"), ("b", "x"), ("c", "a")]


def test_registering_the_same_timer_twice_keeps_one() -> None:
    timers, target = make()
    assert timers.register_event_time_timer("k", "w", 5)
    assert not timers.register_event_time_timer("k", "w", 5)
    timers.advance_watermark(100)
    assert len(target.fired) == 1


def test_deleted_timer_does_not_fire_and_can_be_registered_again() -> None:
    timers, target = make()
    timers.register_event_time_timer("k", "w", 5)
    assert timers.delete_event_time_timer("k", "w", 5)
    assert not timers.delete_event_time_timer("k", "w", 5)
    timers.advance_watermark(10)
    assert target.fired == []
    timers.register_event_time_timer("k", "w", 15)
    timers.delete_event_time_timer("k", "w", 15)
    timers.register_event_time_timer("k", "w", 15)  # stale heap entry + live one: fires once
    timers.advance_watermark(20)
    assert target.fired == [("event", 15, "k", "w")]


def test_timer_registered_while_firing_fires_in_the_same_advance_if_due() -> None:
    class Chaining(RecordingTarget):
        """Each firing registers the next timer 10 ms later, up to 30."""

        service: TimerService[object, object]

        def on_event_time(self, timer: InternalTimer[object, object]) -> None:
            super().on_event_time(timer)
            if timer.timestamp < 30:
                self.service.register_event_time_timer(timer.key, timer.namespace, timer.timestamp + 10)

    target = Chaining()
    timers: TimerService[object, object] = TimerService(target, key_group_of)
    target.service = timers
    timers.register_event_time_timer("k", "w", 10)
    timers.advance_watermark(25)
    assert [ts for _, ts, _, _ in target.fired] == [10, 20]
    assert [t.timestamp for t in timers.event_time_timers()] == [30]


def test_timer_registered_at_or_below_the_watermark_fires_on_the_next_advance() -> None:
    timers, target = make()
    timers.advance_watermark(50)
    timers.register_event_time_timer("k", "w", 40)
    assert target.fired == []
    timers.advance_watermark(50)
    assert target.fired == [("event", 40, "k", "w")]


def test_processing_time_timers_fire_only_on_processing_time() -> None:
    timers, target = make()
    timers.register_processing_time_timer("k", "w", 1_000)
    timers.register_event_time_timer("k", "w", 1_000)
    timers.advance_watermark(5_000)
    assert target.fired == [("event", 1_000, "k", "w")]
    assert timers.advance_processing_time(999) == 0
    assert timers.advance_processing_time(1_000) == 1
    assert target.fired[-1] == ("processing", 1_000, "k", "w")
    assert timers.current_processing_time == 1_000
    timers.register_processing_time_timer("k", "w", 2_000)
    assert timers.delete_processing_time_timer("k", "w", 2_000)
    assert timers.num_processing_time_timers() == 0


def test_snapshot_groups_timers_by_key_group_in_firing_order() -> None:
    timers, _ = make()
    timers.register_event_time_timer("a", "w", 20)
    timers.register_event_time_timer("a", "w", 10)
    timers.register_processing_time_timer("a", "p", 7)
    timers.register_event_time_timer("b", "w", 5)
    snapshot = timers.snapshot()
    group_a, group_b = key_group_of("a"), key_group_of("b")
    assert group_a != group_b
    assert snapshot[group_a] == {
        "event_time": [[10, "a", "w"], [20, "a", "w"]],
        "processing_time": [[7, "a", "p"]],
    }
    assert snapshot[group_b] == {"event_time": [[5, "b", "w"]], "processing_time": []}


def test_restore_accepts_a_subset_of_key_groups() -> None:
    timers, _ = make()
    timers.register_event_time_timer("a", "w", 10)
    timers.register_event_time_timer("b", "w", 5)
    snapshot = json.loads(json.dumps({str(k): v for k, v in timers.snapshot().items()}))
    snapshot = {int(k): v for k, v in snapshot.items()}
    restored, target = make()
    assert restored.restore(snapshot, key_groups=[key_group_of("a")]) == 1
    restored.advance_watermark(100)
    assert target.fired == [("event", 10, "a", "w")]
    partial, _ = make()
    assert partial.restore({key_group_of("b"): snapshot[key_group_of("b")]}) == 1
    assert [t.key for t in partial.event_time_timers()] == ["b"]


def test_restore_turns_json_lists_back_into_tuple_keys() -> None:
    timers, _ = make()
    timers.register_event_time_timer(("user", 7), ("window", 0, 60), 60)
    as_json = json.loads(json.dumps({str(k): v for k, v in timers.snapshot().items()}))
    restored, target = make()
    restored.restore({int(k): v for k, v in as_json.items()})
    restored.advance_watermark(60)
    assert target.fired == [("event", 60, ("user", 7), ("window", 0, 60))]


def test_restore_rejects_a_key_listed_under_the_wrong_key_group() -> None:
    timers, _ = make()
    wrong = (key_group_of("a") + 1) % 4
    with pytest.raises(TimerRestoreError, match="original max_parallelism"):
        timers.restore({wrong: {"event_time": [[10, "a", "w"]], "processing_time": []}})


def test_restore_rejects_malformed_entries_and_domains() -> None:
    timers, _ = make()
    group = key_group_of("a")
    with pytest.raises(TimerRestoreError, match="malformed"):
        timers.restore({group: {"event_time": [[10, "a"]]}})
    with pytest.raises(TimerRestoreError, match="unknown domains"):
        timers.restore({group: {"wall_clock": []}})
