"""The SQL of the Postgres sink's commit protocol: one transaction per checkpoint, fenced.

Committing checkpoint n of generation g (all subtasks' rows at once; every step may be retried)::

    1. BEGIN
    2. lock the sink's fence row (SELECT ... FOR UPDATE): commits, fences and retractions of one
       sink are serialized, so a zombie racing a fence either commits before it or is refused
    3. a commit row (job, sink, n, g) exists: same records digest -> no-op; else SinkCommitConflict
    4. g < fence generation -> FencedTransactionError; a live commit of n by another generation
       -> SinkCommitConflict
    5. create or validate the target table (postgres_schema)
    6. COPY the rows into a temporary table; overwrite mode with a key: save the pre-images of
       the rows about to be replaced (epochal_sink_undo); upsert by unique_key (the last row of a
       key wins inside one commit) or plain INSERT
    7. INSERT the commit row; fence generation := max(fence, g)
    8. COMMIT -- **the visibility point**: rows and commit row become visible together or not at
       all. A lost response is recognized on retry by step 3.

Retracting after checkpoint c for generation g (a restore to an older snapshot): under the same
lock, every live commit of a generation below g with c < n (< before) is marked retracted; with
``on_rewind="overwrite"`` its rows are deleted and the pre-images it replaced restored, newest
commit first, so the table is what it was after c. Invariant: a checkpoint id is *committed* iff a
non-retracted commit row names it; a retracted (n, g) is never committed again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from spark_jobs.sinks.postgres_schema import ORD, PROVENANCE, Names, ensure_target, pg_type, target_exists
from state_store.core.twophase import FencedTransactionError, SinkCommitConflict

AFTER_FENCE_CHECK = "pg_after_fence_check"  # inside the transaction: fence row locked and checked
AFTER_UPSERT = "pg_after_upsert"  # inside the transaction: rows and commit row written, no COMMIT


@dataclasses.dataclass(frozen=True, slots=True)
class CommitRequest:
    """One checkpoint's commit: who, which rows (None: no rows at all), and how to write them."""

    job_id: str
    sink_uid: str
    checkpoint_id: int
    generation: int
    digest: str
    rows: pa.Table | None
    unique_key: tuple[str, ...]
    provenance: bool


