"""What several subcommands share: where the store is, an existing job in it, the job's lease,
the fault a drill asked for, and the job's clock.

Clocks (``state_store.clocks``, docs/clocks.md): ``--clock wall`` (real time; ``run``'s default) or
``--clock simulated --time-step-ms N`` (``--time-step-ms N`` alone is shorthand for it;
``--replay-cut`` is ``--time-step-ms 0``: the next epoch re-reads the cut of the last trigger, how a
crashed epoch is replayed). ``savepoint`` and ``restore`` default to the job's recorded clock, so a
restore of a simulated job stamps its import on the simulated clock. A clock other than the job's
is refused in one line before anything changes.

Store URIs: ``--store`` wins, else ``EPOCHAL_STORE_URI`` (the entry point passes the environment in
``args.env``); a value without a scheme is a local folder (``./store`` -> ``file:///abs/store``);
``file://``, ``s3://`` and ``memory://`` URIs are used as given.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
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
            "time per epoch; --replay-cut replays the same cut)"
        )


def simulated_clock(store: Any, job_id: str, start_ms: int) -> Any:
    """A clock that resumes where the job's newest checkpoint left off (simulated event time):
    the newest trigger time in the job's history, else ``start_ms`` (its logical clock stands still
    while an epoch runs, so the newest trigger is where the job's time is)."""
    from state_store.clocks import ManualClock

    rows = checkpoint_history(store, job_id)
    return ManualClock(max([start_ms, *(r.trigger_ms for r in rows)]))


@dataclass(frozen=True, slots=True)
class ClockChoice:
    """What the command line asked for: a clock kind (None: the command's default) and the
    simulated step per epoch (0 with ``--replay-cut``)."""

    kind: Any  # state_store.clocks.ClockKind | None
    step_ms: int


SIMULATED_REMEDY = (
    "run it with --clock simulated --time-step-ms N (e.g. 10000), or --replay-cut to replay the last "
    "cut (see docs/clocks.md)"
)
WALL_REMEDY = (
    "leave out --clock simulated, --time-step-ms and --replay-cut: this job runs on real time "
    "(see docs/clocks.md)"
)


def clock_choice(args: argparse.Namespace, *, needs_step: bool) -> ClockChoice:
    """``--clock``/``--time-step-ms``/``--replay-cut`` checked together (one line per mistake).
    ``needs_step``: a simulated clock must be told how far each epoch moves it (``run``)."""
    from state_store.clocks import ClockKind

    check_time_step(args)
    kind_name = getattr(args, "clock", None)
    step = getattr(args, "time_step_ms", None)
    replay = bool(getattr(args, "replay_cut", False))
    if replay:
        if kind_name == "wall":
            raise UsageError("--replay-cut replays a cut on the simulated clock: leave out --clock wall")
        if step not in (None, 0):
            raise UsageError(
                f"--replay-cut re-reads the last cut (a step of 0): leave out --time-step-ms {step}"
            )
        return ClockChoice(ClockKind.SIMULATED, 0)
    if kind_name == "wall":
        if step is not None:
            raise UsageError(
                f"--time-step-ms {step} moves a simulated clock: add --clock simulated, or leave it out "
                "to run on real time"
            )
        return ClockChoice(ClockKind.WALL, 0)
    if kind_name == "simulated" or step is not None:
        if step is None and needs_step:
            raise UsageError(
                "--clock simulated needs --time-step-ms N (simulated time per epoch, e.g. 10000), or "
                "--replay-cut to replay the last cut"
            )
        return ClockChoice(ClockKind.SIMULATED, step or 0)
    return ClockChoice(None, 0)


def job_clock(
    store: Any,
    job_id: str,
    choice: ClockChoice,
    *,
    command: str,
    default: Any = None,
    record: bool = False,
) -> tuple[Any, Any]:
    """The clock ``command`` stamps job ``job_id`` with, and its kind: ``choice``'s kind, else
    ``default`` (a ClockKind), else the job's recorded clock, else the wall clock. Another kind
    than the recorded one is a one-line ClockMismatchError (exit 2) naming the remedy. ``record``:
    record the kind now if the job has none; callers rather call :func:`record_job_clock` once the
    command did its work, so a command that fails leaves nothing behind. A simulated clock resumes
    where the job's history left off (:func:`simulated_clock`) and is not advanced here."""
    from spark_jobs.sources.generator import DEFAULT_START_MS
    from state_store.clocks import ClockKind, SystemClock, ensure_clock, read_clock

    kind = choice.kind if choice.kind is not None else default
    if kind is None:
        recorded = read_clock(store, job_id)
        kind = recorded.kind if recorded is not None else ClockKind.WALL
    ensure_clock(
        store,
        job_id,
        kind,
        recorded_by=command,
        remedy=SIMULATED_REMEDY if kind is ClockKind.WALL else WALL_REMEDY,
        record=record,
    )
    if kind is ClockKind.WALL:
        return SystemClock(), kind
    return simulated_clock(store, job_id, DEFAULT_START_MS), kind


def record_job_clock(store: Any, job_id: str, kind: Any, command: str) -> None:
    """Record ``kind`` as the job's clock after ``command`` worked on it (at its first command;
    a no-op once recorded; ClockMismatchError if a racing command recorded the other one)."""
    from state_store.clocks import ClockKind, ensure_clock

    remedy = SIMULATED_REMEDY if kind is ClockKind.WALL else WALL_REMEDY
    ensure_clock(store, job_id, kind, recorded_by=command, remedy=remedy)


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
