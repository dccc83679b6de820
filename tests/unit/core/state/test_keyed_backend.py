"""KeyedStateBackend: every state type, key scoping, namespaces, registration rules, bulk access."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state_store.core.keygroups import KeyGroupRange, key_group_of, key_group_range_for_subtask
from state_store.core.state import (
    AggregatingStateDescriptor,
    KeyedStateBackend,
    KeyOutOfRangeError,
    ListStateDescriptor,
    MapStateDescriptor,
    NoCurrentKeyError,
    ReducingStateDescriptor,
    StateRegistrationError,
    StateTtlConfig,
    ValueStateDescriptor,
)

from .support import MAX_P, Average, full_backend

COUNT = ValueStateDescriptor[int]("count", default=0)
EVENTS = ListStateDescriptor[str]("events")
SEEN = MapStateDescriptor[Any, int | None]("seen")
TOTAL = ReducingStateDescriptor[int]("total", lambda a, b: a + b)
MEAN = AggregatingStateDescriptor("mean", Average())


def test_value_state_is_scoped_to_the_current_key() -> None:
    backend = full_backend()
    count = backend.get_state(COUNT)
    backend.set_current_key("a")
    assert count.value() == 0  # the default
    count.update(5)
    backend.set_current_key("b")
    assert count.value() == 0
    count.update(7)
    backend.set_current_key("a")
    assert count.value() == 5
    count.update(None)  # Flink: update(null) clears
    assert count.value() == 0
    backend.set_current_key("b")
    count.clear()
    assert count.value() == 0
    assert backend.snapshot().is_empty()


def test_list_state_add_add_all_update_clear() -> None:
    backend = full_backend()
    events = backend.get_state(EVENTS)
    backend.set_current_key(("user", 1))
    assert events.get() == []
    events.add("x")
    events.add_all(["y", "z"])
    got = events.get()
    got.append("not stored")  # a copy
    assert events.get() == ["x", "y", "z"]
    events.update(["only"])
    assert events.get() == ["only"]
    events.update([])
    assert events.get() == [] and backend.snapshot().is_empty()
    events.add("again")
    events.clear()
    assert events.get() == []


def test_map_state_operations() -> None:
    backend = full_backend()
    seen = backend.get_state(SEEN)
    backend.set_current_key("k")
    assert seen.is_empty() and seen.get("a") is None and not seen.contains("a")
    seen.put("a", 1)
    seen.put((2, "b"), 2)
    seen.put_all({"c": 3})
    seen.put("n", None)  # a stored None is present
    assert seen.get("a") == 1 and seen.contains((2, "b")) and seen.contains("n")
    assert sorted(map(str, seen.keys())) == sorted(map(str, ["a", (2, "b"), "c", "n"]))
    assert sorted(v for v in seen.values() if v is not None) == [1, 2, 3]
    seen.remove("a")
    seen.remove("missing")
    assert not seen.contains("a") and len(seen.items()) == 3
    seen.clear()
    assert seen.is_empty()
    with pytest.raises(TypeError, match="map state 'seen': unsupported map key type list"):
        seen.put(["unhashable"], 1)


def test_reducing_and_aggregating_state() -> None:
    backend = full_backend()
    total = backend.get_state(TOTAL)
    mean = backend.get_state(MEAN)
    backend.set_current_key(3)
    assert total.get() is None and mean.get() is None
    for value in (1, 2, 6):
        total.add(value)
        mean.add(value)
    assert total.get() == 9
    assert mean.get() == 3.0 and mean.get_accumulator() == [9.0, 3]
    mean.merge_accumulator([3.0, 1])
    assert mean.get() == 3.0 and mean.get_accumulator() == [12.0, 4]
    total.clear()
    mean.clear()
    assert total.get() is None and mean.get() is None


def test_namespaces_separate_state_of_one_key() -> None:
    backend = full_backend()
    events = backend.get_state(EVENTS)
    backend.set_current_key("k")
    backend.set_current_namespace((0, 10))
    events.add("window-1")
    backend.set_current_namespace((10, 20))
    events.add("window-2")
    assert events.get() == ["window-2"]
    backend.set_current_namespace(None)
    assert events.get() == []
    assert backend.keys("events", (0, 10)) == ["k"]
    with pytest.raises(TypeError, match="unsupported namespace type dict"):
        backend.set_current_namespace({"start": 0})


def test_key_outside_the_subtask_range_is_refused_with_a_routing_hint() -> None:
    rng = key_group_range_for_subtask(MAX_P, 4, 0)
    backend = KeyedStateBackend(rng, MAX_P)
    foreign = next(k for k in range(1000) if key_group_of(k, MAX_P) not in rng)
    message = r"belongs to key group \d+, but this subtask owns key groups 0-31"
    with pytest.raises(KeyOutOfRangeError, match=message):
        backend.set_current_key(foreign)
    with pytest.raises(KeyOutOfRangeError, match="subtask_for_key"):
        backend.bulk(COUNT).put_many([foreign], [1])


def test_access_without_current_key_raises() -> None:
    backend = full_backend()
    count = backend.get_state(COUNT)
    with pytest.raises(NoCurrentKeyError, match=r"call set_current_key.*'count'"):
        count.value()
    with pytest.raises(TypeError, match="unsupported key type list"):
        backend.set_current_key(["a"])


def test_registration_rejects_another_kind_or_ttl_and_ttl_without_clock() -> None:
    backend = full_backend()
    assert backend.get_state(COUNT) is backend.get_state(ValueStateDescriptor("count", default=0))
    with pytest.raises(StateRegistrationError, match=r"'count' is a value state .* cannot be used as a list"):
        backend.get_state(ListStateDescriptor("count"))
    with pytest.raises(StateRegistrationError, match="already registered with ttl None"):
        backend.get_state(ValueStateDescriptor("count", ttl=StateTtlConfig(10)))
    with pytest.raises(StateRegistrationError, match="has a TTL but the backend has no clock"):
        backend.get_state(ValueStateDescriptor("other", ttl=StateTtlConfig(10)))
    with pytest.raises(StateRegistrationError, match="non-empty string"):
        backend.get_state(ValueStateDescriptor(""))


def test_bulk_value_and_reducing_match_per_record_calls() -> None:
    keys = ["a", "b", "a", 7, (1, "x"), "b", "a"]
    values = [1, 2, 3, 4, 5, 6, 7]
    bulk_backend, slow_backend = full_backend(), full_backend()
    bulk_backend.bulk(COUNT).put_many(keys, values)
    bulk_backend.bulk(TOTAL).add_many(keys, values)
    count, total = slow_backend.get_state(COUNT), slow_backend.get_state(TOTAL)
    for key, value in zip(keys, values):
        slow_backend.set_current_key(key)
        count.update(value)
        total.add(value)
    assert bulk_backend.snapshot().key_groups == slow_backend.snapshot().key_groups
    assert bulk_backend.bulk(COUNT).get_many(["a", "b", "zz"]) == [7, 6, 0]
    assert bulk_backend.bulk(TOTAL).get_many(["a", "zz"]) == [11, None]
    bulk_backend.bulk(COUNT).put_many(["a"], [None])
    bulk_backend.bulk(COUNT).clear_many(["b"])
    assert bulk_backend.bulk(COUNT).get_many(["a", "b"]) == [0, 0]


def test_bulk_aggregating_merges_partial_accumulators() -> None:
    backend = full_backend()
    mean = backend.bulk(MEAN)
    mean.add_many(["a", "b", "a"], [1.0, 10.0, 3.0])
    mean.merge_many(["a", "c"], [[6.0, 1], [4.0, 2]])
    assert mean.get_many(["a", "b", "c", "d"]) == [10.0 / 3, 10.0, 2.0, None]
    assert mean.get_accumulators(["a"]) == [[10.0, 3]]
    backend.set_current_key("a")
    assert backend.get_state(MEAN).get() == 10.0 / 3


def test_bulk_list_and_map() -> None:
    backend = full_backend()
    backend.bulk(EVENTS).add_many(["a", "b", "a"], ["1", "2", "3"])
    assert backend.bulk(EVENTS).get_many(["a", "b", "c"]) == [["1", "3"], ["2"], []]
    seen = backend.bulk(SEEN)
    seen.put_many(["a", "a", "b"], ["x", "y", "x"], [1, 2, 3])
    assert seen.get_many(["a", "a", "b", "b"], ["x", "y", "x", "y"]) == [1, 2, 3, None]
    with pytest.raises(TypeError, match="unsupported map key type set"):
        seen.put_many(["c", "c"], ["ok", {1}], [1, 2])
    assert seen.get_many(["c"], ["ok"]) == [None]  # nothing written by the failed call


def test_bulk_refuses_mismatched_lengths_and_writes_nothing_on_a_foreign_key() -> None:
    rng = KeyGroupRange(0, 63)
    backend = KeyedStateBackend(rng, MAX_P)
    mine = next(k for k in range(100) if key_group_of(k, MAX_P) in rng)
    foreign = next(k for k in range(100) if key_group_of(k, MAX_P) not in rng)
    with pytest.raises(ValueError, match="2 keys but 1 values"):
        backend.bulk(COUNT).put_many([mine, mine], [1])
    with pytest.raises(KeyOutOfRangeError):
        backend.bulk(COUNT).put_many([mine, foreign], [1, 2])
    assert backend.snapshot().is_empty()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", 1, (2, "c"), None]), st.integers(-5, 5)), max_size=30))
def test_bulk_aggregation_equals_per_record_aggregation(pairs: list[tuple[Any, int]]) -> None:
    keys = [k for k, _ in pairs]
    values = [float(v) for _, v in pairs]
    fast, slow = full_backend(), full_backend()
    fast.bulk(MEAN).add_many(keys, values)
    mean = slow.get_state(MEAN)
    for key, value in zip(keys, values):
        slow.set_current_key(key)
        mean.add(value)
    assert fast.snapshot().key_groups == slow.snapshot().key_groups


@pytest.mark.parametrize("ttl", [None, StateTtlConfig(1_000_000)])
def test_bulk_pop_many_reads_then_clears_like_get_and_clear(ttl: StateTtlConfig | None) -> None:
    """``pop_many`` (one pass without TTL) = ``get_many`` + ``clear_many`` (the TTL path)."""
    acc = ValueStateDescriptor[list[int]]("acc", ttl=ttl)
    keys = ["a", "b", 7, (1, "x"), "missing"]
    popped, reference = full_backend(now_ms=lambda: 5), full_backend(now_ms=lambda: 5)
    for backend in (popped, reference):
        backend.bulk(acc).put_many(keys[:4], [[1, 2], [3, 4], [5, 6], [7, 8]], namespace=10)
        backend.bulk(acc).put_many(["a"], [[9, 9]], namespace=20)
    expected = reference.bulk(acc).get_many(keys, namespace=10)
    reference.bulk(acc).clear_many(keys, namespace=10)
    assert popped.bulk(acc).pop_many(keys, namespace=10) == expected == [[1, 2], [3, 4], [5, 6], [7, 8], None]
    assert popped.snapshot().key_groups == reference.snapshot().key_groups
    assert popped.bulk(acc).get_many(["a"], namespace=20) == [[9, 9]]
    assert popped.changed_key_groups == reference.changed_key_groups
