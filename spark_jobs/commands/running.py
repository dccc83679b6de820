"""``epochal run``, ``demo`` and ``protocol-demo``: epochs of a job, outside Airflow."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from spark_jobs.commands import render
from spark_jobs.commands.common import check_time_step, kill_switch, latest_id, lease, simulated_clock
from spark_jobs.commands.errors import UsageError
from state_store.clocks import SystemClock
from state_store.core import checkpoint_history
from state_store.storage import open_store


def run_epochs(
    job: Any,
    store_uri: str,
    epochs: int,
    executor: str,
    step_ms: int | None,
    quiet: bool,
    args: argparse.Namespace,
) -> list[Any]:
    from spark_jobs.runtime.cycle import EpochCycle
    from spark_jobs.sources.generator import DEFAULT_START_MS

    store = open_store(store_uri)
    kill = kill_switch(args)
    with lease(store, job.job_id, "epochal run", args, job.max_parallelism) as held:
        clock: Any = (
            SystemClock() if step_ms is None else simulated_clock(store, job.job_id, DEFAULT_START_MS)
        )
        spark = None
        if executor == "spark":
            from spark_jobs.runtime.spark_session import get_spark

            spark = get_spark("local[*]", f"epochal-{job.job_id}")
            spark.sparkContext.setLogLevel("ERROR")
        cycle = EpochCycle(
            job, store_uri, clock, executor=executor, spark=spark, kill=kill, lease_token=held.token
        )
        reports = []
        for _ in range(epochs):
            if step_ms is not None:
                clock.advance(step_ms)
            report = cycle.run_once()
            reports.append(report)
            if not quiet:
                if report.rescale_plan:
                    print(report.rescale_plan)
                target = (
                    "no checkpoint" if report.checkpoint_id is None else f"checkpoint {report.checkpoint_id}"
                )
                print(f"epoch -> {target}: {report.status} {report.reason}".rstrip(), flush=True)
    return reports


def _check_epochs(epochs: int) -> None:
    if epochs < 1:
        raise UsageError(f"--epochs {epochs} is invalid: run at least 1 epoch")


def cmd_run(args: argparse.Namespace) -> int:
    from spark_jobs.jobs.loading import load_job

    options = {"mode": args.mode} if args.mode else {}
    _check_epochs(args.epochs)
    check_time_step(args)
    job = load_job(args.job_ref, **options)
    reports = run_epochs(job, args.store, args.epochs, args.executor, args.time_step_ms, args.json, args)
    if args.json:
        print(
            json.dumps(
                [{"checkpoint_id": r.checkpoint_id, "status": r.status, "reason": r.reason} for r in reports]
            )
        )
    return 0 if all(r.status in ("completed", "skipped") for r in reports) else 1


def cmd_demo(args: argparse.Namespace) -> int:
    """The example pipeline end to end on the embedded default: local store, Spark local[*]."""
    from spark_jobs.examples.clickstream import build_job
    from spark_jobs.sinks import read_committed

    _check_epochs(args.epochs)
    job = build_job()
    if not args.json:
        print(
            f"Epochal demo: job {job.job_id} ({job.mode}, parallelism {job.parallelism}) on {args.store}, "
            f"executor {args.executor}, {args.epochs} epochs of 10 s simulated time"
        )
    run_epochs(job, args.store, args.epochs, args.executor, 10_000, args.json, args)
    store = open_store(args.store)
    rows = checkpoint_history(store, job.job_id)
    table = read_committed(store, job.job_id, "page-counts-sink")
    frame = table.to_pandas().sort_values(["window_start", "page"])
    frame = frame[[c for c in frame.columns if not c.startswith("_")]]
    if args.json:
        print(
            render.dumps(
                {
                    "job": job.job_id,
                    "history": [asdict(r) for r in rows],
                    "sink": "page-counts-sink",
                    "rows": table.num_rows,
                    "latest_rows": frame.tail(8).to_dict(orient="records"),
                }
            )
        )
        return 0
    print("\ncheckpoint history:")
    print(render.format_history(rows, latest_id(store, job.job_id)))
    print(f"\ncommitted output of sink page-counts-sink: {table.num_rows} window rows; the latest:")
    print(frame.tail(8).to_string(index=False))
    return 0


def cmd_protocol_demo(args: argparse.Namespace) -> int:
    from spark_jobs.tools.protocol_demo import run_protocol_demo

    _check_epochs(args.epochs)
    store = open_store(args.store)
    rows = run_protocol_demo(store, args.job, epochs=args.epochs, kill=kill_switch(args))
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
    else:
        print(f"job {args.job} on {store.uri}: {args.epochs} epochs, checkpoint history:")
        print(render.format_history(rows, latest_id(store, args.job)))
    return 0
