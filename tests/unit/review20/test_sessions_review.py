"""Review of the columnar / indexed session-window paths (issue 20): repro tests, each of a problem
the review found (see the docstrings) and that failed before its fix."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from spark_jobs.api.windows import Aggregates, Count, EventTimeSessionWindows, Sum
from spark_jobs.runtime.operators import window
from spark_jobs.runtime.operators.base import OperatorContext, OperatorRestore
from state_store.core.keygroups import KeyGroupRange
from tests.unit.runtime.support import Collect

GAP = 100


def make(restored: Any = None, aggs: Any = None) -> Any:
    op = window.WindowOperator(
        "w", "k", EventTimeSessionWindows(GAP), aggs or Aggregates(Sum("v"), Count()), 0
    )
    op.output = Collect()
    op.open(OperatorContext("job", 0, 1, 8, KeyGroupRange(0, 7), 0, 1), restored)
    return op


def restore_of(snaps: list[Any], checkpoint_id: int) -> OperatorRestore:
    return OperatorRestore(
        keyed=[s.keyed for s in snaps],
        timers={k: v for s in snaps for k, v in s.timers.items()},
        extra={"parts": [s.extra for s in snaps]},
        checkpoint_id=checkpoint_id,
    )


def entries(snap: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (kg, name, r.key, r.namespace, tuple(r.value))
        for kg, states in snap.keyed.key_groups.items()
        for name, rows in states.items()
        for r in rows
    )


def test_uint64_keys_above_int64_max_keep_their_value_on_the_columnar_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Claim 1/5: a uint64 key >= 2**63 is accepted by ``_unfit_for_columns`` (any integer type) and
    then cast with ``astype(np.int64)`` in ``_merge_session_columns``: it wraps to a negative key in
    the state (a different key, hashed to another key group on an untrusted restore / rescale) and in
    the output. The heap path keeps the key exactly in its state (it cannot emit it either:
    ``flush_timer_output`` raises OverflowError -- a loud failure, not a silent wrong key)."""
    key = 2**63 + 5
    batch = pa.record_batch({"k": pa.array([key], pa.uint64()), "_ts": pa.array([0], pa.int64()), "v": [1]})
    monkeypatch.setattr(window, "COLUMNAR", False)
    heap = make()
    heap.process_batch(batch)
    assert entries(heap.snapshot(1)) == [(4, "session", key, 0, (100, 1, 1))]  # exact
    monkeypatch.setattr(window, "COLUMNAR", True)
    op = make()
    op.process_batch(batch)
    assert op.scols is None and op.fallback == "keys of type uint64 beyond int64"  # fixed: the heap
    op.process_watermark(1_000)
    assert [r["k"] for r in op.output.rows] == [key]  # was: [-9223372036854775803]


def test_converting_an_indexed_checkpoint_to_the_timer_mode_keeps_the_late_boundary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Claim 4: an indexed-mode checkpoint (watermark 500 processed, session [0, 100) fired) restored
    into the timer mode (INDEXED_FIRING off, or the job now has allowed lateness) drops the restored
    ``fired_through`` (``restore_extra`` only keeps it in the indexed modes), so until the next
    watermark arrives the late boundary is MIN_TIMESTAMP: a record at t=0 -- late before the
    checkpoint, and late in the indexed mode after it -- opens the already-fired session [0, 100)
    again and emits it a second time instead of going to the late side output."""
    monkeypatch.setattr(window, "INDEXED_FIRING", True)
    first = make()
    first.process_batch(pa.record_batch({"k": [1], "_ts": pa.array([0], pa.int64()), "v": [1]}))
    first.process_watermark(500)
    assert [(r["window_start"], r["window_end"]) for r in first.output.rows] == [(0, 100)]
    snap = first.snapshot(1)

    results = {}
    for indexed in (True, False):
        monkeypatch.setattr(window, "INDEXED_FIRING", indexed)
        op = make(restore_of([snap], 1))
        op.process_batch(pa.record_batch({"k": [1], "_ts": pa.array([0], pa.int64()), "v": [7]}))
        op.process_watermark(600)
        results[indexed] = ([(r["window_start"], r["sum_v"]) for r in op.output.rows], len(op.output.late))
    assert results[True] == ([], 1)  # the indexed mode: late, as before the checkpoint
    assert results[False] == results[True]  # the timer mode re-fires window [0, 100) with 7


def test_a_record_inside_an_open_session_is_merged_as_flink_merges_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Claim 2 (Flink semantics): Flink's WindowOperator adds a record's window to the merging set
    first and checks lateness on the *merged* window (``isWindowLate(actualWindow)``). Records at 0,
    50, 100 (gap 100) form the open session [0, 200); watermark 150 does not fire it (199 > 150). A
    record at t=40 has its own window [40, 140) late (139 <= 150) but merges into [0, 200), which is
    not late: Flink counts it. Here (both paths, and the timer mode) it goes to the late side output."""
    for columnar in (True, False):
        monkeypatch.setattr(window, "COLUMNAR", columnar)
        op = make()
        op.process_batch(
            pa.record_batch({"k": [1, 1, 1], "_ts": pa.array([0, 50, 100], pa.int64()), "v": [1, 1, 1]})
        )
        op.process_watermark(150)
        op.process_batch(pa.record_batch({"k": [1], "_ts": pa.array([40], pa.int64()), "v": [10]}))
        op.process_watermark(10_000)
        got = [(r["window_start"], r["window_end"], r["sum_v"], r["count"]) for r in op.output.rows]
        assert (got, op.output.late) == ([(0, 200, 13, 4)], []), columnar
