"""Schema enforcement of a Delta sink: a batch must match the table, column for column.

Rules (checked when a batch is written, so a mismatch fails the epoch before anything is staged, and
again at commit against the table as it is then):

* without ``schema_evolution``: the batch has exactly the table's columns (any order) with the same
  Delta types (``int32`` is Delta ``integer``, ``int64`` is ``long``: they differ);
* ``schema_evolution="merge"``: new columns are added to the table (nullable), columns the batch
  lacks are written as nulls; a column whose type differs is still refused -- evolution never
  changes a type.

Every refusal is one :class:`DeltaSchemaMismatch` line naming the table, the column and the remedy.
Files are written in the table's Arrow types (the Delta schema's Arrow form), so every reader of the
table sees one type per column.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from deltalake import Schema as DeltaSchema

from state_store.core.errors import BadInputError

EVOLVE = "merge"


class DeltaSchemaMismatch(ValueError, BadInputError):
    """A batch (or staged files) whose schema the table does not accept (module docstring)."""


def delta_schema_of(schema: pa.Schema, table: str) -> DeltaSchema:
    """The Delta schema of an Arrow schema; a one-line error for a type Delta cannot store."""
    try:
        converted = DeltaSchema.from_arrow(schema)
    except Exception as exc:  # delta-rs raises its own error types for unsupported Arrow types
        raise DeltaSchemaMismatch(
            f"Delta table {table}: a column's type has no Delta equivalent ({exc}); cast it in the "
            "job to a Delta type (integers, floats, decimal, string, binary, bool, date, timestamp[us])"
        ) from None
    for field in converted.fields:
        if "nanos" in _type_name(field.type):
            raise DeltaSchemaMismatch(
                f"Delta table {table}: column {field.name!r} holds nanosecond timestamps, which a Delta "
                "table stores only with the timestampNanos feature: cast it to pa.timestamp('us') in the job"
            )
    return converted


def _type_name(tp: Any) -> str:
    """``long``, ``string``, or the JSON of a nested type (the Delta protocol's spelling)."""
    text = str(tp.to_json()) if hasattr(tp, "to_json") else repr(tp)
    return text[1:-1] if text.startswith('"') and text.endswith('"') else text


def check_batch(table: str, expected: DeltaSchema, batch: pa.Schema, evolve: bool) -> None:
    """Refuse ``batch`` unless it matches ``expected`` (module docstring rules)."""
    _compare(table, expected, delta_schema_of(batch, table), evolve, what="the batch")


def check_staged(table: str, expected: DeltaSchema, staged: DeltaSchema, evolve: bool) -> None:
    """The commit-time check of staged files' schema against the table's current schema."""
    _compare(table, expected, staged, evolve, what="the staged files")


def _compare(table: str, expected: DeltaSchema, got: DeltaSchema, evolve: bool, *, what: str) -> None:
    have = {f.name: f for f in got.fields}
    want = {f.name: f for f in expected.fields}
    for name, field in want.items():
        if name not in have:
            if evolve:
                continue
            raise DeltaSchemaMismatch(
                f"Delta table {table}: {what} lack column {name!r} "
                f"({_type_name(field.type)}); add it to the sink's input, or set "
                "schema_evolution='merge' to write nulls for it"
            )
        if _type_name(have[name].type) != _type_name(field.type):
            raise DeltaSchemaMismatch(
                f"Delta table {table}: column {name!r} is {_type_name(field.type)} in the table but "
                f"{_type_name(have[name].type)} in {what}; cast it in the job (schema_evolution "
                "never changes a column's type)"
            )
    extra = [name for name in have if name not in want]
    if extra and not evolve:
        raise DeltaSchemaMismatch(
            f"Delta table {table}: column {extra[0]!r} of {what} is not in the table; drop it "
            "before the sink, or set schema_evolution='merge' to add it to the table"
        )


def new_fields(expected: DeltaSchema, staged: DeltaSchema) -> list[Any]:
    """Fields of ``staged`` the table lacks (in ``staged``'s order): what evolution adds."""
    known = {f.name for f in expected.fields}
    return [f for f in staged.fields if f.name not in known]


def merged(expected: DeltaSchema | None, batches: Iterable[pa.Schema], table: str) -> DeltaSchema:
    """The table's schema followed by the batches' new columns (first seen first)."""
    fields = list(expected.fields) if expected is not None else []
    names = {f.name for f in fields}
    for schema in batches:
        for field in delta_schema_of(schema, table).fields:
            if field.name not in names:
                fields.append(field)
                names.add(field.name)
    return DeltaSchema(fields)


def arrow_of(schema: DeltaSchema) -> pa.Schema:
    return pa.schema(schema.to_arrow())


def conform(data: pa.Table, target: pa.Schema, table: str) -> pa.Table:
    """``data`` with exactly ``target``'s columns, in its order and types (missing ones null)."""
    columns = []
    for field in target:
        if field.name in data.column_names:
            column = data.column(field.name)
            if not column.type.equals(field.type):
                try:
                    column = column.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise DeltaSchemaMismatch(
                        f"Delta table {table}: column {field.name!r} cannot be stored as "
                        f"{field.type} ({exc}); cast it in the job"
                    ) from None
            columns.append(column)
        else:
            columns.append(pa.nulls(data.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=pa.schema(list(target), metadata=None))
