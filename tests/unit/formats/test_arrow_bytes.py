"""In-memory Parquet reads cannot abort the interpreter at exit (apache/arrow#34314).

``pq.read_table(pa.BufferReader(bytes))`` may drop its reader -- and with it the Python ``bytes`` --
on an Arrow pool thread; if that happens while the interpreter finalizes, the process aborts with
"terminate called without an active exception" after all its work succeeded (measured: 17 of 40
short processes). ``read_parquet`` reads synchronously from an Arrow-owned copy, so nothing Arrow
frees needs the GIL.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.sources import parquet as parquet_segments
from state_store.formats.arrow_bytes import arrow_owned, read_parquet
from tests.unit.docs.snippets import ROOT


def _parquet_bytes(n: int) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"k": list(range(n)), "v": [str(i) for i in range(n)]}), sink, row_group_size=100)
    return bytes(sink.getvalue().to_pybytes())


def test_read_parquet_returns_the_rows_in_file_order_and_holds_no_reference_to_the_input() -> None:
    data = _parquet_bytes(1_000)
    before = sys.getrefcount(data)
    table = read_parquet(data)
    assert table.column("k").to_pylist() == list(range(1_000))
    assert table.column("v")[999].as_py() == "999"
    assert sys.getrefcount(data) == before


def test_arrow_owned_is_an_equal_copy_not_a_view() -> None:
    for data in (b"abc\x00def", bytearray(b"abc\x00def"), memoryview(b"abc\x00def")):
        assert arrow_owned(data).to_pybytes() == b"abc\x00def"
    source = bytearray(b"xyz")
    buffer = arrow_owned(source)
    source[0] = ord("q")
    assert buffer.to_pybytes() == b"xyz"


def test_parquet_segments_count_and_read_without_keeping_the_segment() -> None:
    data = _parquet_bytes(250)
    before = sys.getrefcount(data)
    assert parquet_segments.count_records(data) == 250
    assert parquet_segments.read_segment(data).num_rows == 250
    assert sys.getrefcount(data) == before


_EXIT_RIGHT_AFTER_READS = textwrap.dedent(
    """
    import pyarrow as pa, pyarrow.parquet as pq
    from state_store.formats.arrow_bytes import read_parquet
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"k": list(range(2000))}), sink, row_group_size=100)
    data = sink.getvalue().to_pybytes()
    for _ in range(200):
        assert read_parquet(bytes(data)).num_rows == 2000
    """
)


@pytest.mark.slow
def test_processes_that_exit_right_after_parquet_reads_exit_cleanly() -> None:
    """The shape that aborted 17 of 40 runs through ``pq.read_table``: every run must exit 0."""
    for _ in range(6):
        done = subprocess.run(
            [sys.executable, "-c", _EXIT_RIGHT_AFTER_READS],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
