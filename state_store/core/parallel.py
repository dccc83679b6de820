"""Bounded concurrent reads for the pure core (standard library only).

The coordinator reads one ack per task and one state file per handle; against a remote store each
read is a round trip, so they are issued through a small thread pool. Results come back in the
order of the inputs, and a failing read raises its exception when the caller reaches that item,
exactly where a sequential loop would have raised it (the first failure in input order wins; the
reads still queued are cancelled and the running ones finish before the exception propagates).

Only stores that declare ``max_concurrent_reads`` (an int > 1) are read concurrently: S3 and the
in-memory test store do (the local store does not: its reads are faster than a thread hand-off);
any other store (fault-injection wrappers whose faults are consumed in call order, test doubles)
is read sequentially, one item at a time, as before. Writes follow the same rule with
``max_concurrent_writes`` (snapshot uploads: one state file per key group; the local store
declares it too, since its writes wait on fsync with the GIL released).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def read_concurrency(store: object, limit: int) -> int:
    """Reads of ``store`` allowed in flight: ``min(limit, store.max_concurrent_reads)``, 1 when the
    store does not declare it."""
    declared = getattr(store, "max_concurrent_reads", 1)
    if not isinstance(declared, int) or isinstance(declared, bool):
        return 1
    return max(1, min(limit, declared))


def write_concurrency(store: object, limit: int) -> int:
    """Writes of ``store`` allowed in flight: ``min(limit, store.max_concurrent_writes)``, 1 when the
    store does not declare it (the same rule as reads: fault wrappers stay sequential)."""
    declared = getattr(store, "max_concurrent_writes", 1)
    if not isinstance(declared, int) or isinstance(declared, bool):
        return 1
    return max(1, min(limit, declared))


def map_ordered(fn: Callable[[T], R], items: Sequence[T], concurrency: int) -> Iterator[R]:
    """Yield ``fn(item)`` for each item, in order, with at most ``concurrency`` calls in flight.

    ``concurrency <= 1`` (or fewer than two items) is a plain sequential loop. Otherwise a failing
    call re-raises its exception when the iteration reaches its item (so the first failure in
    input order is the one the caller sees); the calls not yet started are cancelled.
    """
    if concurrency <= 1 or len(items) < 2:
        for item in items:
            yield fn(item)
        return
    pool = ThreadPoolExecutor(max_workers=min(concurrency, len(items)), thread_name_prefix="epochal-read")
    try:
        futures: list[Future[R]] = [pool.submit(fn, item) for item in items]
        for future in futures:
            yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["map_ordered", "read_concurrency", "write_concurrency"]
