"""``python -m bench matrix``: a workload matrix, Epochal vs Spark Structured Streaming (issue 20, part 1).

Each cell is one workload on its own generated input (``bench.gen.Shape``: the records of S1's
generator with string keys, float values, a lagging partition or redelivered duplicates), run by

* Epochal with ``executor="spark"`` on the peer's ``local[2]`` SparkSession (as S1), one epoch and
  one checkpoint per micro-batch of the peer, exactly-once, a transactional Parquet sink;
* the Spark Structured Streaming query a user would write instead (windowed ``groupBy`` /
  ``session_window`` / ``dropDuplicatesWithinWatermark``, append mode, Parquet sink, the same input
  files, ``maxFilesPerTrigger = partitions`` so that micro-batch e is our epoch e), once with the
  HDFS-backed state store and once with RocksDB (changelog checkpointing),

in that order, in the same process; then the results are compared row for row: keys, window
bounds and integers exactly, floats within ``REL_TOL`` (Spark adds in another order).

The matrix varies one dimension at a time around the baseline (int64 keys, int64 values,
count + sum, 10 s tumbling windows), plus string keys x float values (min/max and count/sum), so
every dimension is covered without the full product. Cells without a deterministic peer
equivalent (``first``/``last``: Spark's ``first``/``last`` depend on the order rows arrive after
a shuffle) run ours only and are checked against the input instead (see ``check_first_last``).
A slow cell says why: the ``heap_fallback`` reasons in Epochal's acks (the completed checkpoints'
task metrics) name what took the operator off the columnar path.

Invariants: no cell drops a record on either engine (the watermark delay is at least the input's
jitter plus the partition lag), so every window both engines closed has the same contents; the
windows compared are those ending at or before the earlier of the two final watermarks
(``close_horizons``: ours is the minimum over partitions, Spark's the global maximum), the others
are counted. Every number in the results comes from this run (ratios of events/s measured minutes
apart at most).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench import report
from bench.engines import PROVIDERS
from bench.gen import EventSpec, Shape, shaped_events, shaped_source, write_shaped_inputs
from spark_jobs.api import windows as W
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
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
SLIDE_MS = 5_000
SESSION_GAP_MS = 3_000
LATENESS_MS = 5_000
LAG_MS = 3_000
"""The lagging partition's event times trail the other's by this much (the skewed input)."""
DUPLICATE_SHARE = 0.25
"""Of the odd records (those of the second partition), this share are redeliveries."""
DEDUP_TTL_MS = 2_000
"""Epochal's dedup remembers a key for 2 epochs of processing time (the bench clock advances 1 s
per epoch); every copy arrives in the epoch of its original, within 99 records."""
REL_TOL = 1e-9
"""Float results: |ours - peer| <= REL_TOL * max(|ours|, |peer|)."""
LOCAL_CORES = 2
SHUFFLE_PARTITIONS = 2 * LOCAL_CORES
"""Spark's tuning guide: "we recommend 2-3 tasks per CPU core"; in Structured Streaming this is
also the number of state store instances (fixed when a query's checkpoint is created)."""
PEER_DRIVER_MEMORY = "4g"
"""More than the 1g default: the HDFS-backed provider keeps every state version in the JVM heap."""
WARM_UP = EventSpec(100_000, 2_000, 2)
"""Both engines run the baseline cell on this input before anything is timed (20 s of event time:
a window closes, so firing and the sink's output run too)."""
WINDOW_TARGETS = (3.0, 5.0)
OTHER_TARGETS = (1.5, 2.5)
"""Minimum ratios (Epochal events/s / peer events/s) vs the HDFS-backed and RocksDB peers."""
AGGREGATES = ("count", "sum", "min", "max", "first", "last", "avg")


@dataclass(frozen=True)
class Cell:
    name: str
    key_type: str = "int64"
    value_type: str = "int64"
    aggregates: tuple[str, ...] = ("count", "sum")
    window: str = "tumbling"
    """tumbling (10 s), sliding (10 s every 5 s), session (3 s gap), or dedup (no window)."""
    lateness_ms: int = 0
    lag_ms: int = 0
    peer: bool = True
    """False: Spark has no deterministic equivalent; ours runs alone and is checked against the input."""
    varies: str = "baseline"
    """The dimension this cell varies against the baseline (for the coverage check and the table)."""

    def __post_init__(self) -> None:
        unknown = [a for a in self.aggregates if a not in AGGREGATES]
        if unknown or self.window not in ("tumbling", "sliding", "session", "dedup"):
            raise ValueError(f"cell {self.name!r}: unknown aggregates {unknown} or window {self.window!r}")

    @property
    def dedup(self) -> bool:
        return self.window == "dedup"

    @property
    def uid(self) -> str:
        return "dedup" if self.dedup else "windows"

    @property
    def shape(self) -> Shape:
        return Shape(self.key_type, self.value_type, self.lag_ms, DUPLICATE_SHARE if self.dedup else 0.0)

    @property
    def targets(self) -> tuple[float, float]:
        return OTHER_TARGETS if self.dedup else WINDOW_TARGETS

    def describe(self) -> str:
        if self.dedup:
            what = f"dedup by event_id (ours: TTL {DEDUP_TTL_MS} ms; peer: dropDuplicatesWithinWatermark)"
        else:
            what = {
                "tumbling": "tumbling 10 s",
                "sliding": "sliding 10 s / 5 s",
                "session": f"session gap {SESSION_GAP_MS // 1000} s",
            }[self.window]
            what += f", {'+'.join(self.aggregates)}"
            if self.lateness_ms:
                what += f", lateness {self.lateness_ms // 1000} s"
        lag = f", partition lag {self.lag_ms // 1000} s" if self.lag_ms else ""
        return f"{self.key_type} key, {self.value_type} value, {what}{lag}"


CELLS: tuple[Cell, ...] = (
    Cell("baseline"),
    Cell("string-key", key_type="string", varies="key type"),
    Cell("float-value", value_type="float64", varies="value type"),
    Cell("min-max", aggregates=("min", "max"), varies="aggregates"),
    Cell("first-last", aggregates=("first", "last"), peer=False, varies="aggregates"),
    Cell("avg", aggregates=("avg",), varies="aggregates"),
    Cell("sliding", window="sliding", varies="window"),
    Cell("session", window="session", varies="window"),
    Cell("lateness", lateness_ms=LATENESS_MS, varies="lateness"),
    Cell("skewed-partitions", lag_ms=LAG_MS, varies="partition skew"),
    Cell(
        "string-float-min-max",
        key_type="string",
        value_type="float64",
        aggregates=("min", "max"),
        varies="key x value x aggregates",
    ),
    Cell(
        "string-float-count-sum",
        key_type="string",
        value_type="float64",
        varies="key x value (issue 20's input)",
    ),
    Cell("dedup", window="dedup", aggregates=(), varies="operator"),
)
DIMENSIONS = ("key type", "value type", "aggregates", "window", "lateness", "partition skew", "operator")


def avg_available() -> bool:
    return hasattr(W, "Avg")


def skipped_reason(cell: Cell) -> str | None:
    if "avg" in cell.aggregates and not avg_available():
        return "spark_jobs.api.windows.Avg does not exist yet (another engineer is adding it)"
    return None


@dataclass(frozen=True)
class MatrixSizes:
    events: int = 1_000_000
    keys: int = 100_000
    epochs: int = 10
    repeat: int = 1
    peer: bool = True
    cells: tuple[str, ...] = field(default_factory=tuple)
    """Names of the cells to run (empty: all)."""

    def spec(self) -> EventSpec:
        per_epoch = self.events // self.epochs
        per_epoch -= per_epoch % 2
        if per_epoch < 2:
            raise ValueError(f"--events {self.events} over --epochs {self.epochs} leaves no events per epoch")
        return EventSpec(per_epoch, max(1, self.keys), self.epochs)


def select_cells(names: Sequence[str]) -> list[Cell]:
    if not names:
        return list(CELLS)
    known = {c.name: c for c in CELLS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown matrix cells {unknown}: use some of {list(known)}")
    return [known[n] for n in names]


# -- Epochal ---------------------------------------------------------------------------------------
def _our_aggregate(name: str) -> Any:
    if name == "count":
        return W.Count(name="count")
    classes: dict[str, Any] = {"sum": W.Sum, "min": W.Min, "max": W.Max, "first": W.First, "last": W.Last}
    classes["avg"] = getattr(W, "Avg", None)  # issue 20: added by another engineer (``skipped_reason``)
    return classes[name]("value", name=name)


def _assigner(cell: Cell) -> Any:
    if cell.window == "sliding":
        return W.SlidingEventTimeWindows(WINDOW_MS, SLIDE_MS)
    if cell.window == "session":
        return W.EventTimeSessionWindows(SESSION_GAP_MS)
    return W.TumblingEventTimeWindows(WINDOW_MS)


def build_job(cell: Cell, spec: EventSpec, store_uri: str, job_id: str) -> Job:
    """The cell's Epochal job: S1's settings (2 subtasks, 128 key groups, one epoch per micro-batch)."""
    job = Job(
        job_id,
        parallelism=2,
        max_parallelism=128,
        max_records_per_epoch=spec.per_partition,
        retained_checkpoints=2,
        chunk_size=65_536,
    )
    events = job.source(
        shaped_source(open_store(store_uri), cell.shape), uid="events", out_of_orderness_ms=spec.jitter_ms
    )
    if cell.dedup:
        unique = events.key_by("event_id").deduplicate(ttl_ms=DEDUP_TTL_MS, uid=cell.uid)
        unique.sink(ParquetSink(unique_key=("event_id",)), uid="out")
        return job
    aggs = W.Aggregates(*(_our_aggregate(a) for a in cell.aggregates))
    windows = events.key_by("user_id").window(
        _assigner(cell), aggs, uid=cell.uid, allowed_lateness_ms=cell.lateness_ms
    )
    windows.sink(ParquetSink(unique_key=("user_id", "window_start")), uid="out")
    return job


def result_columns(cell: Cell) -> list[str]:
    if cell.dedup:
        return ["event_id", "user_id", "event_time", "value"]
    return ["user_id", "window_start", "window_end", *cell.aggregates]


def result_keys(cell: Cell) -> list[str]:
    return ["event_id"] if cell.dedup else ["user_id", "window_start"]


def run_ours(cell: Cell, spec: EventSpec, store_uri: str, *, spark: Any, job_id: str) -> dict[str, Any]:
    """``bench.engines.run_epochal`` for any cell: trigger, run, complete, notify, retention per
    epoch (timed), then the committed output and what the acks said (``heap_fallback``, late records)."""
    executor = "spark" if spark is not None else "local"
    job = build_job(cell, spec, store_uri, job_id)
    store = open_store(store_uri)
    clock = ManualClock(1_000_000)
    epochs: list[dict[str, Any]] = []
    fallbacks: dict[str, int] = {}
    metrics_total: dict[str, float] = {}
    began = time.perf_counter()
    for _ in range(spec.epochs):
        clock.advance(1_000)
        t0 = time.perf_counter()
        pending = trigger_epoch(job, store, clock)
        if pending is None:
            raise RuntimeError(f"epoch {len(epochs) + 1} found no input: the generator wrote too few epochs")
        n = pending.checkpoint_id
        t1 = time.perf_counter()
        run_epoch(job, store_uri, n, clock, executor=executor, spark=spark)
        t2 = time.perf_counter()
        result = complete_epoch(job, store, clock, n)
        if result.status != "completed":
            raise RuntimeError(f"checkpoint {n} {result.status}: {result.message}")
        t3 = time.perf_counter()
        notify_epoch_complete(job, store, clock, n)
        t_notified = time.perf_counter()
        apply_job_retention(job, store, clock)
        t4 = time.perf_counter()
        tasks = [
            t
            for t in load_completed(store, JobLayout(job.job_id), n).metadata.tasks
            if t.task.uid == cell.uid
        ]
        for t in tasks:
            reason = t.metrics.get("heap_fallback")
            if reason:
                fallbacks[str(reason)] = fallbacks.get(str(reason), 0) + 1
            for name in (
                "late_records",
                "duplicates_dropped",
                "restore_s",
                "snapshot_sync_s",
                "upload_wait_s",
            ):
                metrics_total[name] = metrics_total.get(name, 0.0) + float(t.metrics.get(name, 0.0) or 0.0)
        epochs.append(
            {
                "epoch": n,
                "seconds": t4 - t0,
                "events": spec.events_per_epoch,
                "trigger_s": t1 - t0,
                "run_s": t2 - t1,
                "complete_s": t3 - t2,
                "notify_s": t_notified - t3,
                "retention_s": t4 - t_notified,
                "state_bytes": sum(h.size for t in tasks for h in t.handles),
            }
        )
    wall = time.perf_counter() - began
    committed = read_committed(store, job.job_id, "out")
    columns = result_columns(cell)
    out = committed.select(columns) if committed.num_columns else None
    return {
        "engine": f"epochal-{executor}",
        "wall_s": wall,
        "epochs": epochs,
        "table": out,
        "heap_fallback": fallbacks,
        "metrics": metrics_total,
    }


# -- the Spark Structured Streaming peer -----------------------------------------------------------
def _spark_schema(shape: Shape) -> Any:
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    kinds = {"int64": LongType(), "string": StringType(), "float64": DoubleType()}
    fields = [
        ("user_id", kinds[shape.key_type]),
        ("event_time", LongType()),
        ("value", kinds[shape.value_type]),
    ]
    if shape.duplicate_share:
        fields.insert(0, ("event_id", LongType()))
    return StructType([StructField(n, t) for n, t in fields])


def peer_delay_ms(cell: Cell, spec: EventSpec) -> int:
    """The peer's watermark delay: its watermark is the maximum event time over all partitions, so
    with a lagging partition the delay must cover the lag too or it would drop that partition's
    records as late (ours takes the minimum over partitions and needs only the jitter)."""
    return spec.jitter_ms + cell.lag_ms


def peer_query(cell: Cell, spec: EventSpec, events: Any) -> Any:
    """The query a Spark user would write for the cell (``events`` has ``ts`` and the watermark)."""
    from pyspark.sql import functions as F

    if cell.dedup:
        return events.dropDuplicatesWithinWatermark(["event_id"]).select(*result_columns(cell))
    if cell.window == "session":
        window = F.session_window("ts", f"{SESSION_GAP_MS} milliseconds")
    elif cell.window == "sliding":
        window = F.window("ts", f"{WINDOW_MS} milliseconds", f"{SLIDE_MS} milliseconds")
    else:
        window = F.window("ts", f"{WINDOW_MS} milliseconds")
    functions = {"count": lambda: F.count("*"), "sum": lambda: F.sum("value"), "min": lambda: F.min("value")}
    functions |= {"max": lambda: F.max("value"), "avg": lambda: F.avg("value")}
    aggs = [functions[a]().alias(a) for a in cell.aggregates]
    column = "session_window" if cell.window == "session" else "window"
    return (
        events.groupBy(window, "user_id")
        .agg(*aggs)
        .select(
            "user_id",
            F.unix_millis(F.col(f"{column}.start")).alias("window_start"),
            F.unix_millis(F.col(f"{column}.end")).alias("window_end"),
            *cell.aggregates,
        )
    )


def run_peer(
    cell: Cell, spec: EventSpec, spark: Any, input_dir: Path, work: Path, provider: str
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDERS[provider])
    spark.conf.set(
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
        "true" if provider == "rocksdb" else "false",
    )
    out_dir, checkpoint = work / f"peer-{provider}-out", work / f"peer-{provider}-chk"
    events = (
        spark.readStream.schema(_spark_schema(cell.shape))
        .option("maxFilesPerTrigger", spec.partitions)
        .parquet(str(input_dir))
        .withColumn("ts", F.timestamp_millis("event_time"))
        .withWatermark("ts", f"{peer_delay_ms(cell, spec)} milliseconds")
    )
    began = time.perf_counter()
    query = (
        peer_query(cell, spec, events)
        .writeStream.format("parquet")
        .option("path", str(out_dir))
        .option("checkpointLocation", str(checkpoint))
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.perf_counter() - began
    epochs = []
    for raw in query.recentProgress:
        p = _progress(raw)
        if not p.get("numInputRows"):
            continue
        ops = p.get("stateOperators") or [{}]
        epochs.append(
            {
                "epoch": int(p["batchId"]) + 1,
                "seconds": p["durationMs"].get("triggerExecution", 0) / 1000.0,
                "events": int(p["numInputRows"]),
                "state_rows": int(ops[0].get("numRowsTotal", 0)),
                "commit_s": ops[0].get("commitTimeMs", 0) / 1000.0,
            }
        )
    files = sorted(out_dir.glob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files]) if files else None
    return {
        "engine": f"peer-{provider}",
        "wall_s": wall,
        "epochs": epochs,
        "table": table.select(result_columns(cell)) if table is not None else None,
        "watermark_delay_ms": peer_delay_ms(cell, spec),
    }


def _progress(p: Any) -> dict[str, Any]:
    if isinstance(p, dict):
        return p
    raw = getattr(p, "json", None)
    return dict(json.loads(raw)) if isinstance(raw, str) else dict(json.loads(str(p)))


def _conf(spark: Any, key: str) -> str:
    """A setting's effective value (Spark's default where it was not set), or ``(default)``."""
    try:
        return str(spark.conf.get(key))
    except Exception:
        value = spark.sparkContext.getConf().get(key)
        return "(default)" if value is None else str(value)


def peer_settings(spark: Any, spec: EventSpec) -> dict[str, Any]:
    """Everything that decides the peer's speed, read back from its session where it can be."""
    keys = [
        "spark.sql.shuffle.partitions",
        "spark.driver.memory",
        "spark.sql.streaming.noDataMicroBatches.enabled",
        "spark.sql.streaming.stateStore.maintenanceInterval",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot",
        "spark.sql.streaming.stateStore.rocksdb.compactOnCommit",
        "spark.sql.adaptive.enabled",
        "spark.python.worker.reuse",
        "spark.serializer",
    ]
    conf = {k: _conf(spark, k) for k in keys}
    return {
        "master": spark.sparkContext.master,
        "spark_version": spark.version,
        "conf": conf,
        "state_store_providers": {
            "peer-hdfs": {"providerClass": PROVIDERS["hdfs"], "changelogCheckpointing.enabled": "false"},
            "peer-rocksdb": {"providerClass": PROVIDERS["rocksdb"], "changelogCheckpointing.enabled": "true"},
        },
        "source": f"parquet file source, maxFilesPerTrigger={spec.partitions} (micro-batch e = our epoch e)",
        "trigger": "availableNow (all input, then the no-data batches that close the last windows)",
        "sink": "parquet, outputMode append, a fresh checkpoint location per cell and provider",
        "watermark": f"withWatermark(ts, {spec.jitter_ms} ms + the cell's partition lag); ours: "
        f"out_of_orderness {spec.jitter_ms} ms per partition, minimum over partitions",
        "shuffle_partitions_rule": f"{SHUFFLE_PARTITIONS} = 2 tasks per core x {LOCAL_CORES} cores (Spark's "
        "tuning guide: 2-3 tasks per CPU core)",
        "warm_up": f"before anything is timed, the baseline cell on {WARM_UP.total:,} events / "
        f"{WARM_UP.keys:,} keys / {WARM_UP.epochs} epochs, run by Epochal and by both peers on this session",
    }


# -- comparing results -----------------------------------------------------------------------------
def compare_rows(
    ours: pa.Table | None,
    peer: pa.Table | None,
    keys: Sequence[str],
    rel_tol: float = REL_TOL,
    *,
    horizon: int | None = None,
) -> dict[str, Any]:
    """Row for row: the rows are matched on ``keys``; every other column must be equal -- exactly
    for ints and strings, within ``rel_tol`` (relative) for floats. Rows on one side only, rows
    twice on one side, and mismatched rows all make the results not identical.

    ``horizon``: only windows with ``window_end <= horizon`` are compared -- those that both
    engines' final watermarks close (``close_horizons``); the rows beyond are counted, not compared."""
    a = _frame(ours, keys)
    b = _frame(peer, keys)
    beyond_a = beyond_b = 0
    if horizon is not None:
        beyond_a, beyond_b = int((a["window_end"] > horizon).sum()), int((b["window_end"] > horizon).sum())
        a, b = a[a["window_end"] <= horizon], b[b["window_end"] <= horizon]
    dup_a, dup_b = int(a.index.duplicated().sum()), int(b.index.duplicated().sum())
    a, b = a[~a.index.duplicated()], b[~b.index.duplicated()]
    both = a.index.intersection(b.index)
    x, y = a.loc[both], b.loc[both]
    bad = np.zeros(len(both), dtype=bool)
    max_rel = 0.0
    columns = [c for c in a.columns if c in b.columns]
    for column in columns:
        xs, ys = x[column].to_numpy(), y[column].to_numpy()
        if xs.dtype.kind == "f" or ys.dtype.kind == "f":
            xf, yf = xs.astype(np.float64), ys.astype(np.float64)
            nan = np.isnan(xf) | np.isnan(yf)
            scale = np.maximum(np.abs(xf), np.abs(yf))
            rel = np.where(nan | (scale == 0), 0.0, np.abs(xf - yf) / np.where(scale == 0, 1.0, scale))
            bad |= (rel > rel_tol) | (np.isnan(xf) != np.isnan(yf))
            if len(rel):
                max_rel = max(max_rel, float(rel.max()))
        else:
            bad |= xs != ys
    missing_columns = sorted(set(a.columns) ^ set(b.columns))
    only_ours, only_peer = len(a) - len(both), len(b) - len(both)
    mismatched = int(bad.sum())
    return {
        "ours_rows": len(a) + dup_a,
        "peer_rows": len(b) + dup_b,
        "both": len(both),
        "only_ours": only_ours,
        "only_peer": only_peer,
        "duplicates_ours": dup_a,
        "duplicates_peer": dup_b,
        "mismatched": mismatched,
        "max_rel_diff": max_rel,
        "rel_tol": rel_tol,
        "missing_columns": missing_columns,
        "horizon": horizon,
        "beyond_horizon_ours": beyond_a,
        "beyond_horizon_peer": beyond_b,
        "identical": not (mismatched or dup_a or dup_b or only_ours or only_peer or missing_columns)
        and len(both) > 0,
    }


def _frame(table: pa.Table | None, keys: Sequence[str]) -> pd.DataFrame:
    if table is None:
        return pd.DataFrame(columns=list(keys)).set_index(list(keys))
    return table.to_pandas().set_index(list(keys)).sort_index()


def input_frame(spec: EventSpec, shape: Shape) -> pd.DataFrame:
    """Every generated record with its partition (record index mod partitions, as the files split them)."""
    frames = []
    for e in range(spec.epochs):
        df = shaped_events(spec, shape, e).to_pandas()
        df["partition"] = np.arange(len(df)) % spec.partitions
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def close_horizons(spec: EventSpec, cell: Cell, df: pd.DataFrame) -> dict[str, int]:
    """The largest window end each engine's final watermark closes. Ours: a window fires when
    ``end - 1 <= watermark`` and the watermark is the minimum over partitions of ``max event time -
    delay - 1``; the peer's watermark is ``max event time over all partitions - delay`` and evicts
    windows with ``end <= watermark``. They differ by the few ms between the partitions' maxima
    (plus the lag): a session (or a window boundary) ending in between is closed by one engine only."""
    ours = int(df.groupby("partition")["event_time"].max().min()) - spec.jitter_ms
    peer = int(df["event_time"].max()) - peer_delay_ms(cell, spec)
    return {"ours": ours, "peer": peer, "both": min(ours, peer)}


def touching_pairs(df: pd.DataFrame, horizon: int) -> int:
    """Consecutive events of one key exactly one session gap apart (both sessions closed): where
    sessions that only touch (``end == next start``) are merged or not."""
    times = df.loc[df["event_time"] + SESSION_GAP_MS <= horizon, ["user_id", "event_time"]]
    times = times.sort_values(["user_id", "event_time"])
    same_key = times["user_id"].to_numpy()[1:] == times["user_id"].to_numpy()[:-1]
    gaps = np.diff(times["event_time"].to_numpy())
    return int((same_key & (gaps == SESSION_GAP_MS)).sum())


def check_first_last(ours: pa.Table | None, spec: EventSpec, cell: Cell) -> dict[str, Any]:
    """No peer can check ``first``/``last`` (Spark's are not deterministic after a shuffle), so the
    input does: the windows ours closed must be exactly the input's windows whose end - 1 is at or
    below the final watermark (min over partitions of the max event time, minus the delay, minus 1);
    every first/last is one of the window's values (between its min and max), and a window of
    one record has first = last = that record's value (about a third of the windows here)."""
    df = input_frame(spec, cell.shape)
    watermark = int(df.groupby("partition")["event_time"].max().min()) - spec.jitter_ms - 1
    df["window_start"] = df["event_time"] - df["event_time"] % WINDOW_MS
    ref = df.groupby(["user_id", "window_start"])["value"].agg(["min", "max", "count"])
    starts = ref.index.get_level_values("window_start")
    ref = ref[starts + WINDOW_MS - 1 <= watermark]
    mine = _frame(ours, ["user_id", "window_start"])
    dup = int(mine.index.duplicated().sum())
    mine = mine[~mine.index.duplicated()]
    both = mine.index.intersection(ref.index)
    m, r = mine.loc[both], ref.loc[both]
    bad = np.zeros(len(both), dtype=bool)
    for column in ("first", "last"):
        v = m[column].to_numpy()
        bad |= (v < r["min"].to_numpy()) | (v > r["max"].to_numpy())
        single = r["count"].to_numpy() == 1
        bad |= single & (v != r["min"].to_numpy())
    bad |= m["window_end"].to_numpy() != m.index.get_level_values("window_start").to_numpy() + WINDOW_MS
    mismatched = int(bad.sum())
    only_ours, only_ref = len(mine) - len(both), len(ref) - len(both)
    return {
        "checked_against": "the input (no peer)",
        "ours_rows": len(mine) + dup,
        "reference_rows": len(ref),
        "both": len(both),
        "only_ours": only_ours,
        "only_reference": only_ref,
        "duplicates_ours": dup,
        "single_record_windows": int((r["count"] == 1).sum()),
        "mismatched": mismatched,
        "identical": not (mismatched or dup or only_ours or only_ref) and len(both) > 0,
    }


# -- running the matrix ----------------------------------------------------------------------------
def _spark() -> Any:
    from spark_jobs.runtime.spark_session import get_spark

    spark = get_spark(
        f"local[{LOCAL_CORES}]",
        "epochal-bench-matrix",
        conf={
            "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
            "spark.driver.memory": PEER_DRIVER_MEMORY,
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def warm_up(spark: Any, root: Path) -> dict[str, float]:
    """The same courtesy for both engines: the baseline cell on a small input, ours and both peers."""
    began = time.perf_counter()
    cell = CELLS[0]
    store = root / "warm-store"
    write_shaped_inputs(WARM_UP, cell.shape, open_store(store.as_uri()), root / "warm-in")
    run_ours(cell, WARM_UP, store.as_uri(), spark=spark, job_id="warm-up")
    for provider in ("hdfs", "rocksdb"):
        run_peer(cell, WARM_UP, spark, root / "warm-in", root / "warm", provider)
    shutil.rmtree(root / "warm-store", ignore_errors=True)
    return {"warm_up_s": time.perf_counter() - began}


def _log(message: str) -> None:
    print(f"[matrix {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def evaluate(cell: Cell, best: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Ratios of the best runs against each peer, and whether each meets the cell's target."""
    ours = best.get("epochal-spark") or best.get("epochal-local")
    out: dict[str, Any] = {}
    if ours is None:
        return out
    for peer, target in zip(("peer-hdfs", "peer-rocksdb"), cell.targets):
        if peer not in best:
            continue
        ratio = ours["events_per_s"] / best[peer]["events_per_s"]
        out[peer] = {
            "ratio": ratio,
            "target": target,
            "met": ratio >= target,
            "share_of_target": ratio / target,
            "missed_by": max(0.0, 1.0 - ratio / target),
            "speedup_needed": max(1.0, target / ratio),
        }
    return out


def run_cell(cell: Cell, spec: EventSpec, spark: Any, root: Path, repeat: int, peer: bool) -> dict[str, Any]:
    work = root / cell.name
    store = work / "store"
    store.mkdir(parents=True)
    inputs = write_shaped_inputs(spec, cell.shape, open_store(store.as_uri()), work / "peer-in")
    runs: dict[str, list[dict[str, Any]]] = {}
    last: dict[str, dict[str, Any]] = {}
    with_peer = peer and cell.peer and spark is not None
    for r in range(repeat):
        ours = run_ours(cell, spec, store.as_uri(), spark=spark, job_id=f"{cell.name}-r{r}")
        last[ours["engine"]] = ours
        runs.setdefault(ours["engine"], []).append(_summary(ours, spec.total))
        _log(f"{cell.name}: {ours['engine']} {spec.total / ours['wall_s']:,.0f} events/s")
        if with_peer:
            for provider in ("hdfs", "rocksdb"):
                result = run_peer(cell, spec, spark, work / "peer-in", work / f"r{r}", provider)
                last[result["engine"]] = result
                runs.setdefault(result["engine"], []).append(_summary(result, spec.total))
                _log(f"{cell.name}: {result['engine']} {spec.total / result['wall_s']:,.0f} events/s")
    best = {name: max(rs, key=lambda s: s["events_per_s"]) for name, rs in runs.items()}
    ours_name = next(n for n in last if n.startswith("epochal-"))
    ours_last = last[ours_name]
    extra: dict[str, Any] = {}
    if with_peer:
        horizon = None
        if not cell.dedup:
            df = input_frame(spec, cell.shape)
            extra["close_horizons"] = close_horizons(spec, cell, df)
            horizon = extra["close_horizons"]["both"]
            if cell.window == "session":
                extra["touching_pairs"] = touching_pairs(df, horizon)
            del df
        checks = {
            f"{ours_name} vs {p}": compare_rows(
                ours_last["table"], last[p]["table"], result_keys(cell), horizon=horizon
            )
            for p in ("peer-hdfs", "peer-rocksdb")
        }
        checks["peer-hdfs vs peer-rocksdb"] = compare_rows(
            last["peer-hdfs"]["table"], last["peer-rocksdb"]["table"], result_keys(cell)
        )
    elif "first" in cell.aggregates:
        checks = {f"{ours_name} vs input": check_first_last(ours_last["table"], spec, cell)}
    else:
        checks = {}
    ours_checks = [c for name, c in checks.items() if name.startswith("epochal")]
    shutil.rmtree(work, ignore_errors=True)
    return {
        "cell": asdict(cell),
        "name": cell.name,
        "describe": cell.describe(),
        "varies": cell.varies,
        "peer": with_peer,
        "inputs": inputs,
        "best": {n: {k: v for k, v in b.items() if k != "epochs"} for n, b in best.items()},
        "runs": runs,
        "ratios": evaluate(cell, best) if with_peer else {},
        "targets": {"peer-hdfs": cell.targets[0], "peer-rocksdb": cell.targets[1]},
        "checks": checks,
        "identical": bool(ours_checks) and all(c["identical"] for c in ours_checks),
        "heap_fallback": ours_last["heap_fallback"],
        "late_records": int(ours_last["metrics"].get("late_records", 0)),
        "ours_metrics": ours_last["metrics"],
        "peer_watermark_delay_ms": peer_delay_ms(cell, spec),
        **extra,
    }


def _summary(run: dict[str, Any], total: int) -> dict[str, Any]:
    summary = {
        "engine": run["engine"],
        "wall_s": run["wall_s"],
        "events_per_s": total / run["wall_s"],
        "epochs": run["epochs"],
    }
    if "metrics" in run:  # ours: per-subtask phases summed over subtasks and epochs
        summary["metrics"] = run["metrics"]
        summary["phases_s"] = {
            k: sum(e[k] for e in run["epochs"])
            for k in ("trigger_s", "run_s", "complete_s", "notify_s", "retention_s")
        }
    return summary


def run(sizes: MatrixSizes, out: Path | None) -> Path:
    spec = sizes.spec()
    cells = select_cells(sizes.cells)
    root = Path(tempfile.mkdtemp(prefix="epochal-bench-matrix-"))
    spark = _spark() if sizes.peer else None
    began = time.perf_counter()
    results: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    try:
        warm = warm_up(spark, root) if spark is not None else {}
        _log(f"warm-up done: {warm}")
        for cell in cells:
            reason = skipped_reason(cell)
            if reason is not None:
                skipped[cell.name] = reason
                _log(f"{cell.name}: skipped ({reason})")
                continue
            results.append(run_cell(cell, spec, spark, root, max(1, sizes.repeat), sizes.peer))
        settings = peer_settings(spark, spec) if spark is not None else {}
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    data = {
        "scenario": "matrix",
        "sizes": {
            "events": spec.total,
            "keys": spec.keys,
            "epochs": spec.epochs,
            "events_per_key_window": spec.total
            / spec.keys
            / max(1, spec.total * spec.ms_per_event / WINDOW_MS),
            "repeat": sizes.repeat,
        },
        "input": {
            "partitions": spec.partitions,
            "jitter_ms": spec.jitter_ms,
            "ms_per_event": spec.ms_per_event,
            "lag_ms": LAG_MS,
            "duplicate_share_of_odd_records": DUPLICATE_SHARE,
        },
        "rel_tol": REL_TOL,
        "targets": {"window cells": WINDOW_TARGETS, "other cells": OTHER_TARGETS},
        "peer_settings": settings,
        "warm_up": warm,
        "skipped": skipped,
        "cells": results,
        "total_s": time.perf_counter() - began,
        "machine": report.machine(),
    }
    out_dir = out or report.RESULTS
    chart(results, out_dir)
    return report.write("matrix", data, markdown(data), out_dir)


# -- output ----------------------------------------------------------------------------------------
def _ratio_text(result: dict[str, Any], peer: str) -> str:
    r = result["ratios"].get(peer)
    if r is None:
        return "--"
    verdict = "met" if r["met"] else f"**missed** ({r['share_of_target']:.0%} of it)"
    return f"{r['ratio']:.2f}x / {r['target']:g}x: {verdict}"


def _check_text(result: dict[str, Any]) -> str:
    checks = [(n, c) for n, c in result["checks"].items() if n.startswith("epochal")]
    if not checks:
        return "not checked"
    parts = []
    for name, c in checks:
        other = name.split(" vs ")[1].replace("peer-", "")
        rows = c.get("reference_rows", c.get("peer_rows"))
        text = f"{other}: {c['both']:,}/{c['ours_rows']:,}/{rows:,}"
        only_other = c.get("only_peer", c.get("only_reference", 0))
        if c["mismatched"] or c["only_ours"] or only_other:
            text += (
                f", {c['mismatched']:,} mismatched, {c['only_ours']:,} ours only, {only_other:,} {other} only"
            )
        beyond = (c.get("beyond_horizon_ours", 0), c.get("beyond_horizon_peer", 0))
        if any(beyond):
            text += f" (+{beyond[0]:,}/{beyond[1]:,} closed by one final watermark only)"
        parts.append(text)
    verdict = "identical" if result["identical"] else "**differ**"
    return f"{verdict} ({'; '.join(parts)})"


def _max_rel(result: dict[str, Any]) -> str:
    values = [
        c["max_rel_diff"]
        for n, c in result["checks"].items()
        if n.startswith("epochal") and "max_rel_diff" in c
    ]
    return f"{max(values):.1e}" if values else "--"


def _phase_row(result: dict[str, Any]) -> list[Any]:
    best = result["best"]
    ours = best.get("epochal-spark") or best.get("epochal-local") or {}
    phases, metrics = ours.get("phases_s", {}), ours.get("metrics", {})
    return [
        result["name"],
        ours.get("wall_s", 0.0),
        phases.get("trigger_s", 0.0),
        phases.get("run_s", 0.0),
        phases.get("complete_s", 0.0),
        phases.get("notify_s", 0.0) + phases.get("retention_s", 0.0),
        metrics.get("restore_s", 0.0),
        metrics.get("snapshot_sync_s", 0.0),
        metrics.get("upload_wait_s", 0.0),
        best.get("peer-hdfs", {}).get("wall_s", "--"),
        best.get("peer-rocksdb", {}).get("wall_s", "--"),
    ]


def _fallback_text(result: dict[str, Any]) -> str:
    if result["heap_fallback"]:
        return "; ".join(result["heap_fallback"])
    return "none (columnar)"


def _session_note(data: dict[str, Any]) -> list[str]:
    lines = []
    for r in data["cells"]:
        if r["cell"]["window"] != "session" or r["identical"] or not r.get("touching_pairs"):
            continue
        worst = max(c["mismatched"] + c["only_ours"] + c["only_peer"] for c in r["checks"].values())
        lines += [
            "",
            f"**Sessions that touch.** The input of `{r['name']}` has {r['touching_pairs']:,} pairs of "
            f"consecutive events of one key exactly the gap ({SESSION_GAP_MS} ms) apart, and the results "
            "differ "
            f"in up to {worst:,} rows: the peer merges sessions that only touch (`[t, t + gap)` and "
            "`[t + gap, ...)` become one session, as Flink's `TimeWindow.intersects`, `start <= other.end`, "
            "does), Epochal's session merge needs an overlap (`s < end and start < e` in "
            "`spark_jobs/runtime/operators/window.py`) and keeps two sessions.",
        ]
    return lines


def markdown(data: dict[str, Any]) -> list[str]:
    sizes = data["sizes"]
    rows = []
    for r in data["cells"]:
        best = r["best"]
        ours = best.get("epochal-spark") or best.get("epochal-local") or {}
        rows.append(
            [
                r["name"],
                r["describe"],
                ours.get("events_per_s", 0.0),
                best.get("peer-hdfs", {}).get("events_per_s", "--"),
                best.get("peer-rocksdb", {}).get("events_per_s", "--"),
                _ratio_text(r, "peer-hdfs"),
                _ratio_text(r, "peer-rocksdb"),
                _check_text(r),
                _max_rel(r),
                _fallback_text(r),
            ]
        )
    settings = data["peer_settings"]
    conf = settings.get("conf", {})
    missed = [r for r in data["cells"] if any(not v["met"] for v in r["ratios"].values())]
    lines = [
        "# Workload matrix: Epochal vs Spark Structured Streaming (issue 20)",
        "",
        f"{sizes['events']:,} events, {sizes['keys']:,} keys, {sizes['epochs']} epochs (= micro-batches) per "
        "cell, "
        f"about {sizes['events_per_key_window']:.1f} event(s) per key and 10 s window; each cell on its own "
        "input "
        f"(`bench/gen.py` `Shape`), {data['input']['partitions']} partitions, event-time jitter "
        f'{data["input"]["jitter_ms"]} ms. Epochal on Spark (`executor="spark"`, the peer\'s session), then '
        "the "
        "peer with the HDFS-backed and the RocksDB state store, in the same run; best of "
        f"{sizes['repeat']} run(s) per engine. Total {data['total_s'] / 60:.1f} min. Machine: "
        f"{data['machine']}.",
        "",
        *report.table(
            [
                "cell",
                "workload",
                "Epochal events/s",
                "HDFS peer events/s",
                "RocksDB peer events/s",
                "vs HDFS (target)",
                "vs RocksDB (target)",
                "results (both/ours/peer rows)",
                "max rel diff",
                "Epochal heap_fallback",
            ],
            rows,
        ),
        "",
        "![ratios vs targets](matrix.png)",
        "",
        "Where Epochal's time goes (its best run, seconds over all epochs): `trigger`, `run` (the epoch's "
        "Spark job: restore, process, snapshot, in both subtasks at once), `complete` (the checkpoint "
        "decision), `notify + retention`; inside `run`, summed over the 2 subtasks: restore, synchronous "
        "snapshot, upload wait. The peers' wall time for comparison.",
        "",
        *report.table(
            [
                "cell",
                "Epochal wall s",
                "trigger",
                "run",
                "complete",
                "notify + retention",
                "restore (subtasks)",
                "snapshot sync (subtasks)",
                "upload wait (subtasks)",
                "HDFS peer wall s",
                "RocksDB peer wall s",
            ],
            [_phase_row(r) for r in data["cells"]],
        ),
        "",
        f"**Targets** (issue 20): window cells >= {WINDOW_TARGETS[0]:g}x the HDFS-backed peer and >= "
        f"{WINDOW_TARGETS[1]:g}x the RocksDB peer; the dedup cell >= {OTHER_TARGETS[0]:g}x / "
        f"{OTHER_TARGETS[1]:g}x. "
        f"Cells missing a target: {', '.join(r['name'] for r in missed) or 'none'}. "
        '"x% of it" = ratio / target.',
        "",
        "**Results** are compared row for row (rows matched on key and window start, or on `event_id`): "
        "keys, "
        "window bounds and integers exactly, floats within a relative tolerance of "
        f"{data['rel_tol']:g} (`|ours - peer| <= tol * max(|ours|, |peer|)`; Spark adds in another order); "
        "rows on "
        "one side only or twice count as differences. `both/ours/peer rows`: rows matched, rows of ours, "
        "rows of "
        "the peer. The peers are also compared with each other in `matrix.json`.",
        "",
        "**Cells without a peer.** `first-last`: Spark's `first`/`last` return whichever row reaches the "
        "aggregation first after a shuffle (not deterministic), so there is no equivalent query; ours runs "
        "alone "
        "and is checked against the input instead: exactly the windows whose end is at or below the final "
        "watermark, every first/last one of the window's values, single-record windows exact.",
        *(f"**Skipped:** `{name}`: {why}." for name, why in data["skipped"].items()),
        "",
        "**Final watermarks.** Ours is the minimum over partitions of `max event time - delay - 1` "
        "(Flink's), the peer's is `max event time over all partitions - delay`; at the end of the input they "
        "differ by the few ms between the partitions' last event times, so a window or session ending in "
        "between is closed by one engine only. Rows are compared up to the earlier of the two (window end <= "
        "it); the rows beyond are counted in the table (`+ours/peer`) and in `matrix.json` "
        "(`close_horizons`).",
        *_session_note(data),
        "",
        "**Inputs.** `skewed-partitions`: the second partition's event times lag the first's by "
        f"{data['input']['lag_ms']} ms; ours takes the minimum of the partitions' watermarks, Spark's "
        "watermark is "
        "the maximum event time over all partitions, so the peer's delay is the jitter plus the lag "
        "(otherwise it "
        "would drop the lagging partition as late). `dedup`: an `event_id` per record; "
        f"{data['input']['duplicate_share_of_odd_records']:.0%} of the second partition's records are exact "
        "copies "
        "of a first-partition record at most 99 records earlier (redeliveries). Ours: `deduplicate(ttl_ms="
        f"{DEDUP_TTL_MS})` (two epochs of processing time); peer: "
        "`dropDuplicatesWithinWatermark(['event_id'])`. "
        "`lateness`: ours with `allowed_lateness_ms=5000`, the peer the same query as `baseline` (no record "
        "is "
        "later than the watermark delay, so the closed windows are identical).",
        "",
        "## The peer's settings",
        "",
        f"- master `{settings.get('master')}`, Spark {settings.get('spark_version')}; "
        f"`spark.sql.shuffle.partitions={conf.get('spark.sql.shuffle.partitions')}` "
        f"({settings.get('shuffle_partitions_rule')}); "
        f"`spark.driver.memory={conf.get('spark.driver.memory')}`",
        f"- state stores: HDFS-backed `{PROVIDERS['hdfs']}` (changelog checkpointing off: it has none); "
        "RocksDB "
        f"`{PROVIDERS['rocksdb']}` with "
        "`spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true`",
        f"- {settings.get('source')}; trigger {settings.get('trigger')}; sink {settings.get('sink')}",
        f"- watermark: {settings.get('watermark')}",
        f"- warm-up: {settings.get('warm_up')}",
        "- other settings read back from the session: "
        + ", ".join(
            f"`{k}={v}`"
            for k, v in conf.items()
            if k not in ("spark.sql.shuffle.partitions", "spark.driver.memory")
        ),
    ]
    return lines


def chart(results: list[dict[str, Any]], out_dir: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in results if r["ratios"]]
    if not shown:
        return None
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(shown) + 2), 5))
    xs = np.arange(len(shown))
    width = 0.38
    for offset, peer, color in (
        (-width / 2, "peer-hdfs", "tab:blue"),
        (width / 2, "peer-rocksdb", "tab:orange"),
    ):
        ratios = [r["ratios"].get(peer, {}).get("ratio", 0.0) for r in shown]
        targets = [r["targets"][peer] for r in shown]
        ax.bar(xs + offset, ratios, width, label=f"vs {peer.replace('peer-', '')} peer", color=color)
        ax.hlines(targets, xs + offset - width / 2, xs + offset + width / 2, colors="black", linewidth=2)
    ax.plot([], [], color="black", linewidth=2, label="target")
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_xticks(xs, [r["name"] for r in shown], rotation=30, ha="right")
    ax.set_ylabel("Epochal events/s / peer events/s")
    ax.set_title("Workload matrix: speed ratio vs the Spark Structured Streaming peers (black: target)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "matrix.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
