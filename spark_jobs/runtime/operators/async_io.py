"""Async I/O enrichment (Flink's AsyncWaitOperator, seed 004).

Each record of a chunk calls ``await fn(row) -> row | None`` with at most ``capacity`` requests
in flight and a per-request ``timeout_ms``. Results leave in input order (``ordered``) or in
completion order (``unordered``). Watermarks separate segments: a chunk is fully resolved before
the watermark that follows it is forwarded, so in unordered mode no result crosses a watermark
(seed 004's segment rule) and nothing is in flight at a barrier (the operator needs no state:
``prepare_snapshot_pre_barrier`` has nothing left to drain). A timed-out request goes to the
``async-timeout`` side output, or fails the epoch with ``on_timeout="fail"``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pyarrow as pa

from spark_jobs.runtime.operators.base import Operator

AsyncFn = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]


class AsyncTimeoutError(RuntimeError):
    """An async request exceeded its timeout and the operator was told to fail."""


class AsyncEnrichOperator(Operator):
    def __init__(
        self, fn: AsyncFn, *, ordered: bool, capacity: int, timeout_ms: int, on_timeout: str
    ) -> None:
        super().__init__()
        if capacity < 1 or timeout_ms < 1:
            raise ValueError(
                f"async enrichment needs capacity >= 1 and timeout_ms >= 1, got {capacity}, {timeout_ms}"
            )
        if on_timeout not in ("side_output", "fail"):
            raise ValueError(f"on_timeout={on_timeout!r} is invalid: use 'side_output' or 'fail'")
        self.fn, self.ordered, self.capacity = fn, ordered, capacity
        self.timeout_s = timeout_ms / 1000
        self.on_timeout = on_timeout
        self.timeouts = 0

    async def _run(self, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``capacity`` workers pull rows in order; each request runs under its own timeout."""
        done: list[tuple[int, dict[str, Any] | None]] = []
        timed_out: list[dict[str, Any]] = []
        pending = iter(enumerate(rows))

        async def worker() -> None:
            for i, row in pending:
                try:
                    async with asyncio.timeout(self.timeout_s):
                        result = await self.fn(row)
                except TimeoutError:
                    timed_out.append(row)
                    continue
                done.append((i, result))

        await asyncio.gather(*(worker() for _ in range(min(self.capacity, len(rows)))))
        if self.ordered:
            done.sort(key=lambda item: item[0])
        return [r for _, r in done if r is not None], timed_out

    def process_batch(self, batch: pa.RecordBatch) -> None:
        results, timed_out = asyncio.run(self._run(batch.to_pylist()))
        if timed_out:
            self.timeouts += len(timed_out)
            if self.on_timeout == "fail":
                raise AsyncTimeoutError(
                    f"{len(timed_out)} async requests exceeded {self.timeout_s * 1000:.0f} ms: "
                    "raise timeout_ms or use on_timeout='side_output'"
                )
            self.out.side("async-timeout", pa.RecordBatch.from_pylist(timed_out))
        if results:
            self.out.emit(pa.RecordBatch.from_pylist(results))

    def metrics(self) -> dict[str, int]:
        return {"async_timeouts": self.timeouts}

    def reopen(self, ctx: Any, checkpoint_id: int) -> None:
        super().reopen(ctx, checkpoint_id)
        self.timeouts = 0
