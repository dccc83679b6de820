"""The two clocks (the ``Clock`` port of ``state_store.core.ports``): the wall clock and a manual one.

Production code uses both: :class:`SystemClock` where time is real, :class:`ManualClock` where an
epoch's time is given (an Airflow run's data-interval end, ``run_epoch --now-ms``, the CLI's
simulated event time) or moved by hand (tests, the chaos harness, backfill).
"""

from __future__ import annotations

import threading
import time


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
            raise ValueError(f"cannot move a clock backwards by {ms} ms")
        with self._lock:
            self._now += ms
            return self._now
