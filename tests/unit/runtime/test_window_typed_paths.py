"""The columnar window paths beyond int Count/Sum -- string keys, float values, Min/Max/First/Last --
give the heap backend's output and state exactly: on randomized jobs (hypothesis) across snapshots,
restores and rescales 4 -> 2 -> 8, with the path switched between epochs (either path restores the
other's files), through a crash at every kill point, and through savepoints written by one path and
restored on the other.

Each run goes epoch by epoch in process and returns the committed rows and ``state_digest`` of the
latest checkpoint (every entry, key group, window and accumulator, floats by ``repr``: bit for bit).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.windows import (
    Aggregates,
    Avg,
    Count,
    EventTimeSessionWindows,
    First,
    Last,
    Max,
    Min,
    SlidingEventTimeWindows,
    Sum,
    TumblingEventTimeWindows,
)
from spark_jobs.chaos.observe import state_digest
from spark_jobs.lifecycle.restore import RestoreRequest, restore
from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.runtime.operators import decimals, window
from spark_jobs.runtime.operators.session_columns import SessionColumns
from spark_jobs.runtime.operators.window_columns import WindowColumns
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import CompletedCheckpointStore, JobLayout, killpoints
from state_store.storage import open_store
from state_store.testing import KillAt, ManualClock, SimulatedCrash
from tests.unit.runtime.support import Collect

STEP = 10_000
AGGREGATES = {
    "count": lambda: Count(),
    "sum": lambda: Sum("amount", name="total"),
    "min": lambda: Min("amount", name="low"),
    "max": lambda: Max("amount", name="high"),
    "first": lambda: First("amount", name="opening"),
    "last": lambda: Last("amount", name="closing"),
    "avg": lambda: Avg("amount", name="mean"),
}


@dataclass(frozen=True)
class Variant:
    string_keys: bool
    values: str
    """int, float or decimal (scale 2)"""
    aggregates: tuple[str, ...]
    sliding: bool
    seed: int
    keys: int
    lateness: int = 0
    """allowed_lateness_ms; with it the job's watermark lags less than the input's disorder, so
    some records arrive after their window fired (kept and re-emitted) or after its lateness (late)"""
    session: bool = False
    """session windows (gap 3 s) instead of tumbling/sliding ones"""


FLOAT_STRINGS = Variant(True, "float", tuple(AGGREGATES), False, 3, 30)


def _shape(variant: Variant) -> Any:
    def shape(batch: pa.RecordBatch) -> pa.RecordBatch:
        value = batch.column("value")
        if variant.values == "float":
            amount = pc.multiply(pc.cast(value, pa.float64()), 0.1)
        elif variant.values == "decimal":
            amount = decimals.rescale(pc.multiply(value, 7), 2)  # value * 0.07, decimal128(38, 2)
        else:
            amount = value
        batch = batch.append_column("amount", amount)
        if not variant.string_keys:
            key = pc.cast(pc.utf8_slice_codeunits(batch.column("user_id"), 1), pa.int64())
            batch = batch.set_column(batch.schema.get_field_index("user_id"), "user_id", key)
        return batch

    return shape


def job_of(variant: Variant, parallelism: int) -> Job:
    job = Job("typed", parallelism=parallelism, max_parallelism=32, chunk_size=48)
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=variant.seed, events_per_second=[60, 35],
        out_of_orderness_ms=[2_000, 700], keys=variant.keys, start_ms=DEFAULT_START_MS,
    )  # fmt: skip
    assigner: Any = (
        SlidingEventTimeWindows(10_000, 5_000) if variant.sliding else TumblingEventTimeWindows(10_000)
    )
    if variant.session:
        assigner = EventTimeSessionWindows(3_000)
    (
        job.source(source, uid="clicks", out_of_orderness_ms=300 if variant.lateness else 2_000)
        .map(_shape(variant))
        .key_by("user_id")
        .window(
            assigner,
            Aggregates(*(AGGREGATES[a]() for a in variant.aggregates)),
            uid="per-user",
            allowed_lateness_ms=variant.lateness,
        )
        .sink(ParquetSink(), uid="out")
    )
    return job


def _result(uri: str, job: Job) -> tuple[list[Any], dict[str, Any]]:
    store = open_store(uri)
    rows = sorted(repr(tuple(r.values())) for r in read_committed(store, job.job_id, "out").to_pylist())
    completed, _ = CompletedCheckpointStore.recover(store, JobLayout(job.job_id), 1)
    latest = completed.latest()
    assert latest is not None
    return rows, state_digest(store, latest.metadata, job.max_parallelism)


class _Merges:
    """Counts chunks the columns merged (proof the columnar path ran)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = WindowColumns.merge_all
        original_sessions = SessionColumns.merge

        def counting(cols: WindowColumns, chunks: Any) -> None:
            self.count += bool(chunks)
            original(cols, chunks)

        def counting_sessions(cols: SessionColumns, *args: Any) -> None:
            original_sessions(cols, *args)
            self.count += 1

        monkeypatch.setattr(WindowColumns, "merge_all", counting)
        monkeypatch.setattr(SessionColumns, "merge", counting_sessions)


