"""``conn_id``: an Airflow connection, read by the provider's resolver or from ``AIRFLOW_CONN_*``."""

from __future__ import annotations

import json
import os

import pytest
from psycopg.conninfo import conninfo_to_dict

from spark_jobs.sinks.postgres_conn import (
    PostgresFailure,
    PostgresSinkConfigError,
    PostgresSinkError,
    conninfo_from_airflow_value,
    environment_resolver,
    register_connection_resolver,
)
from tests.unit.sinks_postgres.conftest import Db, batch, stage


@pytest.fixture(autouse=True)
def cli_entry_point() -> None:
    """What the ``epochal`` CLI does at start: read AIRFLOW_CONN_* from the environment."""
    register_connection_resolver("environment", environment_resolver(os.environ))


def commit_one(db: Db, conn_id: str) -> None:
    sink = db.sink(unique_key=("k",), conn_id=conn_id)
    assert sink.commit([stage(sink, 1, batch(k=["a"], v=[1], g=[0]))]) == (1,)
    assert db.rows() == [("a", 1, 0)]


def test_a_conn_id_resolves_from_the_airflow_uri_variable(db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = f"postgresql://postgres@127.0.0.1:{db.server.port}/epochal?sslmode=disable&cursor=named"
    monkeypatch.setenv("AIRFLOW_CONN_PG_EPOCHAL_URI", uri)
    commit_one(db, "pg_epochal_uri")


def test_a_conn_id_resolves_from_the_airflow_json_variable(db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {"conn_type": "postgres", "host": "127.0.0.1", "port": db.server.port, "login": "postgres"}
    monkeypatch.setenv("AIRFLOW_CONN_PG_EPOCHAL_JSON", json.dumps({**doc, "schema": "epochal"}))
    commit_one(db, "pg_epochal_json")


def test_a_conn_id_resolves_through_airflow_when_the_provider_is_loaded(
    db: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    from epochal_airflow.hooks.postgres import postgres_conninfo

    doc = {"conn_type": "postgres", "host": "127.0.0.1", "port": db.server.port, "login": "postgres"}
    monkeypatch.setenv("AIRFLOW_CONN_PG_EPOCHAL_AF", json.dumps({**doc, "schema": "epochal"}))
    info = conninfo_to_dict(postgres_conninfo("pg_epochal_af") or "")
    assert info == {"host": "127.0.0.1", "port": str(db.server.port), "user": "postgres", "dbname": "epochal"}
    commit_one(db, "pg_epochal_af")
    monkeypatch.setenv("AIRFLOW_CONN_PG_EPOCHAL_S3", json.dumps({"conn_type": "aws", "login": "x"}))
    with pytest.raises(PostgresSinkConfigError, match="has type 'aws', not postgres"):
        postgres_conninfo("pg_epochal_s3")


def test_an_unknown_conn_id_is_one_line_with_the_remedies(db: Db) -> None:
    sink = db.sink(conn_id="pg_epochal_missing")
    with pytest.raises(PostgresSinkError) as caught:
        sink.committed_checkpoint_ids()
    assert caught.value.reason is PostgresFailure.NO_CONNECTION
    text = str(caught.value)
    assert "\n" not in text and "'pg_epochal_missing' not found" in text
    assert "AIRFLOW_CONN_PG_EPOCHAL_MISSING" in text and "dsn=" in text


def test_airflow_connection_values_map_to_libpq_keywords() -> None:
    uri = "postgres://us%40er:p%2Fw@db.example:6543/analytics?sslmode=require&connect_timeout=3&x=1"
    assert conninfo_to_dict(conninfo_from_airflow_value(uri, "c")) == {
        "host": "db.example",
        "port": "6543",
        "user": "us@er",
        "password": "p/w",
        "dbname": "analytics",
        "sslmode": "require",
        "connect_timeout": "3",
    }
    with pytest.raises(PostgresSinkConfigError, match="scheme 'mysql', not postgres"):
        conninfo_from_airflow_value("mysql://h/db", "c")
    with pytest.raises(PostgresSinkConfigError, match="AIRFLOW_CONN_C is not valid JSON"):
        conninfo_from_airflow_value("{nope", "c")
