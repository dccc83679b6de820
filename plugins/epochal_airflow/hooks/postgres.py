"""Airflow connections for ``PostgresSink(conn_id=...)``.

``spark_jobs`` never imports Airflow, so the sink asks the resolvers registered with
``spark_jobs.sinks.postgres_conn.register_connection_resolver``; importing this module (the
provider's ``hooks`` package does) registers :func:`postgres_conninfo`, which reads the connection
with ``BaseHook.get_connection`` -- the lookup ``PostgresHook`` itself makes, through every secrets
backend, the metastore and ``AIRFLOW_CONN_*`` -- so the Airflow postgres provider is not needed.
Fields map to libpq keywords (host, port, login -> user, password, schema -> dbname; extras that
are libpq keywords, such as ``sslmode``). The conninfo holds the password: it is never logged.
"""

from __future__ import annotations

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from spark_jobs.sinks.postgres_conn import (
    PostgresSinkConfigError,
    conninfo_from_fields,
    register_connection_resolver,
)

POSTGRES_CONN_TYPES = ("postgres", "postgresql")


def postgres_conninfo(conn_id: str) -> str | None:
    """The conninfo of Airflow connection ``conn_id`` (None if Airflow does not know it)."""
    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    if conn.conn_type and conn.conn_type not in POSTGRES_CONN_TYPES:
        raise PostgresSinkConfigError(
            f"Airflow connection {conn_id!r} has type {conn.conn_type!r}, not postgres: point the "
            "PostgresSink's conn_id at a postgres connection"
        )
    return conninfo_from_fields(
        host=conn.host,
        port=conn.port,
        login=conn.login,
        password=conn.password,
        schema=conn.schema,
        extra=conn.extra_dejson,
    )


register_connection_resolver("airflow", postgres_conninfo)