def run(
    uri: str,
    monkeypatch: pytest.MonkeyPatch,
    variant: Variant,
    columnar: list[bool],
    parallelism: list[int],
    kill: str | None = None,
) -> tuple[list[Any], dict[str, Any]]:
    """One epoch per entry of ``columnar``; with ``kill``, from the second epoch on, the first cycle
    that reaches the kill point crashes there and the next cycle recovers and runs the epoch again
    (the clock does not move)."""
    clock = ManualClock(DEFAULT_START_MS)
    job = job_of(variant, parallelism[0])
    crashes = 0
    for epoch, on in enumerate(columnar):
        monkeypatch.setattr(window, "COLUMNAR", on)
        job = job_of(variant, parallelism[epoch])
        clock.advance(STEP)
        if kill is not None and epoch >= 1 and not crashes:
            try:
                report = run_cycle(job, uri, clock, executor="local", kill=KillAt(kill))  # type: ignore[arg-type]
            except SimulatedCrash:
                crashes += 1
                report = run_cycle(job, uri, clock, executor="local")
                # after a crash past the commit point the epoch is complete: the cycle only recovers
                assert report.status in ("completed", "skipped"), report
                continue
        else:
            report = run_cycle(job, uri, clock, executor="local")
        assert report.status == "completed", report
    assert kill is None or crashes == 1, f"no cycle reached kill point {kill}"
    return _result(uri, job)


SCALES = [4, 4, 2, 2, 8, 8]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.builds(
        Variant,
        string_keys=st.booleans(),
        values=st.sampled_from(["int", "float", "decimal"]),
        aggregates=st.lists(st.sampled_from(sorted(AGGREGATES)), min_size=1, max_size=7, unique=True).map(
            tuple
        ),
        sliding=st.booleans(),
        seed=st.integers(0, 1_000),
        keys=st.sampled_from([5, 40, 400]),
        lateness=st.sampled_from([0, 0, 900]),
    ),
    st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_randomized_jobs_give_the_heap_backends_output_and_state(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    variant: Variant,
    mixed: list[bool],
) -> None:
    base = tmp_path_factory.mktemp("typed")
    merges = _Merges(monkeypatch)
    columns = run((base / "columns").as_uri(), monkeypatch, variant, [True] * 6, SCALES)
    assert merges.count > 0
    merges.count = 0
    heap = run((base / "heap").as_uri(), monkeypatch, variant, [False] * 6, SCALES)
    assert merges.count == 0
    assert columns[0], "windows closed"
    assert columns == heap
    assert run((base / "mixed").as_uri(), monkeypatch, variant, mixed, SCALES) == heap


@pytest.mark.parametrize("point", killpoints.ALL)
def test_a_crash_at_every_kill_point_recovers_to_the_heap_backends_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    columns = run((tmp_path / "columns").as_uri(), monkeypatch, FLOAT_STRINGS, [True] * 5, SCALES, kill=point)
    heap = run((tmp_path / "heap").as_uri(), monkeypatch, FLOAT_STRINGS, [False] * 5, SCALES)
    assert columns[0] and columns == heap


def _savepoint_then_restore(tmp: Path, monkeypatch: pytest.MonkeyPatch, write: bool, read: bool) -> Any:
    """Three epochs on one path, a savepoint, a restore into another store at parallelism 3 and
    three epochs on the other path."""
    monkeypatch.setattr(window, "COLUMNAR", write)
    clock = ManualClock(DEFAULT_START_MS)
    job = job_of(FLOAT_STRINGS, 2)
    for _ in range(3):
        clock.advance(STEP)
        assert run_cycle(job, (tmp / "prod").as_uri(), clock, executor="local").status == "completed"
    info = take_savepoint(job, (tmp / "prod").as_uri(), clock, "sp")
    monkeypatch.setattr(window, "COLUMNAR", read)
    target = (tmp / "restored").as_uri()
    rescaled = job_of(FLOAT_STRINGS, 3)
    restore(rescaled, target, clock, RestoreRequest(source=info["location"]))
    for _ in range(3):
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
    assert _savepoint_then_restore(tmp_path / "c2c", monkeypatch, True, True) == heap


