"""Columnar window accumulators (``window_columns``) give the heap backend's results exactly.

Every test runs the same int-keyed window job (a key function turns ``u<k>`` into ``k``) epoch by
epoch, in process, once with the columnar path and once with ``COLUMNAR`` off, and compares the
committed output and the restored state of the latest checkpoint (``state_digest``: every entry,
key group, window and accumulator). Switching the path between epochs restores files the other
path wrote; inputs the columns cannot hold exactly move the state to the heap backend mid-epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.windows import Aggregates, Count, SlidingEventTimeWindows, Sum, TumblingEventTimeWindows
from spark_jobs.chaos.observe import state_digest
from spark_jobs.lifecycle.restore import RestoreRequest, restore
from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.runtime.operators import window
from spark_jobs.runtime.operators.base import OperatorContext
from spark_jobs.runtime.operators.window_columns import WindowColumns
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import CompletedCheckpointStore, JobLayout
from state_store.core.keygroups import KeyGroupRange, key_group_of
from state_store.core.state.backend import KeyOutOfRangeError
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow
from state_store.formats.int_rows import IntRows
from state_store.storage import open_store
from state_store.testing import ManualClock

STEP = 10_000
EPOCHS = 6


def int_user(batch: pa.RecordBatch) -> pa.Array:
    return pc.cast(pc.utf8_slice_codeunits(batch.column("user_id"), 1), pa.int64())


def window_job(
    parallelism: int = 2,
    assigner: Any = None,
    transform: Callable[[pa.RecordBatch], pa.RecordBatch] | None = None,
) -> Job:
    job = Job("columns", parallelism=parallelism, max_parallelism=32, chunk_size=64)
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=5, events_per_second=[70, 40], out_of_orderness_ms=[2_000, 800],
        keys=40, start_ms=DEFAULT_START_MS,
    )  # fmt: skip
    stream = job.source(source, uid="clicks", out_of_orderness_ms=2_000)
    if transform is not None:
        stream = stream.map(transform)
    (
        stream.key_by(int_user)
        .window(
            assigner or TumblingEventTimeWindows(10_000),
            Aggregates(Count(), Sum("value", name="total")),
            uid="per-user",
        )
        .sink(ParquetSink(), uid="out")
    )
    return job


def run(
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    columnar: list[bool],
    parallelism: list[int] | None = None,
    **job_args: Any,
) -> tuple[list[Any], dict[str, Any], int]:
    """Run ``len(columnar)`` epochs; return committed rows, the latest state digest and how many
    chunks the columnar path merged."""
    merges = 0
    original = WindowColumns.merge_all

    def counting(self: WindowColumns, chunks: Any) -> None:
        nonlocal merges
        merges += bool(chunks)
        original(self, chunks)

    monkeypatch.setattr(WindowColumns, "merge_all", counting)
    uri = tmp.as_uri()
    clock = ManualClock(DEFAULT_START_MS)
    job = window_job(**job_args)
    for epoch, on in enumerate(columnar):
        monkeypatch.setattr(window, "COLUMNAR", on)
        job = window_job(parallelism=(parallelism or [2] * len(columnar))[epoch], **job_args)
        clock.advance(STEP)
        report = run_cycle(job, uri, clock, executor="local")
        assert report.status == "completed", report
    store = open_store(uri)
    rows = sorted(tuple(r.values()) for r in read_committed(store, job.job_id, "out").to_pylist())
    completed, _ = CompletedCheckpointStore.recover(store, JobLayout(job.job_id), 1)
    latest = completed.latest()
    assert latest is not None
    return rows, state_digest(store, latest.metadata, job.max_parallelism), merges


@pytest.mark.parametrize(
    "assigner",
    [TumblingEventTimeWindows(10_000), SlidingEventTimeWindows(10_000, 5_000)],
    ids=["tumbling", "sliding"],
)
def test_columnar_windows_equal_the_heap_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, assigner: Any
) -> None:
    rows, state, merges = run(tmp_path / "columns", monkeypatch, [True] * EPOCHS, assigner=assigner)
    heap_rows, heap_state, heap_merges = run(
        tmp_path / "heap", monkeypatch, [False] * EPOCHS, assigner=assigner
    )
    assert merges > 0 and heap_merges == 0
    assert len(rows) > 100
    assert rows == heap_rows
    assert state == heap_state
    assert state["per-user"], "the last checkpoint holds open windows"


def test_either_path_restores_what_the_other_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mixed = run(tmp_path / "mixed", monkeypatch, [True, False, True, True, False, True])
    heap = run(tmp_path / "heap", monkeypatch, [False] * EPOCHS)
    assert mixed[:2] == heap[:2]


def test_rescaling_a_columnar_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scales = [2, 3, 3, 1, 4, 2]
    rescaled = run(tmp_path / "columns", monkeypatch, [True] * EPOCHS, parallelism=scales)
    heap = run(tmp_path / "heap", monkeypatch, [False] * EPOCHS, parallelism=scales)
    assert rescaled[:2] == heap[:2]


def _floats(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``value`` as a float column: the columns refuse the first chunk, the heap backend sums."""
    index = batch.schema.get_field_index("value")
    return batch.set_column(index, "value", pc.add(pc.cast(batch.column(index), pa.float64()), 0.5))


