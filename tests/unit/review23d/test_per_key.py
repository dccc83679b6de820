"""A per-key process function's state on disk (the heap backend as a page cache in front of the
spill store, key groups hashed once per page and remembered for the page out) equals the same job's
in memory: for every key type the disk holds, across rescales 2 -> 1 -> 3, with value, list and map
state, timers that fire for keys not paged in, and state deleted by the function and by timers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_jobs.api.functions import KeyedProcessFunction
from state_store.core.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from tests.unit.review23d.harness import KEYS, both, diff


class Armed(KeyedProcessFunction):
    """Per key: a count, a list of fired timers, a map of chunk sizes; each chunk re-arms ONE timer
    after the key's newest row (deleting the previous one); every fifth row count clears the key's
    state from the function; a firing timer appends to the list and clears the map every other time."""

    count = ValueStateDescriptor[int]("count")
    armed = ValueStateDescriptor[int]("armed")
    fired = ListStateDescriptor[int]("fired")
    sizes = MapStateDescriptor[int, int]("sizes")
    state_descriptors = (count, armed, fired, sizes)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        count = ctx.state(self.count)
        n = (count.value() or 0) + len(rows)
        ctx.state(self.sizes).put(len(rows), n)
        armed = ctx.state(self.armed)
        if armed.value() is not None:
            ctx.delete_event_time_timer(armed.value())
        if n % 5 == 0:
            for d in self.state_descriptors:
                ctx.state(d).clear()
            ctx.emit({"key": repr(key), "n": n, "fired": -1})
            return
        count.update(n)
        armed.update(max(r["_ts"] for r in rows) + 300)
        ctx.register_event_time_timer(armed.value())

    def on_timer(self, timestamp: int, ctx: Any) -> None:
        fired = ctx.state(self.fired)
        fired.add(timestamp)
        ctx.state(self.armed).clear()
        size = len(fired.get())
        if size % 2 == 0:
            ctx.state(self.sizes).clear()
        ctx.emit({"key": repr(ctx.current_key), "n": ctx.state(self.count).value(), "fired": size})


@pytest.mark.parametrize("key", sorted(KEYS))
def test_per_key_state_on_disk_equals_in_memory_for_every_key_type(tmp_path: Path, key: str) -> None:
    heap, disk = both(tmp_path, [2, 1, 3, 3], Armed, key)
    assert any("('fired', 2)" in r for r in heap[0]), "timers did not fire twice for a key"
    assert any("('fired', -1)" in r for r in heap[0]), "no key was cleared by the function"
    assert disk[0] == heap[0], diff(heap[0], disk[0])
    assert disk[1] == heap[1]


class TwoTimers(KeyedProcessFunction):
    """Every chunk of a key sets two timers after its newest row; each firing appends its time to
    the key's list state (and, ``with_value``, counts in a value state)."""

    log = ListStateDescriptor[int]("log")
    count = ValueStateDescriptor[int]("count")
    with_value = False

    @property
    def state_descriptors(self) -> tuple[Any, ...]:  # type: ignore[override]
        return (self.log, self.count) if self.with_value else (self.log,)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        ts = max(r["_ts"] for r in rows)
        ctx.register_event_time_timer(ts + 100)
        ctx.register_event_time_timer(ts + 200)

    def on_timer(self, timestamp: int, ctx: Any) -> None:
        log = ctx.state(self.log)
        log.add(timestamp)
        if self.with_value:
            count = ctx.state(self.count)
            count.update((count.value() or 0) + 1)
        ctx.emit({"key": repr(ctx.current_key), "at": timestamp, "n": len(log.get())})


@pytest.mark.parametrize("with_value", [False, True], ids=["list", "list+value"])
def test_two_timers_of_a_key_due_in_one_advance_page_its_state_in_once(
    tmp_path: Path, with_value: bool
) -> None:
    """BUG (spill_rows.SpillKeyedRows.page_in, ProcessOperator._fire): a timer of a key not paged in
    pages in ``[timer.key, *due_keys]``; ``due_keys`` lists the key again when it has a second timer
    due, and ``page_in`` reads and decodes it twice: the key's list rows are loaded twice (its list
    doubles on disk, silently), a value state raises "lists key ... twice: the snapshot is corrupt"."""
    fn = type("Fn", (TwoTimers,), {"with_value": with_value})
    heap, disk = both(tmp_path, [1, 1], fn, "string", keys=30, rate=40)
    assert len(heap[0]) > 40, len(heap[0])
    assert disk[0] == heap[0], diff(heap[0], disk[0])
    assert disk[1] == heap[1]
