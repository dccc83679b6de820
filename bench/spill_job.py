"""``python -m bench.spill_job [--keys 1000000] [--budget-mb 2] [--epochs 5]`` -- a job whose value
state is larger than its memory budget (issue 23 item 1, ``Job(state_memory_mb=...)``).

One value-state job (a ``BatchProcessFunction`` keeping a count and a float total per user, string
keys; with ``--per-key`` the same as a ``KeyedProcessFunction`` with two value states) runs in
three configurations in one process, interleaved epoch by epoch (the machine is shared): state
**in memory** (the heap backend), **on disk** under ``--budget-mb`` per subtask (every epoch
fetches its run files from the store), and **on disk + local recovery** (an epoch adopts the
previous epoch's store on local disk). Three load epochs touch about 95% of
``--keys``; each measured epoch then updates about 1% of them. Per measured epoch: wall time, the
checkpoint's share (the subtasks' synchronous snapshot + upload wait, summed, over the wall time),
bytes the state acks wrote, the store's own peak memory accounting and the acks' peak RSS; the
final state and output of all three are checked equal. In-process executor, parallelism 2,
max_parallelism 128.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bench.local_recovery import _latest
from spark_jobs.api.functions import BatchProcessFunction, KeyedProcessFunction
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.chaos.observe import state_digest
from spark_jobs.runtime import warm
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core.state import ValueStateDescriptor
from state_store.storage import open_store
from state_store.testing import ManualClock

RESULTS = Path(__file__).parent / "results"
RATE = 20_000
"""Events per second of event time (both partitions together)."""
MODES = ("in memory", "on disk", "on disk + local recovery")


class PerKeyTotals(KeyedProcessFunction):
    """``Totals`` written per key, as most Flink users write it: two value states per key."""

    count = ValueStateDescriptor[int]("count")
    total = ValueStateDescriptor[float]("total")
    state_descriptors = (count, total)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        count, total = ctx.state(self.count), ctx.state(self.total)
        count.update((count.value() or 0) + len(rows))
        total.update((total.value() or 0.0) + sum(r["amount"] for r in rows))


class Totals(BatchProcessFunction):
    """A running count and float total per key; emits nothing (the state is the result)."""

    state_schema = pa.schema([("count", pa.int64()), ("total", pa.float64())])

    def process(self, rows: pa.Table, state: pa.Table, ctx: Any) -> None:
        chunk = rows.group_by("key", use_threads=False).aggregate([([], "count_all"), ("amount", "sum")])
        mine = state.take(pc.index_in(chunk.column("key"), state.column("key")))
        ctx.update_state(
            pa.table(
                {
                    "key": chunk.column("key"),
                    "count": pc.add(pc.coalesce(mine.column("count"), 0), chunk.column("count_all")),
                    "total": pc.add(pc.coalesce(mine.column("total"), 0.0), chunk.column("amount_sum")),
                }
            )
        )


def _amount(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.append_column("amount", pc.multiply(pc.cast(batch.column("value"), pa.float64()), 0.01))


def job_of(mode: str, keys: int, budget_mb: int, state_dir: Path, per_key: bool = False) -> Job:
    job = Job(
        "spill-" + mode.split()[-1].replace("memory", "mem"),
        parallelism=2,
        max_parallelism=128,
        max_records_per_epoch=10 * keys,
        state_memory_mb=None if mode == "in memory" else budget_mb,
        state_dir=str(state_dir),
        local_recovery=mode.endswith("local recovery"),
    )
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=7, events_per_second=RATE // 2, keys=keys, start_ms=DEFAULT_START_MS
    )
    fn = PerKeyTotals() if per_key else Totals()
    job.source(source, uid="clicks").map(_amount).key_by("user_id").process(fn, uid="op").sink(
        ParquetSink(), uid="out"
    )
    return job


def _epoch(job: Job, uri: str, clock: ManualClock) -> dict[str, Any]:
    began = time.perf_counter()
    report = run_cycle(job, uri, clock, executor="local")
    wall = time.perf_counter() - began
    assert report.status == "completed", report
    tasks = [t for t in _latest(uri, job.job_id).tasks if t.task.uid == "op"]
    checkpoint = sum(
        float(t.metrics.get("snapshot_sync_s", 0)) + float(t.metrics.get("upload_wait_s", 0)) for t in tasks
    )
    return {
        "wall_s": wall,
        "checkpoint_s": checkpoint,
        "restore_s": sum(float(t.metrics.get("restore_s", 0.0)) for t in tasks),
        "bytes_written": sum(int(t.metrics.get("bytes_written", 0)) for t in tasks),
        "store_peak_bytes": max(int(t.metrics.get("state_memory_peak_bytes", 0)) for t in tasks),
        "disk_bytes": sum(int(t.metrics.get("state_on_disk_bytes", 0)) for t in tasks),
        "peak_rss_bytes": max(int(t.metrics.get("peak_rss_bytes", 0)) for t in tasks),
        "how": sorted({str(t.metrics.get("local_recovery")) for t in tasks}),
    }


def run(
    keys: int, budget_mb: int, epochs: int, root: Path, modes: tuple[str, ...] = MODES, per_key: bool = False
) -> dict[str, Any]:
    warm.clear()
    jobs = {mode: job_of(mode, keys, budget_mb, root / "state", per_key) for mode in modes}
    uris = {mode: (root / job.job_id).as_uri() for mode, job in jobs.items()}
    clocks = {mode: ManualClock(DEFAULT_START_MS) for mode in jobs}
    load_ms = 1000 * keys // RATE
    step_ms = max(1, load_ms // 100)
    per_epoch: dict[str, list[dict[str, Any]]] = {mode: [] for mode in jobs}
    for phase, step, count in (("load", load_ms, 3), ("measured", step_ms, epochs)):
        for _ in range(count):
            for mode, job in jobs.items():
                clocks[mode].advance(step)
                result = _epoch(job, uris[mode], clocks[mode])
                if phase == "measured":
                    per_epoch[mode].append(result)
    digests = {
        mode: state_digest(open_store(uris[mode]), _latest(uris[mode], jobs[mode].job_id), 128)
        for mode in jobs
    }
    outputs = {
        mode: read_committed(open_store(uris[mode]), jobs[mode].job_id, "out").num_rows for mode in jobs
    }
    warm.clear()

    def median(mode: str, field: str) -> float:
        return float(statistics.median(e[field] for e in per_epoch[mode]))

    fields = ("wall_s", "checkpoint_s", "restore_s", "bytes_written", "disk_bytes")
    return {
        "function": "KeyedProcessFunction (per key)" if per_key else "BatchProcessFunction (vectorized)",
        "keys": keys,
        "budget_mb": budget_mb,
        "events_per_epoch": RATE * step_ms // 1000,
        "median": {mode: {f: median(mode, f) for f in fields} for mode in jobs},
        "store_peak_bytes": {mode: max(e["store_peak_bytes"] for e in per_epoch[mode]) for mode in jobs},
        "peak_rss_bytes": {mode: max(e["peak_rss_bytes"] for e in per_epoch[mode]) for mode in jobs},
        "how": {mode: [e["how"] for e in per_epoch[mode]] for mode in jobs},
        "same_state": len({json.dumps(d, sort_keys=True, default=repr) for d in digests.values()}) == 1,
        "same_output_rows": len(set(outputs.values())) == 1,
        "state_rows": len(next(iter(digests.values())).get("op", [])),
    }


def _ratio(value: float, base: float) -> str:
    return "-" if base != base else f"{value / base:.2f}x"  # nan: no in-memory run


def report(r: dict[str, Any], args: argparse.Namespace) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    med = r["median"]
    base = med["in memory"]["wall_s"] if "in memory" in med else float("nan")
    lines = [
        "# State larger than its memory budget: a value-state job in memory and on disk",
        "",
        f"`python -m bench.spill_job --keys {args.keys} --budget-mb {args.budget_mb} --epochs {args.epochs}"
        f"{' --per-key' if args.per_key else ''}` "
        f"with a {r['function']}, on 2 shared cores, in-process executor, parallelism 2, "
        f"max_parallelism 128; {when}. Three load "
        f"epochs touch about 95% of the keys, then each measured epoch updates about 1% "
        f"({r['events_per_epoch']:,} events); the three configurations run interleaved, epoch by epoch, "
        "in one process; medians over the measured epochs. *Checkpoint* = the subtasks' synchronous "
        "snapshot + upload wait, summed. *Store peak* = the spill store's own accounting (write buffer + "
        "one key group's runs read at once); *RSS peak* = the acks' `peak_rss_bytes` (the process's, it "
        "holds every configuration).",
        "",
        "| configuration | epoch | vs in memory | checkpoint (share) | restore | bytes/checkpoint | on disk "
        "| store peak | RSS peak | restored by |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode in med:
        m = med[mode]
        lines.append(
            f"| {mode} | {m['wall_s']:.2f} s | {_ratio(m['wall_s'], base)} | {m['checkpoint_s']:.3f} s "
            f"({100 * m['checkpoint_s'] / m['wall_s']:.1f}%) | {m['restore_s']:.3f} s | "
            f"{m['bytes_written'] / 1e6:.2f} MB | {m['disk_bytes'] / 1e6:.1f} MB | "
            f"{r['store_peak_bytes'][mode] / 1e6:.2f} MB | {r['peak_rss_bytes'][mode] / 1e6:.0f} MB | "
            f"{', '.join(sorted({h for hs in r['how'][mode] for h in hs}))} |"
        )
    disk = med["on disk"]["disk_bytes"]
    lines += [
        "",
        f"Budget {r['budget_mb']} MiB per subtask; state on disk {disk / 1e6:.1f} MB over 2 subtasks "
        f"({disk / 2 / (r['budget_mb'] << 20):.1f}x the budget each). "
        f"Same state and output in every configuration: {r['same_state']}, {r['same_output_rows']} "
        f"({r['state_rows']:,} state rows).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spill_job", description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--budget-mb", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="spill_job")
    parser.add_argument("--disk-only", action="store_true", help="skip the in-memory configuration")
    parser.add_argument(
        "--per-key",
        action="store_true",
        help="a KeyedProcessFunction with two value states, not the batch one",
    )
    args = parser.parse_args(argv)
    modes = MODES[1:] if args.disk_only else MODES
    with tempfile.TemporaryDirectory(prefix="epochal-spill-") as tmp:
        result = run(args.keys, args.budget_mb, args.epochs, Path(tmp), modes, args.per_key)
    print(json.dumps(result), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=2))
    text = report(result, args)
    (args.out / f"{args.name}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
