"""Repros of the adversarial review of issue 20's window changes (notes: /work/notes/review20.md),
each failing before its fix: the operator driven directly, on the heap and the columnar path."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from spark_jobs.api.functions import BatchProcessFunction
from spark_jobs.api.windows import Aggregates, Avg, Count, Sum, TumblingEventTimeWindows
from spark_jobs.runtime.keys import key_groups
from spark_jobs.runtime.operators import window
from spark_jobs.runtime.operators.base import OperatorContext, OperatorRestore
from spark_jobs.runtime.operators.batch_process import BatchProcessOperator
from state_store.core.errors import BadInputError
from state_store.core.keygroups import KeyGroupRange
from state_store.core.stream import MAX_TIMESTAMP
from tests.unit.runtime.support import Collect


def make(aggs: Any, lateness: int, restored: Any = None, kgs: tuple[int, int] = (0, 7)) -> Any:
    op = window.WindowOperator("w", "k", TumblingEventTimeWindows(100), aggs, lateness)
    op.output = Collect()
    op.open(OperatorContext("job", 0, 1, 8, KeyGroupRange(*kgs), 0, 1), restored)
    return op


def restore_of(snaps: list[Any], checkpoint_id: int) -> OperatorRestore:
    return OperatorRestore(
        keyed=[s.keyed for s in snaps],
        timers={k: v for s in snaps for k, v in s.timers.items()},
        extra={"parts": [s.extra for s in snaps]},
        checkpoint_id=checkpoint_id,
    )


def batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows)


@pytest.mark.parametrize("columnar", [False, True])
def test_a_timer_checkpoint_restored_rescaled_keeps_every_subtask_in_one_mode(
    monkeypatch: pytest.MonkeyPatch, columnar: bool
) -> None:
    """A checkpoint with lateness timers (the code before issue 20) restored at parallelism 2, then
    rescaled to 1: no subtask may open windows without timers, or they never fire after the rescale."""
    monkeypatch.setattr(window, "COLUMNAR", columnar)
    kg = lambda k: int(key_groups(pa.array([k]), 8)[0])  # noqa: E731
    ka = next(k for k in range(100) if kg(k) <= 3)
    kb = next(k for k in range(100) if kg(k) >= 4)
    monkeypatch.setattr(window, "INDEXED_FIRING", False)  # the timer mode, as the old code wrote it
    old = make(Aggregates(Count()), 100)
    old.process_batch(batch([{"k": ka, "_ts": 1_010}]))
    first = old.snapshot(1)
    monkeypatch.setattr(window, "INDEXED_FIRING", True)
    parts = []
    for lo, hi in ((0, 3), (4, 7)):
        restored = restore_of([first], 1)
        restored.timers = {g: v for g, v in restored.timers.items() if lo <= g <= hi}
        op = make(Aggregates(Count()), 100, restored, kgs=(lo, hi))
        op.process_batch(batch([{"k": ka if lo == 0 else kb, "_ts": 2_010}]))
        op.process_watermark(500)
        parts.append(op.snapshot(2))
    merged = make(Aggregates(Count()), 100, restore_of(parts, 2))
    merged.process_watermark(10_000)
    got = sorted((r["k"], r["window_start"], r["count"]) for r in merged.output.rows)
    assert got == sorted([(ka, 1000, 1), (ka, 2000, 1), (kb, 2000, 1)])


@pytest.mark.parametrize("columnar", [False, True])
def test_decimal_sums_beyond_int64_come_out_as_wide_decimals(
    monkeypatch: pytest.MonkeyPatch, columnar: bool
) -> None:
    monkeypatch.setattr(window, "COLUMNAR", columnar)
    op = make(Aggregates(Sum("v"), Avg("v", name="mean"), Count()), 0)
    value = Decimal("-999999999999999.999")  # 18 digits: each value fits, their sum does not
    op.process_batch(batch([{"k": 1, "_ts": 5, "v": value}] * 10).cast(
        pa.schema([("k", pa.int64()), ("_ts", pa.int64()), ("v", pa.decimal128(18, 3))])
    ))  # fmt: skip
    op.process_watermark(1_000)
    (row,) = op.output.rows
    assert row["sum_v"] == value * 10 and row["count"] == 10
    assert row["mean"] == pytest.approx(float(value))


@pytest.mark.parametrize("columnar", [False, True])
@pytest.mark.parametrize("lateness", [(1 << 63) - 1, 3 << 61])
def test_an_allowed_lateness_near_int64_max_keeps_every_window(
    monkeypatch: pytest.MonkeyPatch, columnar: bool, lateness: int
) -> None:
    monkeypatch.setattr(window, "COLUMNAR", columnar)
    op = make(Aggregates(Count()), lateness)
    op.process_batch(batch([{"k": 1, "_ts": 10}]))
    op.process_watermark(1_500)
    op.process_batch(batch([{"k": 1, "_ts": 2_010}]))
    op.process_watermark(3_000)
    assert sorted((r["window_start"], r["count"]) for r in op.output.rows) == [(0, 1), (2000, 1)]
    assert op.output.late == []


class Chain(BatchProcessFunction):
    """A timer at ts + 5; when it fires, a follow-up timer one ms earlier (already past)."""

    state_schema = pa.schema([("n", pa.int64())])

    def process(self, rows: pa.Table, state: pa.Table, ctx: Any) -> None:
        ctx.register_timers(rows.column("key"), pa.array([t + 5 for t in rows.column("_ts").to_pylist()]))

    def on_timers(self, timers: pa.Table, state: pa.Table, ctx: Any) -> pa.Table:
        odd = [
            (k, t)
            for k, t in zip(timers.column("key").to_pylist(), timers.column("timestamp").to_pylist())
            if t % 2
        ]
        if odd:
            ctx.register_timers(pa.array([k for k, _ in odd]), pa.array([t - 1 for _, t in odd]))
        return pa.table({"key": timers.column("key"), "fired": timers.column("timestamp")})


def _batch_op(fn: Any) -> BatchProcessOperator:
    op = BatchProcessOperator("b", "k", fn)
    op.output = Collect()  # type: ignore[assignment]
    op.open(OperatorContext("job", 0, 1, 8, KeyGroupRange(0, 7), 0, 1), None)
    return op


@pytest.mark.parametrize("final", [1_000, MAX_TIMESTAMP])
def test_a_timer_on_timers_sets_at_or_below_the_watermark_fires_in_the_same_advance(final: int) -> None:
    op = _batch_op(Chain())
    op.process_batch(batch([{"k": 1, "_ts": 10}]))
    op.process_watermark(final)
    assert [r["fired"] for r in op.output.rows] == [15, 14]  # type: ignore[attr-defined]


def test_timers_with_null_or_unmatched_timestamps_are_refused() -> None:
    class Bad(BatchProcessFunction):
        state_schema = pa.schema([("n", pa.int64())])

        def process(self, rows: pa.Table, state: pa.Table, ctx: Any) -> None:
            ctx.register_timers(pa.array([1, 2]), pa.array([5]))

    with pytest.raises(
        BadInputError, match=r"got 2 keys and 1 timestamps.*one non-null timestamp per non-null key"
    ):
        _batch_op(Bad()).process_batch(batch([{"k": 1, "_ts": 10}]))


@pytest.mark.parametrize("columnar", [False, True])
def test_int_sums_that_would_wrap_in_a_chunk_stay_exact(
    monkeypatch: pytest.MonkeyPatch, columnar: bool
) -> None:
    """Arrow's grouped sum of int64 wraps silently; a chunk whose sum could pass int64 is summed as
    decimals (the heap backend keeps exact Python ints; the columns hand over to it)."""
    monkeypatch.setattr(window, "COLUMNAR", columnar)
    op = make(Aggregates(Sum("v"), Count()), 0)
    op.process_batch(batch([{"k": 1, "_ts": 5, "v": 1 << 61}] * 3 + [{"k": 2, "_ts": 6, "v": 7}]))
    op.process_batch(batch([{"k": 1, "_ts": 7, "v": -(1 << 62)}] * 2))  # back inside int64
    op.process_watermark(1_000)
    got = {r["k"]: (r["sum_v"], r["count"]) for r in op.output.rows}
    assert got == {1: (3 * (1 << 61) - 2 * (1 << 62), 5), 2: (7, 1)}  # 3 * 2**61 wrapped before


@pytest.mark.parametrize("columnar", [False, True])
def test_an_int_result_beyond_int64_is_refused_naming_the_aggregate(
    monkeypatch: pytest.MonkeyPatch, columnar: bool
) -> None:
    monkeypatch.setattr(window, "COLUMNAR", columnar)
    op = make(Aggregates(Sum("v")), 0)
    op.process_batch(batch([{"k": 1, "_ts": 5, "v": 1 << 62}] * 3))
    with pytest.raises(
        BadInputError, match="aggregate 'sum_v' of window operator 'w' reached a value beyond int64"
    ):
        op.process_watermark(1_000)


@pytest.mark.parametrize("columnar", [False, True])
@pytest.mark.parametrize(
    "chunks", [[[float("nan"), 1.0, 0.5]], [[float("nan")], [1.0, 0.5]], [[1.0, 0.5], [float("nan")]]]
)
def test_min_and_max_skip_nan_whatever_the_chunking(
    monkeypatch: pytest.MonkeyPatch, columnar: bool, chunks: list[list[float]]
) -> None:
    from spark_jobs.api.windows import Max, Min

    monkeypatch.setattr(window, "COLUMNAR", columnar)
    op = make(Aggregates(Min("v"), Max("v")), 0)
    for values in chunks:
        op.process_batch(batch([{"k": 1, "_ts": 5, "v": v} for v in values]))
    op.process_watermark(1_000)
    (row,) = op.output.rows
    assert (row["min_v"], row["max_v"]) == (0.5, 1.0)
