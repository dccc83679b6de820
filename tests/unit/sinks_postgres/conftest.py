"""One real PostgreSQL server per session (``state_store.testing.postgres``); a fresh schema per test.

Without PostgreSQL binaries the tests are skipped -- except in CI (``CI=true``), where they fail:
``make test`` installs the server first (``make postgres-deps``), so a missing one is a broken set-up.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from spark_jobs.sinks.postgres import PostgresTransactionalSink, RewindPolicy
from state_store.core.ports import NO_KILL, KillSwitch
from state_store.core.twophase import PreCommittedTxn
from state_store.storage import MemoryObjectStore
from state_store.testing import SimulatedCrash
from state_store.testing.postgres import PostgresServer, PostgresUnavailable

JOB, UID = "job", "orders"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    try:
        server = PostgresServer()
    except PostgresUnavailable as exc:
        if in_ci():
            pytest.fail(f"CI=true and no PostgreSQL server to test the Postgres sink against: {exc}")
        pytest.skip(str(exc))
    server.start()
    try:
        yield server
    finally:
        server.stop(grace_s=5)


@dataclass
class Db:
    """A fresh schema on the session's server, an in-memory store, and helpers to read back."""

    server: PostgresServer
    schema: str
    conn: psycopg.Connection[Any]
    store: MemoryObjectStore

    @property
    def dsn(self) -> str:
        return self.server.dsn()

    @property
    def table(self) -> str:
        return f"{self.schema}.out"

    def sink(
        self,
        *,
        unique_key: Sequence[str] = (),
        on_rewind: RewindPolicy = RewindPolicy.KEEP,
        kill: KillSwitch = NO_KILL,
        table: str | None = None,
        dsn: str | None = None,
        uid: str = UID,
        **kwargs: Any,
    ) -> PostgresTransactionalSink:
        """A new sink instance (as a new process would build it)."""
        return PostgresTransactionalSink(
            self.store,
            JOB,
            uid,
            table=table or self.table,
            dsn=dsn or (None if "conn_id" in kwargs else self.dsn),
            unique_key=unique_key,
            on_rewind=on_rewind,
            kill=kill,
            **kwargs,
        )

    def rows(self, columns: str = "k, v, g", table: str = "out") -> list[tuple[Any, ...]]:
        """``columns`` of every row of the target table, sorted by them."""
        return self.query(f"SELECT {columns} FROM {{s}}.{table} ORDER BY {columns}")

    def query(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of ``query``; ``{s}`` is replaced by the test's schema."""
        return [tuple(r) for r in self.conn.execute(query.format(s=self.schema), params).fetchall()]

    def execute(self, statement: str) -> None:
        """Run a statement without results; ``{s}`` is replaced by the test's schema."""
        self.conn.execute(statement.format(s=self.schema))

    def commits(self, uid: str = UID) -> list[tuple[Any, ...]]:
        """(checkpoint, generation, retracted) of every commit row of sink ``uid``, in commit order."""
        return self.query(
            "SELECT checkpoint_id, generation, retracted_at IS NOT NULL FROM {s}.epochal_sink_commits "
            "WHERE sink_uid = %s ORDER BY seq",
            (uid,),
        )

    def exists(self, name: str = "out") -> bool:
        row = self.conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{self.schema}.{name}",)).fetchone()
        return bool(row and row[0])


@pytest.fixture
def db(postgres: PostgresServer) -> Iterator[Db]:
    schema = f"t_{uuid.uuid4().hex[:10]}"
    with postgres.connect() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        yield Db(postgres, schema, conn, MemoryObjectStore(f"pg-{schema}"))


class KillAt:
    """A kill switch for the sink's own kill points: at ``point`` (of ``checkpoint_id`` if given),
    once, run ``action`` if given, else raise SimulatedCrash (the process 'dies' there)."""

    def __init__(
        self, point: str, checkpoint_id: int | None = None, action: Callable[[], None] | None = None
    ) -> None:
        self.point, self.checkpoint_id, self.action = point, checkpoint_id, action
        self.fired = False

    def __call__(self, point: str, checkpoint_id: int | None = None) -> None:
        if self.fired or point != self.point:
            return
        if self.checkpoint_id is not None and checkpoint_id != self.checkpoint_id:
            return
        self.fired = True
        if self.action is not None:
            self.action()
            return
        raise SimulatedCrash(point, checkpoint_id)


def batch(**columns: list[Any]) -> pa.RecordBatch:
    return pa.record_batch(columns)


def stage(
    sink: PostgresTransactionalSink,
    n: int,
    *batches: pa.RecordBatch,
    subtask: int = 0,
    attempt: int = 0,
    gen: int = 0,
) -> PreCommittedTxn:
    """Begin, write ``batches`` and pre-commit one subtask's transaction of checkpoint ``n``."""
    txn = sink.begin_transaction(n, subtask, attempt, gen)
    for b in batches:
        sink.write(txn, b)
    return sink.pre_commit(txn)
