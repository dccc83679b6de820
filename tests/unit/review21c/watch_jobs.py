"""Jobs for the landing-watch review, loadable by reference as the triggerer loads them:
``hashed`` (a PrefixSource with partitions=4 over ``$REVIEW21C_ROOT/landing``, manifest compacted
after 2 tracked files) and ``in_memory`` (its landing zone on the memory store)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.sources import PrefixSource

ROOT_ENV = "REVIEW21C_ROOT"
SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("event_time", pa.timestamp("ms", tz="UTC"))]
)


def root() -> Path:
    return Path(os.environ[ROOT_ENV])


def _job(landing: str, store: str) -> Job:
    source = PrefixSource(
        "drops", landing, job_id="hashed", schema=SCHEMA, format="jsonl", partitions=4, settle_ms=0,
        confirm_listing=False, max_tracked_files=2, state_store=store,
    )  # fmt: skip
    built = Job("hashed", parallelism=1, max_parallelism=8)
    built.source(source, uid="drops").sink(ParquetSink(), uid="out")
    return built


def hashed() -> Job:
    return _job((root() / "landing").as_uri(), (root() / "store").as_uri())


def in_memory() -> Job:
    return _job("memory://review21c-landing", (root() / "store").as_uri())
