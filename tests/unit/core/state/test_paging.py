"""The pieces of per-key state on disk, alone: a key's rows as one text (``key_rows``), the backend
as a page cache (``page_in``/``page_out``) and the timers a watermark is about to fire
(``_TimerQueue.peek_due``/``TimerService.due_keys``)."""

from __future__ import annotations

import heapq
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state_store.core.keygroups import KeyGroupRange
from state_store.core.state import (
    KeyedStateBackend,
    ListStateDescriptor,
    MapStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from state_store.core.state.backend import KeyOutOfRangeError, StateRegistrationError
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import StateRow
from state_store.core.stream.timers import InternalTimer, TimeDomain, TimerService
from state_store.formats.json_codec import StateValueError
from state_store.formats.key_rows import KeyRowsError, decode_key_rows, encode_key_rows, rows_by_key

keys = st.one_of(
    st.integers(), st.text(max_size=5), st.binary(max_size=4), st.tuples(st.integers(), st.text(max_size=3))
)
values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
expiries = st.one_of(st.none(), st.integers(0, 2**53))


@settings(max_examples=200, deadline=None)
@given(
    key=keys,
    value_rows=st.lists(st.tuples(keys, values, expiries), max_size=3, unique_by=lambda r: repr(r[0])),
    list_rows=st.lists(st.tuples(values, expiries), max_size=4),
    map_rows=st.lists(st.tuples(keys, values, expiries), max_size=4, unique_by=lambda r: repr(r[0])),
)
def test_a_keys_rows_round_trip_through_its_text(
    key: Any, value_rows: list[Any], list_rows: list[Any], map_rows: list[Any]
) -> None:
    """Every state kind, namespaces of every key type, map keys of every key type, expiries: the
    text decodes to the rows it was written from, in their order, and equal rows give equal text."""
    states = {
        "v": (StateKind.VALUE, [StateRow(key, ns, v, e) for ns, v, e in value_rows]),
        "l": (StateKind.LIST, [StateRow(key, None, v, e) for v, e in list_rows]),
        "m": (StateKind.MAP, [StateRow(key, None, (uk, v), e) for uk, v, e in map_rows]),
    }
    text = encode_key_rows(key, states)
    expected = {name: (kind, rows) for name, (kind, rows) in states.items() if rows}
    if not expected:
        assert text is None
        return
    assert text is not None
    decoded = decode_key_rows(key, text)
    assert decoded == _json_normal(expected)
    assert encode_key_rows(key, decoded) == text


def _json_normal(states: dict[str, Any]) -> dict[str, Any]:
    """Values as JSON gives them back (tuples inside values become lists)."""
    import json

    out = {}
    for name, (kind, rows) in states.items():
        fixed = []
        for r in rows:
            if kind is StateKind.MAP:
                value: Any = (r.value[0], json.loads(json.dumps(r.value[1])))
            else:
                value = json.loads(json.dumps(r.value))
            fixed.append(StateRow(r.key, r.namespace, value, r.expiry_ms))
        out[name] = (kind, fixed)
    return out


def test_values_that_are_not_json_and_texts_it_did_not_write_are_refused() -> None:
    with pytest.raises(StateValueError, match=r"state 'v' for key 7: value has type set"):
        encode_key_rows(7, {"v": (StateKind.VALUE, [StateRow(7, None, {1, 2}, None)])})
    for bad in ("{", '{"v": ["nokind", []]}', '{"v": ["value", [[null, 1]]]}', "[]"):
        with pytest.raises(KeyRowsError, match=r"state on disk of key 7 is not a text Epochal wrote"):
            decode_key_rows(7, bad)


def test_rows_of_several_states_group_by_key_in_order() -> None:
    states = {
        "a": [StateRow(1, None, 10, None), StateRow(2, None, 20, None)],
        "b": [StateRow(2, None, "x", None), StateRow(2, None, "y", None), StateRow(1, None, "z", None)],
    }
    grouped = rows_by_key(states, {"a": StateKind.VALUE, "b": StateKind.LIST})
    assert list(grouped) == [1, 2]
    assert [r.value for r in grouped[2]["b"][1]] == ["x", "y"]
    assert grouped[1]["a"] == (StateKind.VALUE, [StateRow(1, None, 10, None)])


def _backend(now: list[int] | None = None) -> KeyedStateBackend:
    clock = (lambda: now[0]) if now is not None else None
    return KeyedStateBackend(KeyGroupRange(0, 127), 128, now_ms=clock)


def test_a_page_out_returns_what_the_calls_left_and_empties_the_backend() -> None:
    now = [1_000]
    backend = _backend(now)
    count = ValueStateDescriptor[int]("count")
    seen = ListStateDescriptor[str]("seen", ttl=StateTtlConfig(500))
    pages = MapStateDescriptor[str, int]("pages")
    kg = backend.key_group_of("u1")
    backend.page_in(
        {kg: {"count": [StateRow("u1", None, 4, None)], "seen": [StateRow("u1", None, "old", 900)]}},
        {"count": StateKind.VALUE, "seen": StateKind.LIST},
    )
    backend.set_current_key("u1")
    assert backend.get_state(count).value() == 4
    assert backend.get_state(seen).get() == []  # expired at 900 <= now
    backend.get_state(count).update(5)
    backend.get_state(seen).add("new")
    backend.get_state(pages).put("/a", 1)
    assert not backend.changed_key_groups - {kg}
    out = backend.page_out()
    assert out == {
        kg: {
            "count": [StateRow("u1", None, 5, None)],
            "seen": [StateRow("u1", None, "new", 1_500)],
            "pages": [StateRow("u1", None, ("/a", 1), None)],
        }
    }
    assert backend.page_out() == {}  # nothing left
    backend.set_current_key("u1")
    assert backend.get_state(count).value() is None


def test_a_page_in_refuses_another_kind_and_keys_of_other_key_groups() -> None:
    backend = KeyedStateBackend(KeyGroupRange(0, 63), 128)
    backend.get_state(ValueStateDescriptor[int]("count"))
    mine = next(k for k in range(1000) if backend.key_group_of(k) < 64)
    theirs = next(k for k in range(1000) if backend.key_group_of(k) >= 64)
    with pytest.raises(
        StateRegistrationError, match=r"state 'count' is a value state, but its state on disk is a list"
    ):
        backend.page_in({}, {"count": StateKind.LIST})
    with pytest.raises(KeyOutOfRangeError, match=rf"key {theirs} belongs to key group"):
        backend.page_in(
            {backend.key_group_of(theirs): {"count": [StateRow(theirs, None, 1, None)]}},
            {"count": StateKind.VALUE},
        )
    backend.page_in({backend.key_group_of(mine): {"count": [StateRow(mine, None, 1, None)]}}, {})
    with pytest.raises(ValueError, match=r"lists key .* twice"):
        backend.page_in({backend.key_group_of(mine): {"count": [StateRow(mine, None, 2, None)]}}, {})


class _Recorder:
    """Records the timers it fires; at the first one, what ``due_keys`` says comes next."""

    def __init__(self, limit: int) -> None:
        self.fired: list[tuple[int, Any]] = []
        self.limit = limit
        self.service: TimerService[int, None] | None = None
        self.peeked: list[int] | None = None

    def on_event_time(self, timer: InternalTimer[Any, Any]) -> None:
        if self.peeked is None and self.service is not None:
            self.peeked = self.service.due_keys(TimeDomain.EVENT_TIME, self.limit)
        self.fired.append((timer.timestamp, timer.key))

    def on_processing_time(self, timer: InternalTimer[Any, Any]) -> None:
        self.on_event_time(timer)


@settings(max_examples=150, deadline=None)
@given(
    timers=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), max_size=60),
    deleted=st.lists(st.integers(0, 59), max_size=20),
    watermark=st.integers(-1, 60),
    limit=st.integers(1, 12),
)
def test_due_keys_are_the_keys_of_the_next_timers_to_fire(
    timers: list[tuple[int, int]], deleted: list[int], watermark: int, limit: int
) -> None:
    """While a watermark fires timers, ``due_keys`` names the keys of the next ``limit`` timers it
    will fire (each key once, in firing order), registered and deleted ones accounted for."""
    recorder = _Recorder(limit)
    service: TimerService[int, None] = TimerService(recorder, lambda k: 0)
    recorder.service = service
    for ts, key in timers:
        service.register_event_time_timer(key, None, ts)
    for i in deleted:
        if i < len(timers):
            service.delete_event_time_timer(timers[i][1], None, timers[i][0])
    service.advance_watermark(watermark)
    upcoming = [key for _, key in recorder.fired[1 : 1 + limit]]
    assert recorder.peeked == (None if not recorder.fired else list(dict.fromkeys(upcoming)))
    gone = {(timers[i][0], timers[i][1]) for i in deleted if i < len(timers)}
    assert recorder.fired == [t for t in sorted(set(timers) - gone) if t[0] <= watermark]


