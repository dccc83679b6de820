"""Parquet segments: row *i* of the file is the record at offset ``base_offset + i``.

The record count comes from the footer (``num_rows``), so indexing a segment reads no data pages.
Rows are in file order (row groups in order, rows in order within a group); a writer must not
reorder them after the offsets were handed out.

A file may use other column types than the source schema: columns are cast safely per value, so a
value that cannot be cast, or a null/absent required column, dead-letters only its row. Columns not
in the schema are ignored. A dead letter's ``raw`` is the row rendered as JSON.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.sources.conform import Conformed, Where, conform, table_columns
from state_store.formats.arrow_bytes import read_parquet

EXTENSION = "parquet"


def count_records(data: bytes) -> int:
    """Number of records in a segment, from the Parquet footer."""
    with pq.ParquetFile(pa.BufferReader(data)) as parquet_file:  # footer only, in this thread
        return int(parquet_file.metadata.num_rows)


def read_segment(data: bytes) -> pa.Table:
    """All rows of a segment, in file order, with the file's own column types."""
    return read_parquet(data)


def decode(
    table: pa.Table, first: int, stop: int, base_offset: int, schema: pa.Schema, where: Where
) -> Conformed:
    """Decode rows ``[first, stop)`` (row indices, stop exclusive) of a segment at ``base_offset``."""
    window = table.slice(first, stop - first)
    offsets = np.arange(base_offset + first, base_offset + stop, dtype=np.int64)

    def raw(i: int) -> str:
        return json.dumps(window.slice(i, 1).to_pylist()[0], default=str, ensure_ascii=False)

    return conform(table_columns(window, schema), offsets, schema, where, raw)


def encode_table(table: pa.Table | pa.RecordBatch) -> bytes:
    """Write Arrow rows as one Parquet file (zstd), rows in order."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return bytes(sink.getvalue().to_pybytes())
