"""``python -m bench.local_recovery [--keys 200000] [--epochs 6]`` -- what local recovery saves
(issue 23 item 2, ``Job(local_recovery=True)``, ``spark_jobs.runtime.warm``).

Per workload, two stores in one process: the job without local recovery (every epoch fetches,
verifies and decodes its state files and opens fresh operators) and with it (every epoch after the
first adopts the previous epoch's operators). A load phase touches about 95% of ``--keys`` keys
(three epochs of ``keys`` events); then ``--epochs`` measured epochs touch about 1% of the keys each,
the two configurations interleaved epoch by epoch (the machine is shared). Measured per epoch: the
restore cost (the keyed subtasks' ``restore_s`` from their acks: restore and operator open, or the
adoption), the whole epoch's wall time, and the bytes the state acks wrote; the final state and
output of both runs are checked equal. In-process executor, parallelism 2, max_parallelism 128.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from spark_jobs.api.functions import KeyedProcessFunction
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.windows import Aggregates, Count, Sum, TumblingEventTimeWindows
from spark_jobs.chaos.observe import state_digest
from spark_jobs.runtime import warm
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import CompletedCheckpointStore, JobLayout
from state_store.core.state import ValueStateDescriptor
from state_store.storage import open_store
from state_store.testing import ManualClock

RESULTS = Path(__file__).parent / "results"
RATE = 10_000
"""Events per second of event time (both partitions together)."""


class Totals(KeyedProcessFunction):
    """Value state per key (the heap backend): a running count and sum; emits nothing."""

    state_descriptors = (ValueStateDescriptor[list[int]]("totals"),)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        state = ctx.state(self.state_descriptors[0])
        count, total = state.value() or [0, 0]
        state.update([count + len(rows), total + sum(r["value"] for r in rows)])


def _dedup(keyed: Any) -> Any:
    return keyed.deduplicate(ttl_ms=86_400_000, uid="op")


def _value_state(keyed: Any) -> Any:
    return keyed.process(Totals(), uid="op")


def _windows(keyed: Any) -> Any:
    """One-hour windows: every key's window stays open through the run (state = open windows)."""
    return keyed.window(
        TumblingEventTimeWindows(3_600_000), Aggregates(Count(name="n"), Sum("value")), uid="op"
    )


WORKLOADS = {
    "dedup (columns)": _dedup,
    "window, open (columns)": _windows,
    "value state (heap)": _value_state,
}


def job_of(workload: str, keys: int, local_recovery: bool) -> Job:
    job = Job(
        "lr-" + workload.split()[0].strip(","), parallelism=2, max_parallelism=128,
        max_records_per_epoch=10 * keys, local_recovery=local_recovery,
    )  # fmt: skip
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=7, events_per_second=RATE // 2, keys=keys, start_ms=DEFAULT_START_MS
    )
    keyed = job.source(source, uid="clicks").key_by("user_id")
    WORKLOADS[workload](keyed).sink(ParquetSink(), uid="out")
    return job


def _latest(uri: str, job_id: str) -> Any:
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout(job_id), 1)
    latest = completed.latest()
    assert latest is not None
    return latest.metadata


def _epoch(job: Job, uri: str, clock: ManualClock) -> dict[str, Any]:
    began = time.perf_counter()
    report = run_cycle(job, uri, clock, executor="local")
    wall = time.perf_counter() - began
    assert report.status == "completed", report
    tasks = [t for t in _latest(uri, job.job_id).tasks if t.task.uid == "op"]
    return {
        "wall_s": wall,
        "restore_s": sum(float(t.metrics.get("restore_s", 0.0)) for t in tasks),
        "bytes_written": sum(int(t.metrics.get("bytes_written", 0)) for t in tasks),
        "how": sorted({str(t.metrics.get("local_recovery")) for t in tasks}),
    }


