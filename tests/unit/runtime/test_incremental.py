"""Incremental checkpoints: with 1% of the keys updated per epoch only a small fraction of the
state is written, and restoring through a chain of deltas gives exactly the right counts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from spark_jobs.examples.keyed_counts import build_job
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core import JobLayout, load_completed
from state_store.storage import open_store
from state_store.testing import ManualClock
from tests.unit.runtime.support import final_state


def test_small_updates_write_a_small_fraction_and_delta_chains_restore_exactly(tmp_path: Path) -> None:
    uri, keys = tmp_path.as_uri(), 4_000
    job = build_job(keys=keys, fraction=0.01, max_parallelism=16)
    clock = ManualClock(DEFAULT_START_MS)
    ratios = []
    for _ in range(12):  # more epochs than MAX_DELTA_CHAIN: chains are rebased on the way
        clock.advance(10_000)
        report = run_cycle(job, uri, clock)
        assert report.status == "completed" and report.checkpoint_id is not None
        meta = load_completed(open_store(uri), JobLayout(job.job_id), report.checkpoint_id).metadata
        tasks = [t for t in meta.tasks if t.task.uid == "counts"]
        full = sum(h.size for t in tasks for h in t.handles)
        ratios.append(sum(int(t.metrics["bytes_written"]) for t in tasks) / full)
    assert ratios[0] == 1.0
    steady = ratios[1:]  # includes the rebase after MAX_DELTA_CHAIN deltas (a full file per key group)
    assert sorted(steady)[len(steady) // 2] < 0.1, ratios
    assert sum(steady) / len(steady) < 0.15, ratios

    source = job.graph.stages()[0].source_spec.source
    end = source.end_offsets(clock.now_ms())["p0"]
    import numpy as np

    expected = Counter(f"user-{k}" for k in source.key_at(np.arange(end, dtype=np.int64)))
    rows = final_state(uri, job)["counts"]
    got = {eval(key): eval(value) for _, name, key, _, value, _ in rows if name == "count"}
    assert got == dict(expected)