HUGE_EVENT = "clicks-p0-900"  # an event of the fourth epoch


def _huge(batch: pa.RecordBatch) -> pa.RecordBatch:
    """One event of 2**62 (``SAFE``): the columns hand their state to the heap backend mid-epoch,
    which sums exactly past the columns' safe range (the total still fits the int64 output)."""
    index = batch.schema.get_field_index("value")
    value = pc.if_else(
        pc.equal(batch.column("event_id"), HUGE_EVENT), pa.scalar(1 << 62), batch.column(index)
    )
    return batch.set_column(index, "value", value)


@pytest.mark.parametrize("transform", [_floats, _huge], ids=["float-values", "beyond-int64-safe-range"])
def test_inputs_the_columns_cannot_hold_go_to_the_heap_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transform: Any
) -> None:
    rows, state, merges = run(tmp_path / "columns", monkeypatch, [True] * EPOCHS, transform=transform)
    heap_rows, heap_state, _ = run(tmp_path / "heap", monkeypatch, [False] * EPOCHS, transform=transform)
    assert rows == heap_rows
    assert state == heap_state
    if transform is _huge:
        assert merges > 0  # the columns held the state until the huge event arrived
        assert any(v > 1 << 62 for r in rows for v in r if isinstance(v, int))


def _snapshot(rows: dict[int, list[StateRow]]) -> KeyedStateSnapshot:
    return KeyedStateSnapshot(
        32, KeyGroupRange(0, 31), {"acc": StateKind.VALUE}, {kg: {"acc": r} for kg, r in rows.items()}
    )


def test_restore_refuses_keys_under_the_wrong_key_group_and_duplicates() -> None:
    groups_of = lambda keys: np.asarray(keys) % 32  # noqa: E731 - a stand-in hash for the test
    good = _snapshot({3: [StateRow(3, 0, [1, 2], None), StateRow(35, 0, [1, 5], None)]})
    cols = WindowColumns.restore(2, [good], "acc", KeyGroupRange(0, 31), groups_of)
    assert cols is not None and sorted(cols.runs[0].keys.tolist()) == [3, 35]
    wrong = _snapshot({4: [StateRow(3, 0, [1, 2], None)]})
    with pytest.raises(ValueError, match="belongs to key group 3"):
        WindowColumns.restore(2, [wrong], "acc", KeyGroupRange(0, 31), groups_of)
    trusted = WindowColumns.restore(2, [wrong], "acc", KeyGroupRange(0, 31), None)  # a checkpoint's files
    assert trusted is not None and trusted.runs[0].kgs.tolist() == [4]
    twice = [_snapshot({3: [StateRow(3, 0, [1, 2], None)]}), _snapshot({3: [StateRow(3, 0, [2, 2], None)]})]
    with pytest.raises(ValueError, match="twice"):
        WindowColumns.restore(2, twice, "acc", KeyGroupRange(0, 31), groups_of)


