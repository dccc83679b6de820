"""A batch process function's value state on disk equals the same job's in memory for every key
type the disk holds (empty and non-ASCII strings, large strings, binaries, int64 extremes, narrow
and unsigned integers), across rescales 2 -> 1 -> 3: with update tables keyed by the chunk's own
key type and by another one (int32 rows, int64 update keys), duplicated update rows (the last
wins), clears, and ``on_timers`` updates and clears of keys the latest chunk may not hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.functions import BatchProcessFunction
from tests.unit.review23d.harness import both, diff

NORMAL = {"large_string": pa.string(), "int32_negative": pa.int64(), "int8": pa.int64(), "uint64": pa.int64()}


def _repr(keys: Any) -> pa.Array:
    return pa.array([repr(k) for k in keys.to_pylist()], pa.string())


class Mixed(BatchProcessFunction):
    """Per key a count and how often its timers fired. ``update_type``: cast the keys of updates and
    clears to it (None: the rows' key type)."""

    state_schema = pa.schema([("count", pa.int64()), ("fires", pa.int64())])
    update_type: pa.DataType | None = None

    def _keys(self, keys: pa.Array) -> pa.Array:
        return keys if self.update_type is None else keys.cast(self.update_type)

    def process(self, rows: pa.Table, state: pa.Table, ctx: Any) -> pa.Table:
        chunk = rows.group_by("key", use_threads=False).aggregate([([], "count_all"), ("_ts", "max")])
        keys = chunk.column("key").combine_chunks()
        mine = state.take(pc.index_in(keys.cast(state.column("key").type), state.column("key")))
        count = pc.add(pc.coalesce(mine.column("count"), 0), chunk.column("count_all")).combine_chunks()
        fires = pc.coalesce(mine.column("fires"), 0).combine_chunks()
        n = chunk.num_rows
        bogus = pa.table({"key": self._keys(keys), "count": pa.array([-999] * n, pa.int64()), "fires": fires})
        ctx.update_state(
            pa.concat_tables([bogus, pa.table({"key": self._keys(keys), "count": count, "fires": fires})])
        )
        ctx.clear_state(self._keys(pc.filter(keys, pc.equal(pc.bit_wise_and(count, 3), 0))))
        ctx.register_timers(keys, pc.add(chunk.column("_ts_max"), 400))
        return pa.table({"key": _repr(keys), "count": count, "fires": fires, "timer": pa.repeat(False, n)})

    def on_timers(self, timers: pa.Table, state: pa.Table, ctx: Any) -> pa.Table:
        live = pc.is_valid(state.column("count"))
        keys = pc.filter(timers.column("key"), live).combine_chunks()
        count = pc.add(pc.filter(state.column("count"), live), 100).combine_chunks()
        fires = pc.add(pc.filter(state.column("fires"), live), 1).combine_chunks()
        ctx.update_state(pa.table({"key": self._keys(keys), "count": count, "fires": fires}))
        ctx.clear_state(self._keys(pc.filter(keys, pc.equal(pc.bit_wise_and(fires, 1), 0))))
        return pa.table(
            {"key": _repr(keys), "count": count, "fires": fires, "timer": pa.repeat(True, len(keys)),
             "_ts": pc.filter(timers.column("timestamp"), live)}
        )  # fmt: skip


CASES = [
    ("string", None),
    ("large_string", None),
    ("large_string", "normal"),
    ("binary", None),
    ("int64_extremes", None),
    ("int32_negative", None),
    ("int32_negative", "normal"),
    ("int8", "normal"),
    ("uint64", None),
]


@pytest.mark.parametrize(("key", "update"), CASES)
def test_batch_state_on_disk_equals_in_memory_for_every_key_type(
    tmp_path: Path, key: str, update: Any
) -> None:
    fn = type("Fn", (Mixed,), {"update_type": NORMAL[key] if update else None})
    heap, disk = both(tmp_path, [2, 1, 3, 3], fn, key)
    assert any("('timer', True)" in r for r in heap[0]), "no timer fired"
    assert heap[1]["fn"], "no state kept"
    assert disk[0] == heap[0], diff(heap[0], disk[0])
    assert disk[1] == heap[1]


@pytest.mark.parametrize(("key", "update"), [("string", None), ("int32_negative", "normal")])
def test_warm_operators_keep_equal_state_across_epochs(tmp_path: Path, key: str, update: Any) -> None:
    """Local recovery keeps the operator (its latest chunk's keys and key groups) across epochs, so
    the first timers of an epoch update keys looked up among the previous epoch's chunk."""
    fn = type("Fn", (Mixed,), {"update_type": NORMAL[key] if update else None})
    heap, disk = both(tmp_path, [2, 2, 2, 2], fn, key, local_recovery=True)
    assert any("('timer', True)" in r for r in heap[0]), "no timer fired"
    assert disk[0] == heap[0], diff(heap[0], disk[0])
    assert disk[1] == heap[1]
