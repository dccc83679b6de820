"""The spill store holds exactly what a dict holds, across put/delete/flush/compaction/snapshot/
restore/rescale by key-group ranges (hypothesis drives the sequence)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from state_store.core.keygroups import KeyGroupRange, key_group_of
from state_store.spill import RunFile, SpillSnapshot, SpillStore, restore
from state_store.spill.runs import RunReader

MAX_P = 8
FULL = KeyGroupRange(0, MAX_P - 1)
KEYS_OF: dict[str, list[object]] = {
    "binary": [f"k{i}".encode() for i in range(24)],
    "int64": [(i - 12) * 7_919_003 for i in range(22)] + [-(2**63), 2**63 - 1],  # a binary search
}
TYPES = {"binary": pa.binary(), "int64": pa.int64()}
KEYS = KEYS_OF["binary"]
BUDGET = 1 << 20
BLOCKS = {"a key group a block": None, "a row a block": 1}
"""Block sizes: the default (a key group of this test fits one block) and one row per block (every
read prunes blocks by the index, every merge streams several blocks of each run)."""

keys_st = st.integers(0, 23)  # an index into KEYS_OF[key type]
op_st = st.one_of(
    st.tuples(st.just("put"), st.lists(st.tuples(keys_st, st.integers(-5, 5)), min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.lists(keys_st, min_size=1, max_size=4)),
    st.tuples(st.just("flush"), st.none()),
    st.tuples(st.just("compact"), st.booleans()),
    st.tuples(st.just("restore"), st.booleans()),  # True: into the same directory (adopt local files)
    st.tuples(st.just("rescale"), st.integers(1, MAX_P - 1)),
)


def kg(key: object) -> int:
    return key_group_of(key, MAX_P)


class Remote:
    """A directory standing in for the checkpoint store: shipped files by name."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        self.shipped_bytes = 0

    def ship(self, store: SpillStore, snap: SpillSnapshot, base: SpillSnapshot | None) -> None:
        for f in snap.changed_since(base):
            if not (self.root / f.name).exists():
                shutil.copyfile(store.directory / f.name, self.root / f.name)
                self.shipped_bytes += f.size

    def fetch(self) -> Callable[[RunFile, Path], None]:
        return lambda f, path: shutil.copyfile(self.root / f.name, path)


def put(store: SpillStore, items: list[tuple[object, int]]) -> None:
    store.put(
        np.array([kg(k) for k, _ in items]),
        pa.array([k for k, _ in items], store.key_type),
        pa.array([v for _, v in items], pa.int64()),
    )


def contents(store: SpillStore) -> dict[object, int]:
    out: dict[object, int] = {}
    for group, batch in store.items():
        for k, v in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(), strict=True):
            assert kg(k) == group
            out[k] = v
    return out


def lookups(store: SpillStore, keys: list[object]) -> dict[object, int]:
    """Every key of the store's range looked up at once, and again in reverse with repeats."""
    mine = [k for k in keys if kg(k) in store.key_group_range]
    values = store.get(np.array([kg(k) for k in mine], dtype=np.int32), pa.array(mine, store.key_type))
    again = mine[::-1] * 2
    assert (
        store.get(
            np.array([kg(k) for k in again], dtype=np.int32), pa.array(again, store.key_type)
        ).to_pylist()
        == values.to_pylist()[::-1] * 2
    )
    values = values.to_pylist()
    return {k: v for k, v in zip(mine, values, strict=True) if v is not None}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@pytest.mark.parametrize("block_bytes", BLOCKS.values(), ids=BLOCKS)
