"""What one merge holds: the store's accounting stays within the budget however large a key group
is (the claim of 1fbcc1d), and a merge reads at most ``MAX_FAN_IN`` logical runs, ``items`` too.

Both fail on 1fbcc1d: ``_merged`` opens one cursor per run FILE, and the files of one logical run
are cut at the budget inside a key group, so a key group K times the budget is K files, each
holding its first block from the start of the merge: ``2 * K * budget/32`` grows with K (1.2x the
budget at 20x, 1.3x at 18x with string keys and struct values). And ``items`` calls ``compact()``,
whose size-tiered rule may stop after merging two runs, then merges all the rest at once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from state_store.core.keygroups import KeyGroupRange
from state_store.spill import SpillStore
from state_store.spill.runs import RunReader
from state_store.spill.store import MAX_FAN_IN
from tests.unit.review23e.harness import BUDGET, merge_spy

ONE = KeyGroupRange(0, 1)


def _files_holding(store: SpillStore, key_group: int) -> int:
    count = 0
    for f in store.snapshot_files():
        reader = RunReader(store.directory / f.name, 0)
        count += bool(reader.blocks(key_group))
        reader.close()
    return count


def test_a_key_group_twenty_times_the_budget_merges_within_the_budget(tmp_path: Path) -> None:
    n = 200_000  # 8-byte keys, 40-byte values: about 20x the 512 KiB budget, all in key group 0
    keys = np.arange(n, dtype=np.int64)
    values = pa.array(np.char.zfill(keys.astype("S40"), 40).astype(object), pa.binary())
    store = SpillStore(
        tmp_path / "s", ONE, memory_budget_bytes=BUDGET, key_type=pa.int64(), value_type=pa.binary()
    )
    store.put(np.zeros(n, dtype=np.int32), pa.array(keys), values)
    store.put(np.array([0, 1], dtype=np.int32), pa.array([5, 6], pa.int64()), pa.array([b"x", b"y"]))
    store.flush()
    store.compact(everything=True)
    assert store.disk_bytes > 15 * BUDGET
    assert _files_holding(store, 0) > 15  # the key group is cut into many files of one logical run
    got = store.get(np.zeros(4, dtype=np.int32), pa.array([0, 5, n - 1, n], pa.int64())).to_pylist()
    assert got == [values[0].as_py(), b"x", values[n - 1].as_py(), None]
    assert store.peak_memory_bytes <= BUDGET, f"peak {store.peak_memory_bytes / BUDGET:.2f}x the budget"
    store.close()


def test_string_keys_and_struct_values_eighteen_times_the_budget_stay_within_it(tmp_path: Path) -> None:
    value_type = pa.struct([("name", pa.string()), ("n", pa.int64()), ("tags", pa.list_(pa.string()))])
    n = 150_000
    keys = pa.array([f"clé-{i:07d}-日本" for i in range(n)])
    values = pa.array([{"name": "x" * (i % 20), "n": i, "tags": ["a", "bb"]} for i in range(n)], value_type)
    store = SpillStore(
        tmp_path / "s", ONE, memory_budget_bytes=BUDGET, key_type=pa.string(), value_type=value_type
    )
    store.put(np.zeros(n, dtype=np.int32), keys, values)
    every_tenth = pa.array(range(0, n, 10))
    store.put(np.zeros(len(every_tenth), dtype=np.int32), keys.take(every_tenth), values.take(every_tenth))
    store.compact(everything=True)
    assert store.disk_bytes > 15 * BUDGET
    seen = 0
    for _, batch in store.items():
        seen += batch.num_rows
    assert seen == n
    assert store.peak_memory_bytes <= BUDGET, f"peak {store.peak_memory_bytes / BUDGET:.2f}x the budget"
    store.close()


def test_items_reads_at_most_max_fan_in_logical_runs_at_once(tmp_path: Path) -> None:
    """Eight runs whose sizes stop the size-tiered rule after the newest two: ``items`` must still
    merge in passes of at most ``MAX_FAN_IN`` (here it merged the two, then read the other seven)."""
    store = SpillStore(
        tmp_path / "s", ONE, memory_budget_bytes=64 << 20, key_type=pa.int64(), value_type=pa.int64(),
        max_runs=10,
    )  # fmt: skip
    model: dict[int, int] = {}
    for i, rows in enumerate([4_000] * 5 + [5_000, 1_000, 1_000]):  # the sixth > 2x the newest two
        keys = np.arange(rows, dtype=np.int64) * (i + 1)
        store.put(np.zeros(rows, dtype=np.int32), pa.array(keys), pa.array(np.full(rows, i, dtype=np.int64)))
        store.flush()
        model.update(dict.fromkeys(keys.tolist(), i))
    assert len(store._logical_runs()) == 8
    with merge_spy() as merges:
        got = {
            k: v for _, b in store.items() for k, v in zip(b.column(0).to_pylist(), b.column(1).to_pylist())
        }
    assert got == model
    assert max(m["logical"] for m in merges) <= MAX_FAN_IN, merges
    store.close()
