"""Turn decoded columns into rows of the source schema, setting malformed rows aside.

Input: a table of decoded records (any column types; extra columns are ignored, missing ones are
null) and the offset of every row. Output: a record batch of the valid rows with the ``_offset``
column first, plus one dead letter per rejected row.

Rules, applied per field in schema order (a row's first problem is its reason):

1. **Cast** the column to the field type with a *safe* cast (``"12"`` -> 12 is fine, ``"abc"`` or
   ``1.5`` -> int64 is not). Whole column first; only when that fails, value by value to find the
   culprits (the slow path), which become ``BAD_TYPE``.
2. **Required** fields (``nullable=False``) that are null or absent make the row ``MISSING_FIELD``.

Casting is the same code whatever decoder produced the column, so a record converts the same way
whichever path or chunking read it (needed for replay determinism).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from spark_jobs.sources.base import batch_schema
from spark_jobs.sources.dead_letters import DeadLetter, DeadLetterReason

CAST_ERRORS: tuple[type[BaseException], ...] = (pa.ArrowException, TypeError, ValueError, OverflowError)
"""Exceptions that mean "this value does not fit this type"."""


@dataclass(frozen=True, slots=True)
class Where:
    """Where decoded rows come from, for dead letters."""

    source: str
    partition: str


@dataclass(frozen=True, slots=True)
class Conformed:
    """Valid rows (``_offset`` first) and the dead letters of the rejected ones, in offset order."""

    batch: pa.RecordBatch
    rejected: tuple[DeadLetter, ...]


def cast_array(values: pa.Array, target: pa.DataType) -> tuple[pa.Array, NDArray[np.bool_]]:
    """Safely cast ``values`` to ``target``; values that cannot be cast become null and are flagged."""
    bad = np.zeros(len(values), dtype=np.bool_)
    if values.type == target:
        return values, bad
    try:
        return pc.cast(values, target, safe=True), bad
    except CAST_ERRORS:
        pass
    for i in range(len(values)):
        try:
            pc.cast(values.slice(i, 1), target, safe=True)
        except CAST_ERRORS:
            bad[i] = True
    cleaned = pc.if_else(pa.array(bad), pa.nulls(len(values), values.type), values)
    return pc.cast(cleaned, target, safe=True), bad


def array_from_values(values: Sequence[Any], target: pa.DataType) -> tuple[pa.Array, NDArray[np.bool_]]:
    """Build a ``target`` array from Python values (decoded JSON); flag values that do not fit.

    Values are first typed by inference, then cast *safely*: ``pa.array([2.5], type=pa.int64())``
    would silently truncate, which is exactly the conversion that must be refused.
    """
    try:
        return cast_array(pa.array(values), target)
    except CAST_ERRORS:
        pass  # mixed JSON types in one column: convert value by value
    bad = np.zeros(len(values), dtype=np.bool_)
    parts: list[pa.Array] = []
    for i, value in enumerate(values):
        try:
            parts.append(pc.cast(pa.array([value]), target, safe=True))
        except CAST_ERRORS:
            bad[i] = True
            parts.append(pa.nulls(1, target))
    if not parts:
        return pa.array([], type=target), bad
    return pa.concat_arrays(parts), bad


def conform(
    columns: dict[str, tuple[pa.Array, NDArray[np.bool_]]],
    offsets: NDArray[np.int64],
    schema: pa.Schema,
    where: Where,
    raw: Callable[[int], str],
) -> Conformed:
    """Assemble valid rows from per-field ``(array, bad_type_mask)`` pairs.

    ``columns`` maps a field name to its already-typed array and the mask of rows whose value did
    not fit; a field absent from ``columns`` is all null. ``raw(i)`` renders row ``i`` for its
    dead letter.
    """
    n = len(offsets)
    rejected: dict[int, DeadLetter] = {}

    def reject(rows: NDArray[np.bool_], reason: DeadLetterReason, detail: str) -> None:
        for i in np.flatnonzero(rows).tolist():
            if i not in rejected:
                rejected[i] = DeadLetter(
                    where.source, where.partition, int(offsets[i]), reason, detail, raw(i)
                )

    arrays: list[pa.Array] = []
    for schema_field in schema:
        array, bad = columns.get(schema_field.name, (pa.nulls(n, schema_field.type), np.zeros(n, np.bool_)))
        if bad.any():
            reject(
                bad,
                DeadLetterReason.BAD_TYPE,
                f"field {schema_field.name!r} cannot be cast to {schema_field.type}",
            )
        if not schema_field.nullable and array.null_count:
            missing = np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=np.bool_) & ~bad
            reject(
                missing, DeadLetterReason.MISSING_FIELD, f"required field {schema_field.name!r} is missing"
            )
        arrays.append(array)
    out_schema = batch_schema(schema)
    arrays.insert(0, pa.array(offsets, type=pa.int64()))
    if rejected:
        keep = np.ones(n, dtype=np.bool_)
        keep[list(rejected)] = False
        mask = pa.array(keep)
        arrays = [pc.filter(array, mask) for array in arrays]
    batch = pa.RecordBatch.from_arrays(arrays, schema=out_schema)
    letters = tuple(rejected[i] for i in sorted(rejected))
    return Conformed(batch, letters)


def table_columns(table: pa.Table, schema: pa.Schema) -> dict[str, tuple[pa.Array, NDArray[np.bool_]]]:
    """Cast the columns of a decoded table to the schema (see :func:`cast_array`)."""
    out: dict[str, tuple[pa.Array, NDArray[np.bool_]]] = {}
    for schema_field in schema:
        if schema_field.name in table.column_names:
            column = table.column(schema_field.name).combine_chunks()
            out[schema_field.name] = cast_array(column, schema_field.type)
    return out
