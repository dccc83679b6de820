"""NDJSON segments: one JSON object per line; the record at line *i* has offset ``base_offset + i``.

Line rules (where the off-by-one traps are)
-------------------------------------------
* Lines are separated by ``\\n``. A final line without ``\\n`` still counts; the ``\\n`` ending the
  last line does **not** start another (empty) record.
* An empty line *is* a record -- a malformed one (``INVALID_JSON``) that consumes its offset.
  Producers must never write blank lines; :func:`encode_lines` refuses values containing ``\\n``.
* A ``\\r`` before the ``\\n`` belongs to the line (JSON treats it as whitespace).
* Timestamp fields are ISO-8601 strings (with ``Z`` or an offset for zoned types) or integers in
  the field's unit (milliseconds for ``timestamp[ms]``); :func:`encode_table` writes ISO strings.
  Fields not in the schema are ignored.

Decoding is vectorized: a window of lines whose every line starts with ``{`` and ends with ``}`` is
parsed by Arrow's JSON reader in one call. When Arrow refuses the window (a bad line, a value of the
wrong JSON type) the window is decoded line by line with :mod:`json` to find the culprits. Both
paths cast values with the same functions (:mod:`spark_jobs.sources.conform`), so a record decodes
identically whichever path or chunking reads it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from numpy.typing import NDArray

from spark_jobs.sources.conform import (
    CAST_ERRORS,
    Conformed,
    Where,
    array_from_values,
    conform,
    table_columns,
)
from spark_jobs.sources.dead_letters import DeadLetter, DeadLetterReason

EXTENSION = "ndjson"
_NEWLINE, _OPEN, _CLOSE = 10, ord("{"), ord("}")


@dataclass(frozen=True, slots=True)
class Lines:
    """The line boundaries of one segment: line *i* is ``data[starts[i]:ends[i]]`` (no ``\\n``)."""

    data: bytes
    starts: NDArray[np.int64]
    ends: NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.starts)

    def line(self, i: int) -> bytes:
        return self.data[int(self.starts[i]) : int(self.ends[i])]

    def text(self, i: int) -> str:
        return self.line(i).decode("utf-8", errors="replace")


def split_lines(data: bytes) -> Lines:
    """Find every line of ``data`` (vectorized; see the line rules in the module docstring)."""
    newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == _NEWLINE).astype(np.int64)
    starts = np.concatenate([np.zeros(1, np.int64), newlines + 1])
    ends = np.concatenate([newlines, np.array([len(data)], np.int64)])
    if len(data) == 0 or data.endswith(b"\n"):
        starts, ends = starts[:-1], ends[:-1]
    return Lines(data, starts, ends)


def count_records(data: bytes) -> int:
    """Number of records (lines) in a segment."""
    newlines = data.count(b"\n")
    return newlines + (1 if data and not data.endswith(b"\n") else 0)


def decode(
    lines: Lines, first: int, stop: int, base_offset: int, schema: pa.Schema, where: Where
) -> Conformed:
    """Decode lines ``[first, stop)`` (line indices, stop exclusive) of a segment at ``base_offset``."""
    offsets = np.arange(base_offset + first, base_offset + stop, dtype=np.int64)

    def raw(i: int) -> str:
        return lines.text(first + i)

    columns = _fast_columns(lines, first, stop, schema)
    if columns is not None:
        return conform(columns, offsets, schema, where, raw)
    return _slow(lines, first, stop, offsets, schema, where)


def _parse_schemas(schema: pa.Schema) -> list[pa.Schema]:
    """Schemas to hand Arrow's JSON reader: timestamps read as strings, then as integers."""
    timestamps = [f.name for f in schema if pa.types.is_timestamp(f.type)]
    if not timestamps:
        return [schema]
    return [
        pa.schema([f.with_type(kind) if f.name in timestamps else f for f in schema])
        for kind in (pa.string(), pa.int64())
    ]


