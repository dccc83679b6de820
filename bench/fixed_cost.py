"""S5: the fixed cost of one epoch with no new input, in process: a forced checkpoint of the S1
job shape after one small epoch (so restore, snapshot and sink paths all run), step by step."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.engines import build_window_job
from bench.gen import EventSpec, write_inputs
from spark_jobs.runtime.cycle import (
    apply_job_retention,
    complete_epoch,
    notify_epoch_complete,
    run_epoch,
    trigger_epoch,
)
from state_store.storage import open_store
from state_store.testing import ManualClock


def run(epochs: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="epochal-bench-s5-"))
    (root / "store").mkdir()
    uri = (root / "store").as_uri()
    spec = EventSpec(2_000, 100, 1)
    write_inputs(spec, open_store(uri), root / "peer-in")
    job = build_window_job(spec, uri, "s5")
    store = open_store(uri)
    clock = ManualClock(1_000_000)
    samples = []
    for i in range(epochs + 1):
        clock.advance(1_000)
        t0 = time.perf_counter()
        pending = trigger_epoch(job, store, clock, force=True)
        assert pending is not None
        n = pending.checkpoint_id
        t1 = time.perf_counter()
        run_epoch(job, uri, n, clock)
        t2 = time.perf_counter()
        complete_epoch(job, store, clock, n)
        t3 = time.perf_counter()
        notify_epoch_complete(job, store, clock, n)
        t4 = time.perf_counter()
        apply_job_retention(job, store, clock)
        t5 = time.perf_counter()
        if i:  # the first epoch carries the input
            samples.append(
                {
                    "trigger": t1 - t0,
                    "run": t2 - t1,
                    "complete": t3 - t2,
                    "notify": t4 - t3,
                    "retention": t5 - t4,
                    "total": t5 - t0,
                }
            )
    median = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
    return {"samples": samples, "median_s": median}