def _weak_hash(keys: pa.Array) -> Any:
    """Every key of one length gets one hash: ``u1`` and ``u2`` collide."""
    return pc.utf8_length(keys).to_numpy().astype("int64")


def test_two_string_keys_with_one_64_bit_hash_both_stay_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_jobs.runtime.operators import window_columns

    heap = run((tmp_path / "heap").as_uri(), monkeypatch, FLOAT_STRINGS, [False] * 4, SCALES)
    monkeypatch.setattr(window_columns, "HASH_FUNCTION", _weak_hash)
    monkeypatch.setattr(window, "_REPORTED", set())
    collided = run((tmp_path / "weak").as_uri(), monkeypatch, FLOAT_STRINGS, [True] * 4, SCALES)
    assert collided == heap and heap[0]
    store = open_store((tmp_path / "weak").as_uri())
    completed, _ = CompletedCheckpointStore.recover(store, JobLayout("typed"), 1)
    latest = completed.latest()
    assert latest is not None
    reasons = {t.metrics.get("heap_fallback") for t in latest.metadata.tasks if t.task.uid == "per-user"}
    assert reasons & {"two string keys with the same 64-bit hash", window.RESTORED_WITHOUT_COLUMNS}


def test_a_collision_is_refused_before_anything_changes_and_a_restore_leaves_it_to_the_heap() -> None:
    import numpy as np

    from spark_jobs.runtime.operators import window_columns
    from spark_jobs.runtime.operators.window_columns import Refused
    from state_store.core.keygroups import KeyGroupRange
    from state_store.core.state.descriptors import StateKind
    from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow

    cols = WindowColumns(["add"])
    original = window_columns.HASH_FUNCTION
    try:
        window_columns.HASH_FUNCTION = _weak_hash
        cols.merge(0, pa.array(["ab"]), np.array([1], np.int32), [np.array([1.5])])
        before = {kg: list(r) for kg, r in cols.snapshot_rows().items()}
        with pytest.raises(Refused, match="same 64-bit hash"):  # "cd" hashes like "ab"
            cols.merge_all([(10, pa.array(["x"]), np.array([2], np.int32), [np.array([1.0])]),
                            (0, pa.array(["cd"]), np.array([1], np.int32), [np.array([2.5])])])  # fmt: skip
        assert {kg: list(r) for kg, r in cols.snapshot_rows().items()} == before and 10 not in cols.runs
        with pytest.raises(Refused, match="same 64-bit hash"):  # two new keys of one hash in a chunk
            cols.merge(0, pa.array(["xy", "zw"]), np.array([1, 1], np.int32), [np.array([1.0, 2.0])])
        rows = [StateRow("ab", 0, [1.5], None), StateRow("cd", 0, [2.5], None)]
        snap = KeyedStateSnapshot(32, KeyGroupRange(0, 31), {"acc": StateKind.VALUE}, {1: {"acc": rows}})
        assert WindowColumns.restore(["add"], [snap], "acc", KeyGroupRange(0, 31), None) is None
    finally:
        window_columns.HASH_FUNCTION = original
    restored = WindowColumns.restore(["add"], [snap], "acc", KeyGroupRange(0, 31), None)
    assert restored is not None and sorted(restored.runs[0].keys.to_pylist()) == ["ab", "cd"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 199), st.floats(-1e12, 1e12)),
            min_size=1,
            max_size=20,
        ),
        min_size=1,
        max_size=5,
    ),
    st.booleans(),
)
def test_float_sums_equal_a_sequential_python_reference_bit_for_bit(
    chunks: list[list[tuple[str, int, float]]], columnar: bool
) -> None:
    """The documented order of additions: within a chunk, a window's values are added one by one
    in record order starting from 0.0 (Arrow's grouped sum); each chunk's partial is then added to
    the accumulator (``acc + partial``, the accumulator starting at 0)."""
    from spark_jobs.runtime.operators.base import OperatorContext
    from state_store.core.keygroups import KeyGroupRange

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(window, "COLUMNAR", columnar)
        op = window.WindowOperator("w", "k", TumblingEventTimeWindows(100), Aggregates(Count(), Sum("v")), 0)
        out = Collect()
        op.output = out
        op.open(OperatorContext("job", 0, 1, 8, KeyGroupRange(0, 7), 0, 1), None)
        reference: dict[tuple[str, int], Any] = {}
        for chunk in chunks:
            op.process_batch(pa.RecordBatch.from_pylist([{"k": k, "_ts": t, "v": v} for k, t, v in chunk]))
            partials: dict[tuple[str, int], float] = {}
            for k, t, v in chunk:
                window_key = (k, t - t % 100)
                partials[window_key] = partials.get(window_key, 0.0) + v
            for window_key, partial in partials.items():
                reference[window_key] = reference.get(window_key, 0) + partial
        assert (op.cols is not None) == columnar
        op.process_watermark(10_000)
    got = {(r["k"], r["window_start"]): r["sum_v"] for r in out.rows}
    assert {w: repr(v) for w, v in got.items()} == {w: repr(v) for w, v in reference.items()}