def run(workload: str, keys: int, epochs: int, root: Path) -> dict[str, Any]:
    warm.clear()
    jobs = {mode: job_of(workload, keys, mode == "local recovery") for mode in ("store", "local recovery")}
    uris = {mode: (root / mode.replace(" ", "-")).as_uri() for mode in jobs}
    clocks = {mode: ManualClock(DEFAULT_START_MS) for mode in jobs}
    load_ms = 1000 * keys // RATE  # ``keys`` events per load epoch
    step_ms = max(1, load_ms // 100)  # about 1% of the keys per measured epoch
    per_epoch: dict[str, list[dict[str, Any]]] = {mode: [] for mode in jobs}
    for phase, step, count in (("load", load_ms, 3), ("measured", step_ms, epochs)):
        for _ in range(count):
            for mode, job in jobs.items():  # interleaved: the same noise for both
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
    state = _latest(uris["store"], jobs["store"].job_id)
    state_bytes = sum(h.size for t in state.tasks if t.task.uid == "op" for h in t.handles)

    def median(mode: str, field: str) -> float:
        return float(statistics.median(e[field] for e in per_epoch[mode]))

    cold, hot = median("store", "restore_s"), median("local recovery", "restore_s")
    return {
        "workload": workload,
        "keys": keys,
        "events_per_epoch": RATE * step_ms // 1000,
        "state_bytes": state_bytes,
        "restore_s": {"store": cold, "local recovery": hot},
        "restore_cut": cold / hot if hot > 0 else float("inf"),
        "epoch_s": {"store": median("store", "wall_s"), "local recovery": median("local recovery", "wall_s")},
        "bytes_per_checkpoint": {
            "store": median("store", "bytes_written"),
            "local recovery": median("local recovery", "bytes_written"),
        },
        "adopted": [e["how"] for e in per_epoch["local recovery"]],
        "same_state": digests["store"] == digests["local recovery"],
        "same_output_rows": outputs["store"] == outputs["local recovery"],
    }


HEADER = (
    "workload",
    "keys",
    "state",
    "events/epoch",
    "restore from the store",
    "adopted",
    "cut",
    "epoch (store)",
    "epoch (adopted)",
    "bytes/checkpoint store / adopted",
    "same state, output",
)


def _row(r: dict[str, Any]) -> list[str]:
    restore, epoch, written = r["restore_s"], r["epoch_s"], r["bytes_per_checkpoint"]
    return [
        r["workload"],
        f"{r['keys']:,}",
        f"{r['state_bytes'] / 1e6:.1f} MB",
        f"{r['events_per_epoch']:,}",
        f"{restore['store'] * 1000:.1f} ms",
        f"{restore['local recovery'] * 1000:.2f} ms",
        f"**{r['restore_cut']:.0f}x**",
        f"{epoch['store']:.2f} s",
        f"{epoch['local recovery']:.2f} s",
        f"{written['store'] / 1e3:.0f} / {written['local recovery'] / 1e3:.0f} KB",
        f"{r['same_state']}, {r['same_output_rows']}",
    ]


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "# Local recovery: the next epoch adopts the live operators instead of reading the checkpoint",
        "",
        f"`python -m bench.local_recovery --keys {args.keys} --epochs {args.epochs}` on 2 shared cores, "
        f"in-process executor, parallelism 2, max_parallelism 128; {when}. Three load epochs touch about "
        "95% of the keys, then each measured epoch about 1%; the two configurations run interleaved, "
        "epoch by epoch, in one process; medians over the measured epochs. *Restore* = the keyed "
        "subtasks' `restore_s` (fetch + verify + decode + operator open, or the adoption); *epoch* = "
        "the whole `run_cycle` wall time.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    lines += ["| " + " | ".join(_row(r)) + " |" for r in results]
    adopted = all(h == ["adopted"] for r in results for h in r["adopted"])
    lines += [
        "",
        f"Every measured epoch with local recovery adopted: {adopted}. The target (restore cost per "
        "epoch cut by at least 5x where the state is adopted) is met where the cut column is at least 5x.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.local_recovery", description=__doc__)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="epochal-lr-") as tmp:
        for i, workload in enumerate(WORKLOADS):
            results.append(run(workload, args.keys, args.epochs, Path(tmp) / str(i)))
            print(json.dumps(results[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "local_recovery.json").write_text(json.dumps(results, indent=2))
    text = report(results, args)
    (args.out / "local_recovery.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
