"""``epochal savepoint``, ``savepoints list|dispose``, ``restore``, ``backfill`` and ``inspect``:
taking, listing and using snapshots of a job's state."""

from __future__ import annotations

import argparse
import json

from spark_jobs.commands import render
from spark_jobs.commands.common import (
    check_time_step,
    clock_choice,
    job_clock,
    job_store,
    kill_switch,
    lease,
    location,
    record_job_clock,
    snapshot_of,
    snapshot_roots,
)
from spark_jobs.commands.errors import UsageError
from state_store.clocks import SystemClock
from state_store.storage import open_store


def cmd_savepoint(args: argparse.Namespace) -> int:
    from spark_jobs.jobs.loading import load_job
    from spark_jobs.lifecycle.savepoint import take_savepoint
    from spark_jobs.lifecycle.snapshots import savepoint_location

    choice = clock_choice(args, needs_step=False)
    job = load_job(args.job_ref)
    savepoint_location(args.store, job.job_id, args.name)  # a bad name is refused before the lease
    kill = kill_switch(args)
    store = open_store(args.store)
    job_clock(store, job.job_id, choice, command="epochal savepoint")  # refused before the lease
    with lease(store, job.job_id, "epochal savepoint", args, job.max_parallelism) as held:
        clock, kind = job_clock(store, job.job_id, choice, command="epochal savepoint")
        if choice.step_ms:
            clock.advance(choice.step_ms)
        info = take_savepoint(
            job,
            args.store,
            clock,
            args.name,
            fmt=args.format,
            executor=args.executor,
            stop=args.stop,
            lease_token=held.token,
            kill=kill,
        )
        record_job_clock(store, job.job_id, kind, "epochal savepoint")
    print(json.dumps(info) if args.json else f"savepoint {info['name']} written to {info['location']}")
    return 0


def cmd_savepoints_list(args: argparse.Namespace) -> int:
    from spark_jobs.lifecycle.snapshots import list_savepoints

    store = job_store(args)
    rows = list_savepoints(store, args.job)
    if args.json:
        print(json.dumps(rows))
    elif not rows:
        print(f"job {args.job} has no savepoints (take one with `epochal savepoint`)")
    else:
        base = store.uri.rstrip("/")
        print(
            render.table(
                ["name", "written (UTC)", "location"],
                (
                    [r["name"], render.fmt_ms(r["modified_ms"]), f"{base}/{r['key'].rsplit('/', 1)[0]}"]
                    for r in rows
                ),
            )
        )
    return 0


def cmd_savepoints_dispose(args: argparse.Namespace) -> int:
    from spark_jobs.lifecycle.snapshots import dispose_savepoint, savepoint_keys

    store = job_store(args)
    savepoint_keys(store, args.job, args.name)  # refused before the lease: a typo changes nothing
    with lease(store, args.job, "epochal savepoints dispose", args) as held:
        from state_store.core.coordinator import CheckpointCoordinator

        fence = CheckpointCoordinator(store, args.job, clock=SystemClock(), lease_token=held.token)
        deleted = dispose_savepoint(store, args.job, args.name, fence.fence)
    print(
        json.dumps({"deleted_files": deleted})
        if args.json
        else f"savepoint {args.name} disposed ({deleted} files)"
    )
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from spark_jobs.tools.inspect import operator_state

    if (args.checkpoint is None) == (args.savepoint is None):
        raise UsageError("inspect needs exactly one of --checkpoint N or --savepoint PATH")
    if not args.out.endswith((".parquet", ".json")):
        raise UsageError(f"--out {args.out!r} must end in .parquet or .json")
    snapshot = snapshot_of(args, str(args.checkpoint) if args.checkpoint is not None else args.savepoint)
    if snapshot.job_id != args.job:
        raise UsageError(
            f"the snapshot belongs to job {snapshot.job_id!r}, not {args.job!r}: use --job {snapshot.job_id}"
        )
    try:
        key = json.loads(args.key) if args.key is not None else None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"--key {args.key!r} is not JSON ({exc.msg}): quote a string key, e.g. --key '\"u1\"'"
        ) from None
    frame = operator_state(snapshot, args.operator, key=key)
    if args.out.endswith(".parquet"):
        frame.to_parquet(args.out, index=False)
    else:
        frame.to_json(args.out, orient="records", lines=False)
    print(
        json.dumps({"rows": len(frame), "out": args.out})
        if args.json
        else f"wrote {len(frame)} rows to {args.out}"
    )
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from spark_jobs.jobs.loading import load_job
    from spark_jobs.lifecycle.restore import RestoreRequest, restore
    from spark_jobs.lifecycle.restore_render import render_plan

    choice = clock_choice(args, needs_step=False)
    job = load_job(args.job_ref)
    uid_map = {}
    for item in args.uid_map:
        old, sep, new = item.partition("=")
        if not sep or not old or not new:
            raise UsageError(f"--uid-map {item!r} is invalid: use OLD=NEW")
        uid_map[old] = new
    source = args.source if args.source == "latest" or args.source.isdigit() else location(args.source)
    request = RestoreRequest(
        source=source,
        allow_non_restored_state=args.allow_non_restored_state,
        uid_map=uid_map,
        claim_mode=args.claim_mode,
        allow_foreign=args.allow_foreign,
        dry_run=args.dry_run,
        force=args.force,
        roots=snapshot_roots(args),
    )
    store = open_store(args.store)
    # the job's clock (a simulated job's import is stamped on its simulated clock, moved by N)
    clock, kind = job_clock(store, job.job_id, choice, command="epochal restore")
    if choice.step_ms:
        clock.advance(choice.step_ms)
    hold = None if args.dry_run else lease(store, job.job_id, "epochal restore", args, job.max_parallelism)
    kill = kill_switch(args)  # validated before anything changes
    report = restore(job, args.store, clock, request, parallelism=args.parallelism, hold=hold, kill=kill)
    if not args.dry_run and report.plan.ok:
        record_job_clock(store, job.job_id, kind, "epochal restore")
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


def cmd_backfill(args: argparse.Namespace) -> int:
    from spark_jobs.jobs.loading import load_job
    from spark_jobs.lifecycle.backfill import backfill

    check_time_step(args)
    job = load_job(args.job_ref)
    kill = kill_switch(args)  # validated before anything changes
    source = location(args.from_savepoint)
    report = backfill(
        job,
        args.store,
        source,
        args.new_job,
        until_ms=args.until_ms,
        epochs=args.epochs,
        step_ms=args.time_step_ms,
        replace=args.replace,
        wait_s=float(args.wait_timeout) if args.wait else 0.0,
        kill=kill,
        roots=snapshot_roots(args),
    )
    print(
        json.dumps(report)
        if args.json
        else f"backfill job {args.new_job}: restored from {source}, {report['epochs']} epochs, "
        f"output in sink(s) {', '.join(report['sinks'])} of job {args.new_job}"
    )
    return 0