@pytest.mark.parametrize(
    "rows",
    [[StateRow((1, "a"), 0, [1, 2], None)], [StateRow(1, None, [1, 2], None)], [StateRow(1, 0, [1], None)],
     [StateRow(True, 0, [1, 2], None)], [StateRow(1, 0, [1, 2], 99)], [StateRow(1, 0, [1, "x"], None)],
     [StateRow(1, 0, [1, 2], None), StateRow(2, 0, [1, 2.5], None)],
     [StateRow(1, 0, [1, 2], None), StateRow("a", 0, [1, 2], None)]],
    ids=["tuple-key", "no-window", "narrow", "bool-key", "expiry", "str-value", "int-and-float-slot",
         "int-and-str-keys"],
)  # fmt: skip
def test_restore_leaves_other_shapes_to_the_heap_backend(rows: list[StateRow]) -> None:
    snap = _snapshot({1: rows})
    assert WindowColumns.restore(2, [snap], "acc", KeyGroupRange(0, 31), lambda k: np.ones(len(k))) is None


@pytest.mark.parametrize(
    "rows",
    [[StateRow("a", 0, [1, 2], None), StateRow("b", 10, [2, 3], None)],
     [StateRow(1, 0, [1, 2.5], None), StateRow(2, 0, [1, -0.0], None)],
     [StateRow("é", 0, [1, float("nan")], None)], [StateRow(1, 0, [3, True], None)]],
    ids=["str-keys", "float-slot", "unicode-key-nan", "bool-slot"],
)  # fmt: skip
def test_restore_takes_string_keys_and_float_or_bool_slots(rows: list[StateRow]) -> None:
    cols = WindowColumns.restore(2, [_snapshot({1: rows})], "acc", KeyGroupRange(0, 31), None)
    assert cols is not None
    back = [row for r in cols.snapshot_rows().values() for row in r]
    assert sorted(map(repr, back)) == sorted(map(repr, rows))  # repr: NaN == NaN, -0.0 kept


def test_snapshots_are_int_rows_that_later_merges_do_not_change() -> None:
    cols = WindowColumns(2)
    cols.merge(0, np.array([5, 1]), np.array([2, 1], dtype=np.int32), np.array([[1, 10], [1, 20]]))
    snap = cols.snapshot_rows()
    assert all(isinstance(r, IntRows) for r in snap.values())
    before = {kg: tuple(r) for kg, r in snap.items()}
    cols.merge(0, np.array([1, 7]), np.array([1, 3], dtype=np.int32), np.array([[2, 5], [1, 1]]))
    assert {kg: tuple(r) for kg, r in snap.items()} == before
    assert {kg: tuple(r) for kg, r in cols.snapshot_rows().items()} == {
        1: (StateRow(1, 0, [3, 25], None),),
        2: (StateRow(5, 0, [1, 10], None),),
        3: (StateRow(7, 0, [1, 1], None),),
    }
    assert cols.changed == {1, 2, 3}


class _Collect:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.late: list[dict[str, Any]] = []

    def emit(self, batch: pa.RecordBatch) -> None:
        self.rows.extend(batch.to_pylist())

    def emit_watermark(self, timestamp: int) -> None:
        return None

    def side(self, tag: str, batch: pa.RecordBatch) -> None:
        assert tag == "late"
        self.late.extend(batch.to_pylist())


