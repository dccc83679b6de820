"""The tables of the Postgres sink: the target table (from the output's Arrow schema) and the three
control tables beside it, in the target's schema.

Target table (``PostgresSink.table``): created on the first commit if absent, with one column per
output column (types from :func:`pg_type`), ``UNIQUE (unique_key)`` with those columns NOT NULL,
and with ``on_rewind="overwrite"`` the two provenance columns :data:`PROVENANCE` (which commit
wrote the row). If present it is validated, inside the commit's transaction: every output column
exists with a compatible type, the unique key has a unique index whose columns are NOT NULL (or
which is ``NULLS NOT DISTINCT``: else rows with a null key would repeat instead of being upserted),
provenance columns exist when needed, and no other column is NOT NULL without a default. A
mismatch raises a one-line :class:`PostgresSinkError` (SCHEMA_MISMATCH) naming table, column and
remedy; nothing is committed.

Control tables::

    epochal_sink_commits  one row per committed (job, sink, checkpoint, generation): the commit
                          point; retracted_* set when a restore withdrew it
    epochal_sink_fences   one row per (job, sink): the newest generation; commits lock it
    epochal_sink_undo     pre-images of rows an overwrite-mode upsert replaced, per commit
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from spark_jobs.sinks.postgres_conn import PostgresFailure, PostgresSinkConfigError, PostgresSinkError

PROVENANCE = ("epochal_checkpoint_id", "epochal_generation")
"""Columns of an ``on_rewind="overwrite"`` target: the checkpoint and generation that last wrote
the row (so a rewind can delete exactly the rows of withdrawn commits)."""
ORD = "_epochal_ord"
"""Row order inside one commit's staging table (the last row of a key wins)."""
RESERVED = (*PROVENANCE, ORD)

COMMITS, FENCES, UNDO = "epochal_sink_commits", "epochal_sink_fences", "epochal_sink_undo"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_INT_RANK = {"smallint": 1, "integer": 2, "bigint": 3}


@dataclass(frozen=True, slots=True)
class TableName:
    """``[schema.]table``; names are used quoted, exactly as given (case-sensitive)."""

    schema: str | None
    name: str

    @classmethod
    def parse(cls, text: str) -> TableName:
        parts = text.split(".")
        if len(parts) > 2 or not all(_NAME.match(p) for p in parts):
            raise PostgresSinkConfigError(
                f"postgres sink table {text!r} is not a valid name: use [schema.]table, each part "
                "letters, digits and _ (not starting with a digit, at most 63 characters)"
            )
        return cls(parts[0], parts[1]) if len(parts) == 2 else cls(None, parts[0])

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


