"""Hold a job's lease for the length of a command: acquire (or wait), heartbeat, release.

The pure rules live in ``state_store.core.lease``; this module adds what a running process needs:
the wall clock, a daemon thread that renews the lease every third of its time to live, and waiting
for a busy lease when asked to. Usage::

    with HeldLease(store, "clickstream", holder_id("cli"), "epochal run", wait_s=0) as lease:
        ... CheckpointCoordinator(..., lease_token=lease.token) ...

Invariants:

* The heartbeat never steals: it renews only the lease with this holder's token; once it sees the
  lease lost (taken over after a pause past expiry, or broken) it stops, and every commit point of
  the holder is refused from then on by the token check -- the keeper itself refuses nothing.
* ``__exit__`` releases the lease only if it is still ours (a lost lease is left to its new holder).
* Time to live and waiting use the wall clock, never a job's simulated clock.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from types import TracebackType

from state_store.clocks import SystemClock
from state_store.core.jobrecord import JobRecords
from state_store.core.lease import (
    DEFAULT_TTL_MS,
    LeaseHeldError,
    LeaseLostError,
    Takeover,
    acquire,
    release,
    renew,
)
from state_store.core.manifests import Lease
from state_store.core.ports import Clock, ObjectStore, StoreError


def _pid_namespace() -> str:
    """This process's PID namespace (containers sharing a host name have different ones)."""
    try:
        return format(os.stat("/proc/self/ns/pid").st_ino, "x")
    except OSError:
        return "0"


def holder_id(kind: str, detail: str = "") -> str:
    """A holder name that says who and where: ``cli:<host>:<pid>:<random>:<pid namespace>`` (or
    ``kind:detail``)."""
    if detail:
        return f"{kind}:{detail}"
    return f"{kind}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}:{_pid_namespace()}"


def _never(lease: Lease) -> bool:
    return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def takeover_rule(holder: str) -> Takeover:
    """Whom ``holder`` may take a live lease from, without waiting for it to expire:

    * a ``cli:<host>:<pid>:<random>:<pid namespace>`` holder on this very host and in this PID
      namespace whose process is gone (it crashed) -- a holder seen from another namespace (another
      container with the same host name) is never presumed dead;
    * another run of the same Airflow DAG (``airflow:<dag_id>:<run_id>``): the scheduler runs one
      at a time (``max_active_runs=1``), so the other run is over; a zombie task of it is fenced by
      the new token.
    """
    kind, _, rest = holder.partition(":")

    def may_take(held: Lease) -> bool:
        held_kind, _, held_rest = held.holder.partition(":")
        if held_kind == "cli":
            parts = held_rest.split(":")
            return (
                len(parts) >= 4
                and parts[0] == socket.gethostname()
                and parts[3] == _pid_namespace()
                and parts[1].isdigit()
                and not _pid_alive(int(parts[1]))
            )
        if held_kind == "airflow" and kind == "airflow":
            return held_rest.split(":", 1)[0] == rest.split(":", 1)[0] and held.holder != holder
        return False

    return may_take


class HeldLease:
    """A context manager holding one job's lease (see module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        job_id: str,
        holder: str,
        command: str,
        *,
        max_parallelism: int = 128,
        ttl_ms: int = DEFAULT_TTL_MS,
        wait_s: float = 0.0,
        poll_s: float = 1.0,
        takeover: Takeover | None = None,
        clock: Clock | None = None,
        heartbeat: bool = True,
    ) -> None:
        self.records = JobRecords(store, job_id)
        self.holder = holder
        self.command = command
        self.max_parallelism = max_parallelism
        self.ttl_ms = ttl_ms
        self.wait_s = wait_s
        self.poll_s = poll_s
        self.takeover = takeover if takeover is not None else takeover_rule(holder)
        self.clock: Clock = clock or SystemClock()
        self.heartbeat = heartbeat
        self.lease: Lease | None = None
        self.lost: LeaseLostError | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def token(self) -> int:
        if self.lease is None:
            raise RuntimeError(f"the lease of job {self.records.job_id} is not held")
        return self.lease.token

    # -- acquire / release -----------------------------------------------------------------------
    def acquire(self) -> Lease:
        """Take the lease, waiting up to ``wait_s`` for a busy one (LeaseHeldError after that)."""
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                self.lease = acquire(
                    self.records,
                    self.holder,
                    self.command,
                    self.clock.now_ms(),
                    ttl_ms=self.ttl_ms,
                    max_parallelism=self.max_parallelism,
                    takeover=self.takeover,
                )
                break
            except LeaseHeldError:
                if time.monotonic() + self.poll_s > deadline:
                    raise
                time.sleep(self.poll_s)
        if self.heartbeat:
            self._thread = threading.Thread(
                target=self._beat, name=f"lease-{self.records.job_id}", daemon=True
            )
            self._thread.start()
        return self.lease

    def detach(self) -> None:
        """Stop renewing without releasing: the lease lasts until its expiry, for the next step of
        the same holder (the next task of an Airflow DAG run re-acquires it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def release(self) -> bool:
        self.detach()
        with self._lock:
            if self.lease is None or self.lost is not None:
                return False
            try:
                return release(self.records, self.lease)
            except StoreError:
                return False  # it expires on its own

    def __enter__(self) -> HeldLease:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    # -- heartbeat -------------------------------------------------------------------------------
    def _beat(self) -> None:
        interval = max(self.ttl_ms / 3000.0, 0.05)
        while not self._stop.wait(interval):
            with self._lock:
                if self.lease is None:
                    return
                try:
                    self.lease = renew(self.records, self.lease, self.clock.now_ms(), ttl_ms=self.ttl_ms)
                except LeaseLostError as lost:
                    self.lost = lost
                    return
                except Exception:
                    continue  # the next beat tries again before expiry


__all__ = ["HeldLease", "holder_id", "takeover_rule"]
