"""Hand Python ``bytes`` to Arrow's Parquet reader so that no Arrow thread needs the GIL to free them.

Why: ``pa.BufferReader(bytes)`` wraps the Python object, and ``pq.read_table`` goes through the
dataset scanner, which may drop the reader's last reference -- and so the ``bytes`` -- on one of
Arrow's pool threads; that thread then takes the GIL. If the interpreter is finalizing at that
moment, CPython ends the thread with a forced unwind through a ``noexcept`` C++ destructor and the
process aborts with "terminate called without an active exception" after all its work succeeded
(apache/arrow#34314; here 1 in 25 runs of the docs' in-process example, 17 of 40 short processes
that exit right after such reads).

Invariant: the buffers returned here are allocated and owned by Arrow (a copy of the input), so
they can be freed on any thread at any time; Parquet reads also run synchronously in the calling
thread and close their reader before returning.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq


def arrow_owned(data: bytes | bytearray | memoryview) -> pa.Buffer:
    """A copy of ``data`` in memory Arrow allocated (freeing it never touches Python)."""
    sink = pa.BufferOutputStream()
    sink.write(data)
    return sink.getvalue()


def read_parquet(data: bytes | bytearray | memoryview) -> pa.Table:
    """All rows of one Parquet file held in memory, in file order, with the file's column types."""
    with pq.ParquetFile(pa.BufferReader(arrow_owned(data))) as parquet_file:
        return parquet_file.read()


__all__ = ["arrow_owned", "read_parquet"]
