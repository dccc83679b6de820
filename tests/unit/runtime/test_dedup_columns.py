"""Deduplication on the columns (``dedup_columns.SeenKeys``) gives the heap backend's output and
state exactly -- string and int keys, a TTL that expires keys between epochs -- across snapshots,
restores and rescales 4 -> 2 -> 8, with the path switched between epochs, through a crash at every
kill point and a savepoint written by one path and restored on the other; a string-key hash
collision keeps both keys exact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.lifecycle.restore import RestoreRequest, restore
from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.runtime.operators import dedup, window_columns
from spark_jobs.runtime.operators.dedup_columns import SeenKeys
from spark_jobs.runtime.operators.window_columns import Refused
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import CompletedCheckpointStore, JobLayout, killpoints
from state_store.core.keygroups import KeyGroupRange
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow
from state_store.storage import open_store
from state_store.testing import KillAt, ManualClock, SimulatedCrash
from tests.unit.runtime.test_window_typed_paths import SCALES, STEP, _result, _weak_hash


def _int_ids(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``event_id`` as an int (its digits), so the columns take int keys."""
    i = batch.schema.get_field_index("event_id")
    digits = pc.replace_substring_regex(batch.column(i), "[^0-9]", "")
    return batch.set_column(i, "event_id", pc.cast(digits, pa.int64()))


def dedup_job(parallelism: int, string_keys: bool = True, key: str = "event_id", ttl_ms: int = 15_000) -> Job:
    job = Job("typed", parallelism=parallelism, max_parallelism=32, chunk_size=48)
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=11, events_per_second=[60, 35], out_of_orderness_ms=[2_000, 700],
        keys=50, duplicate_fraction=0.3, start_ms=DEFAULT_START_MS,
    )  # fmt: skip
    stream = job.source(source, uid="clicks", out_of_orderness_ms=2_000)
    if not string_keys:
        stream = stream.map(_int_ids)
    stream.key_by(key).deduplicate(ttl_ms=ttl_ms, uid="per-user").sink(ParquetSink(), uid="out")
    return job


def run(
    uri: str,
    monkeypatch: pytest.MonkeyPatch,
    columnar: list[bool],
    string_keys: bool = True,
    kill: str | None = None,
    key: str = "event_id",
    ttl_ms: int = 15_000,
) -> tuple[list[Any], dict[str, Any]]:
    """One epoch per entry of ``columnar`` (the path of that epoch); with ``kill``, the first cycle
    from the second epoch on that reaches the kill point crashes and the next one recovers."""
    clock = ManualClock(DEFAULT_START_MS)
    crashes = 0
    job = dedup_job(SCALES[0], string_keys, key, ttl_ms)
    for epoch, on in enumerate(columnar):
        monkeypatch.setattr(dedup, "COLUMNAR", on)
        job = dedup_job(SCALES[epoch], string_keys, key, ttl_ms)
        clock.advance(STEP)
        if kill is not None and epoch >= 1 and not crashes:
            try:
                report = run_cycle(job, uri, clock, executor="local", kill=KillAt(kill))  # type: ignore[arg-type]
            except SimulatedCrash:
                crashes += 1
                report = run_cycle(job, uri, clock, executor="local")
                assert report.status in ("completed", "skipped"), report
                continue
        else:
            report = run_cycle(job, uri, clock, executor="local")
        assert report.status == "completed", report
    assert kill is None or crashes == 1, f"no cycle reached kill point {kill}"
    return _result(uri, job)


class _Admits:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = SeenKeys.admit

        def counting(cols: SeenKeys, *args: Any) -> Any:
            self.count += 1
            return original(cols, *args)

        monkeypatch.setattr(SeenKeys, "admit", counting)


@pytest.mark.parametrize("string_keys", [True, False], ids=["string", "int"])
def test_the_columns_give_the_heap_backends_output_and_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, string_keys: bool
) -> None:
    admits = _Admits(monkeypatch)
    columns = run((tmp_path / "columns").as_uri(), monkeypatch, [True] * 6, string_keys)
    assert admits.count > 0
    admits.count = 0
    heap = run((tmp_path / "heap").as_uri(), monkeypatch, [False] * 6, string_keys)
    assert admits.count == 0
    rows, state = columns
    assert rows and state["per-user"], "records passed and keys are remembered"
    assert columns == heap
    mixed = [True, False, False, True, False, True]
    assert run((tmp_path / "mixed").as_uri(), monkeypatch, mixed, string_keys) == heap


