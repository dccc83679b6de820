"""The ``epochal`` command line. Exit codes: 0 ok, 1 failure, 2 bad usage or input.

Subcommands: ``demo``, ``run``, ``output``, ``checkpoints list|show|diff``, ``savepoint``,
``savepoints list|dispose``, ``restore``, ``backfill``, ``inspect``, ``retention``, ``validate``
(``--deep``), ``report``, ``lease show|break``, ``chaos``, ``protocol-demo`` (the checkpoint protocol
alone).

Every command that changes a job holds the job's lease while it does (``state_store.lease_keeper``):
a second one gets a one-line error naming the holder, or waits with ``--wait``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from state_store.clocks import SystemClock
from state_store.core import (
    CheckpointConfig,
    CheckpointSummary,
    ObjectNotFound,
    StoreError,
    apply_retention,
    checkpoint_history,
    load_completed,
)
from state_store.core.codec import to_jsonable
from state_store.core.errors import BadInputError, EpochalError
from state_store.core.layout import JobLayout
from state_store.faults import kill_switch_from_env
from state_store.lease_keeper import HeldLease, holder_id
from state_store.storage import open_store
from state_store.storage.uri import redact


class UsageError(BadInputError):
    """Bad input from the user: printed as one line, exit code 2."""


def _fmt_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):  # a time no calendar holds: show it, never die
        return f"{ms} ms"


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
    from state_store.clocks import ManualClock

    rows = checkpoint_history(store, job_id)
    return ManualClock(max([start_ms, *(r.trigger_ms for r in rows)]))


MAX_TIME_STEP_MS = 366 * 24 * 3600 * 1000


def _check_time_step(args: argparse.Namespace) -> None:
    step = getattr(args, "time_step_ms", None)
    if step is not None and not 0 <= step <= MAX_TIME_STEP_MS:
        raise UsageError(
            f"--time-step-ms {step} is invalid: use 0..{MAX_TIME_STEP_MS} (at most a year of simulated "
            "time per epoch; 0 replays the same cut)"
        )


def _lease(
    store: Any, job_id: str, command: str, args: argparse.Namespace, max_parallelism: int = 128
) -> HeldLease:
    """The job's lease for this command (``--wait``: wait up to ``--wait-timeout`` seconds)."""
    wait = getattr(args, "wait", False)
    return HeldLease(
        store,
        job_id,
        holder_id("cli"),
        command,
        max_parallelism=max_parallelism,
        wait_s=float(getattr(args, "wait_timeout", 0)) if wait else 0.0,
    )


