"""A job for the landing-watch tests, loadable by reference
(``tests.unit.airflow.landing_watch_job:job``) as the triggerer loads it: a ``PrefixSource`` over
``$LANDING_WATCH_ROOT/landing`` (JSON lines, one folder per partition, no settle time, one file per
epoch) into a Parquet sink, its store ``$LANDING_WATCH_ROOT/store``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.sources import PrefixSource

ROOT_ENV = "LANDING_WATCH_ROOT"
SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("event_time", pa.timestamp("ms", tz="UTC"))]
)


def root() -> Path:
    return Path(os.environ[ROOT_ENV])


def job() -> Job:
    landing, store = (root() / "landing").as_uri(), (root() / "store").as_uri()
    source = PrefixSource(
        "drops", landing, job_id="watched", schema=SCHEMA, format="jsonl", partitions="folder",
        settle_ms=0, max_files_per_epoch=1, state_store=store,
    )  # fmt: skip
    built = Job("watched", parallelism=1, max_parallelism=8)
    built.source(source, uid="drops").sink(ParquetSink(), uid="out")
    return built


def drop(folder: str, name: str, ids: list[int]) -> None:
    """Write a JSON-lines file aside, then rename it into the landing zone."""
    target = root() / "landing" / folder
    target.mkdir(parents=True, exist_ok=True)
    tmp = target / f".{name}.tmp"
    tmp.write_text("".join(json.dumps({"id": i, "event_time": "2026-11-26T10:00:00Z"}) + "\n" for i in ids))
    tmp.rename(target / name)
