"""What several subcommands share: where the store is, an existing job in it, the job's lease,
the fault a drill asked for, and the simulated clock.

Store URIs: ``--store`` wins, else ``EPOCHAL_STORE_URI`` (the entry point passes the environment in
``args.env``); a value without a scheme is a local folder (``./store`` -> ``file:///abs/store``);
``file://``, ``s3://`` and ``memory://`` URIs are used as given.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from spark_jobs.commands.errors import UsageError
from state_store.core import JobRecords, LatestPointer, checkpoint_history, documents
from state_store.core.codec import ManifestError
from state_store.core.layout import InvalidNameError, JobLayout, validate_name
from state_store.faults import kill_switch_from_env
from state_store.lease_keeper import HeldLease, holder_id
from state_store.storage import open_store

STORE_ENV = "EPOCHAL_STORE_URI"
MAX_TIME_STEP_MS = 366 * 24 * 3600 * 1000
#: keys listed at most when an unknown job id is looked for its neighbours (an error path only)
_KNOWN_JOBS_SCAN = 20_000


def location(value: str) -> str:
    """A store or snapshot location as a URI: a plain path becomes an absolute ``file://`` URI."""
    if value and not urlsplit(value).scheme:
        return Path(value).expanduser().resolve().as_uri()
    return value


def resolve_store(given: str | None, env: Mapping[str, str]) -> str:
    """``--store``, else ``$EPOCHAL_STORE_URI``, as a URI; a one-line UsageError if neither is set."""
    value = given if given else env.get(STORE_ENV, "").strip()
    if not value:
        raise UsageError(
            f"no store given: add --store URI (a folder such as ./store, file:///abs/path or "
            f"s3://bucket/prefix) or set {STORE_ENV}"
        )
    return location(value)


def job_store(args: argparse.Namespace) -> Any:
    """The store of an existing job, opened without writing anything (a mistyped path or job id
    is an error, never a new empty store)."""
    JobLayout(args.job)  # an unsafe job id is refused before the store is looked at
    store = open_store(args.store, must_exist=True)
    require_job(store, args.job)
    return store


def require_job(store: Any, job_id: str) -> None:
    """A job id that never ran in this store is an error naming the jobs that did."""
    layout = JobLayout(job_id)  # validates the name
    if JobRecords(store, job_id).read() is not None or next(iter(store.list(layout.root)), None) is not None:
        return
    known = known_jobs(store)
    close = difflib.get_close_matches(job_id, known, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    listing = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "") if known else "none"
    raise UsageError(
        f"job {job_id!r} has no state in {store.uri}: {hint}check --job and --store (jobs there: {listing})"
    )


def known_jobs(store: Any) -> list[str]:
    """Job ids with state in ``store`` (the top-level folders; a bounded scan: error path only)."""
    found: set[str] = set()
    for n, info in enumerate(store.list("")):
        if n >= _KNOWN_JOBS_SCAN:
            break
        first, sep, _ = info.key.partition("/")
        if sep and not first.startswith("."):
            try:
                found.add(validate_name("job id", first))
            except InvalidNameError:
                continue
    return sorted(found)


def latest_id(store: Any, job_id: str) -> int | None:
    """The checkpoint the job's next epoch continues from (what ``LATEST`` means to the CLI): the job
    record's chain head, else the ``LATEST`` pointer, else the newest completed checkpoint."""
    layout = JobLayout(job_id)
    try:
        record = JobRecords(store, job_id).read()
    except ManifestError:
        record = None
    if record is not None and record.chained:
        return record.head.checkpoint_id if record.head is not None else None
    try:
        pointer = documents.read_optional(store, layout.latest, LatestPointer)
    except ManifestError:
        pointer = None
    if pointer is not None:
        return pointer.checkpoint_id
    completed = [r.checkpoint_id for r in checkpoint_history(store, job_id) if r.status == "completed"]
    return completed[-1] if completed else None


def check_time_step(args: argparse.Namespace) -> None:
    step = getattr(args, "time_step_ms", None)
    if step is not None and not 0 <= step <= MAX_TIME_STEP_MS:
        raise UsageError(
            f"--time-step-ms {step} is invalid: use 0..{MAX_TIME_STEP_MS} (at most a year of simulated "
            "time per epoch; 0 replays the same cut)"
        )


def simulated_clock(store: Any, job_id: str, start_ms: int) -> Any:
    """A clock that resumes where the job's newest checkpoint left off (simulated event time)."""
    from state_store.clocks import ManualClock

    rows = checkpoint_history(store, job_id)
    return ManualClock(max([start_ms, *(r.trigger_ms for r in rows)]))


def lease(
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


def kill_switch(args: argparse.Namespace) -> Any:
    """The fault a drill asked for: ``--fault POINT[@ID]`` (the process exits with code 137 there,
    as a SIGKILL would, unless ``EPOCHAL_FAULT_MODE`` says otherwise), else ``EPOCHAL_FAULT``."""
    env: Mapping[str, str] = getattr(args, "env", {})
    fault = getattr(args, "fault", None)
    if fault:
        env = {**env, "EPOCHAL_FAULT": fault, "EPOCHAL_FAULT_MODE": env.get("EPOCHAL_FAULT_MODE", "exit")}
    return kill_switch_from_env(env)


def snapshot_roots(args: argparse.Namespace) -> Any:
    """The allowed snapshot locations (``EPOCHAL_SNAPSHOT_ROOTS``; empty: any)."""
    from spark_jobs.lifecycle.restore import roots_from_text

    return roots_from_text(getattr(args, "env", {}).get("EPOCHAL_SNAPSHOT_ROOTS", ""))


def max_parallelism(store: Any, args: argparse.Namespace) -> int:
    """The job's key groups from its job record; an explicit ``--max-parallelism`` must match it
    (another value would read a fraction of the state, or none)."""
    record = JobRecords(store, args.job).read()
    recorded = record.max_parallelism if record is not None else None
    given = getattr(args, "max_parallelism", None)
    if given is not None and recorded is not None and given != recorded:
        raise UsageError(
            f"--max-parallelism {given} does not match job {args.job}'s {recorded} (its job record): "
            "leave the option out"
        )
    if given is not None and given < 1:
        raise UsageError(f"--max-parallelism {given} is invalid: leave the option out")
    value = given if given is not None else recorded
    return value if value is not None else 128


def snapshot_of(args: argparse.Namespace, which: str) -> Any:
    """A checkpoint id of ``args.job`` or a savepoint location, read as a snapshot."""
    from spark_jobs.lifecycle.snapshots import from_checkpoint, read_savepoint

    if which.isdigit():
        store = job_store(args)
        return from_checkpoint(store, args.job, int(which), max_parallelism(store, args))
    return read_savepoint(location(which))
