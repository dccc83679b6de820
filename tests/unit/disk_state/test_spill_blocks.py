"""A key group larger than the memory budget: run files keep it in blocks with an index of their last
keys, reads read only the blocks that may hold a wanted key, merges stream one block per run; and
run files of format version 1 (one batch per key group, no index) are still read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from state_store.core.keygroups import KeyGroupRange
from state_store.spill import RunFile, SpillSnapshot, SpillStore, restore
from state_store.spill.runs import RunReader, RunWriter, file_checksum
from state_store.spill.snapshots import SnapshotRun

BUDGET = 1 << 20
RANGE = KeyGroupRange(0, 1)  # two key groups: each holds half the state


def test_a_key_group_four_times_the_budget_stays_within_it_through_reads_merges_and_iteration(
    tmp_path: Path,
) -> None:
    n = 160_000  # 8-byte keys and 40-byte values: about 8 MB, 4 MB per key group
    keys = np.arange(n, dtype=np.int64) * 7
    model = np.zeros(n, dtype=np.int64)
    store = SpillStore(
        tmp_path / "s",
        RANGE,
        memory_budget_bytes=BUDGET,
        key_type=pa.int64(),
        value_type=pa.binary(),
        max_runs=2,
    )

    def value(v: np.ndarray) -> pa.Array:
        return pa.array([b"%040d" % x for x in v], pa.binary())

    for lo in range(0, n, 20_000):
        k = keys[lo : lo + 20_000]
        store.put(k % 2, pa.array(k), value(np.arange(lo, lo + len(k))))
        model[lo : lo + len(k)] = np.arange(lo, lo + len(k))
    store.snapshot()
    rng = np.random.default_rng(7)
    for epoch in range(6):  # 1% of the keys read and rewritten per epoch; runs merge on the way
        rows = np.unique(rng.integers(0, n, n // 100))
        got = store.get(keys[rows] % 2, pa.array(keys[rows]))
        assert got.to_pylist() == [None if x == -1 else b"%040d" % x for x in model[rows]]
        model[rows] = rows + 1_000_000 * (epoch + 1)
        store.put(keys[rows] % 2, pa.array(keys[rows]), value(model[rows]))
        gone = rows[:10]
        store.delete(keys[gone] % 2, pa.array(keys[gone]))
        model[gone] = -1
        store.snapshot()
    store.compact(everything=True)
    seen: dict[int, bytes] = {}
    for kg, batch in store.items():
        ks = batch.column(0).to_numpy()
        assert (ks % 2 == kg).all() and (np.diff(ks) > 0).all()
        seen.update(zip(ks.tolist(), batch.column(1).to_pylist(), strict=True))
    assert seen == {int(k): b"%040d" % v for k, v in zip(keys, model, strict=True) if v != -1}
    # misses: keys never written, in a key group's range of keys and beyond it
    odd = np.array([-7, 3, 5, 7 * n, 7 * n + 2], dtype=np.int64)
    assert store.get(odd % 2, pa.array(odd)).null_count == len(odd)

    assert store.disk_bytes > 4 * BUDGET
    files = store.snapshot_files()
    assert len(files) >= 4 and max(f.size for f in files) <= BUDGET  # an upload holds one file
    readers = [RunReader(store.directory / f.name, 0) for f in files]
    assert min(sum(len(r.blocks(kg)) for r in readers) for kg in (0, 1)) >= 32  # a key group is many blocks
    for r in readers:
        r.close()
    assert 0 < store.peak_memory_bytes <= BUDGET, store.peak_memory_bytes
    store.close()


def test_a_read_of_a_few_keys_reads_only_their_blocks(tmp_path: Path) -> None:
    store = SpillStore(tmp_path / "s", KeyGroupRange(0, 0), memory_budget_bytes=BUDGET, block_bytes=64)
    keys = [f"key-{i:05d}".encode() for i in range(2_000)]
    store.put(np.zeros(len(keys), dtype=np.int32), pa.array(keys), pa.array(keys))
    store.flush()
    reader = store.snapshot_files()
    (run,) = [RunReader(store.directory / f.name, 0) for f in reader]
    assert len(run.blocks(0)) > 100
    run.close()
    read: list[int] = []
    original = RunReader.block
    try:
        RunReader.block = lambda self, i: read.append(i) or original(self, i)  # type: ignore[method-assign]
        wanted = [keys[5], keys[1_500], b"key-00005x", b"a", b"z"]
        got = store.get(np.zeros(len(wanted), dtype=np.int32), pa.array(wanted))
    finally:
        RunReader.block = original  # type: ignore[method-assign]
    assert got.to_pylist() == [keys[5], keys[1_500], None, None, None]
    # one block per wanted key, each read once, of about 1,000 ("a" is before the first, "z" after the last)
    assert len(read) == len(set(read)) <= len(wanted), read
    store.close()


def _write_version_1(path: Path, key_groups: list[int], batches: list[pa.RecordBatch]) -> RunFile:
    """A run file as Epochal wrote it before blocks (format version 1): one batch per key group."""
    sch = pa.schema(
        [pa.field("key", pa.int64(), nullable=False), pa.field("value", pa.int64(), nullable=True)],
        metadata={
            "epochal.format": "epochal-spill-run",
            "epochal.format_version": "1",
            "epochal.key_groups": json.dumps(key_groups),
            "epochal.run": "1",
        },
    )
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, sch) as writer:
        for batch in batches:
            writer.write_batch(batch.cast(sch.remove_metadata()))
    checksum, size = file_checksum(path)
    return RunFile(path.name, size, checksum)


def test_a_version_1_run_file_is_read_and_rewritten_as_version_2(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()

    def batch(ks: list[int], vs: list[int | None]) -> pa.RecordBatch:
        return pa.record_batch([pa.array(ks, pa.int64()), pa.array(vs, pa.int64())], names=["key", "value"])

    file = _write_version_1(
        remote / "00000001-0123456789abcdef0123456789abcdef.arrow",
        [0, 1, 2],
        [batch([2, 4, 6], [20, 40, None]), batch([], []), batch([5, 9], [50, 90])],
    )
    rng = KeyGroupRange(0, 2)
    snap = SpillSnapshot(rng, pa.int64(), pa.int64(), (SnapshotRun(file, rng),))
    fetch = lambda f, p: shutil.copyfile(remote / f.name, p)  # noqa: E731
    store, stats = restore(tmp_path / "s", [(snap, fetch)], rng, memory_budget_bytes=BUDGET, block_bytes=8)
    assert stats.fetched == (file.name,)
    ks = pa.array([6, 4, 9, 2, 5, 7], pa.int64())
    kgs = np.array([0, 0, 2, 0, 2, 1], dtype=np.int32)
    assert store.get(kgs, ks).to_pylist() == [None, 40, 90, 20, 50, None]
    store.put(np.array([1], dtype=np.int32), pa.array([7], pa.int64()), pa.array([70], pa.int64()))
    store.flush()
    store.compact(everything=True)
    (new,) = store.snapshot().files
    reader = RunReader(store.directory / new.name, 0)
    assert reader.key_groups == {
        0: [0, 1],
        1: [2],
        2: [3, 4],
    }  # two one-row blocks per 8 bytes... of two keys
    reader.close()
    assert store.get(kgs, ks).to_pylist() == [None, 40, 90, 20, 50, 70]
    assert [(kg, b.column(0).to_pylist()) for kg, b in store.items()] == [
        (0, [2]),
        (0, [4]),
        (1, [7]),
        (2, [5]),
        (2, [9]),
    ]
    store.close()


def test_a_key_group_cut_across_files_is_one_sequence_of_blocks_to_a_read(tmp_path: Path) -> None:
    """The files of one run hold disjoint key ranges of a key group: a read of its lowest key reads
    one block, not the first block of every file."""
    store = SpillStore(tmp_path / "s", KeyGroupRange(0, 0), memory_budget_bytes=BUDGET, key_type=pa.int64())
    keys = np.arange(100_000, dtype=np.int64)
    store.put(np.zeros(len(keys), dtype=np.int32), pa.array(keys), pa.array([b"%030d" % k for k in keys]))
    store.flush()
    store.compact(everything=True)
    assert len(store.snapshot_files()) >= 3  # one logical run in several files
    read: list[int] = []
    original = RunReader.block
    try:
        RunReader.block = lambda self, i: read.append(i) or original(self, i)  # type: ignore[method-assign]
        for k in (0, 50_000, 99_999, -1, 100_000):
            assert store.get(np.zeros(1, dtype=np.int32), pa.array([k])).to_pylist() == [
                b"%030d" % k if 0 <= k < 100_000 else None
            ]
    finally:
        RunReader.block = original  # type: ignore[method-assign]
    assert len(read) == 5, read  # one block per key (the two absent keys: the first and the last block)
    store.close()


def test_merging_many_runs_is_a_tree_of_merges_not_a_chain(tmp_path: Path) -> None:
    """Sixty runs (a rescale from many subtasks adopts that many) compacted into one rewrite the
    state about log6(60) times, not once per pass: at most 4x the state's bytes are written."""
    store = SpillStore(
        tmp_path / "s",
        RANGE,
        memory_budget_bytes=BUDGET,
        key_type=pa.int64(),
        value_type=pa.int64(),
        max_runs=1_000,
    )
    for i in range(60):
        k = np.arange(i * 1_000, (i + 1) * 1_000, dtype=np.int64)
        store.put(k % 2, pa.array(k), pa.array(k))
        store.flush()
    total = store.disk_bytes
    written: list[int] = []
    close = RunWriter.close
    try:
        RunWriter.close = lambda self: (f := close(self), written.append(f.size))[0]  # type: ignore[method-assign]
        store.compact(everything=True)
    finally:
        RunWriter.close = close  # type: ignore[method-assign]
    assert len(store.snapshot_files()) == 1
    assert sum(written) <= 4 * total, (sum(written), total)
    got = store.get(np.arange(60_000) % 2, pa.array(np.arange(60_000, dtype=np.int64)))
    assert got.to_pylist() == list(range(60_000))
    store.close()
