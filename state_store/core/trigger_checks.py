"""Trigger pre-checks (Flink's ``CheckpointRequestDecider``): pure decisions over plain facts.

The coordinator gathers the facts from storage and the clock; this module only decides, in the
order of seed 002's ``startTriggeringCheckpoint`` pre-checks, and raises
:class:`CheckpointException` (or :class:`JobFailedError`) with the reason of the first refusal.
A *forced* trigger (savepoints, manual checkpoints) skips d and f; nothing skips a, b, c and e.
Unlike Flink, c applies to forced triggers too: an epoch restores from the chain head, so two
undecided checkpoints continue the same base and at most one of them can ever complete (the other
aborts BASE_SUPERSEDED); starting the second is work that cannot succeed.

a. the coordinator is not shut down;
b. the job has not failed (at most ``tolerable_failures`` consecutive failed checkpoints);
c. fewer than ``max_concurrent_checkpoints`` undecided checkpoints;
d. at least ``min_pause_ms`` since the last completion;
e. every task that must acknowledge can run;
f. there is new input.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from state_store.core.failures import CheckpointException, CheckpointFailureReason, JobFailedError


@dataclass(frozen=True, slots=True)
class TriggerFacts:
    """What the pre-checks look at (gathered by the coordinator)."""

    job_id: str
    now_ms: int
    forced: bool
    shutdown: bool = False
    consecutive_failures: int = 0
    tolerable_failures: int = 3
    undecided: tuple[int, ...] = ()
    max_concurrent: int = 1
    last_completion: tuple[int, int] | None = None  # (checkpoint id, completed_ms)
    min_pause_ms: int = 0
    tasks_ready: bool = True
    has_expected: bool = True
    has_new_input: bool = True


MAX_TIME_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: a trigger time beyond it could never be shown as a date."""


class InvalidClockError(ValueError):
    """The clock reads a time outside 1970..9999: nothing is triggered."""


def human_duration(ms: int | float) -> str:
    """A non-negative duration for people: ``850 ms``, ``12.3 s``, ``4 min 05 s``, ``3 h 02 min``,
    ``2 d 04 h``. A negative value is a bug in the caller (durations are never negative):
    ValueError."""
    if ms < 0:
        raise ValueError(f"a duration cannot be negative ({ms}): compare the two times first")
    if ms < 1000:
        return f"{int(ms)} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    seconds = int(ms // 1000)
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours:02d} h"


def human_time(ms: int) -> str:
    """Epoch milliseconds as ``YYYY-MM-DD HH:MM:SS UTC`` (raw ms when no calendar holds it)."""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms after 1970-01-01"


def check_clock(job_id: str, now_ms: int) -> None:
    if not isinstance(now_ms, int) or isinstance(now_ms, bool) or not 0 <= now_ms <= MAX_TIME_MS:
        raise InvalidClockError(
            f"job {job_id}: the clock reads {now_ms!r}, outside 1970-01-01..9999-12-31: nothing was "
            "triggered; check --time-step-ms (or the clock the job runs with, see docs/clocks.md)"
        )


def min_pause_detail(now_ms: int, checkpoint_id: int, completed_ms: int, min_pause_ms: int) -> str:
    """Why pre-check d refused, for people: never a negative time. A clock behind the last
    completion means the wall clock stepped back (NTP), an Airflow run with an older logical date
    was cleared or triggered, or the job was run with another clock (``state_store.clocks``); the
    message names all three, with the remedy of each."""
    elapsed = now_ms - completed_ms
    if elapsed >= 0:
        return (
            f"{human_duration(elapsed)} since checkpoint {checkpoint_id} completed, less than the job's "
            f"minimum pause of {human_duration(min_pause_ms)} (min_pause_ms): run the next epoch later"
        )
    return (
        f"the job's clock reads {human_time(now_ms)}, before checkpoint {checkpoint_id} completed "
        f"({human_time(completed_ms)}): either the clock went back (an NTP step: run the next epoch "
        f"after {human_time(completed_ms)}), or an Airflow run with an older logical date was cleared "
        "or triggered (epochs only move forward: trigger a new run; epochal_backfill for the past), "
        "or the job was run with another clock (run it with the clock it ran with, see docs/clocks.md)"
    )


def check_trigger(facts: TriggerFacts) -> None:
    """Raise for the first failing pre-check (see module docstring); return if all pass."""
    check_clock(facts.job_id, facts.now_ms)
    if facts.shutdown:
        raise CheckpointException(CheckpointFailureReason.COORDINATOR_SHUTDOWN)
    if facts.consecutive_failures > facts.tolerable_failures:
        raise JobFailedError(
            f"job {facts.job_id} failed: {facts.consecutive_failures} consecutive checkpoint failures "
            f"exceed tolerable_failures={facts.tolerable_failures}; fix the cause, then restore from "
            "the latest checkpoint or a savepoint"
        )
    if len(facts.undecided) >= facts.max_concurrent:
        raise CheckpointException(
            CheckpointFailureReason.TOO_MANY_CONCURRENT_CHECKPOINTS,
            f"checkpoint(s) {', '.join(map(str, facts.undecided))} of job {facts.job_id} still undecided "
            f"(max_concurrent_checkpoints={facts.max_concurrent}): let the run that owns them finish, "
            "or start the next run, which aborts the checkpoints of dead runs",
        )
    if not facts.forced and facts.last_completion is not None:
        checkpoint_id, completed_ms = facts.last_completion
        if facts.now_ms - completed_ms < facts.min_pause_ms:
            detail = min_pause_detail(facts.now_ms, checkpoint_id, completed_ms, facts.min_pause_ms)
            raise CheckpointException(CheckpointFailureReason.MINIMUM_TIME_BETWEEN_CHECKPOINTS, detail)
    if not facts.tasks_ready or not facts.has_expected:
        raise CheckpointException(CheckpointFailureReason.NOT_ALL_REQUIRED_TASKS_RUNNING)
    if not facts.has_new_input and not facts.forced:
        raise CheckpointException(CheckpointFailureReason.NO_NEW_INPUT)


__all__ = [
    "MAX_TIME_MS",
    "InvalidClockError",
    "TriggerFacts",
    "check_clock",
    "check_trigger",
    "human_duration",
    "human_time",
    "min_pause_detail",
]
