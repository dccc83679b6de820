"""Incremental snapshots list only new files; restores adopt verified local files, re-fetch damaged
ones, and refuse a damaged fetched file naming it; bad input gets a one-line error."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from state_store.core.errors import BadInputError
from state_store.core.keygroups import KeyGroupRange
from state_store.spill import DamagedRunFileError, RunFile, SpillStore, restore

RANGE = KeyGroupRange(0, 3)
BUDGET = 1 << 20


def filled(path: Path, n: int = 1000) -> SpillStore:
    store = SpillStore(path, RANGE, memory_budget_bytes=BUDGET, key_type=pa.int64(), value_type=pa.int64())
    keys = np.arange(n)
    store.put(keys % 4, pa.array(keys), pa.array(keys * 10))
    return store


def copy_to(remote: Path, store: SpillStore, files: tuple[RunFile, ...]) -> None:
    remote.mkdir(exist_ok=True)
    for f in files:
        shutil.copyfile(store.directory / f.name, remote / f.name)


def fetch_from(remote: Path):  # type: ignore[no-untyped-def]
    return lambda f, path: shutil.copyfile(remote / f.name, path)


def test_incremental_snapshot_lists_only_the_new_run(tmp_path: Path) -> None:
    store = filled(tmp_path / "a")
    base = store.snapshot()
    store.put(np.array([1]), pa.array([1]), pa.array([-1]))
    nxt = store.snapshot()
    changed = nxt.changed_since(base)
    assert len(changed) == 1 and changed[0] not in base.files
    assert set(nxt.files) - set(changed) == set(base.files)
    assert changed[0].size < base.size


def test_restore_adopts_matching_local_files_and_refetches_a_damaged_one(tmp_path: Path) -> None:
    store = filled(tmp_path / "a")
    store.flush()
    store.put(np.array([1]), pa.array([1]), pa.array([-1]))
    snap = store.snapshot()
    copy_to(tmp_path / "remote", store, snap.files)
    store.close()
    damaged = tmp_path / "a" / snap.files[0].name
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    restored, stats = restore(
        tmp_path / "a", [(snap, fetch_from(tmp_path / "remote"))], RANGE, memory_budget_bytes=BUDGET
    )
    assert stats.damaged == (snap.files[0].name,) and stats.fetched == (snap.files[0].name,)
    assert stats.adopted == (snap.files[1].name,)
    assert restored.get(np.array([1, 2]), pa.array([1, 2])).to_pylist() == [-1, 20]


def test_a_damaged_fetched_file_is_refused_naming_it(tmp_path: Path) -> None:
    store = filled(tmp_path / "a")
    snap = store.snapshot()
    copy_to(tmp_path / "remote", store, snap.files)
    victim = tmp_path / "remote" / snap.files[0].name
    victim.write_bytes(victim.read_bytes()[:-1] + b"\x00")
    with pytest.raises(
        DamagedRunFileError, match=f"{snap.files[0].name} is damaged.*restore from an earlier checkpoint"
    ):
        restore(tmp_path / "b", [(snap, fetch_from(tmp_path / "remote"))], RANGE, memory_budget_bytes=BUDGET)


def test_restore_fetches_only_the_runs_of_its_key_groups(tmp_path: Path) -> None:
    low = SpillStore(tmp_path / "low", KeyGroupRange(0, 1), memory_budget_bytes=BUDGET, value_type=pa.int64())
    high = SpillStore(
        tmp_path / "high", KeyGroupRange(2, 3), memory_budget_bytes=BUDGET, value_type=pa.int64()
    )
    low.put(np.array([0, 1]), pa.array([b"a", b"b"]), pa.array([1, 2]))
    high.put(np.array([2, 3]), pa.array([b"c", b"d"]), pa.array([3, 4]))
    snaps = [low.snapshot(), high.snapshot()]
    for s, st_ in zip(snaps, (low, high), strict=True):
        copy_to(tmp_path / "remote", st_, s.files)
    one, stats = restore(
        tmp_path / "one",
        [(s, fetch_from(tmp_path / "remote")) for s in snaps],
        KeyGroupRange(2, 2),
        memory_budget_bytes=BUDGET,
    )
    assert stats.fetched == tuple(f.name for f in snaps[1].files)
    assert one.get(np.array([2]), pa.array([b"c"])).to_pylist() == [3]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda s: s.put(np.array([9]), pa.array([b"k"]), pa.array([1])),
            "key group 9 is outside this subtask's range 0..3",
        ),
        (lambda s: s.put(np.array([0]), pa.array([1]), pa.array([1])), "cast the columns first"),
        (lambda s: s.put(np.array([0]), pa.array([b"k"]), pa.array([None], pa.int64())), "delete the key"),
        (lambda s: s.put(np.array([0, 1]), pa.array([b"k"]), pa.array([1])), "one key group per key"),
    ],
)
def test_bad_input_is_refused_with_the_remedy(tmp_path: Path, call, message: str) -> None:  # type: ignore[no-untyped-def]
    store = SpillStore(tmp_path / "s", RANGE, memory_budget_bytes=BUDGET, value_type=pa.int64())
    with pytest.raises(BadInputError, match=message):
        call(store)


def test_a_non_empty_directory_or_a_tiny_budget_is_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("x")
    with pytest.raises(BadInputError, match="not empty: restore it"):
        SpillStore(tmp_path / "d", RANGE, memory_budget_bytes=BUDGET)
    with pytest.raises(BadInputError, match="state_memory_mb to at least 1"):
        SpillStore(tmp_path / "e", RANGE, memory_budget_bytes=1000)