class Ledger:
    """The control-table operations of one sink (job, uid) on one open connection."""

    def __init__(self, conn: psycopg.Connection[Any], names: Names, job_id: str, sink_uid: str) -> None:
        self.conn, self.names, self.job_id, self.sink_uid = conn, names, job_id, sink_uid

    # -- reading ---------------------------------------------------------------------------
    def committed_ids(self) -> frozenset[int]:
        rows = self.conn.execute(
            sql.SQL(
                "SELECT DISTINCT checkpoint_id FROM {} WHERE job_id = %s AND sink_uid = %s "
                "AND retracted_at IS NULL"
            ).format(self.names.commits),
            (self.job_id, self.sink_uid),
        ).fetchall()
        return frozenset(int(r[0]) for r in rows)

    def retracted_ids(self) -> frozenset[int]:
        """Ids with a retracted commit and no live one."""
        rows = self.conn.execute(
            sql.SQL(
                "SELECT checkpoint_id FROM {} WHERE job_id = %s AND sink_uid = %s "
                "GROUP BY checkpoint_id HAVING bool_and(retracted_at IS NOT NULL)"
            ).format(self.names.commits),
            (self.job_id, self.sink_uid),
        ).fetchall()
        return frozenset(int(r[0]) for r in rows)

    def digest_of(self, checkpoint_id: int, generation: int) -> str | None:
        row = self.conn.execute(
            sql.SQL(
                "SELECT records_digest FROM {} WHERE job_id = %s AND sink_uid = %s "
                "AND checkpoint_id = %s AND generation = %s"
            ).format(self.names.commits),
            (self.job_id, self.sink_uid, checkpoint_id, generation),
        ).fetchone()
        return None if row is None else str(row[0])

    def fence_generation(self) -> int:
        row = self.conn.execute(
            sql.SQL("SELECT generation FROM {} WHERE job_id = %s AND sink_uid = %s").format(
                self.names.fences
            ),
            (self.job_id, self.sink_uid),
        ).fetchone()
        return -1 if row is None else int(row[0])

    # -- writing ---------------------------------------------------------------------------
    def fence(self, generation: int) -> None:
        """Refuse commits of generations below ``generation`` from now on (idempotent; waits for
        a commit holding the lock, so it returns only once no older commit can still land)."""
        self.conn.execute(
            sql.SQL(
                "INSERT INTO {t} (job_id, sink_uid, generation) VALUES (%s, %s, %s) "
                "ON CONFLICT (job_id, sink_uid) DO UPDATE "
                "SET generation = GREATEST({t}.generation, EXCLUDED.generation), updated_at = now()"
            ).format(t=self.names.fences),
            (self.job_id, self.sink_uid, generation),
        )

    def commit(self, request: CommitRequest, kill: Callable[[str, int | None], None]) -> bool:
        """Steps 1-8 of the module docstring; True if this call made the checkpoint visible."""
        n, g = request.checkpoint_id, request.generation
        with self.conn.transaction():
            fence = self._lock_fence()
            existing = self.digest_of(n, g)
            if existing is not None:
                if existing == request.digest:
                    return False
                raise SinkCommitConflict(
                    f"sink {self.sink_uid}: checkpoint {n} of generation {g} is already committed to "
                    f"{self.names.target_text} with other records (another attempt); refusing these: "
                    "a zombie attempt tried to commit; abort its records"
                )
            if g < fence:
                raise FencedTransactionError(
                    f"sink {self.sink_uid}: refusing to commit checkpoint {n} of generation {g} to "
                    f"{self.names.target_text}: generation {fence} already committed or fenced it (a "
                    "zombie of an earlier run); its staged files are removed by abort or the orphan sweep"
                )
            other = self._live_generation(n)
            if other is not None:
                raise SinkCommitConflict(
                    f"sink {self.sink_uid}: checkpoint {n} is already committed to "
                    f"{self.names.target_text} by generation {other}; generation {g} cannot commit it "
                    "too: a restore that reuses checkpoint ids must retract it first (retract_after)"
                )
            kill(AFTER_FENCE_CHECK, n)
            count = 0
            if request.rows is not None and request.rows.num_rows:
                ensure_target(
                    self.conn,
                    self.names,
                    request.rows.schema,
                    request.unique_key,
                    request.provenance,
                    f"postgres sink {self.sink_uid}",
                )
                count = self._write_rows(request)
            self.conn.execute(
                sql.SQL(
                    "INSERT INTO {} (job_id, sink_uid, checkpoint_id, generation, target_table, "
                    "row_count, records_digest) VALUES (%s, %s, %s, %s, %s, %s, %s)"
                ).format(self.names.commits),
                (self.job_id, self.sink_uid, n, g, self.names.target_text, count, request.digest),
            )
            self.conn.execute(
                sql.SQL(
                    "UPDATE {} SET generation = GREATEST(generation, %s), updated_at = now() "
                    "WHERE job_id = %s AND sink_uid = %s"
                ).format(self.names.fences),
                (g, self.job_id, self.sink_uid),
            )
            kill(AFTER_UPSERT, n)
        return True

    def retract_after(
        self, checkpoint_id: int, generation: int, reason: str, before: int | None, overwrite: bool
    ) -> tuple[int, ...]:
        """Withdraw the older generations' commits in (checkpoint_id, before); see the module
        docstring. Returns every id in that range withdrawn now or earlier (idempotent)."""
        with self.conn.transaction():
            self._lock_fence()
            rows = self.conn.execute(
                sql.SQL(
                    "SELECT checkpoint_id, generation, retracted_at IS NOT NULL FROM {} "
                    "WHERE job_id = %s AND sink_uid = %s AND checkpoint_id > %s AND generation < %s "
                    "AND (%s::bigint IS NULL OR checkpoint_id < %s) ORDER BY seq DESC"
                ).format(self.names.commits),
                (self.job_id, self.sink_uid, checkpoint_id, generation, before, before),
            ).fetchall()
            live = [(int(n), int(g)) for n, g, retracted in rows if not retracted]
            if overwrite and live and target_exists(self.conn, self.names):
                for n, g in live:  # newest commit first
                    self._rewind(n, g)
            for n, g in live:
                self.conn.execute(
                    sql.SQL(
                        "UPDATE {} SET retracted_at = now(), retracted_by_generation = %s, "
                        "retraction_reason = %s WHERE job_id = %s AND sink_uid = %s "
                        "AND checkpoint_id = %s AND generation = %s"
                    ).format(self.names.commits),
                    (generation, reason, self.job_id, self.sink_uid, n, g),
                )
        return tuple(sorted({int(r[0]) for r in rows}))

    # -- internals -------------------------------------------------------------------------
    def _lock_fence(self) -> int:
        self.conn.execute(
            sql.SQL(
                "INSERT INTO {} (job_id, sink_uid, generation) VALUES (%s, %s, -1) "
                "ON CONFLICT (job_id, sink_uid) DO NOTHING"
            ).format(self.names.fences),
            (self.job_id, self.sink_uid),
        )
        row = self.conn.execute(
            sql.SQL("SELECT generation FROM {} WHERE job_id = %s AND sink_uid = %s FOR UPDATE").format(
                self.names.fences
            ),
            (self.job_id, self.sink_uid),
        ).fetchone()
        assert row is not None  # inserted above, and fence rows are never deleted
        return int(row[0])

    def _live_generation(self, checkpoint_id: int) -> int | None:
        row = self.conn.execute(
            sql.SQL(
                "SELECT generation FROM {} WHERE job_id = %s AND sink_uid = %s AND checkpoint_id = %s "
                "AND retracted_at IS NULL"
            ).format(self.names.commits),
            (self.job_id, self.sink_uid, checkpoint_id),
        ).fetchone()
        return None if row is None else int(row[0])

    def _write_rows(self, request: CommitRequest) -> int:
        """Step 6: COPY into a temporary table, then one INSERT ... SELECT into the target."""
        rows = request.rows
        assert rows is not None
        names = [f.name for f in rows.schema]
        stage = sql.Identifier("epochal_stage")
        columns = sql.SQL(", ").join(
            [sql.SQL("{} bigint").format(sql.Identifier(ORD))]
            + [sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(pg_type(f))) for f in rows.schema]
        )
        self.conn.execute(sql.SQL("CREATE TEMPORARY TABLE {} ({}) ON COMMIT DROP").format(stage, columns))
        copy_cols = sql.SQL(", ").join(map(sql.Identifier, [ORD, *names]))
        copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(stage, copy_cols)
        with self.conn.cursor() as cur, cur.copy(copy_sql) as copy:
            values = [rows.column(i).to_pylist() for i in range(rows.num_columns)]
            for ordinal, row in enumerate(zip(*values, strict=True)):
                copy.write_row((ordinal, *row))
        target_cols = [*names, *(PROVENANCE if request.provenance else ())]
        select: list[sql.Composable] = [sql.Identifier(c) for c in names]
        if request.provenance:
            select += [sql.Literal(request.checkpoint_id), sql.Literal(request.generation)]
        key = request.unique_key
        insert = sql.SQL("INSERT INTO {} ({}) ").format(
            self.names.target, sql.SQL(", ").join(map(sql.Identifier, target_cols))
        )
        if not key:
            query = insert + sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
                sql.SQL(", ").join(select), stage, sql.Identifier(ORD)
            )
            return self._run(query)
        keys = sql.SQL(", ").join(map(sql.Identifier, key))
        if request.provenance:
            self._save_pre_images(request, keys, stage)
        updated = [c for c in target_cols if c not in key]
        action = (
            sql.SQL("DO UPDATE SET ")
            + sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in updated)
            if updated
            else sql.SQL("DO NOTHING")
        )
        query = insert + sql.SQL(
            "SELECT DISTINCT ON ({keys}) {cols} FROM {stage} ORDER BY {keys}, {ord} DESC "
            "ON CONFLICT ({keys}) {action}"
        ).format(
            keys=keys, cols=sql.SQL(", ").join(select), stage=stage, ord=sql.Identifier(ORD), action=action
        )
        return self._run(query)

    def _save_pre_images(self, request: CommitRequest, keys: sql.Composable, stage: sql.Identifier) -> None:
        self.conn.execute(
            sql.SQL(
                "INSERT INTO {undo} (job_id, sink_uid, checkpoint_id, generation, before) "
                "SELECT %s, %s, %s, %s, to_jsonb(t) FROM {target} AS t "
                "WHERE ({tkeys}) IN (SELECT {keys} FROM {stage})"
            ).format(
                undo=self.names.undo,
                target=self.names.target,
                tkeys=sql.SQL(", ").join(sql.Identifier("t", k) for k in request.unique_key),
                keys=keys,
                stage=stage,
            ),
            (self.job_id, self.sink_uid, request.checkpoint_id, request.generation),
        )

    def _rewind(self, checkpoint_id: int, generation: int) -> None:
        """Undo one commit of an overwrite-mode sink: delete its rows, restore what it replaced."""
        target = self.names.target
        a, b = (sql.Identifier(c) for c in PROVENANCE)
        self.conn.execute(
            sql.SQL("DELETE FROM {} WHERE {} = %s AND {} = %s").format(target, a, b),
            (checkpoint_id, generation),
        )
        where = sql.SQL("job_id = %s AND sink_uid = %s AND checkpoint_id = %s AND generation = %s")
        params = (self.job_id, self.sink_uid, checkpoint_id, generation)
        self.conn.execute(
            sql.SQL(
                "INSERT INTO {t} SELECT (jsonb_populate_record(NULL::{t}, before)).* FROM {u} WHERE "
            ).format(t=target, u=self.names.undo)
            + where
            + sql.SQL(" ORDER BY id"),
            params,
        )
        self.conn.execute(sql.SQL("DELETE FROM {} WHERE ").format(self.names.undo) + where, params)

    def _run(self, query: sql.Composed) -> int:
        return max(self.conn.execute(query).rowcount, 0)
