"""Bad input gets one line naming the thing and the remedy, and commits nothing."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_jobs.sinks.postgres import PostgresSink, RewindPolicy
from spark_jobs.sinks.postgres_conn import PostgresFailure, PostgresSinkConfigError, PostgresSinkError
from state_store.core.errors import BadInputError, EpochalError
from state_store.testing.postgres import _free_port
from tests.unit.sinks_postgres.conftest import Db, batch, stage


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    return text


@pytest.mark.parametrize(
    ("ddl", "column", "remedy"),
    [
        ("k text UNIQUE, v text, g bigint", "'v'", 'ALTER COLUMN "v" TYPE bigint'),
        ("k text UNIQUE, g bigint", "'v'", 'ADD COLUMN "v" bigint'),
        ("k text, v bigint, g bigint", "'k'", "ADD UNIQUE"),
        (
            "k text UNIQUE, v bigint, g bigint, note text NOT NULL",
            "'note'",
            'ALTER COLUMN "note" DROP NOT NULL',
        ),
        ("k text UNIQUE, v bigint, g bigint", "'k'", 'ALTER COLUMN "k" SET NOT NULL'),
    ],
    ids=["wrong-type", "missing-column", "no-unique-constraint", "extra-not-null-column", "nullable-key"],
)
def test_a_schema_mismatch_is_one_line_and_commits_nothing(
    db: Db, ddl: str, column: str, remedy: str
) -> None:
    db.execute(f"CREATE TABLE {{s}}.out ({ddl})")
    sink = db.sink(unique_key=("k",))
    record = stage(sink, 1, batch(k=["a"], v=[1], g=[0]))
    with pytest.raises(PostgresSinkError) as caught:
        sink.commit([record])
    text = one_line(caught.value)
    assert caught.value.reason is PostgresFailure.SCHEMA_MISMATCH
    assert f"table {db.schema}.out column {column}" in text and remedy in text, text
    assert "nothing was committed" in text
    assert db.query("SELECT count(*) FROM {s}.out") == [(0,)]
    assert db.commits() == [] and sink.committed_checkpoint_ids() == frozenset()


def test_after_fixing_the_table_the_same_records_commit(db: Db) -> None:
    db.execute("CREATE TABLE {s}.out (k text UNIQUE, v text, g bigint)")
    sink = db.sink(unique_key=("k",))
    record = stage(sink, 1, batch(k=["a"], v=[1], g=[0]))
    with pytest.raises(PostgresSinkError):
        sink.commit([record])
    db.execute("ALTER TABLE {s}.out ALTER COLUMN v TYPE bigint USING v::bigint")
    with pytest.raises(PostgresSinkError, match=r"column 'k' is a unique_key column that allows NULL"):
        db.sink(unique_key=("k",)).recover_and_commit([record])
    db.execute("ALTER TABLE {s}.out ALTER COLUMN k SET NOT NULL")
    assert db.sink(unique_key=("k",)).recover_and_commit([record]) == (1,)
    assert db.rows() == [("a", 1, 0)]


def test_a_nullable_key_with_a_nulls_not_distinct_constraint_is_accepted(db: Db) -> None:
    db.execute("CREATE TABLE {s}.out (k text, v bigint, g bigint, UNIQUE NULLS NOT DISTINCT (k))")
    sink = db.sink(unique_key=("k",))
    sink.commit([stage(sink, 1, batch(k=["a"], v=[1], g=[0]))])
    sink.commit([stage(sink, 2, batch(k=["a"], v=[2], g=[0]))])
    assert db.rows() == [("a", 2, 0)]


def test_null_unique_key_values_are_refused_at_write_in_one_line(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    txn = sink.begin_transaction(1, 0, 0, 0)
    with pytest.raises(PostgresSinkConfigError) as caught:
        sink.write(txn, batch(k=pa.array(["a", None], pa.string()), v=[1, 2], g=[0, 0]))
    text = one_line(caught.value)
    assert f"table {db.schema}.out" in text and "unique_key column 'k' has 1 null" in text
    assert "fill or drop those rows" in text
    assert isinstance(caught.value, BadInputError) and not db.exists() and not list(db.store.list(""))


def test_overwrite_needs_the_provenance_columns_on_an_existing_table(db: Db) -> None:
    db.execute("CREATE TABLE {s}.out (k text UNIQUE, v bigint, g bigint)")
    sink = db.sink(unique_key=("k",), on_rewind=RewindPolicy.OVERWRITE)
    with pytest.raises(PostgresSinkError, match=r"epochal_checkpoint_id.*ADD COLUMN") as caught:
        sink.commit([stage(sink, 1, batch(k=["a"], v=[1], g=[0]))])
    one_line(caught.value)


def test_a_compatible_existing_table_is_accepted(db: Db) -> None:
    db.execute("CREATE TABLE {s}.out (k varchar(20) PRIMARY KEY, v numeric, g bigint, note text DEFAULT 'x')")
    sink = db.sink(unique_key=("k",))
    sink.commit([stage(sink, 1, batch(k=["a"], v=pa.array([1], pa.int32()), g=[0]))])
    assert db.rows("k, v, g, note") == [("a", 1, 0, "x")]


def test_a_row_the_table_rejects_is_one_line_and_commits_nothing(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    sink.commit([stage(sink, 1, batch(k=["a"], v=[1], g=[0]))])
    db.execute("ALTER TABLE {s}.out ALTER COLUMN v SET NOT NULL")
    record = stage(sink, 2, batch(k=["b"], v=pa.array([None], pa.int64()), g=[0]))  # v is NOT NULL now
    with pytest.raises(PostgresSinkError) as caught:
        sink.commit([record])
    assert caught.value.reason is PostgresFailure.REJECTED
    assert "null value" in one_line(caught.value) and "nothing was committed" in str(caught.value)
    assert db.rows() == [("a", 1, 0)] and [c[0] for c in db.commits()] == [1]


def test_an_unreachable_server_is_one_line_naming_host_and_port(db: Db) -> None:
    port = _free_port()
    sink = db.sink(unique_key=("k",), dsn=f"host=127.0.0.1 port={port} user=postgres dbname=epochal")
    record = stage(sink, 1, batch(k=["a"], v=[1], g=[0]))
    for call in (lambda: sink.commit([record]), sink.committed_checkpoint_ids, lambda: sink.fence(1)):
        with pytest.raises(PostgresSinkError) as caught:
            call()
        text = one_line(caught.value)
        assert caught.value.reason is PostgresFailure.UNREACHABLE
        assert f"cannot connect to PostgreSQL at 127.0.0.1:{port}" in text and "start the server" in text
        assert isinstance(caught.value, EpochalError)
    assert db.sink(unique_key=("k",)).committed_checkpoint_ids() == frozenset()


def test_a_malformed_dsn_is_bad_input(db: Db) -> None:
    sink = db.sink(dsn="host=127.0.0.1 port")
    with pytest.raises(PostgresSinkConfigError, match="the dsn is malformed") as caught:
        sink.committed_checkpoint_ids()
    assert isinstance(caught.value, BadInputError)
    one_line(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"table": "t"}, "needs exactly one of dsn"),
        ({"table": "t", "dsn": "host=x", "conn_id": "pg"}, "needs exactly one of dsn"),
        ({"table": "a.b.c", "dsn": "host=x"}, "is not a valid name"),
        ({"table": "1t", "dsn": "host=x"}, "is not a valid name"),
        ({"table": "t", "dsn": "host=x", "on_rewind": "drop"}, "on_rewind='drop' is unknown"),
        ({"table": "t", "dsn": "host=x", "unique_key": ("a", "a")}, "must be distinct column names"),
    ],
)
def test_a_bad_spec_is_refused_when_the_job_is_defined(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(PostgresSinkConfigError, match=message) as caught:
        PostgresSink(**kwargs)  # type: ignore[arg-type]
    assert isinstance(caught.value, BadInputError)
    one_line(caught.value)


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (pa.array([[1]], pa.list_(pa.int64())), "cannot store: cast it"),
        (pa.array([1]), None),
    ],
)
def test_output_the_sink_cannot_store_is_refused_at_write(
    db: Db, column: pa.Array, message: str | None
) -> None:
    sink = db.sink(unique_key=("k",))
    txn = sink.begin_transaction(1, 0, 0, 0)
    if message is None:  # the unique key must be an output column
        with pytest.raises(PostgresSinkConfigError, match=r"unique_key column\(s\) \['k'\] are not output"):
            sink.write(txn, pa.record_batch({"x": column}))
    else:
        with pytest.raises(PostgresSinkConfigError, match=message):
            sink.write(txn, pa.record_batch({"k": ["a"], "x": column}))
    with pytest.raises(PostgresSinkConfigError, match="reserved"):
        sink.write(
            sink.begin_transaction(2, 0, 0, 0), pa.record_batch({"k": ["a"], "epochal_generation": [1]})
        )


def test_the_spec_builds_the_sink_without_connecting_and_hides_the_dsn() -> None:
    spec = PostgresSink(table="s.t", dsn="host=nowhere password=secret", unique_key=["k"])
    assert spec.unique_key == ("k",)
    assert "secret" not in repr(spec)
    from state_store.storage import MemoryObjectStore

    sink = spec.create(MemoryObjectStore(), "job", "out")  # no server at 'nowhere': not contacted
    assert (sink.uid, str(sink.table), sink.unique_key, sink.on_rewind) == (
        "out",
        "s.t",
        ("k",),
        RewindPolicy.KEEP,
    )
