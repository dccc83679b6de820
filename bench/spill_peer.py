"""``python -m bench.spill_peer --keys N --epochs E`` -- the Spark Structured Streaming peer of
``bench.spill_job`` (issue 23 target: "10M keys of value state, 1% updated per epoch: epoch time at
most the Spark RocksDB peer's on the same input").

Steps, in order:

1. **The same input.** The generator of ``bench.spill_job.job_of`` (same seed, rate, keys, start)
   is cut into epochs exactly as ``run_cycle`` cuts it there: the clock advances ``load_ms`` three
   times (load epochs, ~``keys`` events each, ~95% of the keys), then ``step_ms`` per measured
   epoch (~1% of ``keys`` events); each partition's cut is ``[previous end, epoch_end(...))`` of
   ``source.end_offsets(now)`` (``spark_jobs.runtime.plan.epoch_end``, capped by the job's
   ``max_records_per_epoch``). Epoch *e* is one Parquet file (both partitions; ``user_id``,
   ``event_time``, ``value``) with modification times increasing with *e*.
2. **The peer query**, as ``bench.engines.run_peer`` drives its peer: one query,
   ``Trigger.AvailableNow`` with ``maxFilesPerTrigger=1``, so micro-batch *b* reads epoch *b + 1*
   and nothing else. ``amount = value * 0.01`` (double, as ``spill_job._amount``), then per
   ``user_id`` a (count, total) state, the updated rows out in ``outputMode("update")`` through
   ``foreachBatch`` to Parquet (one directory per batch). Queries:

   * ``pandas-state``: ``groupBy("user_id").applyInPandasWithState`` (a user function per key, the
     closest peer of a ``BatchProcessFunction``);
   * ``tws-pandas``: ``groupBy("user_id").transformWithStateInPandas`` with a ``ValueState``
     (RocksDB only: Spark refuses it on the HDFS-backed provider);
   * ``native-agg``: ``groupBy("user_id").agg(count, sum)`` -- no user code at all, Spark's own
     streaming aggregation: the lower bound a user function cannot beat.

   Providers: ``RocksDBStateStoreProvider`` with changelog checkpointing, or the HDFS-backed one.
   ``local[2]``, ``spark.sql.shuffle.partitions=2``; every query is warmed up on a small input on
   the same session first.
3. **Measured**: per micro-batch ``durationMs.triggerExecution`` (and ``addBatch``,
   ``walCommit``, ``commitOffsets``), the state operator's ``numRowsTotal``, ``numRowsUpdated``,
   ``memoryUsedBytes``, ``commitTimeMs`` and the provider's files written for that version.
4. **Checked**: the final state (the last update of each key over all batches) equals a pandas
   reference computed from the Parquet files (count exactly, total within 1e-9 relative).
5. Optionally (``--epochal``) ``bench.spill_job.run`` on the same size in the same process after
   the Spark session is stopped: its medians and the ratio go into the same table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench.engines import PROVIDERS, _state_bytes_by_version, use_state_store
from bench.spill_job import RATE, job_of
from spark_jobs.runtime.plan import epoch_end
from spark_jobs.sources.generator import DEFAULT_START_MS

RESULTS = Path(__file__).parent / "results"
QUERIES = ("pandas-state", "tws-pandas", "native-agg")
DEFAULT_VARIANTS = "pandas-state/rocksdb,native-agg/rocksdb,pandas-state/hdfs"
REL_TOL = 1e-9
SHUFFLE_PARTITIONS = 2
LOAD_EPOCHS = 3
INPUT_COLUMNS = ["user_id", "event_time", "value"]


# -- 1. the same input ------------------------------------------------------------------------------
def epoch_cuts(keys: int, epochs: int) -> tuple[Any, list[dict[str, tuple[int, int]]]]:
    """The source of ``spill_job.job_of`` and each epoch's ``{partition: (start, end)}``, as
    ``spill_job.run`` + ``trigger_epoch`` compute them (the clock starts at ``DEFAULT_START_MS``
    and advances *before* each epoch)."""
    job = job_of("in memory", keys, 1, Path(tempfile.gettempdir()) / "spill-peer-unused")
    source = next(s for s in job.graph.stages() if s.key is None).source_spec.source
    load_ms = 1000 * keys // RATE
    step_ms = max(1, load_ms // 100)
    now = DEFAULT_START_MS
    ends = {p: 0 for p in source.partitions()}
    cuts: list[dict[str, tuple[int, int]]] = []
    for step in [load_ms] * LOAD_EPOCHS + [step_ms] * epochs:
        now += step
        available = source.end_offsets(now)
        cut = {
            p: (ends[p], epoch_end(source, p, ends[p], int(available[p]), job.max_records_per_epoch))
            for p in source.partitions()
        }
        ends = {p: end for p, (_, end) in cut.items()}
        cuts.append(cut)
    return source, cuts


def write_inputs(keys: int, epochs: int, input_dir: Path) -> dict[str, Any]:
    """One Parquet file per epoch (modification times 10 s apart, oldest first: the file source
    orders files by them) and the pandas reference of the final state."""
    source, cuts = epoch_cuts(keys, epochs)
    input_dir.mkdir(parents=True, exist_ok=True)
    first_mtime = time.time() - 10 * len(cuts) - 60
    reference: pd.DataFrame | None = None
    events: list[int] = []
    for e, cut in enumerate(cuts, start=1):
        parts = [
            batch.select(INPUT_COLUMNS)
            for p, (start, end) in cut.items()
            for batch in source.read(p, start, end, chunk_size=1 << 20)
        ]
        table = pa.Table.from_batches(parts) if parts else None
        if table is None or table.num_rows == 0:
            raise RuntimeError(f"epoch {e} of {keys} keys has no events: raise --keys")
        path = input_dir / f"epoch-{e:05d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (first_mtime + 10 * e, first_mtime + 10 * e))
        events.append(table.num_rows)
        frame = table.select(["user_id", "value"]).to_pandas()
        frame["amount"] = frame["value"] * 0.01
        part = frame.groupby("user_id").agg(count=("value", "size"), total=("amount", "sum"))
        reference = part if reference is None else reference.add(part, fill_value=0)
    assert reference is not None
    reference["count"] = reference["count"].astype("int64")
    return {
        "events": events,
        "reference": reference,
        "cuts": [{p: list(r) for p, r in c.items()} for c in cuts],
    }


# -- 2. the peer query ------------------------------------------------------------------------------
def _pandas_state_fn() -> Any:
    """The ``applyInPandasWithState`` function, built in a closure so that it is pickled by value
    (Spark's Python workers need not import ``bench``)."""

    def totals(key: tuple[Any, ...], frames: Any, state: Any) -> Any:
        count, total = state.get if state.exists else (0, 0.0)
        for frame in frames:
            count += len(frame)
            total += float(frame["amount"].sum())
        state.update((count, total))
        yield pd.DataFrame({"user_id": [key[0]], "count": [count], "total": [total]})

    return totals


def _tws_processor() -> Any:
    from pyspark.sql.streaming import StatefulProcessor

    class Totals(StatefulProcessor):  # type: ignore[misc]
        def init(self, handle: Any) -> None:
            self.totals = handle.getValueState("totals", "count long, total double")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            count, total = self.totals.get() if self.totals.exists() else (0, 0.0)
            for frame in rows:
                count += len(frame)
                total += float(frame["amount"].sum())
            self.totals.update((count, total))
            yield pd.DataFrame({"user_id": [key[0]], "count": [count], "total": [total]})

        def close(self) -> None:
            pass

    return Totals()


def peer_query(events: Any, query: str) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    out = StructType(
        [
            StructField("user_id", StringType()),
            StructField("count", LongType()),
            StructField("total", DoubleType()),
        ]
    )
    grouped = events.withColumn("amount", F.col("value") * F.lit(0.01)).groupBy("user_id")
    if query == "pandas-state":
        state = StructType([StructField("count", LongType()), StructField("total", DoubleType())])
        return grouped.applyInPandasWithState(
            _pandas_state_fn(), out, state, "Update", GroupStateTimeout.NoTimeout
        )
    if query == "tws-pandas":
        return grouped.transformWithStateInPandas(
            statefulProcessor=_tws_processor(), outputStructType=out, outputMode="Update", timeMode="None"
        )
    if query == "native-agg":
        return grouped.agg(F.count(F.lit(1)).alias("count"), F.sum("amount").alias("total"))
    raise ValueError(f"peer query {query!r} is unknown: use one of {QUERIES}")


def _progress(p: Any) -> dict[str, Any]:
    raw = getattr(p, "json", None)
    return dict(json.loads(raw)) if isinstance(raw, str) else dict(p)


def run_peer(spark: Any, input_dir: Path, work: Path, query: str, provider: str) -> dict[str, Any]:
    """One AvailableNow run over every file of ``input_dir``, one file per micro-batch."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    use_state_store(spark, provider)
    schema = StructType(
        [
            StructField("user_id", StringType()),
            StructField("event_time", TimestampType()),
            StructField("value", LongType()),
        ]
    )
    tag = f"{query}-{provider}"
    out_dir, checkpoint = work / f"{tag}-out", work / f"{tag}-chk"
    events = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(input_dir))
    out_path = str(out_dir)

    def write(batch: Any, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(f"{out_path}/batch={batch_id:05d}")

    began = time.perf_counter()
    handle = (
        peer_query(events, query)
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", str(checkpoint))
        .outputMode("update")
        .trigger(availableNow=True)
        .start()
    )
    handle.awaitTermination()
    wall = time.perf_counter() - began
    written = _state_bytes_by_version(checkpoint)
    batches = []
    for p in (_progress(raw) for raw in handle.recentProgress):
        if not p.get("numInputRows"):
            continue
        batch = int(p["batchId"])
        ops = p.get("stateOperators") or [{}]
        durations = p.get("durationMs", {})
        batches.append(
            {
                "batch": batch,
                "epoch": batch + 1,
                "seconds": durations.get("triggerExecution", 0) / 1000.0,
                "add_batch_s": durations.get("addBatch", 0) / 1000.0,
                "wal_commit_s": durations.get("walCommit", 0) / 1000.0,
                "commit_offsets_s": durations.get("commitOffsets", 0) / 1000.0,
                "events": int(p["numInputRows"]),
                "state_rows": int(ops[0].get("numRowsTotal", 0)),
                "state_rows_updated": int(ops[0].get("numRowsUpdated", 0)),
                "state_memory_bytes": int(ops[0].get("memoryUsedBytes", 0)),
                "commit_s": ops[0].get("commitTimeMs", 0) / 1000.0,
                "written_bytes": written.get(batch + 1, 0),
                "custom": ops[0].get("customMetrics", {}),
            }
        )
    return {
        "variant": tag,
        "wall_s": wall,
        "batches": batches,
        "out_dir": out_path,
        "checkpoint": str(checkpoint),
    }


def final_state(spark: Any, out_dir: str) -> pd.DataFrame:
    """The last update of each key over all micro-batches (= the peer's state: every batch emits
    the new state of every key it touched)."""
    table = pq.read_table(out_dir)
    frame = table.to_pandas()
    frame["batch"] = frame["batch"].astype("int64")
    last = frame.sort_values("batch").groupby("user_id").tail(1).set_index("user_id").sort_index()
    return last[["count", "total"]]


def compare_state(peer: pd.DataFrame, reference: pd.DataFrame) -> dict[str, Any]:
    ref = reference.sort_index()
    both = peer.index.intersection(ref.index)
    counts = int((peer.loc[both, "count"].astype("int64") != ref.loc[both, "count"]).sum())
    a, b = peer.loc[both, "total"].to_numpy(), ref.loc[both, "total"].to_numpy()
    rel = abs(a - b) / abs(b).clip(min=1e-300)
    return {
        "peer_rows": len(peer),
        "reference_rows": len(ref),
        "count_mismatches": counts,
        "total_mismatches": int((rel > REL_TOL).sum()),
        "max_rel_error": float(rel.max()) if len(rel) else 0.0,
        "equal": counts == 0 and int((rel > REL_TOL).sum()) == 0 and len(both) == len(ref) == len(peer),
    }


def _spark(driver_memory: str) -> Any:
    from spark_jobs.runtime.spark_session import get_spark

    # pandas' FutureWarning from PySpark's own serializer, once per Python worker batch: noise only
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    spark = get_spark(
        "local[2]",
        "epochal-bench-spill-peer",
        conf={
            "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
            "spark.driver.memory": driver_memory,
            "spark.sql.session.timeZone": "UTC",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _conf(spark: Any, key: str) -> str:
    try:
        return str(spark.conf.get(key))
    except Exception:
        value = spark.sparkContext.getConf().get(key)
        return "(default)" if value is None else str(value)


def peer_settings(spark: Any) -> dict[str, Any]:
    keys = [
        "spark.sql.shuffle.partitions",
        "spark.driver.memory",
        "spark.sql.streaming.stateStore.maintenanceInterval",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot",
        "spark.sql.streaming.stateStore.rocksdb.compactOnCommit",
        "spark.sql.execution.arrow.maxRecordsPerBatch",
        "spark.sql.adaptive.enabled",
        "spark.python.worker.reuse",
    ]
    return {
        "master": spark.sparkContext.master,
        "spark_version": spark.version,
        "conf": {k: _conf(spark, k) for k in keys},
        "providers": {
            "rocksdb": {"providerClass": PROVIDERS["rocksdb"], "changelogCheckpointing.enabled": "true"},
            "hdfs": {"providerClass": PROVIDERS["hdfs"], "changelogCheckpointing.enabled": "false"},
        },
        "source": "parquet file source, one file per epoch, maxFilesPerTrigger=1 (micro-batch b = epoch b+1)",
        "trigger": "availableNow, one query over all epochs (the session and the state store stay warm)",
        "sink": "foreachBatch: the batch's updated rows to Parquet, outputMode update",
        "warm_up": "every variant first runs on 2,000 keys / 2 measured epochs on the same session",
    }


# -- running --------------------------------------------------------------------------------------
def _log(message: str) -> None:
    print(f"[spill_peer {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else math.nan


def run(
    keys: int,
    epochs: int,
    root: Path,
    variants: list[tuple[str, str]],
    driver_memory: str,
    epochal: bool,
    budget_mb: int,
    save: Callable[[dict[str, Any]], None] = lambda _: None,
    per_key: bool = False,
    disk_only: bool = False,
) -> dict[str, Any]:
    """Every variant, then (``epochal``) ``spill_job`` (``disk_only``: without its in-memory
    configuration, which at 10M keys takes minutes per epoch); ``save`` gets the results so far after
    each one (a long run leaves its finished parts behind)."""
    began = time.perf_counter()
    inputs = write_inputs(keys, epochs, root / "in")
    input_s = time.perf_counter() - began
    _log(f"inputs: {sum(inputs['events']):,} events in {len(inputs['events'])} files, {input_s:.1f} s")
    reference = inputs.pop("reference")
    warm = write_inputs(2_000, 2, root / "warm-in")
    spark = _spark(driver_memory)
    results: dict[str, Any] = {}
    out: dict[str, Any] = {
        "keys": keys,
        "epochs": epochs,
        "events_per_epoch": inputs["events"],
        "input_s": input_s,
        "reference_rows": len(reference),
        "settings": peer_settings(spark),
        "peers": results,
    }
    for query, provider in variants:
        run_peer(spark, root / "warm-in", root / "warm", query, provider)
        _log(f"{query}/{provider}: warm")
        peer = run_peer(spark, root / "in", root / "work", query, provider)
        batches = peer["batches"]
        if [b["events"] for b in batches] != inputs["events"]:
            raise RuntimeError(
                f"{query}/{provider}: micro-batches read {[b['events'] for b in batches]} events, the epochs "
                f"hold {inputs['events']}: one file per micro-batch did not hold"
            )
        load, measured = batches[:LOAD_EPOCHS], batches[LOAD_EPOCHS:]
        check = compare_state(final_state(spark, peer["out_dir"]), reference)
        results[peer["variant"]] = {
            "query": query,
            "provider": provider,
            "wall_s": peer["wall_s"],
            "load_s": sum(b["seconds"] for b in load),
            "median_s": _median([b["seconds"] for b in measured]),
            "median_commit_s": _median([b["commit_s"] for b in measured]),
            "median_written_bytes": _median([float(b["written_bytes"]) for b in measured]),
            "state_rows": batches[-1]["state_rows"] if batches else 0,
            "state_memory_bytes": batches[-1]["state_memory_bytes"] if batches else 0,
            "check": check,
            "batches": batches,
        }
        r = results[peer["variant"]]
        _log(
            f"{peer['variant']}: load {r['load_s']:.1f} s, measured median {r['median_s']:.3f} s, "
            f"state rows {r['state_rows']:,}, equal to reference: {check['equal']}"
        )
        shutil.rmtree(root / "work", ignore_errors=True)
        save(out)
    del warm
    spark.stop()
    if epochal:
        from bench import spill_job

        _log("epochal: bench.spill_job.run on the same size")
        with tempfile.TemporaryDirectory(prefix="epochal-spill-peer-run-") as tmp:
            modes = spill_job.MODES[1:] if disk_only else spill_job.MODES
            out["epochal"] = spill_job.run(keys, budget_mb, epochs, Path(tmp), modes, per_key=per_key)
        out["epochal"]["budget_mb"] = budget_mb
        save(out)
    return out


def report(r: dict[str, Any], argv: str) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    ev = r["events_per_epoch"]
    settings = r["settings"]
    load_events = ", ".join(f"{n:,}" for n in ev[:LOAD_EPOCHS])
    measured_events = _median([float(n) for n in ev[LOAD_EPOCHS:]])
    lines = [
        "# The Spark peer of the value-state job (`bench.spill_job`) on the same input",
        "",
        f"`python -m bench.spill_peer {argv}` on 2 shared cores; {when}. Spark {settings['spark_version']}, "
        f"`{settings['master']}`, `spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}`, "
        f"`spark.driver.memory={settings['conf']['spark.driver.memory']}`. The input is "
        f"`spill_job`'s generator cut into its epochs: {LOAD_EPOCHS} load epochs ({load_events} events), "
        f"then {r['epochs']} measured epochs of ~{measured_events:,.0f} events (~1% of {r['keys']:,} keys), "
        "one Parquet file per epoch, one micro-batch per file (`Trigger.AvailableNow`, "
        "`maxFilesPerTrigger=1`), updated rows out through `foreachBatch` to Parquet in `update` mode. "
        "RocksDB = `RocksDBStateStoreProvider` with changelog checkpointing; HDFS = the default provider. "
        "*Batch* = `durationMs.triggerExecution`; *commit* = the state operator's `commitTimeMs`; "
        "medians over the measured batches; *load* = the three load batches together.",
        "",
        "| engine | query | state store | load | epoch / batch (median) | commit | state bytes/batch "
        "| state rows | state memory | same state as pandas |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in r["peers"].values():
        c = p["check"]
        lines.append(
            f"| Spark peer | `{p['query']}` | {p['provider']} | {p['load_s']:.1f} s | "
            f"{p['median_s']:.3f} s | {p['median_commit_s']:.3f} s | "
            f"{p['median_written_bytes'] / 1e6:.2f} MB | {p['state_rows']:,} | "
            f"{p['state_memory_bytes'] / 1e6:.1f} MB | {c['equal']} "
            f"(max rel. err. {c['max_rel_error']:.1e}) |"
        )
    ep = r.get("epochal")
    if ep:
        function = (
            "KeyedProcessFunction" if ep.get("function", "").startswith("Keyed") else "BatchProcessFunction"
        )
        for mode, m in ep["median"].items():
            lines.append(
                f"| Epochal | `{function}` | {mode} | - | {m['wall_s']:.3f} s | "
                f"{m['checkpoint_s']:.3f} s (checkpoint) | {m['bytes_written'] / 1e6:.2f} MB | "
                f"{ep['state_rows']:,} | - | {ep['same_state']} (between its modes) |"
            )
        lines += [
            "",
            "Ratios (Epochal's median epoch / the peer's median batch; below 1 = Epochal faster):",
            "",
        ]
        for mode, m in ep["median"].items():
            for tag, p in r["peers"].items():
                lines.append(f"- Epochal {mode} / {tag}: {m['wall_s'] / p['median_s']:.2f}x")
    lines += [
        "",
        f"Reference: pandas over the same Parquet files, {r['reference_rows']:,} keys; counts exact, "
        f"totals within {REL_TOL:g} relative. Writing the inputs took {r['input_s']:.1f} s (not timed "
        "for either engine). Epochal's rows: `bench.spill_job.run` in the same process after the Spark "
        "session stopped (in-process executor, parallelism 2; its epoch is the whole `run_cycle`: "
        "trigger, restore, run, checkpoint, commit).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spill_peer", description=__doc__)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument(
        "--variants", default=DEFAULT_VARIANTS, help=f"query/provider,... (queries: {', '.join(QUERIES)})"
    )
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument(
        "--epochal", action="store_true", help="also run bench.spill_job.run on the same size"
    )
    parser.add_argument("--budget-mb", type=int, default=1, help="spill_job's budget (with --epochal)")
    parser.add_argument(
        "--per-key", action="store_true", help="with --epochal: spill_job's KeyedProcessFunction version"
    )
    parser.add_argument(
        "--disk-only", action="store_true", help="with --epochal: skip spill_job's in-memory configuration"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="spill_peer")
    args = parser.parse_args(argv)
    variants = [(q, p) for q, _, p in (v.partition("/") for v in args.variants.split(",") if v)]
    command = " ".join(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)

    def save(result: dict[str, Any]) -> None:
        (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=2, default=str))
        (args.out / f"{args.name}.md").write_text(report(result, command))

    with tempfile.TemporaryDirectory(prefix="epochal-spill-peer-") as tmp:
        result = run(
            args.keys,
            args.epochs,
            Path(tmp),
            variants,
            args.driver_memory,
            args.epochal,
            args.budget_mb,
            save,
            args.per_key,
            args.disk_only,
        )
    print(report(result, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
