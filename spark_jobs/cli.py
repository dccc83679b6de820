"""The ``epochal`` command line. Exit codes: 0 ok, 1 failure, 2 bad usage or input.

Subcommands: ``demo``, ``run``, ``output``, ``checkpoints list|show``, ``retention``,
``protocol-demo`` (the checkpoint protocol alone, with simulated tasks).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from spark_jobs.jobs.loading import JobNotFoundError
from state_store.clock import SystemClock
from state_store.core import (
    CheckpointConfig,
    CheckpointSummary,
    InvalidNameError,
    ManifestError,
    ObjectNotFound,
    StoreError,
    apply_retention,
    checkpoint_history,
    load_completed,
)
from state_store.core.codec import to_jsonable
from state_store.core.layout import JobLayout
from state_store.storage import InvalidStoreURI, open_store
from state_store.testing.killpoints import InvalidFaultSpec, kill_switch_from_env


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def _fmt_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def format_history(rows: Sequence[CheckpointSummary]) -> str:
    header = (
        f"{'id':>5}  {'status':<11} {'triggered (UTC)':<19}  {'duration':>9}  "
        f"{'acks':>7}  {'size':>9}  reason"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        duration = "-" if r.duration_ms is None else f"{r.duration_ms} ms"
        kind = " (savepoint)" if r.savepoint else ""
        lines.append(
            f"{r.checkpoint_id:>5}  {r.status:<11} {_fmt_ms(r.trigger_ms):<19}  {duration:>9}  "
            f"{r.acked:>3}/{r.expected:<3}  {r.state_bytes:>9}  {r.reason}{kind}"
        )
    return "\n".join(lines)


def _simulated_clock(store: Any, job_id: str, start_ms: int) -> Any:
    """A clock that resumes where the job's newest checkpoint left off (simulated event time)."""
    from state_store.testing import ManualClock

    rows = checkpoint_history(store, job_id)
    return ManualClock(max([start_ms, *(r.trigger_ms for r in rows)]))


def _run_epochs(
    job: Any, store_uri: str, epochs: int, executor: str, step_ms: int | None, quiet: bool
) -> list[Any]:
    from spark_jobs.runtime.cycle import run_cycle
    from spark_jobs.sources.generator import DEFAULT_START_MS

    store = open_store(store_uri)
    clock: Any = SystemClock() if step_ms is None else _simulated_clock(store, job.job_id, DEFAULT_START_MS)
    spark = None
    if executor == "spark":
        from spark_jobs.runtime.spark_session import get_spark

        spark = get_spark("local[*]", f"epochal-{job.job_id}")
        spark.sparkContext.setLogLevel("ERROR")
    reports = []
    for _ in range(epochs):
        if step_ms is not None:
            clock.advance(step_ms)
        report = run_cycle(job, store_uri, clock, executor=executor, spark=spark, kill=kill_switch_from_env())
        reports.append(report)
        if not quiet:
            print(f"epoch -> checkpoint {report.checkpoint_id}: {report.status} {report.reason}".rstrip())
    return reports


def _cmd_run(args: argparse.Namespace) -> int:
    from spark_jobs.jobs.loading import load_job

    options = {"mode": args.mode} if args.mode else {}
    job = load_job(args.job_ref, **options)
    reports = _run_epochs(job, args.store, args.epochs, args.executor, args.time_step_ms, args.json)
    if args.json:
        print(
            json.dumps(
                [{"checkpoint_id": r.checkpoint_id, "status": r.status, "reason": r.reason} for r in reports]
            )
        )
    return 0 if all(r.status in ("completed", "skipped") for r in reports) else 1


def _cmd_output(args: argparse.Namespace) -> int:
    from spark_jobs.sinks import export_committed

    result = export_committed(open_store(args.store), args.job, args.sink, args.out)
    print(
        json.dumps({"path": str(result.path), "rows": result.rows, "checkpoints": list(result.checkpoints)})
        if args.json
        else f"wrote {result.rows} committed rows of sink {args.sink} to {result.path}"
    )
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    """The example pipeline end to end on the embedded default: local store, Spark local[*]."""
    from spark_jobs.examples.clickstream import build_job
    from spark_jobs.sinks import read_committed

    job = build_job()
    print(
        f"Epochal demo: job {job.job_id} ({job.mode}, parallelism {job.parallelism}) on {args.store}, "
        f"executor {args.executor}, {args.epochs} epochs of 10 s simulated time"
    )
    _run_epochs(job, args.store, args.epochs, args.executor, 10_000, False)
    store = open_store(args.store)
    print("\ncheckpoint history:")
    print(format_history(checkpoint_history(store, job.job_id)))
    table = read_committed(store, job.job_id, "page-counts-sink")
    print(f"\ncommitted output of sink page-counts-sink: {table.num_rows} window rows; the latest:")
    frame = table.to_pandas().sort_values(["window_start", "page"]).tail(8)
    print(frame.drop(columns=["_ts"]).to_string(index=False))
    return 0