@dataclass(frozen=True, slots=True)
class Names:
    """Qualified identifiers of the target and control tables (schema resolved on the server)."""

    schema: str
    table: str

    @property
    def target(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.table)

    @property
    def target_text(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def commits(self) -> sql.Identifier:
        return sql.Identifier(self.schema, COMMITS)

    @property
    def fences(self) -> sql.Identifier:
        return sql.Identifier(self.schema, FENCES)

    @property
    def undo(self) -> sql.Identifier:
        return sql.Identifier(self.schema, UNDO)


def resolve_names(conn: psycopg.Connection[Any], table: TableName) -> Names:
    """Qualify ``table`` with the connection's current schema when it names none."""
    if table.schema:
        return Names(table.schema, table.name)
    row = conn.execute("SELECT current_schema()").fetchone()
    if row is None or row[0] is None:
        raise PostgresSinkError(
            PostgresFailure.SCHEMA_MISMATCH,
            f"table {table}: the connection has no current schema (empty search_path): "
            "name the schema in the sink's table (schema.table)",
        )
    return Names(str(row[0]), table.name)


# -- types ---------------------------------------------------------------------------------------
def pg_type(field: pa.Field) -> str:
    """The PostgreSQL type the sink creates for an Arrow column; unsupported types raise."""
    t = field.type
    if pa.types.is_dictionary(t):
        return pg_type(pa.field(field.name, t.value_type))
    simple: list[tuple[Any, str]] = [
        (pa.types.is_boolean, "boolean"),
        (lambda x: pa.types.is_int8(x) or pa.types.is_int16(x) or pa.types.is_uint8(x), "smallint"),
        (lambda x: pa.types.is_int32(x) or pa.types.is_uint16(x), "integer"),
        (lambda x: pa.types.is_int64(x) or pa.types.is_uint32(x), "bigint"),
        (pa.types.is_uint64, "numeric(20,0)"),
        (lambda x: pa.types.is_float16(x) or pa.types.is_float32(x), "real"),
        (pa.types.is_float64, "double precision"),
        (lambda x: pa.types.is_string(x) or pa.types.is_large_string(x), "text"),
        (
            lambda x: (
                pa.types.is_binary(x) or pa.types.is_large_binary(x) or pa.types.is_fixed_size_binary(x)
            ),
            "bytea",
        ),
        (pa.types.is_date, "date"),
        (pa.types.is_time, "time without time zone"),
        (pa.types.is_duration, "interval"),
    ]
    for test, name in simple:
        if test(t):
            return name
    if pa.types.is_timestamp(t):
        return "timestamp with time zone" if t.tz else "timestamp without time zone"
    if pa.types.is_decimal(t):
        return f"numeric({t.precision},{t.scale})"
    raise PostgresSinkConfigError(
        f"output column {field.name!r} has Arrow type {t}, which the Postgres sink cannot store: "
        "cast it to a number, string, binary, boolean, date, time, timestamp or decimal column"
    )


def compatible(have: str, wanted: str) -> bool:
    """Whether an existing column of type ``have`` (``format_type``) stores values of ``wanted``."""
    if have == wanted:
        return True
    if wanted in _INT_RANK:
        return have.startswith("numeric") or _INT_RANK.get(have, 0) >= _INT_RANK[wanted]
    if wanted == "real":
        return have == "double precision" or have.startswith("numeric")
    if wanted == "text":
        return have.startswith(("character varying", "character(", "text"))
    if wanted.startswith("numeric"):
        return have.startswith("numeric")
    return False


def check_output_schema(schema: pa.Schema, sink: str) -> None:
    """Refuse outputs the sink cannot store: unsupported types, reserved or too long names."""
    for field in schema:
        if field.name in RESERVED:
            raise PostgresSinkConfigError(
                f"{sink}: output column {field.name!r} is reserved by the Postgres sink: rename it"
            )
        if not field.name or len(field.name.encode()) > 63:
            raise PostgresSinkConfigError(
                f"{sink}: output column {field.name!r} must have 1 to 63 bytes (PostgreSQL's limit): "
                "rename it"
            )
        pg_type(field)


# -- control tables ------------------------------------------------------------------------------
def ensure_control_tables(conn: psycopg.Connection[Any], names: Names) -> None:
    """Create the control tables if missing (one round trip when they exist)."""
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL",
        [_regclass(names.schema, t) for t in (COMMITS, FENCES, UNDO)],
    ).fetchone()
    if row is not None and row[0]:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"epochal-control:{names.schema}",))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(names.schema)))
        conn.execute(
            sql.SQL(
                """CREATE TABLE IF NOT EXISTS {} (
                    job_id text NOT NULL,
                    sink_uid text NOT NULL,
                    checkpoint_id bigint NOT NULL,
                    generation bigint NOT NULL,
                    seq bigserial NOT NULL,
                    target_table text NOT NULL,
                    row_count bigint NOT NULL,
                    records_digest text NOT NULL,
                    committed_at timestamptz NOT NULL DEFAULT now(),
                    retracted_at timestamptz,
                    retracted_by_generation bigint,
                    retraction_reason text,
                    PRIMARY KEY (job_id, sink_uid, checkpoint_id, generation))"""
            ).format(names.commits)
        )
        conn.execute(
            sql.SQL(
                """CREATE TABLE IF NOT EXISTS {} (
                    job_id text NOT NULL,
                    sink_uid text NOT NULL,
                    generation bigint NOT NULL,
                    updated_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (job_id, sink_uid))"""
            ).format(names.fences)
        )
        conn.execute(
            sql.SQL(
                """CREATE TABLE IF NOT EXISTS {} (
                    id bigserial PRIMARY KEY,
                    job_id text NOT NULL,
                    sink_uid text NOT NULL,
                    checkpoint_id bigint NOT NULL,
                    generation bigint NOT NULL,
                    before jsonb NOT NULL)"""
            ).format(names.undo)
        )
        conn.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} (job_id, sink_uid, checkpoint_id, generation)"
            ).format(sql.Identifier(f"{UNDO}_commit"), names.undo)
        )


# -- target table --------------------------------------------------------------------------------
def target_exists(conn: psycopg.Connection[Any], names: Names) -> bool:
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (_regclass(names.schema, names.table),)
    ).fetchone()
    return bool(row and row[0])