@pytest.mark.parametrize("columnar", [True, False])
def test_late_records_and_firing_match_in_both_paths(monkeypatch: pytest.MonkeyPatch, columnar: bool) -> None:
    monkeypatch.setattr(window, "COLUMNAR", columnar)
    op = window.WindowOperator("w", "k", TumblingEventTimeWindows(100), Aggregates(Count(), Sum("v")), 0)
    out = _Collect()
    op.output = out
    op.open(OperatorContext("job", 0, 1, 8, KeyGroupRange(0, 7), 0, 1), None)
    assert (op.cols is not None) == columnar
    op.process_batch(pa.RecordBatch.from_pylist([{"k": 1, "_ts": 10, "v": 1}, {"k": 2, "_ts": 90, "v": 2}]))
    op.process_batch(pa.RecordBatch.from_pylist([{"k": 1, "_ts": 150, "v": 4}, {"k": 1, "_ts": 20, "v": 8}]))
    op.process_watermark(120)  # [0, 100) fires
    op.process_batch(
        pa.RecordBatch.from_pylist([{"k": 2, "_ts": 50, "v": 16}, {"k": 2, "_ts": 199, "v": 32}])
    )
    op.process_watermark(300)
    got = sorted(
        (r["k"], r["window_start"], r["window_end"], r["count"], r["sum_v"], r["_ts"]) for r in out.rows
    )
    assert got == [
        (1, 0, 100, 2, 9, 99),
        (1, 100, 200, 1, 4, 199),
        (2, 0, 100, 1, 2, 99),
        (2, 100, 200, 1, 32, 199),
    ]
    assert [r["v"] for r in out.late] == [16]
    assert op.metrics()["late_records"] == 1


def _savepoint_then_restore(tmp: Path, monkeypatch: pytest.MonkeyPatch, columnar: bool) -> tuple[Any, Any]:
    """Three epochs, a savepoint, a restore into another store at parallelism 3, three epochs."""
    monkeypatch.setattr(window, "COLUMNAR", columnar)
    clock = ManualClock(DEFAULT_START_MS)
    job = window_job()
    for _ in range(3):
        clock.advance(STEP)
        assert run_cycle(job, (tmp / "prod").as_uri(), clock, executor="local").status == "completed"
    info = take_savepoint(job, (tmp / "prod").as_uri(), clock, "sp")
    target = (tmp / "restored").as_uri()
    rescaled = window_job(parallelism=3)
    restore(rescaled, target, clock, RestoreRequest(source=info["location"]))
    for _ in range(3):
        clock.advance(STEP)
        assert run_cycle(rescaled, target, clock, executor="local").status == "completed"
    store = open_store(target)
    rows = sorted(tuple(r.values()) for r in read_committed(store, rescaled.job_id, "out").to_pylist())
    completed, _ = CompletedCheckpointStore.recover(store, JobLayout(rescaled.job_id), 1)
    latest = completed.latest()
    assert latest is not None
    return rows, state_digest(store, latest.metadata, rescaled.max_parallelism)


def test_a_savepoint_of_columnar_windows_restores_rescaled_like_the_heap_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    columns = _savepoint_then_restore(tmp_path / "columns", monkeypatch, True)
    heap = _savepoint_then_restore(tmp_path / "heap", monkeypatch, False)
    assert columns[0] and columns == heap


@pytest.mark.parametrize("columnar", [True, False])
def test_a_key_of_another_subtask_is_refused_on_both_paths(
    monkeypatch: pytest.MonkeyPatch, columnar: bool
) -> None:
    monkeypatch.setattr(window, "COLUMNAR", columnar)
    op = window.WindowOperator("w", "k", TumblingEventTimeWindows(100), Aggregates(Count(), Sum("v")), 0)
    op.output = _Collect()
    op.open(OperatorContext("job", 0, 2, 8, KeyGroupRange(0, 3), 0, 1), None)
    foreign = next(k for k in range(100) if key_group_of(k, 8) > 3)
    with pytest.raises(KeyOutOfRangeError, match="route records"):
        op.process_batch(pa.RecordBatch.from_pylist([{"k": foreign, "_ts": 10, "v": 1}]))


