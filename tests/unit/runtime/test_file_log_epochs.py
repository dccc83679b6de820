"""A file-log source through the epoch cycle: malformed records go to the dead letters (counted in
the source's ack), the epoch continues, and positions resume exactly after each segment."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.windows import Count, TumblingEventTimeWindows
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources import FileLogSource
from state_store.core import CompletedCheckpointStore, JobLayout
from state_store.storage import LocalObjectStore, open_store
from state_store.testing import ManualClock

SCHEMA = pa.schema(
    [pa.field("page", pa.string(), nullable=False), pa.field("event_time", pa.int64(), nullable=False)]
)


def test_malformed_records_are_dead_lettered_and_the_epoch_continues(tmp_path: Path) -> None:
    source = FileLogSource(LocalObjectStore(tmp_path / "input"), "clicks", uid="clicks", schema=SCHEMA)
    good = [json.dumps({"page": "/a" if i % 2 else "/b", "event_time": 1_000 * i}) for i in range(20)]
    source.append_lines("p0", [*good[:10], "{not json", json.dumps({"page": "/a"})])  # 2 bad records
    job = Job("files", parallelism=2, max_parallelism=8)
    job.source(source, uid="clicks").key_by("page").window(
        TumblingEventTimeWindows(5_000), Count(), uid="w"
    ).sink(ParquetSink(), uid="out")
    uri, clock = (tmp_path / "store").as_uri(), ManualClock(0)
    assert run_cycle(job, uri, clock).status == "completed"
    source.append_lines("p0", good[10:])
    assert run_cycle(job, uri, clock).status == "completed"
    assert run_cycle(job, uri, clock, drain=True).status == "completed"

    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout("files"), 3)
    metas = sorted((c.metadata for c in completed), key=lambda m: m.checkpoint_id)
    source_acks = [t for t in metas[0].tasks if t.task.uid == "clicks"]
    assert source_acks[0].metrics["dead_letters"] == 2
    assert metas[-1].positions["ranges"]["clicks/p0"][1] == 22  # 12 + 10 offsets, bad ones included
    counts = read_committed(open_store(uri), "files", "out").to_pandas()
    assert counts["count"].sum() == 20