def test_keys_expire_after_the_ttl_on_the_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keyed by one of 50 users, with a TTL of 15 s and epochs 10 s apart: a user passes once, then
    again once its flag expired -- at most once per epoch, more than once in six; both paths agree."""
    columns = run((tmp_path / "columns").as_uri(), monkeypatch, [True] * 6, key="user_id")
    heap = run((tmp_path / "heap").as_uri(), monkeypatch, [False] * 6, key="user_id")
    assert columns == heap
    users = pc.value_counts(
        read_committed(open_store((tmp_path / "columns").as_uri()), "typed", "out")["user_id"]
    )
    counts = users.field("counts").to_pylist()
    assert len(counts) == 50 and max(counts) <= 6 and sum(c > 1 for c in counts) > 25


@pytest.mark.parametrize("point", killpoints.ALL)
def test_a_crash_at_every_kill_point_recovers_to_the_heap_backends_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    columns = run((tmp_path / "columns").as_uri(), monkeypatch, [True] * 4, kill=point)
    heap = run((tmp_path / "heap").as_uri(), monkeypatch, [False] * 4)
    assert columns[0] and columns == heap


def _savepoint_then_restore(tmp: Path, monkeypatch: pytest.MonkeyPatch, write: bool, read: bool) -> Any:
    monkeypatch.setattr(dedup, "COLUMNAR", write)
    clock = ManualClock(DEFAULT_START_MS)
    job = dedup_job(2)
    for _ in range(3):
        clock.advance(STEP)
        assert run_cycle(job, (tmp / "prod").as_uri(), clock, executor="local").status == "completed"
    info = take_savepoint(job, (tmp / "prod").as_uri(), clock, "sp")
    monkeypatch.setattr(dedup, "COLUMNAR", read)
    target = (tmp / "restored").as_uri()
    rescaled = dedup_job(3)
    restore(rescaled, target, clock, RestoreRequest(source=info["location"]))
    for _ in range(2):
        clock.advance(STEP)
        assert run_cycle(rescaled, target, clock, executor="local").status == "completed"
    return _result(target, rescaled)


def test_a_savepoint_written_by_either_path_restores_on_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heap = _savepoint_then_restore(tmp_path / "heap", monkeypatch, False, False)
    assert heap[0]
    assert _savepoint_then_restore(tmp_path / "c2h", monkeypatch, True, False) == heap
    assert _savepoint_then_restore(tmp_path / "h2c", monkeypatch, False, True) == heap


def test_two_string_keys_with_one_hash_both_stay_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heap = run((tmp_path / "heap").as_uri(), monkeypatch, [False] * 4)
    monkeypatch.setattr(window_columns, "HASH_FUNCTION", _weak_hash)
    monkeypatch.setattr(dedup, "_REPORTED", set())
    assert run((tmp_path / "weak").as_uri(), monkeypatch, [True] * 4) == heap


def test_a_collision_is_refused_before_anything_changes() -> None:
    seen = SeenKeys(100)
    kg = np.array([1], np.int32)
    original = window_columns.HASH_FUNCTION
    try:
        window_columns.HASH_FUNCTION = _weak_hash
        assert seen.admit(pa.array(["ab"]), kg, 0).tolist() == [True]
        with pytest.raises(Refused, match="same 64-bit hash"):
            seen.admit(pa.array(["cd"]), kg, 10)
        with pytest.raises(Refused, match="same 64-bit hash"):
            seen.admit(pa.array(["xy", "zw"]), np.array([1, 1], np.int32), 10)
        assert [list(r) for r in seen.snapshot_rows(10)[1]] == [["ab", None, True, 100]]
        rows = [StateRow("ab", None, True, 100), StateRow("cd", None, True, 100)]
        snap = KeyedStateSnapshot(32, KeyGroupRange(0, 31), {"seen": StateKind.VALUE}, {1: {"seen": rows}})
        assert SeenKeys.restore(100, [snap], "seen", KeyGroupRange(0, 31), None) is None
    finally:
        window_columns.HASH_FUNCTION = original
    ints = SeenKeys(100)
    assert ints.admit(np.array([7, 9]), np.array([1, 2], np.int32), 0).tolist() == [True, True]
    assert ints.admit(np.array([7]), kg, 99).tolist() == [False]  # live until 100
    assert ints.admit(np.array([7, 8]), np.array([1, 1], np.int32), 100).tolist() == [
        True,
        True,
    ]  # expired at 100
    assert ints.changed == {1, 2}
    assert [list(r) for r in ints.snapshot_rows(150)[1]] == [[7, None, True, 200], [8, None, True, 200]]
    assert 2 not in ints.snapshot_rows(150) and len(ints) == 2  # 9 expired at 100: dropped


def _delta_chains(uri: str) -> int:
    """How many key groups of the dedup operator's latest checkpoint end in a delta file."""
    store = open_store(uri)
    completed, _ = CompletedCheckpointStore.recover(store, JobLayout("typed"), 1)
    latest = completed.latest()
    assert latest is not None
    chains = [
        chain
        for task in latest.metadata.tasks
        if task.task.uid == "per-user"
        for chain in task.snapshot.get("state_files", {}).values()
    ]
    return sum(bool(chain["deltas"]) for chain in chains)


def test_a_long_ttl_writes_deltas_of_the_new_keys_as_the_heap_backend_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys live for an hour: each epoch adds a few per key group, so both paths write deltas (the
    new keys) instead of whole key groups, and restore the same entries."""
    parallel = [2, 2, 2, 2, 2]
    monkeypatch.setattr("tests.unit.runtime.test_dedup_columns.SCALES", parallel)
    columns = run((tmp_path / "columns").as_uri(), monkeypatch, [True] * 5, ttl_ms=3_600_000)
    heap = run((tmp_path / "heap").as_uri(), monkeypatch, [False] * 5, ttl_ms=3_600_000)
    assert columns == heap
    assert _delta_chains((tmp_path / "columns").as_uri()) > 0
    assert _delta_chains((tmp_path / "columns").as_uri()) == _delta_chains((tmp_path / "heap").as_uri())