@pytest.mark.parametrize("sessions", [False, True], ids=["tumbling", "sessions"])
def test_avg_is_the_sum_over_the_count_of_each_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sessions: bool
) -> None:
    from spark_jobs.api.windows import EventTimeSessionWindows

    job = Job("avg", parallelism=2, max_parallelism=32, chunk_size=48)
    source = GeneratorSource(uid="clicks", partitions=2, seed=9, events_per_second=[50, 30], keys=20,
                             start_ms=DEFAULT_START_MS)  # fmt: skip
    assigner = EventTimeSessionWindows(1_500) if sessions else TumblingEventTimeWindows(10_000)
    (
        job.source(source, uid="clicks", out_of_orderness_ms=1_000)
        .map(_shape(FLOAT_STRINGS))
        .key_by("user_id")
        .window(assigner, Aggregates(Count(), Sum("amount", name="total"), Avg("amount")), uid="per-user")
        .sink(ParquetSink(), uid="out")
    )
    clock, uri = ManualClock(DEFAULT_START_MS), tmp_path.as_uri()
    for _ in range(3):
        clock.advance(STEP)
        assert run_cycle(job, uri, clock, executor="local").status == "completed"
    rows = read_committed(open_store(uri), job.job_id, "out").to_pylist()
    assert rows and {"avg_amount", "total", "count"} <= set(rows[0])
    assert all(r["avg_amount"] == float(r["total"]) / float(r["count"]) for r in rows)
    assert not any(name.startswith("avg_amount.") for name in rows[0])


def test_decimal_amounts_sum_exactly_as_decimals_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from decimal import Decimal

    variant = Variant(False, "decimal", ("count", "sum", "min", "max", "avg"), False, 4, 25)
    merges = _Merges(monkeypatch)
    columns = run((tmp_path / "columns").as_uri(), monkeypatch, variant, [True] * 4, SCALES)
    assert merges.count > 0
    assert columns == run((tmp_path / "heap").as_uri(), monkeypatch, variant, [False] * 4, SCALES)
    out = read_committed(open_store((tmp_path / "columns").as_uri()), "typed", "out")
    assert out.schema.field("total").type == pa.decimal128(38, 2) and out.schema.field(
        "low"
    ).type == pa.decimal128(38, 2)
    for row in out.to_pylist():
        assert isinstance(row["total"], Decimal) and row["total"] % Decimal("0.07") == 0
        unscaled = int(row["total"] * 100)
        assert row["mean"] == unscaled / (row["count"] * 100)  # one float division, correctly rounded


def test_decimals_beyond_18_digits_or_of_another_scale_are_refused_with_a_remedy() -> None:
    from spark_jobs.runtime.operators.base import OperatorContext
    from state_store.core.errors import BadInputError
    from state_store.core.keygroups import KeyGroupRange

    op = window.WindowOperator("w", "k", TumblingEventTimeWindows(100), Aggregates(Sum("v")), 0)
    op.output = Collect()
    op.open(OperatorContext("job", 0, 1, 8, KeyGroupRange(0, 7), 0, 1), None)

    def batch(value: pa.Array) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict({"k": pa.array([1]), "_ts": pa.array([5]), "v": value})

    from decimal import Decimal

    with pytest.raises(BadInputError, match=r"column 'v' holds a decimal of more than 18 digits.*cast it"):
        op.process_batch(batch(pa.array([Decimal("1" * 20)], pa.decimal128(30, 0))))
    op.process_batch(batch(pa.array([Decimal("1.25")], pa.decimal128(10, 2))))
    with pytest.raises(BadInputError, match=r"changed from scale 2 to decimal128.10, 3.*scale 2"):
        op.process_batch(batch(pa.array([Decimal("1.250")], pa.decimal128(10, 3))))
    op.process_watermark(1_000)
    assert [r["sum_v"] for r in op.output.rows] == [Decimal("1.25")]  # type: ignore[attr-defined]