def _fast_columns(
    lines: Lines, first: int, stop: int, schema: pa.Schema
) -> dict[str, tuple[pa.Array, NDArray[np.bool_]]] | None:
    starts, ends = lines.starts[first:stop], lines.ends[first:stop]
    if len(starts) == 0:
        return table_columns(schema.empty_table(), schema)
    buffer = np.frombuffer(lines.data, dtype=np.uint8)
    if np.any(ends <= starts) or np.any(buffer[starts] != _OPEN) or np.any(buffer[ends - 1] != _CLOSE):
        return None
    # Every line starts with '{' and ends with '}': each yields at least one row or an error, so an
    # equal row count proves one row per line (no line skipped, none split).
    window = lines.data[int(starts[0]) : int(ends[-1])]
    for parse_schema in _parse_schemas(schema):
        options = pj.ParseOptions(explicit_schema=parse_schema, unexpected_field_behavior="ignore")
        try:
            table = pj.read_json(io.BytesIO(window), parse_options=options)
        except CAST_ERRORS:
            continue
        if table.num_rows != len(starts):
            return None
        return table_columns(table, schema)
    return None


def _slow(
    lines: Lines, first: int, stop: int, offsets: NDArray[np.int64], schema: pa.Schema, where: Where
) -> Conformed:
    letters: list[DeadLetter] = []
    objects: list[dict[str, Any]] = []
    kept: list[int] = []
    for i in range(stop - first):
        try:
            value = json.loads(lines.line(first + i))
        except ValueError as exc:
            reason, detail = DeadLetterReason.INVALID_JSON, f"invalid JSON: {exc}"
        else:
            if isinstance(value, dict):
                objects.append(value)
                kept.append(i)
                continue
            reason, detail = DeadLetterReason.NOT_AN_OBJECT, f"a JSON {type(value).__name__}, not an object"
        letters.append(
            DeadLetter(where.source, where.partition, int(offsets[i]), reason, detail, lines.text(first + i))
        )
    columns = {
        f.name: array_from_values([obj.get(f.name) for obj in objects], f.type)
        for f in schema
        if any(f.name in obj for obj in objects)
    }
    kept_rows = np.asarray(kept, dtype=np.int64)
    result = conform(columns, offsets[kept_rows], schema, where, lambda i: lines.text(first + kept[i]))
    merged = sorted((*letters, *result.rejected), key=lambda letter: letter.offset)
    return Conformed(result.batch, tuple(merged))


# -- encoding (producers, tests, demo) -----------------------------------------------------------
def encode_lines(lines: Sequence[str | bytes]) -> bytes:
    """Join raw lines into a segment; refuses values containing a newline (it would add a record)."""
    parts = [line.encode() if isinstance(line, str) else bytes(line) for line in lines]
    for index, part in enumerate(parts):
        if b"\n" in part:
            raise ValueError(f"line {index} contains a newline: NDJSON records are one line each")
    return b"".join(part + b"\n" for part in parts)


def encode_records(records: Iterable[Mapping[str, Any]]) -> bytes:
    """One compact JSON object per record (values JSON cannot hold are written with ``str``)."""
    return encode_lines([json.dumps(dict(r), default=str, separators=(",", ":")) for r in records])


def encode_table(table: pa.Table | pa.RecordBatch) -> bytes:
    """Write Arrow rows as NDJSON; timestamps become ISO-8601 strings (``Z`` for zoned types)."""
    columns: dict[str, Any] = {}
    for name, column in zip(table.column_names, table.columns):
        kind = column.type
        if pa.types.is_timestamp(kind):
            if kind.tz is not None:
                column = pc.strftime(
                    column.cast(pa.timestamp(kind.unit, tz="UTC")), format="%Y-%m-%dT%H:%M:%SZ"
                )
            else:
                column = pc.strftime(column, format="%Y-%m-%dT%H:%M:%S")
        columns[name] = column
    rows = pa.table(columns).to_pylist()
    return encode_records(rows)