def _run_epochs(
    job: Any,
    store_uri: str,
    epochs: int,
    executor: str,
    step_ms: int | None,
    quiet: bool,
    args: argparse.Namespace | None = None,
) -> list[Any]:
    from spark_jobs.runtime.cycle import EpochCycle
    from spark_jobs.sources.generator import DEFAULT_START_MS

    store = open_store(store_uri)
    kill = kill_switch_from_env(os.environ)
    with _lease(store, job.job_id, "epochal run", args or argparse.Namespace(), job.max_parallelism) as lease:
        clock: Any = (
            SystemClock() if step_ms is None else _simulated_clock(store, job.job_id, DEFAULT_START_MS)
        )
        spark = None
        if executor == "spark":
            from spark_jobs.runtime.spark_session import get_spark

            spark = get_spark("local[*]", f"epochal-{job.job_id}")
            spark.sparkContext.setLogLevel("ERROR")
        cycle = EpochCycle(
            job, store_uri, clock, executor=executor, spark=spark, kill=kill, lease_token=lease.token
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
                print(f"epoch -> {target}: {report.status} {report.reason}".rstrip())
    return reports


def _cmd_run(args: argparse.Namespace) -> int:
    from spark_jobs.jobs.loading import load_job

    options = {"mode": args.mode} if args.mode else {}
    if args.epochs < 1:
        raise UsageError(f"--epochs {args.epochs} is invalid: run at least 1 epoch")
    _check_time_step(args)
    job = load_job(args.job_ref, **options)
    reports = _run_epochs(job, args.store, args.epochs, args.executor, args.time_step_ms, args.json, args)
    if args.json:
        print(
            json.dumps(
                [{"checkpoint_id": r.checkpoint_id, "status": r.status, "reason": r.reason} for r in reports]
            )
        )
    return 0 if all(r.status in ("completed", "skipped") for r in reports) else 1


def _cmd_output(args: argparse.Namespace) -> int:
    from spark_jobs.runtime.cycle import sink_specs_of_store
    from spark_jobs.sinks import export_committed

    store = _job_store(args)
    sinks = sink_specs_of_store(store, args.job)
    if args.sink not in sinks:
        raise UsageError(
            f"sink uid {args.sink!r} (--sink): job {args.job} has no sink of that uid in {store.uri} "
            f"(sinks with output: {', '.join(sinks) or 'none'})"
        )
    result = export_committed(store, args.job, args.sink, args.out)
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
    from spark_jobs.tools.protocol_demo import run_protocol_demo

    store = open_store(args.store)
    rows = run_protocol_demo(store, args.job, epochs=args.epochs, kill=kill_switch_from_env(os.environ))
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
    else:
        print(f"job {args.job} on {store.uri}: {args.epochs} epochs, checkpoint history:")
        print(format_history(rows))
    return 0


def _cmd_checkpoints(args: argparse.Namespace) -> int:
    store = _job_store(args)
    if args.action == "diff":
        if not (args.a and args.b):
            raise UsageError(
                "checkpoints diff needs two snapshots: A B (checkpoint ids or savepoint locations)"
            )
        return _cmd_diff(args)
    if args.action == "list":
        rows = checkpoint_history(store, args.job)
        print(json.dumps([asdict(r) for r in rows], indent=1) if args.json else format_history(rows))
        return 0
    if args.id is None:
        raise UsageError("checkpoints show needs --id N: the checkpoint to show")
    try:
        cp = load_completed(store, JobLayout(args.job), args.id, deep=True)
    except ObjectNotFound:
        raise UsageError(
            f"checkpoint {args.id} of job {args.job} was not found: see `epochal checkpoints list`"
        ) from None
    print(json.dumps(to_jsonable(cp.metadata), indent=1))
    return 0


class AuditFailedError(EpochalError):
    """``epochal validate`` found a damaged checkpoint (exit 1; each finding names file and remedy)."""


def _cmd_validate(args: argparse.Namespace) -> int:
    from state_store.core.audit import audit_checkpoints
    from state_store.core.parallel import read_concurrency

    store = _job_store(args)
    if any(n < 1 for n in args.checkpoint):
        raise UsageError(f"--checkpoint {min(args.checkpoint)} is invalid: use a completed checkpoint id")
    report = audit_checkpoints(
        store,
        args.job,
        deep=args.deep,
        checkpoint_ids=args.checkpoint or None,
        concurrency=read_concurrency(store, 16),
    )
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        for finding in report.findings:
            print(f"DAMAGED {finding.line()}")
        print(report.summary_line())
    if not report.ok:
        first = report.findings[0]
        raise AuditFailedError(
            f"job {args.job}: {len(report.findings)} damaged file(s), the first: {first.line()}"
        )
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from spark_jobs.tools.report import write_report

    store = _job_store(args)
    r = write_report(store, args.job, args.out, limit=args.limit, airflow_url=args.airflow_url)
    print(
        json.dumps({"path": str(r.path), "checkpoints": r.checkpoints, "rows": r.rows_shown})
        if args.json
        else f"wrote the checkpoint report of job {args.job} ({r.rows_shown} of {r.checkpoints}) to {r.path}"
    )
    return 0


def _cmd_retention(args: argparse.Namespace) -> int:
    from spark_jobs.lifecycle.pins import pin_checkpoints, unpin_checkpoints

    store = _job_store(args)
    config = CheckpointConfig(retained_checkpoints=args.retain, orphan_grace_ms=args.grace_ms)
    if args.dry_run:
        plan = apply_retention(
            store, args.job, config, SystemClock(), dry_run=True, pinned=frozenset(args.pin)
        )
    else:
        kill = kill_switch_from_env(os.environ)
        with _lease(store, args.job, "epochal retention", args) as lease:
            from state_store.core.coordinator import CheckpointCoordinator

            fence = CheckpointCoordinator(store, args.job, clock=SystemClock(), lease_token=lease.token)
            if args.pin or args.unpin:
                pin_checkpoints(store, args.job, args.pin, fence)
                unpin_checkpoints(store, args.job, args.unpin, fence)
            # as in the cycle's retention step: keep the monitoring rows of what retention deletes
            from state_store.monitoring.archive import archive_history

            try:
                archive_history(store, args.job)
            except StoreError as exc:  # best effort, as in the cycle: retention still runs
                print(f"epochal: warning: checkpoint history not archived: {exc}", file=sys.stderr)
            fence.fence()
            plan = apply_retention(store, args.job, config, SystemClock(), kill=kill)
    report = {
        "retained": list(plan.retained),
        "discarded": list(plan.discarded),
        "deleted_files": len(plan.delete),
        "dry_run": args.dry_run,
        "pinned": sorted(args.pin),
        "unpinned": sorted(args.unpin),
    }
    print(
        json.dumps(report)
        if args.json
        else f"retained {report['retained']}, discarded {report['discarded']}, "
        f"{'would delete' if args.dry_run else 'deleted'} {len(plan.delete)} files"
        + (f"; pinned {report['pinned']}" if args.pin and not args.dry_run else "")
        + (f"; unpinned {report['unpinned']}" if args.unpin and not args.dry_run else "")
    )
    return 0


def _max_parallelism(store: Any, args: argparse.Namespace) -> int:
    """The job's key groups from its job record; an explicit ``--max-parallelism`` must match it
    (another value would read a fraction of the state, or none)."""
    from state_store.core.jobrecord import JobRecords

    record = JobRecords(store, args.job).read()
    recorded = record.max_parallelism if record is not None else None
    given = args.max_parallelism
    if given is not None and recorded is not None and given != recorded:
        raise UsageError(
            f"--max-parallelism {given} does not match job {args.job}'s {recorded} (its job record): "
            "leave the option out"
        )
    if given is not None and given < 1:
        raise UsageError(f"--max-parallelism {given} is invalid: leave the option out")
    value = given if given is not None else recorded
    return value if value is not None else 128


def _job_store(args: argparse.Namespace) -> Any:
    """The store of an existing job, opened without writing anything (a mistyped path or job id
    is an error, never a new empty store)."""
    JobLayout(args.job)  # an unsafe job id is refused before the store is looked at
    store = open_store(args.store, must_exist=True)
    _require_job(store, args.job)
    return store


def _require_job(store: Any, job_id: str) -> None:
    """A job id that never ran in this store is an error, not an empty answer."""
    from state_store.core.jobrecord import JobRecords

    JobLayout(job_id)  # validates the name
    if (
        JobRecords(store, job_id).read() is None
        and next(iter(store.list(JobLayout(job_id).root)), None) is None
    ):
        raise UsageError(
            f"job {job_id!r} has no state in {store.uri}: check --job and --store "
            "(`epochal checkpoints list` needs a job that ran there)"
        )


def _cmd_lease(args: argparse.Namespace) -> int:
    from state_store.core.jobrecord import JobRecords
    from state_store.core.lease import break_lease, current_lease, describe

    store = _job_store(args)
    records = JobRecords(store, args.job)
    if args.action == "show":
        lease = current_lease(records)
        now = SystemClock().now_ms()
        if args.json:
            print(
                json.dumps(
                    None if lease is None else {**to_jsonable(lease), "expired": lease.expires_ms < now}
                )
            )
        elif lease is None:
            print(f"job {args.job}: the lease is free")
        else:
            state = (
                "expired" if lease.expires_ms < now else f"expires in {(lease.expires_ms - now) // 1000} s"
            )
            print(
                f"job {args.job}: held by {describe(lease)} since {_fmt_ms(lease.acquired_ms)} UTC ({state})"
            )
        return 0
    broken = break_lease(records)
    if args.json:
        print(json.dumps(None if broken is None else to_jsonable(broken)))
    elif broken is None:
        print(f"job {args.job}: the lease was free; its fencing token moved on anyway")
    else:
        print(f"job {args.job}: broke the lease of {describe(broken)}; that holder can change nothing now")
    return 0


def _snapshot_of(args: argparse.Namespace, which: str) -> Any:
    from spark_jobs.lifecycle.snapshots import from_checkpoint, read_savepoint

    if which.isdigit():
        store = _job_store(args)
        return from_checkpoint(store, args.job, int(which), _max_parallelism(store, args))
    return read_savepoint(which)


def _cmd_savepoint(args: argparse.Namespace) -> int:
    from spark_jobs.jobs.loading import load_job
    from spark_jobs.lifecycle.savepoint import take_savepoint
    from spark_jobs.lifecycle.snapshots import savepoint_location

    _check_time_step(args)
    job = load_job(args.job_ref)
    savepoint_location(args.store, job.job_id, args.name)  # a bad name is refused before the lease
    kill = kill_switch_from_env(os.environ)
    store = open_store(args.store)
    with _lease(store, job.job_id, "epochal savepoint", args, job.max_parallelism) as lease:
        clock = _simulated_clock(store, job.job_id, 0) if args.time_step_ms is not None else SystemClock()
        info = take_savepoint(
            job,
            args.store,
            clock,
            args.name,
            fmt=args.format,
            executor=args.executor,
            stop=args.stop,
            lease_token=lease.token,
            kill=kill,
        )
    print(json.dumps(info) if args.json else f"savepoint {info['name']} written to {info['location']}")
    return 0


def _cmd_savepoints(args: argparse.Namespace) -> int:
    from spark_jobs.lifecycle.snapshots import dispose_savepoint, list_savepoints, savepoint_keys

    store = _job_store(args)
    if args.action == "list":
        rows = list_savepoints(store, args.job)
        print(json.dumps(rows) if args.json else "\n".join(r["name"] for r in rows) or "no savepoints")
        return 0
    if not args.name:
        raise UsageError("savepoints dispose needs --name NAME")
    savepoint_keys(store, args.job, args.name)  # refused before the lease: a typo changes nothing
    with _lease(store, args.job, "epochal savepoints dispose", args) as lease:
        from state_store.core.coordinator import CheckpointCoordinator

        fence = CheckpointCoordinator(store, args.job, clock=SystemClock(), lease_token=lease.token)
        deleted = dispose_savepoint(store, args.job, args.name, fence.fence)
    print(
        json.dumps({"deleted_files": deleted})
        if args.json
        else f"savepoint {args.name} disposed ({deleted} files)"
    )
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from spark_jobs.tools.inspect import operator_state

    if (args.checkpoint is None) == (args.savepoint is None):
        raise UsageError("inspect needs exactly one of --checkpoint N or --savepoint PATH")
    snapshot = _snapshot_of(args, str(args.checkpoint) if args.checkpoint is not None else args.savepoint)
    if snapshot.job_id != args.job:
        raise UsageError(f"the snapshot belongs to job {snapshot.job_id!r}, not {args.job!r}")
    try:
        key = json.loads(args.key) if args.key is not None else None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"--key {args.key!r} is not JSON ({exc.msg}): quote a string key, e.g. --key '\"u1\"'"
        ) from None
    frame = operator_state(snapshot, args.operator, key=key)
    if args.out.endswith(".parquet"):
        frame.to_parquet(args.out, index=False)
    elif args.out.endswith(".json"):
        frame.to_json(args.out, orient="records", lines=False)
    else:
        raise UsageError(f"--out {args.out!r} must end in .parquet or .json")
    print(
        json.dumps({"rows": len(frame), "out": args.out})
        if args.json
        else f"wrote {len(frame)} rows to {args.out}"
    )
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from spark_jobs.tools.inspect import diff

    result = diff(_snapshot_of(args, args.a), _snapshot_of(args, args.b))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{'operator':<20} {'added':>8} {'removed':>8} {'changed':>8}")
        for uid, row in result.items():
            print(f"{uid:<20} {row['added']:>8} {row['removed']:>8} {row['changed']:>8}")
    return 0