@pytest.mark.parametrize("key_type", TYPES)
@given(ops=st.lists(op_st, max_size=25))
def test_spill_store_matches_a_dict_model(
    tmp_path_factory: object, key_type: str, block_bytes: int | None, ops: list[tuple[str, object]]
) -> None:
    tmp = Path(tmp_path_factory.mktemp("spill"))  # type: ignore[attr-defined]
    remote = Remote(tmp / "remote")
    keys = KEYS_OF[key_type]
    store = SpillStore(
        tmp / "s0",
        FULL,
        memory_budget_bytes=BUDGET,
        block_bytes=block_bytes,
        key_type=TYPES[key_type],
        value_type=pa.int64(),
        max_runs=2,
    )
    model: dict[object, int] = {}
    snap: SpillSnapshot | None = None
    snap_model: dict[object, int] = {}
    dirs = iter(range(1, 1000))
    for op, arg in ops:
        if op == "put":
            items = [(keys[i], v) for i, v in arg]  # type: ignore[attr-defined]
            put(store, items)
            model.update(items)
        elif op == "delete":
            gone = [keys[i] for i in arg]  # type: ignore[attr-defined]
            store.delete(np.array([kg(k) for k in gone]), pa.array(gone, store.key_type))
            for k in gone:
                model.pop(k, None)
        elif op == "flush":
            store.flush()
        elif op == "compact":
            store.flush()
            store.compact(everything=bool(arg))
        elif op == "restore":  # snapshot, ship, then crash and restore from the shipped snapshot
            new = store.snapshot()
            remote.ship(store, new, snap)
            snap, snap_model = new, dict(model)
            store.close()
            where = store.directory if arg else tmp / f"s{next(dirs)}"
            store, stats = restore(
                where,
                [(snap, remote.fetch())],
                FULL,
                memory_budget_bytes=BUDGET,
                block_bytes=block_bytes,
                max_runs=2,
            )
            assert bool(arg) or not stats.adopted
            model = dict(snap_model)
        elif op == "rescale":  # 1 -> 2 subtasks at ``split``, both change state, then 2 -> 1
            split = int(arg)  # type: ignore[call-overload]
            new = store.snapshot()
            remote.ship(store, new, snap)
            store.close()
            halves = []
            for r in (KeyGroupRange(0, split - 1), KeyGroupRange(split, MAX_P - 1)):
                half, _ = restore(
                    tmp / f"s{next(dirs)}",
                    [(new, remote.fetch())],
                    r,
                    memory_budget_bytes=BUDGET,
                    block_bytes=block_bytes,
                )
                items = [(k, 100 + i) for i, k in enumerate(keys) if kg(k) in r][:3]
                if items:
                    put(half, items)
                    model.update(items)
                half_snap = half.snapshot()
                remote.ship(half, half_snap, new)
                halves.append(half_snap)
                half.close()
            store, _ = restore(
                tmp / f"s{next(dirs)}",
                [(h, remote.fetch()) for h in halves],
                FULL,
                memory_budget_bytes=BUDGET,
                block_bytes=block_bytes,
                max_runs=2,
            )
            snap = None
        assert lookups(store, keys) == model
    assert contents(store) == model
    if block_bytes == 1:  # the runs really are cut into blocks of one row each
        for f in store.snapshot_files():
            reader = RunReader(store.directory / f.name, 0)
            assert all(reader.block(b).num_rows == 1 for bs in reader.key_groups.values() for b in bs)
            reader.close()
    store.close()


def test_a_rescaled_subtask_never_reads_key_groups_it_does_not_own(tmp_path: Path) -> None:
    """Both halves adopt the same file; a change in one half must not be shadowed by the other's copy."""
    remote = Remote(tmp_path / "remote")
    store = SpillStore(tmp_path / "a", FULL, memory_budget_bytes=BUDGET, value_type=pa.int64())
    put(store, [(k, 1) for k in KEYS])
    base = store.snapshot()
    remote.ship(store, base, None)
    low, high = KeyGroupRange(0, 3), KeyGroupRange(4, 7)
    a, _ = restore(tmp_path / "low", [(base, remote.fetch())], low, memory_budget_bytes=BUDGET)
    b, _ = restore(tmp_path / "high", [(base, remote.fetch())], high, memory_budget_bytes=BUDGET)
    changed = [k for k in KEYS if kg(k) in low]
    put(a, [(k, 2) for k in changed])
    snaps = [a.snapshot(), b.snapshot()]
    for s, st_ in zip(snaps, (a, b), strict=True):
        remote.ship(st_, s, base)
    merged, stats = restore(
        tmp_path / "merged", [(s, remote.fetch()) for s in snaps], FULL, memory_budget_bytes=BUDGET
    )
    assert lookups(merged, KEYS) == {k: (2 if k in changed else 1) for k in KEYS}
    assert set(stats.fetched) == {f.name for s in snaps for f in s.files}
