"""Keyed timers: event time and processing time (Flink's ``InternalTimerServiceImpl``).

A timer is ``(timestamp, key, namespace)`` in one of two domains. Registering the same triple twice
keeps one timer; deleting an unknown timer is a no-op.

Firing, for :meth:`TimerService.advance_watermark` (event time) and
:meth:`TimerService.advance_processing_time` (processing time):

1. Set the domain's current time to the argument.
2. While the earliest timer has ``timestamp <= current time``: remove it, then call the target
   (``on_event_time`` / ``on_processing_time``). Order: by timestamp, ties by key then namespace.
3. A timer registered by the target while firing is fired in the same call if it is due.

Off-by-one traps: a timer fires when the watermark *reaches* its timestamp (``<=``), matching the
watermark's meaning "no more records with event time <= w". A timer registered at or below the
current watermark does *not* fire at once: it fires on the next ``advance_watermark``.

Keys and namespaces must be hashable and mutually comparable within a service (ints, strings or
tuples of them), because ties are broken by comparing them; that makes the firing order a function
of the timers alone, identical after a restore.

Snapshot and restore are per key group (``key_group_of(key)`` is injected; it must be the job's
``stable_hash(key) % max_parallelism``)::

    snapshot() -> {key_group: {"event_time": [[ts, key, ns], ...], "processing_time": [...]}}

Lists are sorted in firing order, so equal timer sets give equal snapshots. ``restore`` accepts any
subset of key groups (a rescaled subtask restores only the groups it now owns) and refuses a timer
whose key does not belong to the group it is listed under.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from state_store.core.stream.events import MIN_TIMESTAMP

K = TypeVar("K", bound=Hashable)
N = TypeVar("N", bound=Hashable)

EVENT_TIME_KEY = "event_time"
PROCESSING_TIME_KEY = "processing_time"


class TimeDomain(enum.Enum):
    """Which clock a timer follows."""

    EVENT_TIME = "event_time"
    PROCESSING_TIME = "processing_time"


@dataclass(frozen=True, slots=True)
class InternalTimer(Generic[K, N]):
    """A timer that fired (or is registered): the target sets its current key to ``key``."""

    timestamp: int
    key: K
    namespace: N


class Triggerable(Protocol[K, N]):
    """What timers call back into (a keyed process function, a window operator)."""

    def on_event_time(self, timer: InternalTimer[K, N]) -> None: ...

    def on_processing_time(self, timer: InternalTimer[K, N]) -> None: ...


class TimerRestoreError(ValueError):
    """A timer snapshot does not fit this service (wrong key group, malformed entry)."""


class _TimerQueue(Generic[K, N]):
    """A deduplicated priority queue of ``(timestamp, key, namespace)`` with lazy deletion.

    Invariant: ``_live`` holds exactly the registered timers; the heap holds each of them at least
    once, plus stale entries that are skipped when they surface.
    """

    __slots__ = ("_heap", "_live")

    def __init__(self) -> None:
        self._heap: list[tuple[int, K, N]] = []
        self._live: set[tuple[int, K, N]] = set()

    def add(self, entry: tuple[int, K, N]) -> bool:
        if entry in self._live:
            return False
        self._live.add(entry)
        heapq.heappush(self._heap, entry)
        return True

    def remove(self, entry: tuple[int, K, N]) -> bool:
        if entry not in self._live:
            return False
        self._live.discard(entry)
        if len(self._heap) > 2 * len(self._live) + 64:
            # too many stale entries: rebuild from the live set
            self._heap = list(self._live)
            heapq.heapify(self._heap)
        return True

    def pop_due(self, time: int) -> tuple[int, K, N] | None:
        """Remove and return the earliest live timer with ``timestamp <= time``, else None."""
        heap = self._heap
        live = self._live
        while heap:
            head = heap[0]
            if head not in live:
                heapq.heappop(heap)  # deleted (or a duplicate of one already fired)
                continue
            if head[0] > time:
                return None
            heapq.heappop(heap)
            live.discard(head)
            return head
        return None

    def peek_due(self, time: int, limit: int) -> list[tuple[int, K, N]]:
        """Up to ``limit`` live timers with ``timestamp <= time``, in firing order, left in the queue:
        a walk of the heap's smallest entries (a frontier of heap positions), O(limit log limit)
        plus the stale entries on the way, not a scan of every timer."""
        heap = self._heap
        live = self._live
        out: list[tuple[int, K, N]] = []
        frontier = [(heap[0], 0)] if heap else []
        while frontier and len(out) < limit:
            entry, at = heapq.heappop(frontier)
            if entry[0] > time:
                break  # every entry left below the frontier is later still
            if entry in live and (not out or out[-1] != entry):
                out.append(entry)
            for child in (2 * at + 1, 2 * at + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child], child))
        return out

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Iterator[tuple[int, K, N]]:
        return iter(sorted(self._live))


class TimerService(Generic[K, N]):
    """Event-time and processing-time timers of one operator (module docstring).

    ``key_group_of`` maps a key to its key group (used by snapshot/restore only).
    """

    __slots__ = ("_event", "_key_group_of", "_processing", "_processing_time", "_target", "_watermark")

    def __init__(self, target: Triggerable[K, N], key_group_of: Callable[[K], int]) -> None:
        self._target = target
        self._key_group_of = key_group_of
        self._event: _TimerQueue[K, N] = _TimerQueue()
        self._processing: _TimerQueue[K, N] = _TimerQueue()
        self._watermark = MIN_TIMESTAMP
        self._processing_time = MIN_TIMESTAMP

    # ------------------------------------------------------------------ registration
    def register_event_time_timer(self, key: K, namespace: N, timestamp: int) -> bool:
        """Register; False if that exact timer already exists."""
        return self._event.add((timestamp, key, namespace))

    def delete_event_time_timer(self, key: K, namespace: N, timestamp: int) -> bool:
        """Delete; False if no such timer."""
        return self._event.remove((timestamp, key, namespace))

    def register_processing_time_timer(self, key: K, namespace: N, timestamp: int) -> bool:
        return self._processing.add((timestamp, key, namespace))

    def delete_processing_time_timer(self, key: K, namespace: N, timestamp: int) -> bool:
        return self._processing.remove((timestamp, key, namespace))

    # ------------------------------------------------------------------ firing
    def advance_watermark(self, watermark: int) -> int:
        """Fire every event-time timer with ``timestamp <= watermark``; return how many fired."""
        self._watermark = watermark
        fired = 0
        on_event_time = self._target.on_event_time
        while (entry := self._event.pop_due(watermark)) is not None:
            on_event_time(InternalTimer(*entry))
            fired += 1
        return fired

    def advance_processing_time(self, now: int) -> int:
        """Fire every processing-time timer with ``timestamp <= now``; return how many fired."""
        self._processing_time = now
        fired = 0
        on_processing_time = self._target.on_processing_time
        while (entry := self._processing.pop_due(now)) is not None:
            on_processing_time(InternalTimer(*entry))
            fired += 1
        return fired

    def due_keys(self, domain: TimeDomain, limit: int) -> list[K]:
        """The keys of the next ``limit`` timers of ``domain`` due at its current time, in firing
        order, each key once: while a watermark (or processing time) advances, what the timers
        about to fire will touch, so an operator can fetch their state together."""
        queue, time = (
            (self._event, self._watermark)
            if domain is TimeDomain.EVENT_TIME
            else (self._processing, self._processing_time)
        )
        return list(dict.fromkeys(key for _, key, _ in queue.peek_due(time, limit)))

    def forget_time(self) -> None:
        """Back to no watermark and no processing time, the timers kept: what a restore from a
        snapshot gives (neither time is part of it), for an operator adopted by local recovery."""
        self._watermark = MIN_TIMESTAMP
        self._processing_time = MIN_TIMESTAMP

    @property
    def current_watermark(self) -> int:
        return self._watermark

    @property
    def current_processing_time(self) -> int:
        return self._processing_time

    def num_event_time_timers(self) -> int:
        return len(self._event)

    def num_processing_time_timers(self) -> int:
        return len(self._processing)

    def event_time_timers(self) -> list[InternalTimer[K, N]]:
        """Registered event-time timers in firing order."""
        return [InternalTimer(*entry) for entry in self._event]

    def processing_time_timers(self) -> list[InternalTimer[K, N]]:
        return [InternalTimer(*entry) for entry in self._processing]

    # ------------------------------------------------------------------ snapshot / restore
    def snapshot(self) -> dict[int, dict[str, list[list[Any]]]]:
        """Timers per key group as plain dicts and lists, sorted in firing order."""
        result: dict[int, dict[str, list[list[Any]]]] = {}
        for domain_key, queue in ((EVENT_TIME_KEY, self._event), (PROCESSING_TIME_KEY, self._processing)):
            for timestamp, key, namespace in queue:
                group = result.setdefault(
                    self._key_group_of(key), {EVENT_TIME_KEY: [], PROCESSING_TIME_KEY: []}
                )
                group[domain_key].append([timestamp, key, namespace])
        return dict(sorted(result.items()))

    def restore(
        self,
        snapshot: Mapping[int, Mapping[str, Sequence[Sequence[Any]]]],
        *,
        key_groups: Iterable[int] | None = None,
    ) -> int:
        """Add the timers of ``snapshot`` (only of ``key_groups`` if given); return how many were added.

        Timers already registered are kept (restore merges). Raises :class:`TimerRestoreError` for a
        malformed entry or a key listed under a key group it does not hash to.
        """
        wanted = None if key_groups is None else set(key_groups)
        added = 0
        for group, domains in snapshot.items():
            if wanted is not None and group not in wanted:
                continue
            unknown = set(domains) - {EVENT_TIME_KEY, PROCESSING_TIME_KEY}
            if unknown:
                raise TimerRestoreError(
                    f"timer snapshot of key group {group} has unknown domains {sorted(unknown)}; "
                    f"expected {EVENT_TIME_KEY!r} and {PROCESSING_TIME_KEY!r}"
                )
            for domain_key, queue in ((EVENT_TIME_KEY, self._event), (PROCESSING_TIME_KEY, self._processing)):
                for entry in domains.get(domain_key, ()):
                    timer = self._parse_entry(group, domain_key, entry)
                    added += queue.add(timer)
        return added

    def _parse_entry(self, group: int, domain_key: str, entry: Sequence[Any]) -> tuple[int, K, N]:
        if len(entry) != 3 or not isinstance(entry[0], int):
            raise TimerRestoreError(
                f"malformed {domain_key} timer {entry!r} in key group {group}: "
                "expected [timestamp, key, namespace]"
            )
        timestamp, key, namespace = entry
        key = _freeze(key)
        namespace = _freeze(namespace)
        actual = self._key_group_of(key)
        if actual != group:
            raise TimerRestoreError(
                f"{domain_key} timer for key {key!r} is listed under key group {group} but the key belongs "
                f"to key group {actual}: the snapshot was taken with another key-group function or "
                "max_parallelism; restore with the job's original max_parallelism"
            )
        return (timestamp, key, namespace)


def _freeze(value: Any) -> Any:
    """Lists (as JSON gives back tuples) become tuples again, so keys stay hashable."""
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value
