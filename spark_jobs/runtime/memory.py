"""The peak memory of a subtask, measured (issue 23 item 3): the resident set's high-water mark of
the process while the subtask ran, reported in its acks as ``peak_rss_bytes``.

How
---
Linux keeps a process's peak resident set (``VmHWM`` in ``/proc/self/status``) and resets it to the
current resident set when ``5`` is written to ``/proc/self/clear_refs``. :meth:`PeakMemory.start`
resets it when the subtask opens -- unless another subtask of the same process is still running
(the in-process executor runs subtasks on threads), since a reset would hide that one's peak so
far -- and :meth:`PeakMemory.peak_bytes` reads it at the ack. Where the reset is impossible (not
Linux, ``/proc`` read-only) the reading is the process's lifetime peak (``getrusage``) and
``peak_rss_scope`` says ``process`` instead of ``subtask``.

Invariant: the reported peak is never below the subtask's own peak (it is the whole process's peak
since a moment at or before the subtask opened). On Spark each Python worker runs one task at a
time, so there it is the subtask's peak plus the worker's baseline; in process, concurrent subtasks
share one figure.
"""

from __future__ import annotations

import resource
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_lock = threading.Lock()
_running = 0
_scope = "process"
"""What the peak of the measurements now running is measured since: ``subtask`` (a reset at or
before each one opened) or ``process`` (the process's lifetime)."""


def _hwm_bytes() -> int | None:
    """``VmHWM`` of this process in bytes, or None without ``/proc``."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _lifetime_peak_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # macOS: bytes, Linux: KiB


def _reset() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


@dataclass
class PeakMemory:
    """One subtask's measurement: ``start()`` when it opens, ``metrics()`` for its acks, ``stop()``
    when it ends, however it ends (:func:`measured` does both)."""

    scope: str
    _open: bool = True

    @classmethod
    def start(cls) -> PeakMemory:
        global _running, _scope
        with _lock:
            if _running == 0:
                _scope = "subtask" if _hwm_bytes() is not None and _reset() else "process"
            _running += 1
            return cls(_scope)

    def peak_bytes(self) -> int:
        """The high-water mark since the measurement began (bytes)."""
        hwm = _hwm_bytes() if self.scope == "subtask" else None
        return hwm if hwm is not None else _lifetime_peak_bytes()

    def metrics(self) -> dict[str, int | str]:
        return {"peak_rss_bytes": self.peak_bytes(), "peak_rss_scope": self.scope}

    def stop(self) -> None:
        global _running
        with _lock:
            if self._open:
                self._open = False
                _running -= 1


_current: ContextVar[PeakMemory | None] = ContextVar("epochal_subtask_memory", default=None)


@contextmanager
def measured() -> Iterator[PeakMemory]:
    """Measure the subtask run inside the block (the executors wrap each subtask in it); its acks
    read the measurement with :func:`current_metrics`."""
    memory = PeakMemory.start()
    token = _current.set(memory)
    try:
        yield memory
    finally:
        _current.reset(token)
        memory.stop()


def current_metrics() -> dict[str, int | str]:
    """The running subtask's peak memory metrics; empty outside :func:`measured` (a subtask driven
    directly by a test)."""
    memory = _current.get()
    return {} if memory is None else memory.metrics()
