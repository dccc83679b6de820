"""State TTL with a manual clock: expiry at exactly now == expiry, update types, visibility, cleanup."""

from __future__ import annotations

import pytest

from state_store.clocks import ManualClock
from state_store.core.state import (
    AggregatingStateDescriptor,
    KeyedStateBackend,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    TtlUpdateType,
    TtlVisibility,
    ValueState,
    ValueStateDescriptor,
)

from .support import Average, full_backend

TTL = StateTtlConfig(100)
ON_READ = StateTtlConfig(100, update_type=TtlUpdateType.ON_READ_AND_WRITE)
RETURN_EXPIRED = StateTtlConfig(100, visibility=TtlVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP)


def setup(ttl: StateTtlConfig) -> tuple[ManualClock, KeyedStateBackend, ValueState[str]]:
    clock = ManualClock(start_ms=1_000)
    backend = full_backend(clock.now_ms)
    backend.set_current_key("k")
    return clock, backend, backend.get_state(ValueStateDescriptor[str]("v", default="none", ttl=ttl))


def test_value_expires_when_now_reaches_write_time_plus_ttl() -> None:
    clock, _, state = setup(TTL)
    state.update("x")
    clock.advance(99)
    assert state.value() == "x"
    clock.advance(1)  # now == expiry: already expired (Flink's expired: expiry <= now)
    assert state.value() == "none"


def test_on_create_and_write_does_not_extend_on_read_but_on_write() -> None:
    clock, _, state = setup(TTL)
    state.update("x")
    clock.advance(60)
    assert state.value() == "x"
    clock.advance(40)
    assert state.value() == "none"
    state.update("y")
    clock.advance(60)
    state.update("z")
    clock.advance(60)
    assert state.value() == "z"


def test_on_read_and_write_extends_expiry_on_every_read() -> None:
    clock, _, state = setup(ON_READ)
    state.update("x")
    for _ in range(5):
        clock.advance(60)
        assert state.value() == "x"
    clock.advance(100)
    assert state.value() == "none"


def test_return_expired_if_not_cleaned_up_returns_the_stale_value_once() -> None:
    clock, _, state = setup(RETURN_EXPIRED)
    state.update("x")
    clock.advance(150)
    assert state.value() == "x"  # expired but not cleaned up yet
    assert state.value() == "none"  # the first read cleaned it up


def test_return_expired_value_is_gone_after_cleanup_expired() -> None:
    clock, backend, state = setup(RETURN_EXPIRED)
    state.update("x")
    clock.advance(100)
    assert backend.cleanup_expired() == 1
    assert state.value() == "none"


def test_list_elements_and_map_entries_expire_individually() -> None:
    clock = ManualClock(start_ms=0)
    backend = full_backend(clock.now_ms)
    backend.set_current_key("k")
    items = backend.get_state(ListStateDescriptor[str]("items", ttl=TTL))
    entries = backend.get_state(MapStateDescriptor[str, int]("entries", ttl=TTL))
    items.add("old")
    entries.put("old", 1)
    clock.advance(50)
    items.add("new")
    entries.put("new", 2)
    clock.advance(50)
    assert items.get() == ["new"]
    assert entries.items() == [("new", 2)] and not entries.contains("old")
    clock.advance(50)
    assert items.get() == [] and entries.is_empty()
    assert backend.snapshot().is_empty()


def test_adding_to_an_expired_reducing_or_aggregating_state_starts_over() -> None:
    clock = ManualClock(start_ms=0)
    backend = full_backend(clock.now_ms)
    backend.set_current_key("k")
    total = backend.get_state(ReducingStateDescriptor[int]("total", lambda a, b: a + b, ttl=RETURN_EXPIRED))
    mean = backend.get_state(AggregatingStateDescriptor("mean", Average(), ttl=TTL))
    total.add(5)
    mean.add(10.0)
    clock.advance(100)
    total.add(1)
    mean.add(2.0)
    assert total.get() == 1 and mean.get() == 2.0


def test_snapshot_leaves_out_expired_entries_and_keeps_live_expiry() -> None:
    clock = ManualClock(start_ms=0)
    backend = full_backend(clock.now_ms)
    state = backend.get_state(ValueStateDescriptor[str]("v", ttl=TTL))
    backend.set_current_key("old")
    state.update("1")
    clock.advance(60)
    backend.set_current_key("new")
    state.update("2")
    clock.advance(40)
    rows = [row for _, row in backend.snapshot().rows("v")]
    assert [(r.key, r.value, r.expiry_ms) for r in rows] == [("new", "2", 160)]


def test_ttl_config_rejects_non_positive_ttl() -> None:
    with pytest.raises(ValueError, match="ttl_ms must be a positive int"):
        StateTtlConfig(0)


def test_restored_expiry_is_honoured_and_ignored_when_ttl_is_dropped() -> None:
    clock = ManualClock(start_ms=0)
    backend = full_backend(clock.now_ms)
    backend.set_current_key("k")
    backend.get_state(ValueStateDescriptor[str]("v", ttl=TTL)).update("x")
    snapshot = backend.snapshot()
    clock.advance(100)
    with_ttl, without_ttl = full_backend(clock.now_ms), full_backend(clock.now_ms)
    with_ttl.restore([snapshot])
    without_ttl.restore([snapshot])
    with_ttl.set_current_key("k")
    without_ttl.set_current_key("k")
    assert with_ttl.get_state(ValueStateDescriptor[str]("v", ttl=TTL)).value() is None
    assert without_ttl.get_state(ValueStateDescriptor[str]("v")).value() == "x"
