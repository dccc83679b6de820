"""``state_store.spill.store._find`` (a key group's sorted run searched for the wanted keys: binary
search for integer keys, a hash of the wanted keys otherwise) against a dict, for every key type a
store may hold, with wanted keys repeated, absent, below the smallest and above the largest key;
and ``SpillStore.get`` through runs, tombstones and the write buffer at the integer extremes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state_store.core.keygroups import KeyGroupRange
from state_store.spill.store import SpillStore, _find

EPOCH = dt.datetime(2000, 1, 1)
I64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.lists(st.sampled_from(["a", "b", "é", "日", "\x00", "🙂", "Z", "ab"]), max_size=3).map("".join)
TYPES: dict[str, tuple[pa.DataType, Any]] = {
    "int64": (pa.int64(), st.one_of(I64, st.sampled_from([-(2**63), 2**63 - 1, 0, -1]))),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "int32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "uint64": (pa.uint64(), st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 2**63, 2**64 - 1]))),
    "string": (pa.string(), TEXT),
    "large_string": (pa.large_string(), TEXT),
    "binary": (pa.binary(), TEXT.map(lambda s: s.encode())),
    "timestamp": (pa.timestamp("us"), st.integers(-(2**29), 2**29).map(lambda n: EPOCH + dt.timedelta(0, n))),
}  # fmt: skip


@pytest.mark.parametrize("kind", TYPES)
@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_find_equals_a_dict_lookup(kind: str, data: Any) -> None:
    typ, values = TYPES[kind]
    keys = sorted(set(data.draw(st.lists(values, max_size=30))))
    pool = keys + data.draw(st.lists(values, max_size=8))  # present and (mostly) absent keys
    want = data.draw(st.lists(st.sampled_from(pool), max_size=40)) if pool else []
    sorted_keys = pa.array(keys, typ).cast(typ)
    row = {k: i for i, k in enumerate(keys)}
    got = _find(sorted_keys, pa.array(want, typ))
    assert got.tolist() == [row.get(k, -1) for k in want]


def test_get_reads_the_newest_entry_through_runs_tombstones_and_the_buffer(tmp_path: Path) -> None:
    """Keys in the oldest run only, updated by a newer run, deleted by a newer run or the buffer
    (a tombstone shadows every older run), written in the buffer only; looked up with repeats."""
    maxp = 4
    store = SpillStore(
        tmp_path / "s", KeyGroupRange(0, maxp - 1), memory_budget_bytes=1 << 20,
        key_type=pa.int64(), value_type=pa.int64(), max_runs=8,
    )  # fmt: skip
    extremes = [-(2**63), 2**63 - 1, -(2**63) + 1, 2**63 - 2, 0, -1, 1]

    def put(items: dict[int, int | None]) -> None:
        keys = list(items)
        groups = np.array([k % maxp for k in keys], dtype=np.int32)  # any owned group per key
        live = [k for k in keys if items[k] is not None]
        gone = [k for k in keys if items[k] is None]
        if live:
            store.put(
                groups[[keys.index(k) for k in live]],
                pa.array(live, pa.int64()),
                pa.array([items[k] for k in live], pa.int64()),
            )
        if gone:
            store.delete(groups[[keys.index(k) for k in gone]], pa.array(gone, pa.int64()))

    model: dict[int, int] = {}
    steps: list[dict[int, int | None]] = [
        {k: i for i, k in enumerate(extremes)},  # run 1: all
        {extremes[0]: 100, extremes[1]: None, extremes[4]: 104},  # run 2: update, delete
        {extremes[1]: 201, extremes[2]: None},  # run 3: back from the dead, delete
        {extremes[0]: None, extremes[5]: 305, 42: 342},  # buffer only
    ]
    for n, items in enumerate(steps):
        put(items)
        for k, v in items.items():
            if v is None:
                model.pop(k, None)
            else:
                model[k] = v
        if n < len(steps) - 1:
            store.flush()
        want = [*extremes, 42, 43, *extremes[::-1], 42]
        got = store.get(np.array([k % maxp for k in want], dtype=np.int32), pa.array(want, pa.int64()))
        assert got.to_pylist() == [model.get(k) for k in want], n
    assert len(store._runs) == 3
    store.close()
