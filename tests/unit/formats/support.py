"""Helpers shared by the state-file format tests: read a file's metadata, rewrite its table."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc


def file_meta(data: bytes) -> dict[str, str]:
    """The ``epochal.*`` schema metadata of a native (Arrow IPC) state file."""
    schema = ipc.open_stream(pa.py_buffer(data)).schema
    return {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}


def rewrite(data: bytes, change: Any) -> bytes:
    """The file with ``change(table)`` written back (to damage it in a test)."""
    table = change(ipc.open_stream(pa.py_buffer(data)).read_all())
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def with_meta(**changes: str) -> Any:
    """A ``change`` for :func:`rewrite` that replaces metadata entries."""

    def change(table: pa.Table) -> pa.Table:
        meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
        return table.replace_schema_metadata({**meta, **changes})

    return change