def _cmd_restore(args: argparse.Namespace) -> int:
    from spark_jobs.jobs.loading import load_job
    from spark_jobs.lifecycle.restore import RestoreRequest, restore, roots_from_text
    from spark_jobs.lifecycle.restore_render import render_plan

    _check_time_step(args)
    job = load_job(args.job_ref)
    uid_map = {}
    for item in args.uid_map:
        old, sep, new = item.partition("=")
        if not sep or not old or not new:
            raise UsageError(f"--uid-map {item!r} is invalid: use OLD=NEW")
        uid_map[old] = new
    request = RestoreRequest(
        source=args.source,
        allow_non_restored_state=args.allow_non_restored_state,
        uid_map=uid_map,
        claim_mode=args.claim_mode,
        allow_foreign=args.allow_foreign,
        dry_run=args.dry_run,
        force=args.force,
        roots=roots_from_text(os.environ.get("EPOCHAL_SNAPSHOT_ROOTS", "")),
    )
    store = open_store(args.store)
    clock = _simulated_clock(store, job.job_id, 0) if args.time_step_ms is not None else SystemClock()
    hold = None if args.dry_run else _lease(store, job.job_id, "epochal restore", args, job.max_parallelism)
    kill = kill_switch_from_env(os.environ)  # validated before anything changes
    report = restore(job, args.store, clock, request, parallelism=args.parallelism, hold=hold, kill=kill)
    if args.json:
        print(json.dumps({"plan": report.plan.to_json(), "checkpoint_id": report.checkpoint_id}))
    else:
        print(render_plan(report.plan))
        print(
            "dry run: nothing was changed"
            if args.dry_run
            else f"restored into checkpoint {report.checkpoint_id}; the next epoch resumes from it"
        )
    if not report.plan.ok:
        raise UsageError(report.plan.refusals[0])
    return 0


