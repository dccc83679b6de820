"""One writer per job: a lease with a fencing token, kept in the job record (no lock service).

Every command that changes a job (an epoch cycle, restore, savepoint, backfill, retention, pins,
dispose, maintenance) holds the job's lease while it changes it::

    free --acquire--> held(holder, token=t+1, expires) --renew--> held(..., expires')
      ^                  |        |
      +----release-------+        +--expired, or break, or a takeover the holder allows--+
      |                                                                                  |
      +-------------------- held(other holder, token=t+2) <-------------------------------+

* **Create-only / CAS, nothing else.** The lease is a field of ``_job.json``
  (:mod:`state_store.core.jobrecord`); acquiring, renewing, releasing and breaking are CAS
  updates of that one document, so of two actors racing for a free lease exactly one wins.
* **Fencing token.** Every acquisition (even by the same holder again: the next task of the same
  Airflow run, a retry) issues ``fencing_token + 1``; a break bumps it too. Every commit point (the
  checkpoint decision's CAS, ``LATEST``, sink commits, deletions) is checked against the record's
  token (:func:`check_token`), in the same CAS where the commit point is a CAS. A holder that lost
  its lease -- it paused past expiry and was taken over, or its lease was broken -- is a zombie: it
  gets :class:`LeaseLostError` and changes nothing.
* **Expiry and heartbeats.** A holder renews (``renew``) well before ``expires_ms``; a lease past
  expiry may be taken over by anybody (the holder is presumed dead). Time is the caller's wall
  clock, injected: the core never reads it.
* **Waiting.** A second actor gets :class:`LeaseHeldError` (one line: who, since when, the remedy);
  callers that were asked to wait poll :func:`acquire` until it succeeds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from state_store.core.errors import EpochalError
from state_store.core.manifests import JobRecord, Lease

if TYPE_CHECKING:
    from state_store.core.jobrecord import JobRecords

DEFAULT_TTL_MS = 60_000
"""A lease not renewed for this long may be taken over (holders renew every third of it)."""

#: A predicate a new holder may use to take over a live lease (e.g. an earlier run of the same
#: Airflow DAG, which the scheduler guarantees is not running any more).
Takeover = Callable[[Lease], bool]


def _never(lease: Lease) -> bool:
    return False


def _utc(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"


def describe(lease: Lease) -> str:
    """``'`epochal run` (holder cli:host:123:ab12, token 7)'``: who holds a lease, for messages."""
    return f"`{lease.command}` (holder {lease.holder}, token {lease.token})"


class LeaseHeldError(RuntimeError, EpochalError):
    """Another actor holds the job's lease; the message names it, since when, and the remedy."""

    def __init__(self, job_id: str, lease: Lease, now_ms: int) -> None:
        self.job_id = job_id
        self.lease = lease
        left_s = max(0, (lease.expires_ms - now_ms + 999) // 1000)
        super().__init__(
            f"job {job_id} is busy: {describe(lease)} holds its lease since {_utc(lease.acquired_ms)} "
            f"(expires in {left_s} s unless renewed): wait for it to finish, pass --wait to wait, or, "
            f"if that process is dead, run `epochal lease break --job {job_id} --store <store>`"
        )


class LeaseLostError(RuntimeError, EpochalError):
    """The caller's lease is no longer the job's: it is a zombie and must change nothing."""

    def __init__(self, job_id: str, token: int | None, current: Lease | None) -> None:
        self.job_id = job_id
        self.token = token
        self.current = current
        mine = "no lease" if token is None else f"lease token {token}"
        now = "nobody holds it" if current is None else f"{describe(current)} holds it"
        super().__init__(
            f"job {job_id}: refused a change made under {mine}: {now} now; this change was not made "
            "(what this actor committed before it stands: check `epochal checkpoints list` before "
            "retrying)"
        )


def check_token(record: JobRecord, token: int | None) -> None:
    """Raise LeaseLostError unless ``token`` is the record's current lease token.

    ``token=None`` (an actor without a lease) passes only while nobody holds the lease."""
    current = record.lease
    if token is None:
        if current is not None:
            raise LeaseLostError(record.job_id, None, current)
        return
    if current is None or current.token != token:
        raise LeaseLostError(record.job_id, token, current)


def acquire(
    records: JobRecords,
    holder: str,
    command: str,
    now_ms: int,
    *,
    ttl_ms: int = DEFAULT_TTL_MS,
    max_parallelism: int = 128,
    takeover: Takeover = _never,
) -> Lease:
    """Take the job's lease for ``holder`` (creating the job record if the job is new).

    Granted when the lease is free, expired, held by ``holder`` itself (a new token fences its
    earlier try), or ``takeover(current)`` allows it; otherwise LeaseHeldError."""
    if ttl_ms < 1:
        raise ValueError(f"lease ttl_ms={ttl_ms} is invalid: use a positive number of milliseconds")
    records.ensure(max_parallelism, now_ms)
    granted: list[Lease] = []

    def take(current: JobRecord) -> JobRecord:
        held = current.lease
        if held is not None and held.holder != holder and held.expires_ms >= now_ms and not takeover(held):
            raise LeaseHeldError(current.job_id, held, now_ms)
        token = current.fencing_token + 1
        lease = Lease(holder, token, command, now_ms, now_ms, now_ms + ttl_ms)
        granted[:] = [lease]
        return dataclasses.replace(current, fencing_token=token, lease=lease)

    records.update(take)
    return granted[0]


def renew(records: JobRecords, lease: Lease, now_ms: int, *, ttl_ms: int = DEFAULT_TTL_MS) -> Lease:
    """Extend ``lease`` to ``now_ms + ttl_ms`` (a heartbeat); LeaseLostError if it is not ours."""
    renewed = dataclasses.replace(lease, renewed_ms=now_ms, expires_ms=max(lease.expires_ms, now_ms + ttl_ms))
    records.fenced_update(lease.token, lambda current: dataclasses.replace(current, lease=renewed))
    return renewed


def release(records: JobRecords, lease: Lease) -> bool:
    """Give the lease up; False (and nothing written) if it was already lost."""
    try:
        records.fenced_update(lease.token, lambda current: dataclasses.replace(current, lease=None))
    except LeaseLostError:
        return False
    return True


def break_lease(records: JobRecords) -> Lease | None:
    """Free the lease whoever holds it, and bump the token so the old holder is fenced even if
    nobody acquires next. Returns the broken lease (None: it was free)."""
    broken: list[Lease | None] = [None]

    def free(current: JobRecord) -> JobRecord:
        broken[0] = current.lease
        return dataclasses.replace(current, fencing_token=current.fencing_token + 1, lease=None)

    records.update(free)
    return broken[0]


def current_lease(records: JobRecords) -> Lease | None:
    record = records.read()
    return None if record is None else record.lease


__all__ = [
    "DEFAULT_TTL_MS",
    "LeaseHeldError",
    "LeaseLostError",
    "Takeover",
    "acquire",
    "break_lease",
    "check_token",
    "current_lease",
    "describe",
    "release",
    "renew",
]