def ensure_target(
    conn: psycopg.Connection[Any],
    names: Names,
    schema: pa.Schema,
    unique_key: Sequence[str],
    provenance: bool,
    sink: str,
) -> None:
    """Create the target table, or validate it (see the module docstring). Call inside the commit's
    transaction: DDL is transactional, so a failed commit leaves no table behind either."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"epochal-target:{names.target_text}",))
    if target_exists(conn, names):
        _validate(conn, names, schema, unique_key, provenance, sink)
        return
    columns = [
        sql.SQL("{} {}{}").format(
            sql.Identifier(f.name),
            sql.SQL(pg_type(f)),
            sql.SQL(" NOT NULL" if f.name in unique_key else ""),
        )
        for f in schema
    ]
    if provenance:
        columns += [sql.SQL("{} bigint NOT NULL").format(sql.Identifier(c)) for c in PROVENANCE]
    if unique_key:
        columns.append(sql.SQL("UNIQUE ({})").format(sql.SQL(", ").join(map(sql.Identifier, unique_key))))
    conn.execute(sql.SQL("CREATE TABLE {} ({})").format(names.target, sql.SQL(", ").join(columns)))


def _validate(
    conn: psycopg.Connection[Any],
    names: Names,
    schema: pa.Schema,
    unique_key: Sequence[str],
    provenance: bool,
    sink: str,
) -> None:
    table = names.target_text
    regclass = _regclass(names.schema, names.table)
    rows = conn.execute(
        """SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.atthasdef
           FROM pg_attribute a WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped""",
        (regclass,),
    ).fetchall()
    existing = {name: (kind, notnull, hasdef) for name, kind, notnull, hasdef in rows}

    def mismatch(column: str, problem: str, remedy: str) -> PostgresSinkError:
        return PostgresSinkError(
            PostgresFailure.SCHEMA_MISMATCH,
            f"{sink}: table {table} column {column!r} {problem}: {remedy}, or drop the table to let the "
            "sink create it; nothing was committed",
        )

    for field in schema:
        wanted = pg_type(field)
        if field.name not in existing:
            raise mismatch(
                field.name,
                f"is missing (the output has it, as {field.type})",
                f'ALTER TABLE {table} ADD COLUMN "{field.name}" {wanted}',
            )
        have = existing[field.name][0]
        if not compatible(have, wanted):
            raise mismatch(
                field.name,
                f"is {have} but the output column is {field.type} (needs {wanted})",
                f'ALTER TABLE {table} ALTER COLUMN "{field.name}" TYPE {wanted}',
            )
    if provenance:
        for column in PROVENANCE:
            if column not in existing or not compatible(existing[column][0], "bigint"):
                raise mismatch(
                    column,
                    "is missing or not bigint (on_rewind='overwrite' records which commit wrote each row)",
                    f"ALTER TABLE {table} ADD COLUMN {column} bigint NOT NULL DEFAULT 0",
                )
    outputs = {f.name for f in schema} | (set(PROVENANCE) if provenance else set())
    for column, (_, notnull, hasdef) in existing.items():
        if column not in outputs and notnull and not hasdef:
            raise mismatch(
                column,
                "is NOT NULL without a default and the output has no such column",
                f'ALTER TABLE {table} ALTER COLUMN "{column}" DROP NOT NULL',
            )
    if not unique_key:
        return
    nulls_not_distinct = _unique_index(conn, regclass, unique_key)
    if nulls_not_distinct is None:
        key = ", ".join(f'"{k}"' for k in unique_key)
        raise mismatch(
            ",".join(unique_key),
            "has no unique constraint (the upsert needs one on exactly the unique_key columns)",
            f"ALTER TABLE {table} ADD UNIQUE ({key})",
        )
    nullable = [k for k in unique_key if not existing[k][1]]
    if nullable and not nulls_not_distinct:
        raise mismatch(
            nullable[0],
            "is a unique_key column that allows NULL, and its unique constraint lets rows with a null "
            "key repeat (an upsert could not replace them)",
            f'ALTER TABLE {table} ALTER COLUMN "{nullable[0]}" SET NOT NULL (or make the constraint '
            "UNIQUE NULLS NOT DISTINCT)",
        )


_UNIQUE_INDEXES = """SELECT array_agg(a.attname::text), bool_or({nnd}) FROM pg_index i
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
           WHERE i.indrelid = %s::regclass AND i.indisunique AND i.indpred IS NULL
             AND i.indexprs IS NULL
           GROUP BY i.indexrelid"""


def _unique_index(conn: psycopg.Connection[Any], regclass: str, unique_key: Sequence[str]) -> bool | None:
    """Whether a unique index on exactly the ``unique_key`` columns treats NULLs as equal (``NULLS
    NOT DISTINCT``, PostgreSQL 15+); None when there is no such index."""
    nnd = sql.SQL("i.indnullsnotdistinct" if conn.info.server_version >= 150000 else "false")
    rows = conn.execute(sql.SQL(_UNIQUE_INDEXES).format(nnd=nnd), (regclass,)).fetchall()
    matching = [bool(flag) for cols, flag in rows if set(cols) == set(unique_key)]
    return any(matching) if matching else None


def _regclass(schema: str, name: str) -> str:
    """A quoted ``schema.name`` for ``to_regclass`` / ``::regclass``."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in (schema, name))
