"""S3: bytes per incremental checkpoint vs the full state, 1% of the keys updated per epoch
(the ``keyed_counts`` example job: one value per key), and the checkpoint duration."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from spark_jobs.examples.keyed_counts import build_job
from spark_jobs.runtime.cycle import (
    apply_job_retention,
    complete_epoch,
    notify_epoch_complete,
    run_epoch,
    trigger_epoch,
)
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core import JobLayout, load_completed
from state_store.storage import open_store
from state_store.testing import ManualClock

STEP_MS = 10_000


def run(keys: int, epochs: int, fraction: float = 0.01) -> dict[str, Any]:
    if keys < 100:
        raise ValueError(f"--keys {keys} is too small for 1% updates: use >= 100")
    root = Path(tempfile.mkdtemp(prefix="epochal-bench-s3-"))
    uri = root.as_uri()
    store = open_store(uri)
    job = build_job(keys=keys, fraction=fraction, step_ms=STEP_MS)
    clock = ManualClock(DEFAULT_START_MS)
    rows: list[dict[str, Any]] = []
    for _ in range(epochs):
        clock.advance(STEP_MS)
        t0 = time.perf_counter()
        pending = trigger_epoch(job, store, clock)
        assert pending is not None
        n = pending.checkpoint_id
        run_epoch(job, uri, n, clock)
        t1 = time.perf_counter()
        complete_epoch(job, store, clock, n)
        t2 = time.perf_counter()
        notify_epoch_complete(job, store, clock, n)
        apply_job_retention(job, store, clock)
        seconds = time.perf_counter() - t0
        meta = load_completed(store, JobLayout(job.job_id), n).metadata
        tasks = [t for t in meta.tasks if t.task.uid == "counts"]
        full = sum(h.size for t in tasks for h in t.handles)
        written = sum(int(t.metrics.get("bytes_written", 0)) for t in tasks)
        sync = sum(
            float(t.metrics.get("snapshot_sync_s", 0)) + float(t.metrics.get("upload_wait_s", 0))
            for t in tasks
        )
        rows.append(
            {
                "epoch": n,
                "events": sum(e - s for s, e in meta.positions["ranges"].values()),
                "state_bytes": full,
                "written_bytes": written,
                "ratio": written / full if full else 0.0,
                "checkpoint_s": sync + (t2 - t1),
                "seconds": seconds,
            }
        )
    steady = [r["ratio"] for r in rows[1:]]
    return {
        "keys": keys,
        "fraction": fraction,
        "epochs": rows,
        "steady_ratio": sum(steady) / len(steady) if steady else 0.0,
    }