@pytest.mark.parametrize("columnar", [True, False])
def test_a_late_record_that_opens_a_fired_window_is_emitted_once(
    monkeypatch: pytest.MonkeyPatch, columnar: bool
) -> None:
    """Flink's EventTimeTrigger fires such a record at once and registers no timer in the past (a
    timer at ``end - 1`` below the watermark would fire the same window again at the next
    watermark: a duplicate row)."""
    from spark_jobs.runtime.operators.base import OperatorContext
    from state_store.core.keygroups import KeyGroupRange

    monkeypatch.setattr(window, "COLUMNAR", columnar)
    op = window.WindowOperator("w", "k", TumblingEventTimeWindows(100), Aggregates(Count()), 50)
    op.output = Collect()
    op.open(OperatorContext("job", 0, 1, 8, KeyGroupRange(0, 7), 0, 1), None)
    assert (op.cols is not None) == columnar
    op.process_batch(pa.RecordBatch.from_pylist([{"k": 1, "_ts": 10}]))
    op.process_watermark(120)  # [0, 100) fires for key 1
    op.process_batch(pa.RecordBatch.from_pylist([{"k": 2, "_ts": 20}, {"k": 1, "_ts": 30}]))  # late, kept
    op.process_watermark(130)
    op.process_watermark(200)  # cleanup
    got = [(r["k"], r["count"]) for r in op.output.rows]  # type: ignore[attr-defined]
    assert sorted(got) == [(1, 1), (1, 2), (2, 1)]  # key 1 fired, then again with its late record


LATE = Variant(True, "float", ("count", "sum", "max", "avg"), True, 7, 25, lateness=900)


def test_allowed_lateness_runs_on_the_columns_and_equals_the_heap_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    merges = _Merges(monkeypatch)
    columns = run((tmp_path / "columns").as_uri(), monkeypatch, LATE, [True] * 6, SCALES)
    assert merges.count > 0
    heap = run((tmp_path / "heap").as_uri(), monkeypatch, LATE, [False] * 6, SCALES)
    assert columns == heap
    keys = [r.rsplit(",", 6)[0] for r in heap[0]]  # (user, window start, ...) of every emitted row
    assert len(keys) > len(set(keys)), "some windows fired again for records inside the lateness"
    assert (
        run((tmp_path / "mixed").as_uri(), monkeypatch, LATE, [True, False, True, False, False, True], SCALES)
        == heap
    )


@pytest.mark.parametrize("point", killpoints.ALL)
def test_lateness_survives_a_crash_at_every_kill_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    columns = run((tmp_path / "columns").as_uri(), monkeypatch, LATE, [True] * 5, SCALES, kill=point)
    assert columns == run((tmp_path / "heap").as_uri(), monkeypatch, LATE, [False] * 5, SCALES)


def test_sessions_that_touch_merge_as_in_flink_and_spark() -> None:
    """Flink's ``TimeWindow.intersects`` (``start <= other.end and end >= other.start``) and Spark's
    session_window merge two sessions when one ends where the other starts: two records exactly
    one gap apart are one session (found by the workload matrix against Spark)."""
    from spark_jobs.api.windows import EventTimeSessionWindows
    from spark_jobs.runtime.operators.base import OperatorContext
    from state_store.core.keygroups import KeyGroupRange

    op = window.WindowOperator("w", "k", EventTimeSessionWindows(100), Aggregates(Count()), 0)
    op.output = Collect()
    op.open(OperatorContext("job", 0, 1, 8, KeyGroupRange(0, 7), 0, 1), None)
    op.process_batch(
        pa.RecordBatch.from_pylist([{"k": 1, "_ts": 0}, {"k": 1, "_ts": 100}, {"k": 1, "_ts": 201}])
    )
    op.process_watermark(1_000)
    got = sorted((r["window_start"], r["window_end"], r["count"]) for r in op.output.rows)  # type: ignore[attr-defined]
    assert got == [(0, 200, 2), (201, 301, 1)]