def _cmd_backfill(args: argparse.Namespace) -> int:
    from spark_jobs.jobs.loading import load_job
    from spark_jobs.lifecycle.backfill import backfill
    from spark_jobs.lifecycle.restore import roots_from_text

    _check_time_step(args)
    job = load_job(args.job_ref)
    kill = kill_switch_from_env(os.environ)  # validated before anything changes
    report = backfill(
        job,
        args.store,
        args.from_savepoint,
        args.new_job,
        until_ms=args.until_ms,
        epochs=args.epochs,
        step_ms=args.time_step_ms,
        replace=args.replace,
        wait_s=float(args.wait_timeout) if args.wait else 0.0,
        kill=kill,
        roots=roots_from_text(os.environ.get("EPOCHAL_SNAPSHOT_ROOTS", "")),
    )
    print(
        json.dumps(report)
        if args.json
        else f"backfill job {args.new_job}: restored from {args.from_savepoint}, {report['epochs']} epochs, "
        f"output in sink(s) {', '.join(report['sinks'])} of job {args.new_job}"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="epochal", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, job_default: str | None = None) -> None:
        p.add_argument(
            "--store", required=True, help="storage URI: file:///path, s3://bucket/prefix, memory://x"
        )
        if job_default is None:
            p.add_argument("--job", required=True, help="job id")
        else:
            p.add_argument("--job", default=job_default, help=f"job id (default: {job_default})")
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
    _wait_arguments(run)
    run.set_defaults(func=_cmd_run)

    out = sub.add_parser("output", help="export a sink's committed output to a Parquet file")
    common(out)
    out.add_argument("--sink", required=True, help="sink uid")
    out.add_argument("--out", required=True, help="local .parquet path")
    out.set_defaults(func=_cmd_output)

    proto = sub.add_parser("protocol-demo", help="the checkpoint protocol alone, with simulated tasks")
    common(proto, job_default="wordcount")
    proto.add_argument("--epochs", type=int, default=5)
    proto.set_defaults(func=_cmd_protocol_demo)

    chk = sub.add_parser("checkpoints", help="list, show or diff checkpoints")
    chk.add_argument("action", choices=["list", "show", "diff"])
    common(chk)
    chk.add_argument("--id", type=int, help="checkpoint id (show)")
    chk.add_argument("a", nargs="?", help="diff: checkpoint id or savepoint location")
    chk.add_argument("b", nargs="?", help="diff: checkpoint id or savepoint location")
    chk.add_argument(
        "--max-parallelism", type=int, default=None, help="key groups of the job (default: its job record's)"
    )
    chk.set_defaults(func=_cmd_checkpoints)

    val = sub.add_parser(
        "validate",
        help="audit the stored checkpoints: metadata, every file present with its size; "
        "--deep reads every byte back and checks its checksum",
    )
    common(val)
    val.add_argument(
        "--deep",
        action="store_true",
        help="read every state file back and check it against its writer's checksum",
    )
    val.add_argument(
        "--checkpoint",
        type=int,
        action="append",
        default=[],
        help="audit only this checkpoint id (repeatable; default: every completed checkpoint)",
    )
    val.set_defaults(func=_cmd_validate)

    rep = sub.add_parser("report", help="write a self-contained HTML page of a job's checkpoints")
    common(rep)
    rep.add_argument("--out", required=True, help="the .html file to write")
    rep.add_argument("--limit", type=int, default=1000, help="history rows, newest first")
    rep.add_argument("--airflow-url", default=None, help="link DAG runs to this Airflow UI")
    rep.set_defaults(func=_cmd_report)

    ret = sub.add_parser("retention", help="apply the retention policy")
    common(ret)
    ret.add_argument("--retain", type=int, default=3)
    ret.add_argument("--grace-ms", type=int, default=3_600_000)
    ret.add_argument(
        "--pin", type=int, action="append", default=[], help="keep checkpoint N from retention (repeatable)"
    )
    ret.add_argument("--unpin", type=int, action="append", default=[], help="remove the pin of checkpoint N")
    ret.add_argument("--dry-run", action="store_true")
    _wait_arguments(ret)
    ret.set_defaults(func=_cmd_retention)
    lease = sub.add_parser("lease", help="show or break the job's lease (who may change the job now)")
    lease.add_argument("action", choices=["show", "break"])
    common(lease)
    lease.set_defaults(func=_cmd_lease)
    sp = sub.add_parser("savepoint", help="take a savepoint (self-contained, canonical Parquet by default)")
    sp.add_argument("--job", dest="job_ref", required=True, help="example name or module:attr")
    sp.add_argument("--store", required=True)
    sp.add_argument("--name", required=True)
    sp.add_argument("--format", choices=["parquet", "arrow"], default="parquet")
    sp.add_argument("--stop", action="store_true", help="stop-with-savepoint: no epochs until a restore")
    sp.add_argument("--executor", choices=["spark", "local"], default="local")
    sp.add_argument("--time-step-ms", type=int, default=None, help="simulated time (as for run)")
    sp.add_argument("--json", action="store_true")
    _wait_arguments(sp)
    sp.set_defaults(func=_cmd_savepoint)

    sps = sub.add_parser("savepoints", help="list or dispose savepoints")
    sps.add_argument("action", choices=["list", "dispose"])
    common(sps)
    sps.add_argument("--name")
    _wait_arguments(sps)
    sps.set_defaults(func=_cmd_savepoints)

    rs = sub.add_parser("restore", help="restore a job from latest, a checkpoint id or a savepoint location")
    rs.add_argument("--job", dest="job_ref", required=True)
    rs.add_argument("--store", required=True)
    rs.add_argument("--from", dest="source", default="latest", help="latest | checkpoint id | savepoint URI")
    rs.add_argument("--dry-run", action="store_true", help="print the plan; change nothing")
    rs.add_argument("--allow-non-restored-state", action="store_true")
    rs.add_argument("--uid-map", action="append", default=[], help="OLD=NEW (repeatable)")
    rs.add_argument("--parallelism", type=int, default=None)
    rs.add_argument("--claim-mode", choices=["CLAIM", "NO_CLAIM"], default="NO_CLAIM")
    rs.add_argument("--allow-foreign", action="store_true", help="accept a snapshot of another job")
    rs.add_argument("--force", action="store_true", help="restore even if the snapshot fails validation")
    rs.add_argument("--time-step-ms", type=int, default=None)
    rs.add_argument("--json", action="store_true")
    _wait_arguments(rs)
    rs.set_defaults(func=_cmd_restore)

    bf = sub.add_parser("backfill", help="fork a new job from a savepoint and reprocess into its own sinks")
    bf.add_argument("--job", dest="job_ref", required=True, help="the job definition to run")
    bf.add_argument("--store", required=True)
    bf.add_argument("--from-savepoint", required=True, help="savepoint location URI")
    bf.add_argument("--new-job", required=True, help="id of the forked job (its own state and sinks)")
    bf.add_argument("--until-ms", type=int, default=None, help="stop once event time reaches this")
    bf.add_argument("--epochs", type=int, default=10)
    bf.add_argument("--time-step-ms", type=int, default=10_000)
    bf.add_argument(
        "--replace",
        action="store_true",
        help="replace the state of an existing job NEW_JOB (fenced like a restore)",
    )
    bf.add_argument("--json", action="store_true")
    _wait_arguments(bf)
    bf.set_defaults(func=_cmd_backfill)

    ins = sub.add_parser("inspect", help="an operator's keyed state at a checkpoint or savepoint")
    common(ins)
    ins.add_argument("--checkpoint", type=int)
    ins.add_argument("--savepoint", help="savepoint location URI")
    ins.add_argument("--operator", required=True, help="operator uid")
    ins.add_argument("--key", help="one key, as JSON (e.g. '\"u1\"')")
    ins.add_argument("--out", required=True, help="file.parquet or file.json")
    ins.add_argument(
        "--max-parallelism", type=int, default=None, help="key groups of the job (default: its job record's)"
    )
    ins.set_defaults(func=_cmd_inspect)

    chaos = sub.add_parser("chaos", help="seeded random fault schedules checked against the invariants")
    from spark_jobs.chaos.report import add_arguments as chaos_arguments

    chaos_arguments(chaos)
    chaos.set_defaults(func=_cmd_chaos)
    return parser


def _wait_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", action="store_true", help="wait for the job's lease instead of failing")
    p.add_argument(
        "--wait-timeout", type=float, default=900.0, help="seconds to wait with --wait (default 900)"
    )


def _cmd_chaos(args: argparse.Namespace) -> int:
    from spark_jobs.chaos.report import run as run_chaos

    return run_chaos(args)


def _one_line(exc: BaseException) -> str:
    """Errors that list several reasons (restore refusals) print as one line, every
    credential-shaped value redacted (a URI given with a secret in it is never echoed)."""
    lines = (re.sub(r"^- ", "", line.strip()) for line in str(exc).splitlines() if line.strip())
    return redact("; ".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    from spark_jobs.sinks.postgres_conn import environment_resolver, register_connection_resolver

    register_connection_resolver("environment", environment_resolver(os.environ))  # PostgresSink conn_id
    try:
        result: int = args.func(args)
        return result
    except EpochalError as exc:  # the tree of state_store.core.errors: one line, its exit code
        print(f"epochal: {_one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except ValueError as exc:
        print(f"epochal: {_one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"epochal: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