def test_peeking_a_large_queue_reads_only_about_limit_entries() -> None:
    service: TimerService[int, None] = TimerService(_Recorder(1), lambda k: 0)
    rng = random.Random(3)
    for key in range(100_000):
        service.register_event_time_timer(key, None, rng.randrange(1_000_000))
    queue = service._event
    calls = 0
    real_pop = heapq.heappop

    def counting_pop(heap: list[Any]) -> Any:
        nonlocal calls
        calls += 1
        return real_pop(heap)

    heapq.heappop = counting_pop  # type: ignore[assignment]
    try:
        entries = queue.peek_due(1_000_000, 50)
    finally:
        heapq.heappop = real_pop  # type: ignore[assignment]
    assert len(entries) == 50 and entries == sorted(entries)
    assert calls <= 51


def test_per_key_handles_store_values_in_the_form_a_checkpoint_gives_back() -> None:
    """Tuples as lists and dict keys sorted, nested, at write: a read is the same before and after a
    checkpoint, a restore or a page on disk (a replayed epoch emits what the first run emitted)."""
    backend = _backend()
    backend.set_current_key(1)
    value = backend.get_state(ValueStateDescriptor[Any]("v"))
    value.update({"b": (1, 2), "a": [{"z": 1, "y": (3,)}]})
    assert repr(value.value()) == "{'a': [{'y': [3], 'z': 1}], 'b': [1, 2]}"
    items = backend.get_state(ListStateDescriptor[Any]("l"))
    items.add((1, "x"))
    items.add_all([(2,), {"q": 1, "p": 2}])
    assert repr(items.get()) == "[[1, 'x'], [2], {'p': 2, 'q': 1}]"
    pairs = backend.get_state(MapStateDescriptor[Any, Any]("m"))
    pairs.put(("k", 1), (5, 6))  # the user key stays a tuple (a key type), the value becomes a list
    assert pairs.items() == [(("k", 1), [5, 6])]
