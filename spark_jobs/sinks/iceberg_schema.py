"""Schema enforcement of an Iceberg sink: a batch must match the table, column for column.

Rules (checked when a batch is written, so a mismatch fails the epoch before anything is staged,
and again at commit against the table as it is then, before anything is written to it):

* the batch has exactly the table's top-level columns (any order);
* each column converts to the table column's Iceberg type (pyarrow ``int32`` is Iceberg ``int``,
  ``int64`` is ``long``: they differ; ``string`` and ``large_string`` are both ``string``);
* a ``required`` column has no nulls.

Without a table (the first commit creates it from the staged rows' schema) the batches of a
transaction must agree with each other, and every type must be one Iceberg can store (nanosecond
timestamps are not, in format version 2). There is no schema evolution: a new column is added to
the table by its owner (``ALTER TABLE ... ADD COLUMN``), then the job may write it.

Every refusal is one :class:`IcebergSchemaMismatch` line naming the table, the column and the remedy.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from state_store.core.errors import BadInputError

if TYPE_CHECKING:
    from pyiceberg.typedef import TableVersion


class IcebergSchemaMismatch(ValueError, BadInputError):
    """A batch (or staged rows) whose schema the table does not accept (module docstring)."""


def _unsupported(table: str, exc: Any, what: str) -> IcebergSchemaMismatch:
    field = getattr(exc, "field", None)
    column = f"column {field.name!r} ({field.type})" if field is not None else f"a column ({exc})"
    return IcebergSchemaMismatch(
        f"Iceberg table {table}: {column} of {what} has a type an Iceberg table cannot store; cast it "
        "in the job (timestamps to pa.timestamp('us'), unsigned integers to signed ones)"
    )


def _version(format_version: int) -> TableVersion:
    if format_version not in (1, 2, 3):
        raise ValueError(f"unknown Iceberg format version {format_version}")
    return cast("TableVersion", format_version)


def _mapped(fields: list[pa.Field], ids: Iterator[int]) -> list[Any]:
    """Name-mapping entries numbering ``fields`` and their nested fields (Iceberg's nested names:
    ``element`` of a list, ``key``/``value`` of a map)."""
    from pyiceberg.table.name_mapping import MappedField

    out = []
    for f in fields:
        t = f.type
        if pa.types.is_struct(t):
            children = [t.field(i) for i in range(t.num_fields)]
        elif pa.types.is_map(t):
            children = [t.key_field.with_name("key"), t.item_field.with_name("value")]
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            children = [t.value_field.with_name("element")]
        else:
            children = []
        number = next(ids)
        out.append(
            MappedField.model_validate(
                {"field-id": number, "names": [f.name], "fields": _mapped(children, ids)}
            )
        )
    return out


def iceberg_schema_of(schema: pa.Schema, table: str, what: str, format_version: int = 2) -> Any:
    """The Iceberg form of ``schema`` (ids numbered in order), as a new table would get it; a
    one-line :class:`IcebergSchemaMismatch` for a type an Iceberg table cannot store."""
    from pyiceberg.io.pyarrow import UnsupportedPyArrowTypeException, pyarrow_to_schema
    from pyiceberg.table.name_mapping import NameMapping

    mapping = NameMapping(_mapped(list(schema), itertools.count(1)))
    try:
        return pyarrow_to_schema(schema, name_mapping=mapping, format_version=_version(format_version))
    except UnsupportedPyArrowTypeException as exc:
        raise _unsupported(table, exc, what) from None
    except ValueError as exc:  # pyiceberg names the column (e.g. a null-typed one)
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        raise IcebergSchemaMismatch(
            f"Iceberg table {table}: {what} has a column an Iceberg table cannot store ({reason}); "
            "cast it in the job to a concrete type"
        ) from None


def check_columns(table: str, expected: Any, got: pa.Schema, what: str, format_version: int = 2) -> None:
    """Refuse ``got`` (an Arrow schema) unless it matches ``expected`` (the table's Iceberg schema)."""
    from pyiceberg.io.pyarrow import UnsupportedPyArrowTypeException, pyarrow_to_schema

    want = {f.name: f for f in expected.fields}
    for name, field in want.items():
        if name not in got.names:
            raise IcebergSchemaMismatch(
                f"Iceberg table {table}: {what} lacks column {name!r} ({field.field_type}); add it to "
                "the sink's input (a typed null column if it has no value)"
            )
    extra = [name for name in got.names if name not in want]
    if extra:
        raise IcebergSchemaMismatch(
            f"Iceberg table {table}: column {extra[0]!r} of {what} is not in the table; drop it "
            "before the sink, or add the column to the table first (ALTER TABLE ... ADD COLUMN)"
        )
    try:
        converted = pyarrow_to_schema(
            got, name_mapping=expected.name_mapping, format_version=_version(format_version)
        )
    except UnsupportedPyArrowTypeException as exc:
        raise _unsupported(table, exc, what) from None
    for name, field in want.items():
        have = converted.find_field(name).field_type
        if str(have) != str(field.field_type):
            raise IcebergSchemaMismatch(
                f"Iceberg table {table}: column {name!r} is {field.field_type} in the table but {have} "
                f"in {what}; cast it in the job (the sink never changes a column's type)"
            )


def check_nulls(table: str, expected: Any, data: pa.Table | pa.RecordBatch, what: str) -> None:
    """Refuse nulls in the table's required columns."""
    for field in expected.fields:
        if field.required and data.column(field.name).null_count:
            raise IcebergSchemaMismatch(
                f"Iceberg table {table}: column {field.name!r} is required but {what} has nulls in it; "
                "fill or drop those rows before the sink"
            )


def check_same(table: str, first: pa.Schema, other: pa.Schema, what: str) -> None:
    """Without a table: ``other`` has ``first``'s columns with the same Arrow types."""
    types = {f.name: f.type for f in first}
    for f in other:
        if f.name not in types:
            raise IcebergSchemaMismatch(
                f"Iceberg table {table} (not created yet): {what} has column {f.name!r} that earlier "
                "rows lack; every batch of every subtask must have the same columns"
            )
        if not f.type.equals(types[f.name]):
            raise IcebergSchemaMismatch(
                f"Iceberg table {table} (not created yet): column {f.name!r} is {f.type} in {what} "
                f"but {types[f.name]} in earlier rows; cast it in the job to one type"
            )
    missing = [n for n in types if n not in other.names]
    if missing:
        raise IcebergSchemaMismatch(
            f"Iceberg table {table} (not created yet): {what} lacks column {missing[0]!r} that "
            "earlier rows have; every batch of every subtask must have the same columns"
        )


def conform(data: pa.Table, expected: Any) -> pa.Table:
    """``data`` with the table's columns, in the table's order and Arrow types (the Iceberg types
    already checked equal: this only unifies ``string``/``large_string`` and the like, so every
    subtask's rows concatenate)."""
    target = pa.schema([f.remove_metadata() for f in expected.as_arrow()])
    columns = []
    for f in target:
        column = data.column(f.name)
        columns.append(column if column.type.equals(f.type) else column.cast(f.type))
    return pa.Table.from_arrays(columns, schema=target)


def check_batch(
    table: str, expected: Any, first: pa.Schema | None, batch: pa.RecordBatch, unique_key: Sequence[str]
) -> None:
    """The write-time check of one batch: against the table's schema (``expected``), else against
    the transaction's ``first`` batch, else that Iceberg can store its types; and the upsert key."""
    if expected is not None:
        check_columns(table, expected, batch.schema, "the batch")
        check_nulls(table, expected, batch, "the batch")
    elif first is not None:
        check_same(table, first, batch.schema, "the batch")
    else:
        iceberg_schema_of(batch.schema, table, "the batch")
    for column in unique_key:
        if column not in batch.schema.names:
            raise IcebergSchemaMismatch(
                f"Iceberg table {table}: the batch lacks unique_key column {column!r}; add it to the "
                "sink's input, or fix the sink's unique_key"
            )
        if batch.column(column).null_count:
            raise IcebergSchemaMismatch(
                f"Iceberg table {table}: unique_key column {column!r} has nulls, which an upsert cannot "
                "match; fill or drop those rows before the sink"
            )


def agreed_schema(table: str, staged: Sequence[pa.Table], what: str) -> pa.Schema:
    """The schema a new table gets from the staged rows: every subtask's must be the same, and
    storable (a one-line error before the catalog sees it)."""
    for other in staged[1:]:
        check_same(table, staged[0].schema, other.schema, what)
    iceberg_schema_of(staged[0].schema, table, what)
    return staged[0].schema


def conformed(
    table: str, expected: Any, format_version: int, staged: Sequence[pa.Table], what: str
) -> pa.Table | None:
    """The commit-time check: the staged rows against the table's current schema, cast to its
    Arrow form and concatenated; None without rows."""
    if not staged:
        return None
    parts = []
    for part in staged:
        check_columns(table, expected, part.schema, what, format_version)
        check_nulls(table, expected, part, what)
        parts.append(conform(part, expected))
    return pa.concat_tables(parts)
