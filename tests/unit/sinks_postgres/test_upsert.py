"""Writing rows: upsert by unique_key across epochs, append exactly once without one, column types."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa

from tests.unit.sinks_postgres.conftest import Db, batch, stage


def test_rows_are_upserted_by_unique_key_across_epochs(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    sink.commit([stage(sink, 1, batch(k=["a", "b"], v=[1, 1], g=[0, 0]))])
    sink.commit([stage(sink, 2, batch(k=["b", "c"], v=[2, 2], g=[0, 0]))])
    sink.commit([stage(sink, 3, batch(k=["a"], v=[3], g=[0]))])
    assert db.rows() == [("a", 3, 0), ("b", 2, 0), ("c", 2, 0)]
    assert db.query("SELECT checkpoint_id, row_count FROM {s}.epochal_sink_commits ORDER BY seq") == [
        (1, 2),
        (2, 2),
        (3, 1),
    ]


def test_the_last_row_of_a_key_wins_inside_one_checkpoint(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    records = [
        stage(sink, 1, batch(k=["a", "a"], v=[1, 2], g=[0, 0]), subtask=0),
        stage(sink, 1, batch(k=["a", "b"], v=[3, 4], g=[0, 0]), batch(k=["a"], v=[5], g=[0]), subtask=1),
    ]
    assert sink.commit(records) == (1,)
    assert db.rows() == [("a", 5, 0), ("b", 4, 0)]


def test_a_composite_key_and_a_table_of_key_columns_only(db: Db) -> None:
    sink = db.sink(unique_key=("k", "v"))
    sink.commit([stage(sink, 1, batch(k=["a", "a"], v=[1, 2]))])
    sink.commit([stage(sink, 2, batch(k=["a", "b"], v=[1, 1]))])
    assert db.rows("k, v") == [("a", 1), ("a", 2), ("b", 1)]
    constraint = db.query(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = '{s}.out'::regclass "
        "AND contype = 'u'"
    )
    assert constraint == [("UNIQUE (k, v)",)]


def test_without_unique_key_rows_are_appended_exactly_once(db: Db) -> None:
    sink = db.sink()
    for n in (1, 2, 3):
        records = [stage(sink, n, batch(k=["a", "a"], v=[n, n], g=[0, 0]), subtask=s) for s in (0, 1)]
        assert sink.commit(records) == (n,)
        assert sink.commit(records) == ()
        assert db.sink().recover_and_commit(records) == ()
    assert db.rows() == [("a", n, 0) for n in (1, 2, 3) for _ in range(4)]
    assert not db.query(
        "SELECT 1 FROM pg_constraint WHERE conrelid = '{s}.out'::regclass AND contype IN ('u', 'p')"
    )


def test_column_types_round_trip(db: Db) -> None:
    when = dt.datetime(2026, 11, 25, 12, 30, 1, 250000, tzinfo=dt.UTC)
    table = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "small": pa.array([-3, None], pa.int16()),
            "i32": pa.array([7, 8], pa.int32()),
            "u64": pa.array([2**64 - 1, 0], pa.uint64()),
            "f32": pa.array([0.5, 1.5], pa.float32()),
            "f64": pa.array([0.1, None], pa.float64()),
            "s": pa.array(["x", "é ü"], pa.string()),
            "cat": pa.array(["p", "q"]).dictionary_encode(),
            "ok": pa.array([True, False]),
            "raw": pa.array([b"\x00\x01", b""], pa.binary()),
            "day": pa.array([dt.date(2026, 1, 2), None], pa.date32()),
            "at": pa.array([when, when], pa.timestamp("us", tz="UTC")),
            "naive": pa.array([when.replace(tzinfo=None)] * 2, pa.timestamp("ms")),
            "amount": pa.array([Decimal("12.34"), Decimal("-0.01")], pa.decimal128(10, 2)),
        }
    )
    sink = db.sink(unique_key=("id",))
    sink.commit([stage(sink, 1, table.to_batches()[0])])
    types = dict(
        db.query(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = '{s}' AND table_name = 'out'"
        )
    )
    assert types["small"] == "smallint" and types["u64"] == "numeric" and types["f32"] == "real"
    assert types["at"] == "timestamp with time zone" and types["naive"] == "timestamp without time zone"
    assert types["cat"] == "text" and types["raw"] == "bytea" and types["amount"] == "numeric"
    rows = db.rows(", ".join(table.column_names), table="out")
    assert rows == [
        (1, -3, 7, Decimal(2**64 - 1), 0.5, 0.1, "x", "p", True, b"\x00\x01", dt.date(2026, 1, 2), when,
         when.replace(tzinfo=None, microsecond=250000), Decimal("12.34")),
        (2, None, 8, Decimal(0), 1.5, None, "é ü", "q", False, b"", None, when,
         when.replace(tzinfo=None, microsecond=250000), Decimal("-0.01")),
    ]  # fmt: skip
