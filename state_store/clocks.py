"""The two clocks (the ``Clock`` port of ``state_store.core.ports``) and the one clock of a job.

Production code uses both clocks: :class:`SystemClock` where time is real, :class:`ManualClock`
where an epoch's time is given (an Airflow run's data-interval end, ``run_epoch --now-ms``, the
CLI's simulated event time) or moved by hand (tests, the chaos harness, backfill).

One clock per job: a job's checkpoints are stamped by one kind of clock, recorded with the job
(``<job>/_clock.json``, create-only) by the first command that runs it:

* ``wall`` -- real time: ``epochal run`` without ``--clock`` and every Airflow DAG run (whose
  logical dates follow real time);
* ``simulated`` -- event time that moves ``--time-step-ms`` per epoch from where the job's newest
  checkpoint left off (tests, demos and drills that must be reproducible).

Invariant: once recorded, the kind never changes; a command that would stamp the job with the
other kind is refused (:class:`ClockMismatchError`) before it changes anything, because mixing them
makes the job's clock jump years forward or run backwards (``min_pause`` then reads a negative
time since the last checkpoint, and sources read a per-epoch cap of years of input). Jobs whose
state predates the record get it at their next command (whatever clock that command uses).
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass

from state_store.core.codec import ManifestError, decode_document, encode_document
from state_store.core.errors import BadInputError
from state_store.core.layout import JobLayout
from state_store.core.ports import ObjectAlreadyExists, ObjectNotFound, ObjectStore

CLOCK_DOCUMENT = "_clock.json"
_KIND = "clock"


class SystemClock:
    """Wall-clock milliseconds since the Unix epoch (``time.time_ns``)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to, never backwards; thread-safe.

    Invariant: ``now_ms()`` never decreases.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError(f"a clock cannot move backwards ({ms} ms asked): give a step of 0 or more")
        with self._lock:
            self._now += ms
            return self._now


class ClockKind(enum.Enum):
    """The kind of clock that stamps a job's checkpoints (module docstring)."""

    WALL = "wall"
    SIMULATED = "simulated"


@dataclass(frozen=True, slots=True)
class ClockRecord:
    """``<job>/_clock.json``: the job's clock kind, who recorded it and when (wall-clock ms)."""

    job_id: str
    kind: ClockKind
    recorded_by: str = ""
    recorded_ms: int = 0


class ClockMismatchError(BadInputError):
    """A command asked for the other clock than the job's (exit code 2, nothing changed)."""


def clock_key(job_id: str) -> str:
    return JobLayout(job_id).root + CLOCK_DOCUMENT


def read_clock(store: ObjectStore, job_id: str) -> ClockRecord | None:
    """The job's recorded clock (None: not recorded yet); ManifestError if the file is damaged."""
    key = clock_key(job_id)
    try:
        data = store.get(key).data
    except ObjectNotFound:
        return None
    return decode_document(data, _KIND, ClockRecord, key=key)


def record_clock(store: ObjectStore, job_id: str, kind: ClockKind, recorded_by: str) -> ClockRecord:
    """Record ``kind`` as the job's clock unless one is recorded; return the record that stands
    (create-only: of two racing first commands, one record wins and the other is checked on it)."""
    record = ClockRecord(job_id, kind, recorded_by, SystemClock().now_ms())
    try:
        store.put_if_absent(clock_key(job_id), encode_document(_KIND, record))
    except ObjectAlreadyExists:
        standing = read_clock(store, job_id)
        if standing is None:  # pragma: no cover - deleted between the two calls
            raise ManifestError(f"{clock_key(job_id)} vanished while it was being read: try again") from None
        return standing
    return record


def mismatch_message(job_id: str, recorded: ClockRecord, asked: ClockKind, remedy: str) -> str:
    """One line: which clock the job has, which one was asked for, and what to do."""
    return (
        f"job {job_id} runs on the {recorded.kind.value} clock (recorded at its first run"
        f"{' by ' + recorded.recorded_by if recorded.recorded_by else ''}), not the {asked.value} "
        f"clock: {remedy}"
    )


def ensure_clock(
    store: ObjectStore, job_id: str, asked: ClockKind, *, recorded_by: str, remedy: str, record: bool = True
) -> ClockRecord | None:
    """Check ``asked`` against the job's clock, recording it when the job has none yet (unless
    ``record`` is False: a dry run); ClockMismatchError with ``remedy`` when they differ."""
    current = read_clock(store, job_id)
    if current is None:
        if not record:
            return None
        current = record_clock(store, job_id, asked, recorded_by)  # the record that stands
    if current.kind is not asked:
        raise ClockMismatchError(mismatch_message(job_id, current, asked, remedy))
    return current


__all__ = [
    "CLOCK_DOCUMENT",
    "ClockKind",
    "ClockMismatchError",
    "ClockRecord",
    "ManualClock",
    "SystemClock",
    "clock_key",
    "ensure_clock",
    "mismatch_message",
    "read_clock",
    "record_clock",
]
