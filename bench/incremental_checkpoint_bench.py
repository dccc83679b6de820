"""Incremental checkpoints: bytes written per checkpoint when 1% of the keys change per epoch.

A keyed process function keeps one value per key for ``KEYS`` keys. Epoch 1 writes every key;
each later epoch updates 1% of the keys (random, uniform). For every checkpoint the benchmark
reports the full state size (bytes of all files the checkpoint references) and the bytes actually
written (new files in ``shared/``), and their ratio.
Run: ``.venv/bin/python bench/incremental_checkpoint_bench.py``.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from spark_jobs.examples.keyed_counts import build_job as build
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core import JobLayout, load_completed
from state_store.storage import open_store
from state_store.testing import ManualClock

START = DEFAULT_START_MS
STEP = 10_000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "incremental_checkpoints.md")
    )
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="epochal-bench-")
    uri, store = Path(root).as_uri(), open_store(Path(root).as_uri())
    job = build(keys=args.keys, fraction=args.fraction, step_ms=STEP)
    clock = ManualClock(START)
    rows = []
    for _ in range(args.epochs):
        clock.advance(STEP)
        began = time.perf_counter()
        report = run_cycle(job, uri, clock)
        seconds = time.perf_counter() - began
        n = report.checkpoint_id
        assert n is not None and report.status == "completed", report
        meta = load_completed(store, JobLayout(job.job_id), n).metadata
        full = sum(h.size for t in meta.tasks if t.task.uid == "counts" for h in t.handles)
        written = sum(int(t.metrics.get("bytes_written", 0)) for t in meta.tasks if t.task.uid == "counts")
        records = sum(e - s for s, e in meta.positions["ranges"].values())
        rows.append((n, records, full, written, written / full if full else 0.0, seconds))
    lines = [
        "# Incremental checkpoints (`bench/incremental_checkpoint_bench.py`)",
        "",
        f"{args.keys:,} keys of keyed state (one value each); epoch 1 writes all of them, each later epoch "
        f"updates {args.fraction:.0%} of the keys (uniformly random). `full state` = bytes of every file the "
        "checkpoint references; `written` = bytes of new files uploaded for it.",
        "",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, {platform.platform()}; "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC. In-process executor, local disk.",
        "",
        "| checkpoint | records | full state (bytes) | written (bytes) | written / full | cycle seconds |",
        "|---:|---:|---:|---:|---:|---:|",
        *(f"| {n} | {r:,} | {f:,} | {w:,} | {ratio:.3f} | {s:.2f} |" for n, r, f, w, ratio, s in rows),
        "",
    ]
    steady = [ratio for _, _, _, _, ratio, _ in rows[1:]]
    lines.append(
        f"Steady state (checkpoints 2..{len(rows)}): mean written/full = {sum(steady) / len(steady):.3f}."
    )
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