def _cmd_protocol_demo(args: argparse.Namespace) -> int:
    from spark_jobs.protocol_demo import run_protocol_demo

    store = open_store(args.store)
    rows = run_protocol_demo(store, args.job, epochs=args.epochs, kill=kill_switch_from_env())
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
    else:
        print(f"job {args.job} on {store.uri}: {args.epochs} epochs, checkpoint history:")
        print(format_history(rows))
    return 0


def _cmd_checkpoints(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    if args.action == "list":
        rows = checkpoint_history(store, args.job)
        print(json.dumps([asdict(r) for r in rows], indent=1) if args.json else format_history(rows))
        return 0
    if args.id is None:
        raise UsageError("checkpoints show needs --id N: the checkpoint to show")
    cp = load_completed(store, JobLayout(args.job), args.id, deep=True)
    print(json.dumps(to_jsonable(cp.metadata), indent=1))
    return 0


def _cmd_retention(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    config = CheckpointConfig(retained_checkpoints=args.retain, orphan_grace_ms=args.grace_ms)
    plan = apply_retention(
        store, args.job, config, SystemClock(), dry_run=args.dry_run, pinned=frozenset(args.pin)
    )
    report = {
        "retained": list(plan.retained),
        "discarded": list(plan.discarded),
        "deleted_files": len(plan.delete),
        "dry_run": args.dry_run,
    }
    print(
        json.dumps(report)
        if args.json
        else f"retained {report['retained']}, discarded {report['discarded']}, "
        f"{'would delete' if args.dry_run else 'deleted'} {len(plan.delete)} files"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="epochal", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--store", required=True, help="storage URI: file:///path, s3://bucket/prefix, memory://x"
        )
        p.add_argument("--job", default="wordcount", help="job id")
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    demo = sub.add_parser("demo", help="run the example pipeline end to end (local store, Spark local[*])")
    demo.add_argument("--store", required=True, help="storage URI")
    demo.add_argument("--epochs", type=int, default=5)
    demo.add_argument("--executor", choices=["spark", "local"], default="spark")
    demo.set_defaults(func=_cmd_demo)

    run = sub.add_parser("run", help="run N epochs of a job: trigger, epoch, complete, notify, retention")
    run.add_argument("--job", dest="job_ref", required=True, help="example name (clickstream) or module:attr")
    run.add_argument("--store", required=True, help="storage URI")
    run.add_argument("--epochs", type=int, default=1)
    run.add_argument("--executor", choices=["spark", "local"], default="spark")
    run.add_argument("--mode", choices=["exactly_once", "at_least_once", "unaligned"], default=None)
    run.add_argument(
        "--time-step-ms",
        type=int,
        default=None,
        help="simulated time: advance this much per epoch (default: the system clock)",
    )
    run.add_argument("--json", action="store_true")
    run.set_defaults(func=_cmd_run)

    out = sub.add_parser("output", help="export a sink's committed output to a Parquet file")
    common(out)
    out.add_argument("--sink", required=True, help="sink uid")
    out.add_argument("--out", required=True, help="local .parquet path")
    out.set_defaults(func=_cmd_output)

    proto = sub.add_parser("protocol-demo", help="the checkpoint protocol alone, with simulated tasks")
    common(proto)
    proto.add_argument("--epochs", type=int, default=5)
    proto.set_defaults(func=_cmd_protocol_demo)

    chk = sub.add_parser("checkpoints", help="list or show checkpoints")
    chk.add_argument("action", choices=["list", "show"])
    common(chk)
    chk.add_argument("--id", type=int, help="checkpoint id (show)")
    chk.set_defaults(func=_cmd_checkpoints)

    ret = sub.add_parser("retention", help="apply the retention policy")
    common(ret)
    ret.add_argument("--retain", type=int, default=3)
    ret.add_argument("--grace-ms", type=int, default=3_600_000)
    ret.add_argument("--pin", type=int, action="append", default=[])
    ret.add_argument("--dry-run", action="store_true")
    ret.set_defaults(func=_cmd_retention)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        result: int = args.func(args)
        return result
    except (
        UsageError,
        InvalidStoreURI,
        InvalidNameError,
        InvalidFaultSpec,
        JobNotFoundError,
        ValueError,
    ) as exc:
        print(f"epochal: {exc}", file=sys.stderr)
        return 2
    except (ManifestError, ObjectNotFound, StoreError) as exc:
        print(f"epochal: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"epochal: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
