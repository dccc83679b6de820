"""The two engines of the windowed-aggregation benchmark, on the same generated input.

* :func:`run_epochal` -- the S1 job (``user_id`` keyed 10 s tumbling event-time windows, count and
  sum, watermark = max event time - ``jitter_ms`` - 1, transactional Parquet sink), one
  ``run_cycle`` per epoch (trigger, run, complete, notify, retention), exactly-once, a checkpoint
  per epoch. Returns per-epoch wall time, checkpoint bytes (referenced and written) and the
  closed windows (the committed sink output).
* :func:`run_peer` -- the Spark Structured Streaming query a user would write instead:
  ``withWatermark(jitter_ms)`` + ``groupBy(window(10 s), user_id)`` in append mode to a Parquet
  sink, ``Trigger.AvailableNow`` with ``maxFilesPerTrigger = partitions`` (micro-batch e = our
  epoch e), with the RocksDB provider (changelog checkpointing) or the default HDFS-backed one.
  Returns per-batch durations from ``recentProgress``, state bytes written per batch (the
  provider's files of version ``batch + 1``), and the closed windows.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.gen import EventSpec, file_log_source
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.windows import Aggregates, Count, Sum, TumblingEventTimeWindows
from spark_jobs.runtime.cycle import (
    apply_job_retention,
    complete_epoch,
    notify_epoch_complete,
    run_epoch,
    trigger_epoch,
)
from spark_jobs.sinks.reader import read_committed
from state_store.core import JobLayout, load_completed
from state_store.storage import open_store
from state_store.testing import ManualClock

WINDOW_MS = 10_000
PROVIDERS = {
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}
RESULT_COLUMNS = ["user_id", "window_start", "count", "sum"]


def build_window_job(
    spec: EventSpec, store_uri: str, job_id: str = "s1", parallelism: int = 2, max_records: int | None = None
) -> Job:
    job = Job(
        job_id,
        parallelism=parallelism,
        max_parallelism=128,
        max_records_per_epoch=max_records or spec.per_partition,
        retained_checkpoints=2,
        chunk_size=65_536,
    )
    source = file_log_source(open_store(store_uri))
    (
        job.source(source, uid="events", out_of_orderness_ms=spec.jitter_ms)
        .key_by("user_id")
        .window(
            TumblingEventTimeWindows(WINDOW_MS), Aggregates(Count(), Sum("value", name="sum")), uid="windows"
        )
        .sink(ParquetSink(unique_key=("user_id", "window_start")), uid="out")
    )
    return job


def run_epochal(
    spec: EventSpec,
    store_uri: str,
    *,
    executor: str = "local",
    spark: Any = None,
    job_id: str = "s1",
    epochs: int | None = None,
) -> dict[str, Any]:
    """The epoch cycle of ``run_cycle``, step by step so that each step is timed. ``epochs=1`` with
    a spec of E epochs runs all the input as one epoch (one checkpoint at the end)."""
    n_epochs = spec.epochs if epochs is None else epochs
    per_partition = spec.per_partition * spec.epochs // n_epochs
    job = build_window_job(spec, store_uri, job_id, max_records=per_partition)
    store = open_store(store_uri)
    clock = ManualClock(1_000_000)
    rows: list[dict[str, Any]] = []
    began = time.perf_counter()
    for _ in range(n_epochs):
        clock.advance(1_000)
        t0 = time.perf_counter()
        pending = trigger_epoch(job, store, clock)
        if pending is None:
            raise RuntimeError(f"epoch {len(rows) + 1} found no input: the generator wrote too few epochs")
        n = pending.checkpoint_id
        t1 = time.perf_counter()
        run_epoch(job, store_uri, n, clock, executor=executor, spark=spark)
        t2 = time.perf_counter()
        result = complete_epoch(job, store, clock, n)
        if result.status != "completed":
            raise RuntimeError(f"checkpoint {n} {result.status}: {result.message}")
        t3 = time.perf_counter()
        notify_epoch_complete(job, store, clock, n)
        t4 = time.perf_counter()
        apply_job_retention(job, store, clock)
        t5 = time.perf_counter()
        meta = load_completed(store, JobLayout(job.job_id), n).metadata
        tasks = [t for t in meta.tasks if t.task.uid == "windows"]

        def metric(name: str, tasks: list[Any] = tasks) -> float:
            return sum(float(t.metrics.get(name, 0.0)) for t in tasks)

        def phase(name: str, tasks: list[Any] = tasks) -> float:
            """Seconds a phase adds to the epoch: subtasks run one after the other in process
            (sum), at the same time on Spark (the slowest subtask)."""
            values = [float(t.metrics.get(name, 0.0)) for t in tasks] or [0.0]
            return max(values) if executor == "spark" else sum(values)

        rows.append(
            {
                "epoch": n,
                "seconds": t5 - t0,
                "events": per_partition * spec.partitions,
                "trigger_s": t1 - t0,
                "run_s": t2 - t1,
                "complete_s": t3 - t2,
                "notify_s": t4 - t3,
                "retention_s": t5 - t4,
                "restore_s": phase("restore_s"),
                "snapshot_sync_s": phase("snapshot_sync_s"),
                "upload_wait_s": phase("upload_wait_s"),
                "checkpoint_s": phase("snapshot_sync_s") + phase("upload_wait_s") + (t3 - t2),
                "state_bytes": sum(h.size for t in tasks for h in t.handles),
                "written_bytes": int(metric("bytes_written")),
                "late": int(metric("late_records")),
            }
        )
    wall = time.perf_counter() - began
    committed = read_committed(store, job.job_id, "out")
    out = (  # nothing closed yet (a short warm-up run) has no columns at all
        committed.select(RESULT_COLUMNS)
        if committed.num_columns
        else pa.table({c: pa.array([], pa.int64()) for c in RESULT_COLUMNS})
    )
    return {"engine": f"epochal-{executor}", "wall_s": wall, "epochs": rows, "windows": out, "job": job}


def _progress(p: Any) -> dict[str, Any]:
    if isinstance(p, dict):
        return p
    raw = getattr(p, "json", None)
    return dict(json.loads(raw)) if isinstance(raw, str) else dict(json.loads(str(p)))


def _state_bytes_by_version(checkpoint: Path) -> dict[int, int]:
    """Bytes of the state provider's files per version (HDFS: ``v.delta``/``v.snapshot``;
    RocksDB: ``v.changelog``/``v.zip`` and the SST files a ``v.zip`` names -- counted by mtime
    order is not stable, so SST files are attributed to the version whose zip is next)."""
    sizes: dict[int, int] = {}
    pending_sst = 0
    files = sorted(
        (p for p in (checkpoint / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_mtime
    )
    for path in files:
        m = re.match(r"^(\d+)(?:_[^.]*)?\.(delta|snapshot|changelog|zip)$", path.name)
        if m is None:
            if path.suffix == ".sst":
                pending_sst += path.stat().st_size
            continue
        version = int(m.group(1))
        sizes[version] = sizes.get(version, 0) + path.stat().st_size + pending_sst
        pending_sst = 0
    return sizes


def use_state_store(spark: Any, provider: str) -> None:
    """Point the session's streaming state at ``provider`` (``PROVIDERS``; RocksDB with changelog
    checkpointing)."""
    if provider not in PROVIDERS:
        raise ValueError(f"peer state store {provider!r} is unknown: use one of {sorted(PROVIDERS)}")
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDERS[provider])
    spark.conf.set(
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
        "true" if provider == "rocksdb" else "false",
    )


def run_peer(spec: EventSpec, spark: Any, input_dir: Path, work: Path, provider: str) -> dict[str, Any]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    use_state_store(spark, provider)
    schema = StructType([StructField(n, LongType()) for n in ("user_id", "event_time", "value")])
    out_dir, checkpoint = work / f"peer-{provider}-out", work / f"peer-{provider}-chk"
    events = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", spec.partitions)
        .parquet(str(input_dir))
        .withColumn("ts", F.timestamp_millis("event_time"))
        .withWatermark("ts", f"{spec.jitter_ms} milliseconds")
    )
    windows = (
        events.groupBy(F.window("ts", f"{WINDOW_MS // 1000} seconds"), "user_id")
        .agg(F.count("*").alias("count"), F.sum("value").alias("sum"))
        .select(
            "user_id",
            F.unix_millis(F.col("window.start")).alias("window_start"),
            "count",
            "sum",
        )
    )
    began = time.perf_counter()
    query = (
        windows.writeStream.format("parquet")
        .option("path", str(out_dir))
        .option("checkpointLocation", str(checkpoint))
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.perf_counter() - began
    progress = [_progress(p) for p in query.recentProgress]
    state_bytes = _state_bytes_by_version(checkpoint)
    epochs = []
    for p in progress:
        if not p.get("numInputRows"):
            continue
        batch = int(p["batchId"])
        ops = p.get("stateOperators") or [{}]
        epochs.append(
            {
                "epoch": batch + 1,
                "seconds": p["durationMs"].get("triggerExecution", 0) / 1000.0,
                "events": int(p["numInputRows"]),
                "state_rows": int(ops[0].get("numRowsTotal", 0)),
                "state_memory_bytes": int(ops[0].get("memoryUsedBytes", 0)),
                "written_bytes": state_bytes.get(batch + 1, 0),
                "commit_s": ops[0].get("commitTimeMs", 0) / 1000.0,
                "checkpoint_s": (
                    ops[0].get("commitTimeMs", 0)
                    + p["durationMs"].get("walCommit", 0)
                    + p["durationMs"].get("commitOffsets", 0)
                )
                / 1000.0,
            }
        )
    files = sorted(out_dir.glob("*.parquet"))
    table = (
        pa.concat_tables([pq.read_table(f) for f in files]).select(RESULT_COLUMNS)
        if files
        else pa.table({c: pa.array([], pa.int64()) for c in RESULT_COLUMNS})
    )
    return {
        "engine": f"peer-{provider}",
        "wall_s": wall,
        "epochs": epochs,
        "windows": table,
        "checkpoint_dir": str(checkpoint),
    }


def compare_windows(ours: pa.Table, peer: pa.Table) -> dict[str, Any]:
    """Windows both engines closed must agree exactly (count and sum per user and window)."""
    a = ours.to_pandas().astype("int64").set_index(["user_id", "window_start"]).sort_index()
    b = peer.to_pandas().astype("int64").set_index(["user_id", "window_start"]).sort_index()
    dup_a, dup_b = int(a.index.duplicated().sum()), int(b.index.duplicated().sum())
    both = a.index.intersection(b.index)
    mismatched = int((a.loc[both] != b.loc[both]).any(axis=1).sum())
    return {
        "ours_closed": len(a),
        "peer_closed": len(b),
        "both_closed": len(both),
        "duplicates_ours": dup_a,
        "duplicates_peer": dup_b,
        "mismatched": mismatched,
        "identical": mismatched == 0 and dup_a == 0 and dup_b == 0 and len(both) > 0,
    }
