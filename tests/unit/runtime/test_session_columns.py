"""Session windows on the columns (``session_columns``) give the heap backend's output and state
exactly: on randomized jobs (hypothesis: int/string keys, int/float/decimal values, every
aggregate) across snapshots, restores and rescales 4 -> 2 -> 8, with the path switched between
epochs, through a crash at every kill point and savepoints written by one path and restored on the
other; float sums bit for bit against a sequential Python reference of the documented order; a
string-key hash collision keeps both keys; checkpoints of the timer mode (before issue 20, or with
allowed lateness) convert both ways.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.api.windows import Aggregates, EventTimeSessionWindows, Sum
from spark_jobs.lifecycle.restore import RestoreRequest, restore
from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.runtime.operators import window, window_columns
from spark_jobs.runtime.operators.base import OperatorContext
from spark_jobs.runtime.operators.session_columns import SessionColumns
from spark_jobs.runtime.operators.window_columns import Refused
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core import killpoints
from state_store.core.keygroups import KeyGroupRange
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow
from state_store.testing import ManualClock
from tests.unit.runtime.support import Collect
from tests.unit.runtime.test_window_typed_paths import (
    AGGREGATES,
    SCALES,
    STEP,
    Variant,
    _Merges,
    _result,
    _weak_hash,
    job_of,
    run,
)

SESSIONS = Variant(True, "float", tuple(AGGREGATES), False, 3, 400, session=True)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.builds(
        Variant,
        string_keys=st.booleans(),
        values=st.sampled_from(["int", "float", "decimal"]),
        aggregates=st.lists(st.sampled_from(sorted(AGGREGATES)), min_size=1, max_size=7, unique=True).map(
            tuple
        ),
        sliding=st.just(False),
        seed=st.integers(0, 1_000),
        keys=st.sampled_from([150, 400, 1_000]),  # fewer keys: sessions that never close
        session=st.just(True),
    ),
    st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_randomized_session_jobs_give_the_heap_backends_output_and_state(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    variant: Variant,
    mixed: list[bool],
) -> None:
    base = tmp_path_factory.mktemp("sessions")
    merges = _Merges(monkeypatch)
    columns = run((base / "columns").as_uri(), monkeypatch, variant, [True] * 6, SCALES)
    assert merges.count > 0
    merges.count = 0
    heap = run((base / "heap").as_uri(), monkeypatch, variant, [False] * 6, SCALES)
    assert merges.count == 0
    assert columns[0], "sessions closed"
    assert columns == heap
    assert run((base / "mixed").as_uri(), monkeypatch, variant, mixed, SCALES) == heap


@pytest.mark.parametrize("point", killpoints.ALL)
def test_a_crash_at_every_kill_point_recovers_to_the_heap_backends_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    columns = run((tmp_path / "columns").as_uri(), monkeypatch, SESSIONS, [True] * 4, SCALES, kill=point)
    heap = run((tmp_path / "heap").as_uri(), monkeypatch, SESSIONS, [False] * 4, SCALES)
    assert columns[0] and columns == heap


def _savepoint_then_restore(tmp: Path, monkeypatch: pytest.MonkeyPatch, write: bool, read: bool) -> Any:
    monkeypatch.setattr(window, "COLUMNAR", write)
    clock = ManualClock(DEFAULT_START_MS)
    job = job_of(SESSIONS, 2)
    for _ in range(3):
        clock.advance(STEP)
        assert run_cycle(job, (tmp / "prod").as_uri(), clock, executor="local").status == "completed"
    info = take_savepoint(job, (tmp / "prod").as_uri(), clock, "sp")
    monkeypatch.setattr(window, "COLUMNAR", read)
    target = (tmp / "restored").as_uri()
    rescaled = job_of(SESSIONS, 3)
    restore(rescaled, target, clock, RestoreRequest(source=info["location"]))
    for _ in range(3):
        clock.advance(STEP)
        assert run_cycle(rescaled, target, clock, executor="local").status == "completed"
    return _result(target, rescaled)


def test_a_session_savepoint_written_by_either_path_restores_on_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heap = _savepoint_then_restore(tmp_path / "heap", monkeypatch, False, False)
    assert heap[0]
    assert _savepoint_then_restore(tmp_path / "c2h", monkeypatch, True, False) == heap
    assert _savepoint_then_restore(tmp_path / "h2c", monkeypatch, False, True) == heap


def test_two_string_keys_with_one_hash_keep_their_own_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heap = run((tmp_path / "heap").as_uri(), monkeypatch, SESSIONS, [False] * 4, SCALES)
    monkeypatch.setattr(window_columns, "HASH_FUNCTION", _weak_hash)
    monkeypatch.setattr(window, "_REPORTED", set())
    collided = run((tmp_path / "weak").as_uri(), monkeypatch, SESSIONS, [True] * 4, SCALES)
    assert collided == heap and heap[0]


def test_a_collision_or_an_inexact_sum_is_refused_before_anything_changes() -> None:
    cols = SessionColumns(["add"])
    kg = np.array([1], np.int32)
    original = window_columns.HASH_FUNCTION
    try:
        window_columns.HASH_FUNCTION = _weak_hash
        cols.merge(pa.array(["ab"]), kg, np.array([0]), np.array([10]), [np.array([1.5])])
        before = {k: list(r) for k, r in cols.snapshot_rows().items()}
        with pytest.raises(Refused, match="same 64-bit hash"):  # "cd" hashes like "ab"
            cols.merge(pa.array(["cd"]), kg, np.array([5]), np.array([15]), [np.array([2.5])])
        assert {k: list(r) for k, r in cols.snapshot_rows().items()} == before
        rows = [StateRow("ab", 0, [10, 1.5], None), StateRow("cd", 20, [30, 2.5], None)]
        snap = KeyedStateSnapshot(
            32, KeyGroupRange(0, 31), {"session": StateKind.VALUE}, {1: {"session": rows}}
        )
        assert SessionColumns.restore(["add"], [snap], "session", KeyGroupRange(0, 31), None) is None
    finally:
        window_columns.HASH_FUNCTION = original
    ints = SessionColumns(["add"])
    ints.merge(np.array([7]), kg, np.array([0]), np.array([10]), [np.array([2**62 - 1])])
    with pytest.raises(Refused, match="2\\*\\*62"):
        ints.merge(np.array([7]), kg, np.array([10]), np.array([20]), [np.array([2**62])])
    assert len(ints) == 1 and ints.rows is not None and int(ints.rows.slots[0][0]) == 2**62 - 1


def test_sessions_join_across_chunks_as_flink_merges_them() -> None:
    """An open session is joined by a later chunk's session that overlaps or touches it, and two
    open sessions are bridged by one that spans the gap between them; the others stay apart."""
    cols = SessionColumns(["add", "min"])
    kgs = np.array([0, 0, 0], np.int32)
    cols.merge(np.array([1, 1, 2]), kgs, np.array([0, 50, 0]), np.array([10, 60, 10]),
               [np.array([1, 2, 3]), np.array([5.0, 1.0, 7.0])])  # fmt: skip
    cols.merge(np.array([1, 2, 3]), kgs, np.array([8, 10, 100]), np.array([52, 13, 110]),
               [np.array([4, 5, 6]), np.array([9.0, 0.5, 2.0])])  # fmt: skip
    assert cols.rows is not None
    got = sorted(zip(cols.rows.index.tolist(), cols.rows.start.tolist(), cols.rows.end.tolist(),
                     cols.rows.slots[0].tolist(), cols.rows.slots[1].tolist()))  # fmt: skip
    assert got == [(1, 0, 60, 7, 1.0), (2, 0, 13, 8, 0.5), (3, 100, 110, 6, 2.0)]
    fired = cols.fire(58)  # end - 1 <= 58: the session ending at 13, not the one ending at 60
    assert fired is not None and sorted(fired.index.tolist()) == [2] and len(cols) == 2


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 40_000), st.floats(-1e6, 1e6, allow_nan=False)),
        min_size=1,
        max_size=60,
    ),
    st.integers(1, 7),
    st.booleans(),
)
def test_float_session_sums_equal_a_sequential_python_reference_bit_for_bit(
    records: list[tuple[int, int, float]], chunk: int, columnar: bool
) -> None:
    """The documented order: per chunk, a key's records in event-time order are cut into sessions
    and each is summed from 0.0 in that order; the pieces of a joined session are then added in
    order of their start (open sessions before new ones at the same start)."""
    gap = 3_000
    reference: dict[int, list[list[Any]]] = {}  # key -> [start, end, sum] open sessions
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(window, "COLUMNAR", columnar)
        op = window.WindowOperator("w", "k", EventTimeSessionWindows(gap), Aggregates(Sum("v")), 0)
        out = Collect()
        op.output = out
        op.open(OperatorContext("job", 0, 1, 8, KeyGroupRange(0, 7), 0, 1), None)
        for lo in range(0, len(records), chunk):
            part = records[lo : lo + chunk]
            op.process_batch(pa.record_batch({"k": [r[0] for r in part], "_ts": [r[1] for r in part],
                                              "v": [r[2] for r in part]}))  # fmt: skip
            for key in sorted({r[0] for r in part}):
                mine = sorted((t, i, v) for i, (k, t, v) in enumerate(part) if k == key)
                pieces: list[list[Any]] = []
                for t, _, v in mine:
                    if pieces and t <= pieces[-1][1]:  # within (or touching) the previous record's session
                        pieces[-1][1] = t + gap
                        pieces[-1][2] += v
                    else:
                        pieces.append([t, t + gap, 0.0 + v])
                tagged = [(s, 0, e, a) for s, e, a in reference.get(key, [])] + [
                    (s, 1, e, a) for s, e, a in pieces
                ]
                tagged.sort(key=lambda p: (p[0], p[1]))
                joined: list[list[Any]] = []
                for s, _, e, a in tagged:
                    if joined and s <= joined[-1][1]:
                        joined[-1][1] = max(joined[-1][1], e)
                        joined[-1][2] = joined[-1][2] + a
                    else:
                        joined.append([s, e, a])
                reference[key] = joined
        assert (op.scols is not None) == columnar
        op.process_watermark(10**9)
    got = {(r["k"], r["window_start"], r["window_end"]): r["sum_v"] for r in out.rows}
    want = {(k, s, e): a for k, sessions in reference.items() for s, e, a in sessions}
    assert set(got) == set(want)
    for where, value in want.items():
        assert math.copysign(1, got[where]) == math.copysign(1, value) and got[where] == value, where


def _sessions_run(uri: str, monkeypatch: pytest.MonkeyPatch, indexed: list[bool]) -> Any:
    """One epoch per entry: the indexed (True) or the timer mode (False) of session windows."""
    variant = dataclasses.replace(SESSIONS, values="int", aggregates=("count", "sum", "max"))
    clock = ManualClock(DEFAULT_START_MS)
    job = job_of(variant, 2)
    for epoch, on in enumerate(indexed):
        monkeypatch.setattr(window, "INDEXED_FIRING", on)
        job = job_of(variant, SCALES[epoch])
        clock.advance(STEP)
        assert run_cycle(job, uri, clock, executor="local").status == "completed"
    return _result(uri, job)


def test_checkpoints_of_the_timer_mode_convert_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint written in the timer mode (before issue 20, or by a job with allowed lateness)
    restores into the indexed mode and back, rescaled, with the same results as either mode alone."""
    indexed = _sessions_run((tmp_path / "indexed").as_uri(), monkeypatch, [True] * 6)
    timers = _sessions_run((tmp_path / "timers").as_uri(), monkeypatch, [False] * 6)
    assert indexed[0] and indexed[0] == timers[0]
    for name, modes in {
        "up": [False, False, True, True, True, True],
        "both": [True, False, True, False, True, True],
    }.items():
        assert _sessions_run((tmp_path / name).as_uri(), monkeypatch, modes) == indexed
