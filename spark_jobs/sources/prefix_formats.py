"""Decoding the files of a landing zone: Parquet, JSON lines and CSV, record *i* at offset ``base + i``.

The prefix source fixes every file's record count when it admits the file, and later reads record
ranges ``[first, stop)`` of it (row indices, ``stop`` exclusive). Both go through
:func:`open_records`, so counting and reading use the same parser and always agree.

Record rules (where the off-by-one traps are)
---------------------------------------------
* **Parquet**: row *i* in file order (row groups in order) is record *i*.
* **JSON lines**: one JSON object per line, ``\\n`` separated, a trailing ``\\r`` is dropped. Blank
  lines (also a lone ``\\r``) are *not* records (producers' editors add them); any other line is a
  record, a malformed one (not JSON, not an object) goes to the dead letters and keeps its offset.
* **CSV** (RFC 4180 as Python's :mod:`csv` reads it, UTF-8, an optional BOM): with ``header=True``
  the first non-blank row names the columns and is not a record; every following non-blank row is a
  record (a quoted field may span lines). As Spark's PERMISSIVE mode: a short row has nulls for the
  missing fields, extra fields are dropped, an empty field is null. Values are cast safely to the
  schema's types (:func:`spark_jobs.sources.conform.cast_array`); timestamps are ISO-8601 strings or
  integers in the field's unit (a zoned field reads a time without zone as UTC).

Columns not in the schema are ignored; a schema field the file lacks is null (a dead letter if
required). A file that cannot be parsed at all (not Parquet, not UTF-8 CSV) raises
:class:`Unreadable`; single bad records never do.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from spark_jobs.sources import ndjson, parquet
from spark_jobs.sources.conform import Conformed, Where, cast_array, conform

FileFormat = Literal["parquet", "jsonl", "csv"]
FORMATS: tuple[FileFormat, ...] = ("parquet", "jsonl", "csv")
_CR = 13


class Unreadable(Exception):
    """The file cannot be parsed in its format; the message is the parser's reason (one line)."""


@dataclass(frozen=True, slots=True)
class CsvOptions:
    """How CSV files are read: a header row naming the columns (else columns in schema order)."""

    header: bool = True
    delimiter: str = ","

    def __post_init__(self) -> None:
        if len(self.delimiter) != 1 or self.delimiter in '\r\n"':
            raise ValueError(
                f"csv delimiter {self.delimiter!r} is invalid: use one character like ',' or ';'"
            )


class FileRecords(Protocol):
    """The records of one file, addressed by row index."""

    @property
    def count(self) -> int: ...

    def decode(self, first: int, stop: int, base: int, schema: pa.Schema, where: Where) -> Conformed:
        """Rows ``[first, stop)`` as a batch with offsets ``base + first .. base + stop - 1``."""
        ...


def open_records(fmt: FileFormat, data: bytes, csv_options: CsvOptions | None = None) -> FileRecords:
    """Parse ``data`` (a whole file) in ``fmt``; raises :class:`Unreadable` if it cannot be parsed."""
    if fmt == "parquet":
        return _ParquetRecords(data)
    if fmt == "jsonl":
        return _JsonLines(data)
    if fmt == "csv":
        return _CsvRecords(data, csv_options or CsvOptions())
    raise ValueError(f"file format {fmt!r} is not supported: use one of {', '.join(FORMATS)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


class _ParquetRecords:
    def __init__(self, data: bytes) -> None:
        try:
            self._table = parquet.read_segment(data)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise Unreadable(f"not a readable Parquet file: {_first_line(exc)}") from None

    @property
    def count(self) -> int:
        return int(self._table.num_rows)

    def decode(self, first: int, stop: int, base: int, schema: pa.Schema, where: Where) -> Conformed:
        return parquet.decode(self._table, first, stop, base, schema, where)


class _JsonLines:
    def __init__(self, data: bytes) -> None:
        lines = ndjson.split_lines(data)
        starts, ends = lines.starts, lines.ends
        if len(data):
            buffer = np.frombuffer(data, dtype=np.uint8)
            ends = ends - ((ends > starts) & (buffer[np.maximum(ends - 1, 0)] == _CR))
        keep = ends > starts
        self._lines = ndjson.Lines(data, starts[keep], ends[keep])

    @property
    def count(self) -> int:
        return len(self._lines)

    def decode(self, first: int, stop: int, base: int, schema: pa.Schema, where: Where) -> Conformed:
        return ndjson.decode(self._lines, first, stop, base, schema, where)


class _CsvRecords:
    def __init__(self, data: bytes, options: CsvOptions) -> None:
        try:
            text = data.decode("utf-8-sig")
            reader = csv.reader(io.StringIO(text, newline=""), delimiter=options.delimiter)
            rows = [row for row in reader if row]
        except UnicodeDecodeError as exc:
            raise Unreadable(f"not UTF-8 text: {_first_line(exc)}") from None
        except csv.Error as exc:
            raise Unreadable(f"not readable as CSV: {_first_line(exc)}") from None
        self._header: list[str] | None = None
        if options.header and rows:
            self._header = [name.strip() for name in rows[0]]
            rows = rows[1:]
        self._rows = rows
        self._delimiter = options.delimiter

    @property
    def count(self) -> int:
        return len(self._rows)

    def decode(self, first: int, stop: int, base: int, schema: pa.Schema, where: Where) -> Conformed:
        window = self._rows[first:stop]
        offsets = np.arange(base + first, base + stop, dtype=np.int64)
        names = self._header if self._header is not None else schema.names
        index: dict[str, int] = {}
        for i, name in enumerate(names):
            index.setdefault(name, i)
        columns: dict[str, tuple[pa.Array, NDArray[np.bool_]]] = {}
        for schema_field in schema:
            column = index.get(schema_field.name)
            if column is not None:
                strings = pa.array([_cell(row, column) for row in window], type=pa.string())
                columns[schema_field.name] = cast_strings(strings, schema_field.type)

        def raw(i: int) -> str:
            out = io.StringIO()
            csv.writer(out, delimiter=self._delimiter, lineterminator="").writerow(window[i])
            return out.getvalue()

        return conform(columns, offsets, schema, where, raw)


def _cell(row: Sequence[str], column: int) -> str | None:
    if column >= len(row) or row[column] == "":
        return None
    return row[column]


def cast_strings(strings: pa.Array, target: pa.DataType) -> tuple[pa.Array, NDArray[np.bool_]]:
    """Cast CSV text safely to ``target``; a timestamp may also be an integer in the field's unit."""
    array, bad = cast_array(strings, target)
    if not (bad.any() and pa.types.is_timestamp(target)):
        return array, bad
    fallbacks = [pa.int64()]
    if target.tz is not None:
        fallbacks.append(pa.timestamp(target.unit))  # no zone in the text: UTC
    for kind in fallbacks:
        parsed, failed = cast_array(strings, kind)
        fix = bad & ~failed
        if fix.any():
            array = pc.if_else(pa.array(fix), pc.cast(parsed, target), array)
            bad = bad & ~fix
    return array, bad
