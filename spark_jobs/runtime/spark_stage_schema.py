"""The output schema of a DataFrame stage: declared or inferred once, then checked every epoch.

A stage's output is checked on the analyzed plan (``df.schema``), before Spark runs a job and
before any subtask starts, so a mismatch fails the epoch with nothing written::

    analyzed Spark schema -> Arrow schema (UTC) -> hidden columns removed -> compare with
    the declared schema (``.spark(fn, schema=...)``) or, without one, the schema this process
    inferred at its first epoch -> the collected rows are cast to it (safe casts only)

Invariants:
  * every declared column is in the output and every output column is declared (the hidden
    ``_offset``/``_partition`` aside); a column whose type family differs (integer, floating,
    timestamp, string, ...) is a mismatch; inside a family the rows are cast safely, and a value
    that does not fit is an error naming the column, never a silent truncation;
  * the source's event time column is in the output, a timestamp or an integer of ms
    (watermarks are computed from it);
  * every error is one line naming the step and the column, with the remedy
    (:class:`SparkStageError`, exit code 2 in the CLI).

Trap: an inferred schema lives in the process (a new process infers again from its first epoch);
declare ``schema=`` when the output must stay the same across restarts and upgrades.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final

import pyarrow as pa

from state_store.core.errors import BadInputError

PARTITION_COLUMN: Final[str] = "_partition"
"""The hidden column the driver adds to a stage's output: the source subtask a row belongs to."""

OFFSET_COLUMN: Final[str] = "_offset"
"""The source's offset column; kept (and used to order a partition's rows) when ``fn`` keeps it."""

HIDDEN: Final[frozenset[str]] = frozenset({PARTITION_COLUMN, OFFSET_COLUMN})

_inferred: dict[tuple[str, str, str], pa.Schema] = {}
_lock = threading.Lock()


class SparkStageError(ValueError, BadInputError):
    """A DataFrame stage that cannot run or returned the wrong rows; one line with the remedy."""


_FAMILIES: tuple[tuple[str, Callable[[pa.DataType], bool]], ...] = (
    ("integer", pa.types.is_integer),
    ("floating", pa.types.is_floating),
    ("decimal", pa.types.is_decimal),
    ("timestamp", pa.types.is_timestamp),
    ("date", pa.types.is_date),
    ("boolean", pa.types.is_boolean),
    ("string", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
    ("binary", lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t)),
)


def type_family(kind: pa.DataType) -> str:
    """The family a type belongs to (its own name for nested and other types)."""
    for name, test in _FAMILIES:
        if test(kind):
            return name
    return str(kind)


def arrow_schema(frame: Any) -> pa.Schema:
    """The Arrow schema of a Spark DataFrame's analyzed plan (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(frame.schema, timezone="UTC")


def visible(schema: pa.Schema) -> pa.Schema:
    """``schema`` without the hidden columns."""
    return pa.schema([f for f in schema if f.name not in HIDDEN])


def expected_schema(key: tuple[str, str, str], declared: pa.Schema | None, actual: pa.Schema) -> pa.Schema:
    """The schema the output must have: the declared one, else the first one this process saw
    for ``key`` (job, source uid, step name)."""
    if declared is not None:
        return declared
    with _lock:
        return _inferred.setdefault(key, visible(actual))


def check_output(step: str, expected: pa.Schema, actual: pa.Schema, event_time_column: str) -> None:
    """Raise SparkStageError naming ``step`` and the first column that does not match."""
    got = visible(actual)
    remedy = "change the stage or its schema= (the declared or first-inferred output)"
    for field in expected:
        if field.name not in got.names:
            raise SparkStageError(
                f"spark step {step!r}: its output has no column {field.name!r} (it has "
                f"{', '.join(got.names) or 'none'}): {remedy}"
            )
        kind = got.field(field.name).type
        if type_family(kind) != type_family(field.type):
            raise SparkStageError(
                f"spark step {step!r}: column {field.name!r} is {kind}, the schema says "
                f"{field.type}: {remedy}"
            )
    for name in got.names:
        if name not in expected.names:
            raise SparkStageError(f"spark step {step!r}: column {name!r} is not in its schema: {remedy}")
    if event_time_column not in expected.names:
        raise SparkStageError(
            f"spark step {step!r}: its output drops the source's event time column "
            f"{event_time_column!r}: keep it (watermarks are computed from it)"
        )
    kind = got.field(event_time_column).type
    if type_family(kind) not in ("timestamp", "integer"):
        raise SparkStageError(
            f"spark step {step!r}: the event time column {event_time_column!r} is {kind}, not a "
            "timestamp or an integer of ms: cast it back in the stage (watermarks are computed from it)"
        )


def conform(step: str, table: pa.Table, expected: pa.Schema) -> pa.Table:
    """The collected rows in ``expected``'s column order and types (``_offset`` first when kept);
    a value that does not fit its declared type is a SparkStageError naming the column."""
    columns: list[pa.ChunkedArray] = []
    fields: list[pa.Field] = []
    if OFFSET_COLUMN in table.column_names:
        columns.append(table.column(OFFSET_COLUMN).cast(pa.int64()))
        fields.append(pa.field(OFFSET_COLUMN, pa.int64()))
    for field in expected:
        try:
            columns.append(table.column(field.name).cast(field.type, safe=True))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            first = str(exc).splitlines()[0]
            raise SparkStageError(
                f"spark step {step!r}: column {field.name!r} does not fit {field.type} ({first}): "
                "widen the type in schema= or cast it in the stage"
            ) from exc
        fields.append(field)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))
