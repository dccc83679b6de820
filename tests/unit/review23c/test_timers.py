"""Timers under a budget: far more keys due in one watermark than one page holds (each key's state
is ~12 KB, so a page is the minimum 16 keys), an ``on_timer`` that registers further timers of its
key at and below the watermark, deletes others and writes state, and processing-time timers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_jobs.api.functions import KeyedProcessFunction
from state_store.core.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from tests.unit.review23c.harness import both, diff

BLOB = 12_000


class Chainer(KeyedProcessFunction):
    """Per key: a count, a wide blob, a list of fired timers, a map of hops; each chunk re-arms an
    event-time timer shortly after the key's newest row (deleting the old one) and a far one; every
    third key also sets a processing-time timer. A firing timer appends to the list, emits, and --
    up to three hops -- registers another timer at the very timestamp it fires at (due now) and one
    below the watermark, and deletes the far timer."""

    count = ValueStateDescriptor[int]("count")
    blob = ValueStateDescriptor[str]("blob")
    armed = ValueStateDescriptor[int]("armed")
    fired = ListStateDescriptor[int]("fired")
    hops = MapStateDescriptor[int, int]("hops")
    state_descriptors = (count, blob, armed, fired, hops)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        count = ctx.state(self.count)
        n = (count.value() or 0) + len(rows)
        count.update(n)
        ctx.state(self.blob).update((str(key) + rows[-1]["page"]) * (BLOB // 12))
        armed = ctx.state(self.armed)
        old = armed.value()
        if old is not None:
            ctx.delete_event_time_timer(old)
            ctx.delete_event_time_timer(old + 10**9)
        new = max(r["_ts"] for r in rows) + 700
        armed.update(new)
        ctx.register_event_time_timer(new)
        ctx.register_event_time_timer(new + 10**9)
        if n % 3 == 0:
            ctx.register_processing_time_timer(ctx.processing_time + 1_000)

    def on_timer(self, timestamp: int, ctx: Any) -> None:
        fired = ctx.state(self.fired)
        fired.add(timestamp)
        hops = ctx.state(self.hops)
        hop = (hops.get(timestamp) or 0) + 1
        hops.put(timestamp, hop)
        blob = ctx.state(self.blob).value() or ""
        ctx.emit(
            {
                "key": str(ctx.current_key),
                "at": timestamp,
                "hop": hop,
                "count": ctx.state(self.count).value(),
                "blob": len(blob),
                "fired": len(fired.get()),
                "wm": ctx.current_watermark,
            }
        )
        armed = ctx.state(self.armed).value()
        if armed is not None and timestamp == armed and hop < 3:
            ctx.register_event_time_timer(timestamp)  # due at once: fires again in this advance
            ctx.register_event_time_timer(timestamp - 5)  # below the watermark
            ctx.delete_event_time_timer(armed + 10**9)
        if hop >= 3:
            ctx.state(self.blob).clear()
            ctx.state(self.fired).update([timestamp])


def test_chained_timers_across_many_pages_equal_in_memory(tmp_path: Path) -> None:
    heap, disk = both(tmp_path, [2, 2, 1, 3, 3], Chainer, keys=400, rate=300)
    assert len(heap[0]) > 500, len(heap[0])
    assert any("('hop', 3)" in r for r in heap[0]), "chained timers did not fire"
    assert disk[0] == heap[0], diff(heap[0], disk[0])
    assert disk[1] == heap[1]