def _window_acks(uri: str) -> list[Any]:
    store = open_store(uri)
    completed, _ = CompletedCheckpointStore.recover(store, JobLayout("columns"), 1)
    latest = completed.latest()
    assert latest is not None
    return [t for t in latest.metadata.tasks if t.task.uid == "per-user"]


def test_a_subtask_writes_its_changed_key_groups_as_one_file_on_either_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flink's one-file-per-subtask snapshot (key groups inside one file) on the columnar and the
    heap path alike; both restore to the same state (the equivalence tests above)."""
    for name, columnar in (("columns", True), ("heap", False)):
        run(tmp_path / name, monkeypatch, [columnar] * 3)
        for task in _window_acks((tmp_path / name).as_uri()):
            chains = task.snapshot["state_files"]
            bases = {chain["key"] if "key" in chain else chain["base"]["key"] for chain in chains.values()}
            assert len(chains) > 1 and len(bases) == 1, (name, task.task, len(bases), len(chains))
            assert [h.key for h in task.handles] == list(bases)


def test_windows_restored_on_threads_equal_one_thread_and_report_the_first_bad_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spark_jobs.runtime.operators import window_columns

    rows = {
        kg: [StateRow(k, ws, [k, ws], None) for ws in (0, 10, 20, 30) for k in range(kg, 320, 32)]
        for kg in range(32)
    }
    one = WindowColumns.restore(2, [_snapshot(rows)], "acc", KeyGroupRange(0, 31), None)
    monkeypatch.setattr(window_columns, "PARALLEL_RESTORE_ENTRIES", 1)
    monkeypatch.setattr(window_columns, "RESTORE_THREADS", 4)
    many = WindowColumns.restore(2, [_snapshot(rows)], "acc", KeyGroupRange(0, 31), None)
    assert one is not None and many is not None and sorted(one.runs) == sorted(many.runs) == [0, 10, 20, 30]
    for ws, run in one.runs.items():
        expected = sorted(zip(run.kgs.tolist(), run.keys.tolist(), strict=True))  # (key group, key) order
        assert list(zip(run.kgs.tolist(), run.keys.tolist(), strict=True)) == expected
        assert run.index.tolist() == many.runs[ws].index.tolist() and run.packed and many.runs[ws].packed
        assert (run.acc == many.runs[ws].acc).all() and (run.kgs == many.runs[ws].kgs).all()
    bad = {**rows, 5: [*rows[5], StateRow(5, 20, [0, 0], None), StateRow(5, 30, [0, 0], None)]}
    with pytest.raises(ValueError, match=r"key 5 \(namespace 20\) twice"):
        WindowColumns.restore(2, [_snapshot(bad)], "acc", KeyGroupRange(0, 31), None)


def _contents(cols: WindowColumns) -> dict[tuple[int, int], tuple[int, list[int]]]:
    """(window start, key) -> (key group, accumulator) of every entry."""
    return {
        (ws, k): (g, a)
        for ws, run in cols.runs.items()
        for k, g, a in zip(run.keys.tolist(), run.kgs.tolist(), run.acc.tolist(), strict=True)
    }


def test_a_restore_of_packed_windows_concatenates_and_sorts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_jobs.runtime.operators import window_columns

    cols = WindowColumns(2)
    keys = np.array([-(1 << 47), 5, 37, (1 << 47) - 1, 64, 3])
    kgs = (keys % 32).astype(np.int32)
    for ws in (0, 10):
        cols.merge(ws, keys, kgs, np.stack([np.ones(len(keys), dtype=np.int64), keys + ws], axis=1))
    assert cols.packed
    files = cols.snapshot_rows()
    sorts = 0
    original = np.argsort

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal sorts
        sorts += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(window_columns.np, "argsort", counting)
    restored = WindowColumns.restore(2, [_snapshot({kg: list(r) for kg, r in files.items()})], "acc",
                                     KeyGroupRange(0, 31), lambda k: np.asarray(k) % 32)  # fmt: skip
    assert sorts == 0 and restored is not None and restored.packed
    assert _contents(restored) == _contents(cols) and len(_contents(cols)) == 12
    for run in restored.runs.values():  # (key group, key) order, the files' order
        pairs = list(zip(run.kgs.tolist(), run.keys.tolist(), strict=True))
        assert pairs == sorted(pairs) and run.index.tolist() == sorted(run.index.tolist())
    shuffled = {kg: list(reversed(r)) for kg, r in files.items()}  # another writer's order is sorted once
    again = WindowColumns.restore(2, [_snapshot(shuffled)], "acc", KeyGroupRange(0, 31), None)
    assert sorts > 0 and again is not None and _contents(again) == _contents(cols)


@pytest.mark.parametrize(
    "big", [1 << 47, -(1 << 47) - 1, (1 << 63) - 1], ids=["2**47", "-2**47-1", "int64-max"]
)
def test_a_key_beyond_48_bits_moves_every_window_to_key_order(big: int) -> None:
    cols = WindowColumns(2)
    cols.merge(
        0, np.array([9, 2, 40]), np.array([9, 2, 8], dtype=np.int32), np.array([[1, 1], [1, 2], [1, 3]])
    )
    cols.merge(10, np.array([7]), np.array([7], dtype=np.int32), np.array([[1, 7]]))
    cols.merge(0, np.array([big, 2]), np.array([1, 2], dtype=np.int32), np.array([[1, 5], [2, 6]]))
    assert not cols.packed and not any(run.packed for run in cols.runs.values())
    assert _contents(cols) == {
        (0, 9): (9, [1, 1]), (0, 2): (2, [3, 8]), (0, 40): (8, [1, 3]), (0, big): (1, [1, 5]),
        (10, 7): (7, [1, 7]),
    }  # fmt: skip
    for run in cols.runs.values():
        assert run.keys.tolist() == sorted(run.keys.tolist()) == run.index.tolist()
    files = cols.snapshot_rows()
    restored = WindowColumns.restore(2, [_snapshot({kg: list(r) for kg, r in files.items()})], "acc",
                                     KeyGroupRange(0, 31), None)  # fmt: skip
    assert restored is not None and not restored.packed and _contents(restored) == _contents(cols)
    with pytest.raises(ValueError, match=rf"key {big} \(namespace 0\) twice"):
        WindowColumns.restore(2, [_snapshot({1: [*files[1], *files[1]]})], "acc", KeyGroupRange(0, 31), None)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0, 10, 20]),
            st.lists(
                st.one_of(st.integers(-50, 50), st.integers(-(1 << 63), (1 << 63) - 1)),
                max_size=8,
                unique=True,
            ),
        ),
        max_size=6,
    )
)
def test_merges_snapshots_and_restores_keep_every_accumulator(chunks: list[tuple[int, list[int]]]) -> None:
    """Against a dict: merges in either order mode, then a snapshot restored, hold the same sums."""
    cols = WindowColumns(2)
    model: dict[tuple[int, int], list[int]] = {}
    for ws, keys in chunks:
        if not keys:
            continue
        arr = np.array(keys, dtype=np.int64)
        cols.merge(
            ws,
            arr,
            (arr % 32).astype(np.int32),
            np.stack([np.ones(len(arr), dtype=np.int64), arr % 7], axis=1),
        )
        for k in keys:
            count, total = model.get((ws, k), [0, 0])
            model[(ws, k)] = [count + 1, total + k % 7]
    assert {wk: a for wk, (_, a) in _contents(cols).items()} == model
    files = cols.snapshot_rows()
    restored = WindowColumns.restore(2, [_snapshot({kg: list(r) for kg, r in files.items()})], "acc",
                                     KeyGroupRange(0, 31), lambda k: np.asarray(k) % 32)  # fmt: skip
    assert restored is not None and _contents(restored) == _contents(cols)
    assert restored.packed == all(-(1 << 47) <= k < 1 << 47 for _, k in model)
