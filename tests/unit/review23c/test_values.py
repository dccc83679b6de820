"""Kinds and values under a budget: map state with tuple, bytes, float and negative-int user keys,
list order, reducing and aggregating state, clear-then-re-add in one call, keys read but never
written, a value of tuples -- each compared with the in-memory backend across rescales and chunks
(a key's rows of one epoch come in several chunks, so its state is paged out and in between)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_jobs.api.functions import KeyedProcessFunction
from state_store.core.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from tests.unit.review23c.harness import both, diff


class MeanOf:
    """An aggregate function: the mean of ints, accumulator [sum, count]."""

    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: int, acc: list[int]) -> list[int]:
        return [acc[0] + value, acc[1] + 1]

    def get_result(self, acc: list[int]) -> float:
        return acc[0] / acc[1] if acc[1] else 0.0

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return [a[0] + b[0], a[1] + b[1]]


class Kinds(KeyedProcessFunction):
    """Every state kind, with awkward user keys; keys whose value is divisible by 7 are cleared and
    re-added in the same call; keys ending in 3 are only read."""

    by_tuple = MapStateDescriptor[tuple[str, int], int]("by_tuple")
    by_bytes = MapStateDescriptor[bytes, str]("by_bytes")
    by_float = MapStateDescriptor[float, int]("by_float")
    by_neg = MapStateDescriptor[int, list[int]]("by_neg")
    order = ListStateDescriptor[list[Any]]("order")
    biggest = ReducingStateDescriptor[int]("biggest", max)
    mean = AggregatingStateDescriptor("mean", MeanOf())
    nested = ValueStateDescriptor[dict[str, Any]]("nested")
    state_descriptors = (by_tuple, by_bytes, by_float, by_neg, order, biggest, mean, nested)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        s = {d.name: ctx.state(d) for d in self.state_descriptors}
        seen = {
            "key": str(key),
            "tuple": repr(sorted(s["by_tuple"].items())),
            "bytes": repr(list(s["by_bytes"].items())),
            "float": repr(list(s["by_float"].items())),
            "neg": repr(list(s["by_neg"].items())),
            "order": repr(s["order"].get()),
            "biggest": repr(s["biggest"].get()),
            "mean": repr(s["mean"].get()),
            "nested": repr(s["nested"].value()),
        }
        ctx.emit(seen)
        if str(key).endswith("3"):
            return
        for r in rows:
            v = r["value"]
            s["by_tuple"].put((r["page"], v % 3), v)
            s["by_bytes"].put(r["page"].encode() + bytes([v % 256]), r["page"])
            s["by_float"].put(v / 8, v)
            neg = s["by_neg"]
            neg.put(-(v % 5) - 1, [*(neg.get(-(v % 5) - 1) or [])[-2:], v])
            if (v % 4) == 0 and neg.contains(-1):
                neg.remove(-1)
            s["order"].add([v, r["page"], v / 3])
            s["biggest"].add(v)
            s["mean"].add(v)
            s["nested"].update(
                {"last": [v, {"p": r["page"]}], "n": (s["nested"].value() or {}).get("n", 0) + 1}
            )
            if v % 7 == 0:
                for state in s.values():
                    state.clear()
                s["order"].add([-v, "again", 0.5])
                s["by_float"].put(-0.0, v)
        s["order"].update(s["order"].get()[-4:])


def test_every_state_kind_with_awkward_user_keys_equals_in_memory(tmp_path: Path) -> None:
    heap, disk = both(tmp_path, [2, 4, 1, 3], Kinds, keys=80, rate=200)
    assert any("again" in r for r in heap[0])
    assert disk[0] == heap[0], diff(heap[0], disk[0])
    assert disk[1] == heap[1]


class Pairs(KeyedProcessFunction):
    """A value state holding a tuple (as Python code often does): read back and shown with repr."""

    pair = ValueStateDescriptor[tuple[int, str]]("pair")
    state_descriptors = (pair,)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        pair = ctx.state(self.pair)
        ctx.emit({"key": str(key), "before": repr(pair.value())})
        n = pair.value()[0] if pair.value() is not None else 0
        pair.update((n + len(rows), rows[-1]["page"]))


class Records(KeyedProcessFunction):
    """A list state of dicts built with their keys in a meaningful order (not sorted): shown as the
    first field of each record, as code that builds a CSV line from ``list(record.values())``."""

    log = ListStateDescriptor[dict[str, Any]]("log")
    state_descriptors = (log,)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        log = ctx.state(self.log)
        ctx.emit({"key": str(key), "firsts": ",".join(str(next(iter(r.values()))) for r in log.get())})
        for r in rows[:2]:
            log.add({"value": r["value"], "page": r["page"]})  # "value" first: not sorted
        log.update(log.get()[-3:])


def test_a_tuple_value_reads_back_alike_within_an_epoch(tmp_path: Path) -> None:
    heap, disk = both(tmp_path, [1, 1], Pairs, keys=20, rate=200)
    assert disk[0] == heap[0], diff(heap[0], disk[0])


def test_a_dict_value_reads_back_alike_within_an_epoch(tmp_path: Path) -> None:
    heap, disk = both(tmp_path, [1, 1], Records, keys=20, rate=200)
    assert disk[0] == heap[0], diff(heap[0], disk[0])
