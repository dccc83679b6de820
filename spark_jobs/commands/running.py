"""``epochal run``, ``demo`` and ``protocol-demo``: epochs of a job, outside Airflow.

``run`` shows each epoch's progress while it runs (a live bar per stage on a terminal, plain lines
into a pipe; ``spark_jobs.runtime.progress``) and a summary line after it (records in/out, measured
duration, state, checkpoint and incremental size, the Spark UI); ``--json`` prints the summaries.
The clock is the job's one clock (``common.clock_choice``, docs/clocks.md).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from spark_jobs.commands import render
from spark_jobs.commands.common import (
    ClockChoice,
    clock_choice,
    job_clock,
    kill_switch,
    latest_id,
    lease,
    record_job_clock,
)
from spark_jobs.commands.errors import UsageError
from state_store.clocks import ClockKind, read_clock
from state_store.core import checkpoint_history
from state_store.core.errors import EpochalError
from state_store.storage import open_store


class EpochRefusedError(EpochalError):
    """The coordinator refused to start an epoch (a pre-check): one line, exit code 1."""


def progress_reporter(quiet: bool, stream: Any = None) -> Any:
    """A live bar on a terminal, plain lines into a pipe, nothing with ``--json``."""
    import sys

    from spark_jobs.runtime.progress import LineReporter, RichReporter

    if quiet:
        return None
    out = stream if stream is not None else sys.stdout
    if out.isatty():
        from rich.console import Console

        return RichReporter(Console(file=out))
    return LineReporter(lambda line: print(f"  {line}", file=out, flush=True))


def run_epochs(
    job: Any,
    store_uri: str,
    epochs: int,
    executor: str,
    choice: ClockChoice,
    quiet: bool,
    args: argparse.Namespace,
) -> list[Any]:
    """Run ``epochs`` epochs under the job's lease on the job's clock; print progress and one
    summary line per epoch (unless ``quiet``); return the epochs' summaries
    (``spark_jobs.runtime.progress.EpochSummary``)."""
    import time

    from spark_jobs.runtime import progress
    from spark_jobs.runtime.cycle import EpochCycle
    from state_store.core.failures import CheckpointException, JobFailedError

    store = open_store(store_uri)
    kill = kill_switch(args)
    # another clock than the job's is refused before the lease is taken (nothing changes)
    job_clock(store, job.job_id, choice, command="epochal run", default=ClockKind.WALL)
    first_run = read_clock(store, job.job_id) is None
    with lease(store, job.job_id, "epochal run", args, job.max_parallelism) as held:
        clock, kind = job_clock(store, job.job_id, choice, command="epochal run", default=ClockKind.WALL)
        if first_run and not quiet:
            print(
                f"job {job.job_id} runs on the {kind.value} clock from now on (recorded with the job; "
                "--clock and --time-step-ms choose it at a job's first run, see docs/clocks.md)",
                flush=True,
            )
        spark = None
        if executor == "spark":
            from spark_jobs.runtime.spark_session import get_spark

            # the Spark UI on loopback, for a person watching the run (its URL is in the summary)
            spark = get_spark("local[*]", f"epochal-{job.job_id}", {"spark.ui.enabled": "true"})
            spark.sparkContext.setLogLevel("ERROR")
        cycle = EpochCycle(
            job, store_uri, clock, executor=executor, spark=spark, kill=kill, lease_token=held.token
        )
        summaries = []
        for _ in range(epochs):
            if kind is ClockKind.SIMULATED:
                clock.advance(choice.step_ms)
            began = time.monotonic()
            try:
                with progress.reporting(progress_reporter(quiet)):
                    report = cycle.run_once()
            except (CheckpointException, JobFailedError) as exc:
                raise EpochRefusedError(f"job {job.job_id}: no epoch started: {exc}") from None
            record_job_clock(store, job.job_id, kind, "epochal run")  # at the job's first epoch
            summary = progress.epoch_summary(
                store,
                job.job_id,
                report.checkpoint_id,
                str(report.status),
                report.summaries,
                int((time.monotonic() - began) * 1000),
                spark_ui=progress.spark_ui_url(spark),
                reason=report.reason,
            )
            summaries.append(summary)
            if not quiet:
                if report.rescale_plan:
                    print(report.rescale_plan)
                print(summary.line(), flush=True)
    return summaries


def _check_epochs(epochs: int) -> None:
    if epochs < 1:
        raise UsageError(f"--epochs {epochs} is invalid: run at least 1 epoch")


def cmd_run(args: argparse.Namespace) -> int:
    from spark_jobs.jobs.loading import load_job

    options = {"mode": args.mode} if args.mode else {}
    _check_epochs(args.epochs)
    choice = clock_choice(args, needs_step=True)
    job = load_job(args.job_ref, **options)
    summaries = run_epochs(job, args.store, args.epochs, args.executor, choice, args.json, args)
    if args.json:
        print(json.dumps([s.to_json() for s in summaries]))
    return 0 if all(s.status in ("completed", "skipped") for s in summaries) else 1


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
    run_epochs(
        job, args.store, args.epochs, args.executor, ClockChoice(ClockKind.SIMULATED, 10_000), args.json, args
    )
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
