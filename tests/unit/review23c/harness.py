"""Shared runner for the review of commit 82e47a6: one per-key process function job run epoch by
epoch on a manual clock, either with its keyed state in memory or on disk (``state_memory_mb=1``);
the result is the committed output and the state digest of the latest completed checkpoint."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.chaos.observe import state_digest
from spark_jobs.runtime import warm
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import CompletedCheckpointStore, JobLayout
from state_store.storage import open_store
from state_store.testing import KillAt, ManualClock, SimulatedCrash

STEP = 2_000
MAXP = 128
JOB = "perkey"
UID = "fn"

KEYS: dict[str, Callable[[pa.RecordBatch], Any]] = {
    "string": lambda b: b.column("user_id"),
    "int": lambda b: pc.cast(pc.utf8_slice_codeunits(b.column("user_id"), 1), pa.int64()),
    "negative": lambda b: pc.multiply(
        pc.cast(pc.utf8_slice_codeunits(b.column("user_id"), 1), pa.int64()), -1_000_000_007
    ),
    "binary": lambda b: pc.cast(b.column("user_id"), pa.binary()),
}


def job_of(
    parallelism: int,
    spill: bool,
    state_dir: Path,
    fn: Any,
    *,
    key: str = "string",
    keys: int = 300,
    rate: int = 250,
    local_recovery: bool = False,
    job_id: str = JOB,
) -> Job:
    job = Job(
        job_id,
        parallelism=parallelism,
        max_parallelism=MAXP,
        chunk_size=256,
        max_records_per_epoch=100_000,
        state_memory_mb=1 if spill else None,
        state_dir=str(state_dir),
        local_recovery=local_recovery,
    )
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=5, events_per_second=[rate, rate // 2],
        out_of_orderness_ms=[300, 100], keys=keys, start_ms=DEFAULT_START_MS,
    )  # fmt: skip
    (
        job.source(source, uid="clicks", out_of_orderness_ms=300)
        .key_by(KEYS.get(key, key))
        .process(fn(), uid=UID)
        .sink(ParquetSink(), uid="out")
    )  # fmt: skip
    return job


def latest_metadata(uri: str, job_id: str = JOB) -> Any:
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout(job_id), 1)
    latest = completed.latest()
    assert latest is not None
    return latest.metadata


def result(uri: str, job_id: str = JOB) -> tuple[list[str], dict[str, Any]]:
    store = open_store(uri)
    rows = read_committed(store, job_id, "out").to_pylist()
    out = sorted(repr(sorted(r.items())) for r in rows)
    return out, state_digest(store, latest_metadata(uri, job_id), MAXP)


def run(
    uri: str,
    spill: bool | list[bool],
    state_dir: Path,
    scales: list[int],
    fn: Any,
    *,
    kill: tuple[int, str] | None = None,
    between: Callable[[int], None] | None = None,
    fns: list[Any] | None = None,
    **kwargs: Any,
) -> tuple[list[str], dict[str, Any]]:
    """One cycle per entry of ``scales`` (the parallelism); ``spill`` per epoch when a list;
    ``kill``: crash that epoch's first try at that kill point, then run it again; ``fns``: the
    function per epoch (a job that changes its descriptors)."""
    warm.clear()
    clock = ManualClock(DEFAULT_START_MS)
    modes = spill if isinstance(spill, list) else [spill] * len(scales)
    try:
        for epoch, parallelism in enumerate(scales):
            job = job_of(parallelism, modes[epoch], state_dir, fns[epoch] if fns else fn, **kwargs)
            clock.advance(STEP)
            if between is not None:
                between(epoch)
            if kill is not None and epoch == kill[0]:
                with pytest.raises(SimulatedCrash):
                    run_cycle(job, uri, clock, executor="local", kill=KillAt(kill[1]))  # type: ignore[arg-type]
                assert run_cycle(job, uri, clock, executor="local").status in ("completed", "skipped")
                continue
            report = run_cycle(job, uri, clock, executor="local")
            assert report.status == "completed", report
    finally:
        warm.clear()
    return result(uri, kwargs.get("job_id", JOB))


def both(
    tmp_path: Path, scales: list[int], fn: Any, **kwargs: Any
) -> tuple[tuple[list[str], dict[str, Any]], tuple[list[str], dict[str, Any]]]:
    """(in memory, on disk) of the same job."""
    heap = run((tmp_path / "heap").as_uri(), False, tmp_path / "hs", scales, fn, **kwargs)
    disk = run((tmp_path / "disk").as_uri(), True, tmp_path / "ds", scales, fn, **kwargs)
    return heap, disk


def diff(a: list[str], b: list[str]) -> tuple[list[str], list[str]]:
    """Rows only in a, rows only in b (first few)."""
    sa, sb = set(a), set(b)
    return sorted(sa - sb)[:3], sorted(sb - sa)[:3]
