"""Where the Postgres sink connects, and its errors (one line each: the thing and the remedy).

A sink names its server with exactly one of:

* ``dsn`` -- a libpq conninfo string or ``postgresql://`` URI, used as is;
* ``conn_id`` -- an Airflow connection id, resolved when the sink first talks to the database
  (never on Spark executors: pre-commits only write staged files), in this order:

  1. resolvers registered with :func:`register_connection_resolver`; the Airflow provider
     registers one (``epochal_airflow.hooks.postgres``) that reads the connection with
     ``BaseHook.get_connection`` -- the lookup ``PostgresHook`` makes too, so the Airflow
     postgres provider is not needed -- from any secrets backend, the metastore or the
     environment;
  2. without Airflow in the process: ``AIRFLOW_CONN_<CONN_ID>``, in Airflow's URI or JSON form,
     read by :func:`environment_resolver` (this package never imports Airflow). Only entry points
     read the environment, so the ``epochal`` CLI registers it with its process environment.

Connection fields map to libpq keywords: host, port, login -> user, password, schema -> dbname;
extras that are libpq keywords (``sslmode``, ``sslrootcert``, ``connect_timeout``, ...) are passed
on, other extras are ignored.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import psycopg
from psycopg import conninfo as libpq_conninfo
from psycopg import pq

from state_store.core.errors import BadInputError, EpochalError
from state_store.core.twophase import SinkCommitError

ConnectionResolver = Callable[[str], "str | None"]
"""``conn_id -> conninfo`` (None: this resolver does not know the id)."""

_RESOLVERS: dict[str, ConnectionResolver] = {}
IDLE_IN_TRANSACTION_TIMEOUT_MS = 60_000
"""A session that holds the commit lock and stalls (a paused zombie) is ended by the server after
this long, so a fence or another commit never waits for it forever."""


class PostgresFailure(enum.Enum):
    UNREACHABLE = "unreachable"
    NO_CONNECTION = "no_connection"
    SCHEMA_MISMATCH = "schema_mismatch"
    INTERRUPTED = "interrupted"
    REJECTED = "rejected"


class PostgresSinkError(SinkCommitError, EpochalError):
    """The sink could not reach, or was refused by, the database; ``reason`` says which.

    Nothing was committed when this is raised; a commit is retried as a whole (idempotent)."""

    def __init__(self, reason: PostgresFailure, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PostgresSinkConfigError(ValueError, BadInputError):
    """A PostgresSink spec that cannot work (names, options); raised when the job is defined."""


def register_connection_resolver(name: str, resolver: ConnectionResolver) -> None:
    """Add (or replace) the ``conn_id -> conninfo`` resolver called ``name``; the most recently
    registered one is asked first."""
    _RESOLVERS.pop(name, None)
    _RESOLVERS[name] = resolver


def resolve_conninfo(dsn: str | None, conn_id: str | None, sink: str) -> str:
    """The conninfo of a sink: ``dsn`` as is, else ``conn_id`` resolved (see the module docstring)."""
    if dsn:
        return dsn
    if not conn_id:
        raise PostgresSinkConfigError(f"{sink}: no database given: pass dsn=... or conn_id=...")
    for resolver in reversed(_RESOLVERS.values()):
        found = resolver(conn_id)
        if found:
            return found
    variable = f"AIRFLOW_CONN_{conn_id.upper()}"
    raise PostgresSinkError(
        PostgresFailure.NO_CONNECTION,
        f"{sink}: Airflow connection {conn_id!r} not found: create it in Airflow "
        f"(airflow connections add {conn_id} --conn-uri postgresql://...), set {variable}, "
        "or pass dsn=... instead",
    )


def environment_resolver(environ: Mapping[str, str]) -> ConnectionResolver:
    """A resolver reading Airflow's ``AIRFLOW_CONN_<CONN_ID>`` variables from ``environ`` (an entry
    point passes its process environment)."""

    def resolve(conn_id: str) -> str | None:
        value = environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
        return conninfo_from_airflow_value(value, conn_id) if value else None

    return resolve


def conninfo_from_fields(
    *,
    host: str | None = None,
    port: int | str | None = None,
    login: str | None = None,
    password: str | None = None,
    schema: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """A conninfo string from an Airflow connection's fields (empty fields are left out)."""
    keywords = _libpq_keywords()
    params: dict[str, Any] = {
        k: v for k, v in dict(extra or {}).items() if k in keywords and v not in (None, "")
    }
    fields = {"host": host, "port": port, "user": login, "password": password, "dbname": schema}
    params.update({k: v for k, v in fields.items() if v not in (None, "")})
    return libpq_conninfo.make_conninfo(**params)


def conninfo_from_airflow_value(value: str, conn_id: str) -> str:
    """An ``AIRFLOW_CONN_*`` value (JSON object or URI) as a conninfo string."""
    text = value.strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PostgresSinkConfigError(
                f"AIRFLOW_CONN_{conn_id.upper()} is not valid JSON ({exc.msg}): fix the variable"
            ) from None
        extra = doc.get("extra") or {}
        if isinstance(extra, str):
            extra = json.loads(extra) if extra.strip() else {}
        return conninfo_from_fields(
            host=doc.get("host"),
            port=doc.get("port"),
            login=doc.get("login"),
            password=doc.get("password"),
            schema=doc.get("schema"),
            extra=extra,
        )
    parts = urlsplit(text)
    if parts.scheme not in ("postgres", "postgresql"):
        raise PostgresSinkConfigError(
            f"AIRFLOW_CONN_{conn_id.upper()} has scheme {parts.scheme!r}, not postgres: "
            "point conn_id at a postgres connection"
        )
    return conninfo_from_fields(
        host=unquote(parts.hostname or "") or None,
        port=parts.port,
        login=unquote(parts.username or "") or None,
        password=unquote(parts.password or "") or None,
        schema=unquote(parts.path.lstrip("/")) or None,
        extra=dict(parse_qsl(parts.query)),
    )


def endpoint_of(conninfo: str) -> str:
    """``host:port`` of a conninfo for error messages (libpq's defaults when absent)."""
    try:
        params = libpq_conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "<unparsable dsn>"
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    return f"{host}:{params.get('port') or 5432}"


@contextmanager
def connect(conninfo: str, *, sink: str, application_name: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection (transactions are explicit), closed on exit.

    An unreachable server or refused login raises :class:`PostgresSinkError` (UNREACHABLE) naming
    ``host:port``; a malformed dsn raises :class:`PostgresSinkConfigError`."""
    try:
        params = libpq_conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise PostgresSinkConfigError(f"{sink}: the dsn is malformed ({first_line(exc)}): fix it") from None
    timeout = params.get("connect_timeout") or 10
    try:
        conn = psycopg.connect(
            conninfo, autocommit=True, connect_timeout=timeout, application_name=application_name[:63]
        )
    except psycopg.OperationalError as exc:
        raise PostgresSinkError(
            PostgresFailure.UNREACHABLE,
            f"{sink}: cannot connect to PostgreSQL at {endpoint_of(conninfo)} ({first_line(exc)}): "
            "start the server, or fix the sink's dsn/connection (host, port, user, password, dbname)",
        ) from None
    with conn:
        conn.execute(f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_TIMEOUT_MS}")
        yield conn


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (libpq's are multi-line)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _libpq_keywords() -> frozenset[str]:
    return frozenset(o.keyword.decode() for o in pq.Conninfo.get_defaults())
