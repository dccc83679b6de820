"""``epochal validate``, ``report``, ``retention``, ``lease show|break`` and ``chaos``: looking after a
job's storage."""

from __future__ import annotations

import argparse
import json
import sys

from spark_jobs.commands import render
from spark_jobs.commands.common import job_store, kill_switch, lease
from spark_jobs.commands.errors import AuditFailedError, UsageError
from state_store.clocks import SystemClock
from state_store.core import CheckpointConfig, StoreError, apply_retention
from state_store.core.codec import to_jsonable


def cmd_validate(args: argparse.Namespace) -> int:
    from state_store.core.audit import audit_checkpoints
    from state_store.core.parallel import read_concurrency

    store = job_store(args)
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


def cmd_report(args: argparse.Namespace) -> int:
    from spark_jobs.tools.report import write_report

    store = job_store(args)
    r = write_report(store, args.job, args.out, limit=args.limit, airflow_url=args.airflow_url)
    print(
        json.dumps({"path": str(r.path), "checkpoints": r.checkpoints, "rows": r.rows_shown})
        if args.json
        else f"wrote the checkpoint report of job {args.job} ({r.rows_shown} of {r.checkpoints}) to {r.path}"
    )
    return 0


def cmd_retention(args: argparse.Namespace) -> int:
    from spark_jobs.lifecycle.pins import pin_checkpoints, unpin_checkpoints

    if args.retain < 1:
        raise UsageError(f"--retain {args.retain} is invalid: keep at least 1 completed checkpoint")
    if args.grace_ms < 0:
        raise UsageError(f"--grace-ms {args.grace_ms} is invalid: use 0 or more milliseconds")
    store = job_store(args)
    config = CheckpointConfig(retained_checkpoints=args.retain, orphan_grace_ms=args.grace_ms)
    if args.dry_run:
        plan = apply_retention(
            store, args.job, config, SystemClock(), dry_run=True, pinned=frozenset(args.pin)
        )
    else:
        kill = kill_switch(args)
        with lease(store, args.job, "epochal retention", args) as held:
            from state_store.core.coordinator import CheckpointCoordinator

            fence = CheckpointCoordinator(store, args.job, clock=SystemClock(), lease_token=held.token)
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


def cmd_lease_show(args: argparse.Namespace) -> int:
    from state_store.core.jobrecord import JobRecords
    from state_store.core.lease import current_lease, describe

    store = job_store(args)
    held = current_lease(JobRecords(store, args.job))
    now = SystemClock().now_ms()
    if args.json:
        print(json.dumps(None if held is None else {**to_jsonable(held), "expired": held.expires_ms < now}))
    elif held is None:
        print(f"job {args.job}: the lease is free")
    else:
        state = "expired" if held.expires_ms < now else f"expires in {(held.expires_ms - now) // 1000} s"
        print(
            f"job {args.job}: held by {describe(held)} since {render.fmt_ms(held.acquired_ms)} UTC ({state})"
        )
    return 0


def cmd_lease_break(args: argparse.Namespace) -> int:
    from state_store.core.jobrecord import JobRecords
    from state_store.core.lease import break_lease, describe

    store = job_store(args)
    broken = break_lease(JobRecords(store, args.job))
    if args.json:
        print(json.dumps(None if broken is None else to_jsonable(broken)))
    elif broken is None:
        print(f"job {args.job}: the lease was free; its fencing token moved on anyway")
    else:
        print(f"job {args.job}: broke the lease of {describe(broken)}; that holder can change nothing now")
    return 0


def cmd_chaos(args: argparse.Namespace) -> int:
    from spark_jobs.chaos.report import run as run_chaos

    return run_chaos(args)
