"""Shared runner for the review of commits 4950c72 and 6cba846 (spill reads searched, key groups
hashed once per chunk): one keyed job run epoch by epoch on a manual clock, either with its state in
memory (``state_memory_mb=None``) or on disk (``state_memory_mb=1``), with the key column turned
into one of many key types; the result is the committed output and the state digest of the latest
completed checkpoint, so the disk run can be compared with the heap run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.chaos.observe import state_digest
from spark_jobs.runtime import warm
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import CompletedCheckpointStore, JobLayout
from state_store.storage import open_store
from state_store.testing import ManualClock

STEP = 2_000
MAXP = 64
JOB = "review23d"
UID = "fn"

STRINGS = ["", "é", "日本語", "a\x00b", " ", "🙂", "Z", "a", "ab", "\u00e9t\u00e9"]
INTS = [-(2**63), 2**63 - 1, 0, -1, 1, 2**62, -(2**62), 7_919_003, -7_919_003, 2**31]


def _index(b: pa.RecordBatch) -> pa.Array:
    """The user number of every row (``u17`` -> 17)."""
    return pc.cast(pc.utf8_slice_codeunits(b.column("user_id"), 1), pa.int64())


def _strings(b: pa.RecordBatch) -> pa.Array:
    """The empty string (user 0); non-ASCII and NUL-bearing strings with a suffix per user."""
    i = _index(b)
    prefix = pc.take(pa.array(STRINGS), pc.remainder(i, len(STRINGS)))
    joined = pc.binary_join_element_wise(prefix, pc.cast(pc.divide(i, 3), pa.string()), "")
    return pc.if_else(pc.equal(i, 0), "", joined)  # user 0: the empty string


def _extremes(b: pa.RecordBatch) -> pa.Array:
    """int64 keys incl. -2**63 and 2**63-1, the rest spread over negatives and positives."""
    i = _index(b)
    far = pc.multiply(pc.subtract(i, 20), 1_000_000_007)
    return pc.if_else(pc.less(i, len(INTS)), pc.take(pa.array(INTS), pc.remainder(i, len(INTS))), far)


KEYS: dict[str, Callable[[pa.RecordBatch], Any]] = {
    "string": _strings,
    "large_string": lambda b: _strings(b).cast(pa.large_string()),
    "binary": lambda b: pc.if_else(
        pc.equal(_index(b), 0),
        pa.scalar(b"", pa.binary()),
        pc.binary_join_element_wise(
            _strings(b).cast(pa.binary()), pa.scalar(b"\xff\x00", pa.binary()), pa.scalar(b"", pa.binary())
        ),
    ),
    "int64_extremes": _extremes,
    "int32_negative": lambda b: pc.cast(pc.multiply(_index(b), -7), pa.int32()),
    "int8": lambda b: pc.cast(pc.subtract(_index(b), 40), pa.int8()),
    "uint64": lambda b: pc.cast(pc.multiply(_index(b), 3), pa.uint64()),
}


def job_of(
    parallelism: int,
    spill: bool,
    state_dir: Path,
    fn: Any,
    key: str,
    *,
    keys: int = 80,
    rate: int = 80,
    local_recovery: bool = False,
) -> Job:
    job = Job(
        JOB,
        parallelism=parallelism,
        max_parallelism=MAXP,
        chunk_size=48,
        max_records_per_epoch=100_000,
        state_memory_mb=1 if spill else None,
        state_dir=str(state_dir),
        local_recovery=local_recovery,
    )
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=23, events_per_second=[rate, rate // 2],
        out_of_orderness_ms=[300, 100], keys=keys, start_ms=DEFAULT_START_MS,
    )  # fmt: skip
    (
        job.source(source, uid="clicks", out_of_orderness_ms=300)
        .key_by(KEYS[key])
        .process(fn(), uid=UID)
        .sink(ParquetSink(), uid="out")
    )  # fmt: skip
    return job


def result(uri: str) -> tuple[list[str], dict[str, Any]]:
    store = open_store(uri)
    rows = read_committed(store, JOB, "out").to_pylist()
    completed, _ = CompletedCheckpointStore.recover(store, JobLayout(JOB), 1)
    latest = completed.latest()
    assert latest is not None
    return sorted(repr(sorted(r.items())) for r in rows), state_digest(store, latest.metadata, MAXP)


def run(
    uri: str, spill: bool, state_dir: Path, scales: list[int], fn: Any, key: str, **kwargs: Any
) -> tuple[list[str], dict[str, Any]]:
    """One cycle per entry of ``scales`` (the parallelism), in process."""
    warm.clear()
    clock = ManualClock(DEFAULT_START_MS)
    try:
        for parallelism in scales:
            clock.advance(STEP)
            report = run_cycle(
                job_of(parallelism, spill, state_dir, fn, key, **kwargs), uri, clock, executor="local"
            )
            assert report.status == "completed", report
    finally:
        warm.clear()
    return result(uri)


def both(
    tmp_path: Path, scales: list[int], fn: Any, key: str, **kwargs: Any
) -> tuple[tuple[list[str], dict[str, Any]], tuple[list[str], dict[str, Any]]]:
    """(in memory, on disk) of the same job."""
    heap = run((tmp_path / "heap").as_uri(), False, tmp_path / "hs", scales, fn, key, **kwargs)
    disk = run((tmp_path / "disk").as_uri(), True, tmp_path / "ds", scales, fn, key, **kwargs)
    return heap, disk


def diff(a: list[str], b: list[str]) -> tuple[list[str], list[str]]:
    """Rows only in a, rows only in b (first few)."""
    sa, sb = set(a), set(b)
    return sorted(sa - sb)[:3], sorted(sb - sa)[:3]
