"""Run files as an operator meets them: version-1 files (one batch per key group, no index, as a
savepoint may hold them) restored beside version-2 files in one store, then read and merged; a
logical run cut inside a key group, adopted by a rescale with ``only`` ranges that split it; and
damaged block indexes, refused with the one-line ``RunFileError`` naming the file and the remedy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from state_store.core.keygroups import KeyGroupRange
from state_store.spill import RunFile, RunFileError, SpillSnapshot, SpillStore, restore
from state_store.spill.runs import RunReader, file_checksum, schema
from state_store.spill.snapshots import SnapshotRun
from tests.unit.review23e.harness import BUDGET, FULL, Remote, contents, groups, keys_of, kg, lookups

LOW, HIGH = KeyGroupRange(0, 3), KeyGroupRange(4, 7)


def _version_1(
    path: Path, key_type: pa.DataType, run: int, parts: dict[int, list[tuple[Any, Any]]]
) -> RunFile:
    """A version-1 run file: one batch per listed key group (maybe empty), no block index."""
    listed = sorted(parts)
    sch = pa.schema(
        [pa.field("key", key_type, nullable=False), pa.field("value", pa.int64(), nullable=True)],
        metadata={
            "epochal.format": "epochal-spill-run",
            "epochal.format_version": "1",
            "epochal.key_groups": json.dumps(listed),
            "epochal.run": str(run),
        },
    )
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, sch) as writer:
        for group in listed:
            rows = sorted(parts[group], key=lambda kv: kv[0].encode() if isinstance(kv[0], str) else kv[0])
            writer.write_batch(
                pa.record_batch(
                    [pa.array([k for k, _ in rows], key_type), pa.array([v for _, v in rows], pa.int64())],
                    schema=sch.remove_metadata(),
                )
            )
    checksum, size = file_checksum(path)
    return RunFile(path.name, size, checksum)


@pytest.mark.parametrize("key_name", ["string", "binary", "int64"])
def test_version_1_and_version_2_files_in_one_store_read_and_merge_as_one_state(
    tmp_path: Path, key_name: str
) -> None:
    key_type = {"string": pa.string(), "binary": pa.binary(), "int64": pa.int64()}[key_name]
    keys = keys_of(key_name, 48)
    remote = Remote(tmp_path / "remote")
    model: dict[Any, int] = {}
    # old subtask LOW: two version-1 runs (the newer deletes some keys, one key group emptied)
    old: dict[int, list[tuple[Any, Any]]] = {g: [] for g in range(LOW.first, LOW.last + 1)}
    for i, k in enumerate(keys):
        if kg(k) in LOW:
            old[kg(k)].append((k, i))
            model[k] = i
    newer: dict[int, list[tuple[Any, Any]]] = {g: [] for g in range(LOW.first, LOW.last + 1)}
    for k in [k for k in keys if kg(k) in LOW][::3]:
        newer[kg(k)].append((k, None))
        model.pop(k)
    first = _version_1(remote.root / "00000001-00000000000000000000000000000001.arrow", key_type, 1, old)
    second = _version_1(remote.root / "00000002-00000000000000000000000000000002.arrow", key_type, 2, newer)
    v1 = SpillSnapshot(LOW, key_type, pa.int64(), (SnapshotRun(first, LOW), SnapshotRun(second, LOW)))
    # old subtask HIGH: version 2, tiny blocks
    high = SpillStore(tmp_path / "h", HIGH, memory_budget_bytes=BUDGET, key_type=key_type,
                      value_type=pa.int64(), block_bytes=7)  # fmt: skip
    mine = [k for k in keys if kg(k) in HIGH]
    high.put(groups(mine), pa.array(mine, key_type), pa.array(range(100, 100 + len(mine)), pa.int64()))
    model.update(zip(mine, range(100, 100 + len(mine)), strict=True))
    v2 = remote.ship(high, high.snapshot())
    high.close()

    store, stats = restore(tmp_path / "s", [(v1, remote.fetch()), (v2, remote.fetch())], FULL,
                           memory_budget_bytes=BUDGET, block_bytes=7)  # fmt: skip
    assert first.name in stats.fetched
    assert lookups(store, keys, key_type) == model
    # re-puts over both formats, deletes, then merges of version-1 and version-2 runs together
    again = keys[::2]
    store.put(groups(again), pa.array(again, key_type), pa.array(range(500, 500 + len(again)), pa.int64()))
    model.update(zip(again, range(500, 500 + len(again)), strict=True))
    gone = keys[1::5]
    store.delete(groups(gone), pa.array(gone, key_type))
    for k in gone:
        model.pop(k, None)
    store.flush()
    store.compact()
    assert lookups(store, keys, key_type) == model
    store.compact(everything=True)
    assert lookups(store, keys, key_type) == model
    assert contents(store) == model
    for f in store.snapshot_files():  # every file is version 2 now
        reader = RunReader(store.directory / f.name, 0)
        assert reader._reader.schema.metadata[b"epochal.format_version"] == b"2"
        reader.close()
    store.close()


def test_a_run_cut_inside_a_key_group_and_split_by_a_rescale_keeps_every_key(tmp_path: Path) -> None:
    """Key group 0 is about 3x the budget, so its run is cut into files inside it; a rescale gives
    key group 0 to one subtask and the rest to another (both adopt the same files), each changes
    keys at the cut (the last key of a file, the first of the next), then they rescale back."""
    remote = Remote(tmp_path / "remote")
    n = 60_000
    keys = np.arange(n, dtype=np.int64)
    kgs = (keys % 3 == 0).astype(np.int32) * 0 + (keys % 3 != 0).astype(np.int32) * 5
    kgs[: n // 2] = 0  # the first half all in key group 0: about 3x the budget of 512 KiB
    values = pa.array(np.char.zfill(keys.astype("S24"), 24).astype(object), pa.binary())
    store = SpillStore(tmp_path / "a", FULL, memory_budget_bytes=BUDGET, key_type=pa.int64(),
                       value_type=pa.binary(), max_runs=2)  # fmt: skip
    store.put(kgs, pa.array(keys), values)
    store.compact(everything=True)
    model = {int(k): values[i].as_py() for i, k in enumerate(keys)}
    owners = {int(k): int(g) for k, g in zip(keys, kgs, strict=True)}
    cut: list[int] = []  # the keys either side of every file boundary inside key group 0
    for f in store.snapshot_files():
        reader = RunReader(store.directory / f.name, 0)
        blocks = reader.blocks(0)
        if blocks:
            cut += [
                reader.block(blocks[0]).column(0)[0].as_py(),
                reader.block(blocks[-1]).column(0)[-1].as_py(),
            ]
        reader.close()
    assert len(cut) >= 6, "key group 0 should be cut into several files"
    snap = remote.ship(store, store.snapshot())
    store.close()

    parts = []
    for i, rng in enumerate([KeyGroupRange(0, 0), KeyGroupRange(1, 7)]):
        half, _ = restore(tmp_path / f"h{i}", [(snap, remote.fetch())], rng, memory_budget_bytes=BUDGET)
        mine = np.array([k for k in [*cut, 1, 2, 4, n - 1, n - 2] if owners[k] in rng], dtype=np.int64)
        g = np.array([owners[int(k)] for k in mine], dtype=np.int32)
        assert half.get(g, pa.array(mine)).to_pylist() == [model[int(k)] for k in mine]
        new = pa.array([b"half%d-%d" % (i, k) for k in mine])
        half.put(g, pa.array(mine), new)
        model.update(zip(mine.tolist(), new.to_pylist(), strict=True))
        half.delete(g[:1], pa.array(mine[:1]))
        model.pop(int(mine[0]))
        half.compact(everything=True)
        parts.append(remote.ship(half, half.snapshot()))
        half.close()
    store, _ = restore(tmp_path / "b", [(p, remote.fetch()) for p in parts], FULL, memory_budget_bytes=BUDGET)
    probe = np.array([*cut, 1, 2, 4, n - 1, n - 2, 100, 30001], dtype=np.int64)
    got = store.get(np.array([owners[int(k)] for k in probe], dtype=np.int32), pa.array(probe)).to_pylist()
    assert got == [model.get(int(k)) for k in probe]
    seen = {k: v for _, b in store.items() for k, v in zip(b.column(0).to_pylist(), b.column(1).to_pylist())}
    assert seen == model
    store.close()


def _index_case(path: Path, batches: list[tuple[pa.RecordBatch, dict[bytes, bytes] | None]]) -> Path:
    sch = schema(pa.int64(), pa.int64(), [0], 1)
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, sch) as writer:
        for batch, meta in batches:
            writer.write_batch(batch.cast(sch.remove_metadata()), custom_metadata=meta)
    return path


def _batch(keys: list[int]) -> pa.RecordBatch:
    return pa.record_batch([pa.array(keys, pa.int64()), pa.array(keys, pa.int64())], names=["key", "value"])


INDEX = b"epochal.block_key_groups"
BAD_INDEXES: dict[str, list[tuple[pa.RecordBatch, dict[bytes, bytes] | None]]] = {
    "no batches at all": [],
    "no index metadata": [(_batch([1, 2]), None), (_batch([2]), None)],
    "index JSON cut short": [(_batch([1, 2]), None), (_batch([2]), {INDEX: b"[0"})],
    "index lists too many blocks": [(_batch([1, 2]), None), (_batch([2]), {INDEX: b"[0, 0]"})],
    "index of the wrong length": [(_batch([1, 2]), None), (_batch([2, 3]), {INDEX: b"[0]"})],
    "index is null": [(_batch([1, 2]), None), (_batch([2]), {INDEX: b"null"})],
    "key group not a number": [(_batch([1, 2]), None), (_batch([2]), {INDEX: b'["x"]'})],
    "key group a list": [(_batch([1, 2]), None), (_batch([2]), {INDEX: b"[[0]]"})],
}


@pytest.mark.parametrize("case", BAD_INDEXES)
def test_a_damaged_block_index_is_one_line_naming_the_file_and_the_remedy(tmp_path: Path, case: str) -> None:
    path = _index_case(tmp_path / "00000001-bad.arrow", BAD_INDEXES[case])
    with pytest.raises(RunFileError) as err:
        RunReader(path, 1)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    assert message.endswith("delete the local state directory and restore from the checkpoint")


def test_a_truncated_run_file_is_a_run_file_error_and_a_restore_fetches_it_again(tmp_path: Path) -> None:
    remote = Remote(tmp_path / "remote")
    store = SpillStore(tmp_path / "s", FULL, memory_budget_bytes=BUDGET, key_type=pa.int64(),
                       value_type=pa.int64(), block_bytes=16)  # fmt: skip
    keys = list(range(0, 400, 3))
    store.put(groups(keys), pa.array(keys, pa.int64()), pa.array(keys, pa.int64()))
    snap = remote.ship(store, store.snapshot())
    store.close()
    (file,) = snap.files
    local = tmp_path / "s" / file.name
    data = local.read_bytes()
    for cut in (len(data) - 1, len(data) - 40, len(data) // 2):
        local.write_bytes(data[:cut])
        with pytest.raises(
            RunFileError, match=rf"spill run {local} is unreadable .*restore from the checkpoint$"
        ):
            RunReader(local, 1)
    # a restore into the same directory sees the damage by size and checksum and fetches the file again
    again, stats = restore(tmp_path / "s", [(snap, remote.fetch())], FULL, memory_budget_bytes=BUDGET)
    assert stats.damaged == (file.name,)
    assert lookups(again, keys, pa.int64()) == {k: k for k in keys}
    again.close()
    shutil.rmtree(tmp_path / "s")


def test_values_larger_than_the_budget_are_kept_shadowed_deleted_and_restored(tmp_path: Path) -> None:
    remote = Remote(tmp_path / "remote")
    big = b"x" * (3 * BUDGET)
    store = SpillStore(tmp_path / "s", FULL, memory_budget_bytes=BUDGET, key_type=pa.string(),
                       value_type=pa.binary(), max_runs=2)  # fmt: skip
    one = np.zeros(1, dtype=np.int32)
    keys = ["a", "b", "c", "d"]
    store.put(np.zeros(4, dtype=np.int32), pa.array(keys), pa.array([big, b"1", big + b"2", b"3"]))
    for i in range(5):  # runs that each hold a version of "b" larger than the budget
        store.put(np.zeros(2, dtype=np.int32), pa.array(["b", f"e{i}"]), pa.array([big + bytes([i]), b"s"]))
    store.delete(one, pa.array(["c"]))
    model = {"a": big, "b": big + b"\x04", "d": b"3", **{f"e{i}": b"s" for i in range(5)}}
    store.flush()
    store.compact(everything=True)
    probe = [*keys, "e4", "zz"]
    assert store.get(np.zeros(len(probe), dtype=np.int32), pa.array(probe)).to_pylist() == [
        model.get(k) for k in probe
    ]
    assert {
        k: v for _, b in store.items() for k, v in zip(b.column(0).to_pylist(), b.column(1).to_pylist())
    } == model
    snap = remote.ship(store, store.snapshot())
    store.close()
    again, _ = restore(tmp_path / "t", [(snap, remote.fetch())], FULL, memory_budget_bytes=BUDGET)
    assert again.get(np.zeros(4, dtype=np.int32), pa.array(keys)).to_pylist() == [model.get(k) for k in keys]
    again.close()
