"""Runs a KeyedProcessFunction: one call per distinct key per chunk, timers, emitted rows.

With ``Job(state_memory_mb=...)`` the keyed state lives in a spill store on local disk and the heap
backend is a page cache (``spark_jobs.runtime.spill_rows``): a chunk's distinct keys are paged in
a page at a time before their calls and out after them (in the order of their first row, as in
memory); a timer whose key is not paged in pages in the keys
of the next timers due with it, and they are paged out when the watermark advance ends (or the
page is full). The user code sees the same handles and semantics either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from spark_jobs.api.functions import CoProcessFunction, KeyedProcessFunction
from spark_jobs.runtime.keys import KeySpec, distinct_keys, key_column
from spark_jobs.runtime.operators.base import OperatorContext, OperatorSnapshot
from spark_jobs.runtime.operators.keyed import KeyedOperator
from spark_jobs.runtime.spill_rows import SpillKeyedRows
from state_store.core.stream.timers import InternalTimer, TimeDomain

_NS = "user"


class _Context:
    def __init__(self, op: ProcessOperator) -> None:
        self.op = op
        self.key: Any = None
        self.ts = 0

    @property
    def current_key(self) -> Any:
        return self.key

    @property
    def current_watermark(self) -> int:
        return self.op.timers.current_watermark

    @property
    def processing_time(self) -> int:
        return self.op.now_ms()

    def state(self, descriptor: Any) -> Any:
        return self.op.backend.get_state(descriptor)

    def register_event_time_timer(self, timestamp: int) -> None:
        self.op.timers.register_event_time_timer(self.key, _NS, int(timestamp))

    def register_processing_time_timer(self, timestamp: int) -> None:
        self.op.timers.register_processing_time_timer(self.key, _NS, int(timestamp))

    def delete_event_time_timer(self, timestamp: int) -> None:
        self.op.timers.delete_event_time_timer(self.key, _NS, int(timestamp))

    def emit(self, row: dict[str, Any]) -> None:
        """Emit a row; its event time ``_ts`` defaults to the input's (or the timer's) time."""
        self.op.rows.append(row if "_ts" in row else {**row, "_ts": self.ts})

    def side_output(self, tag: str, row: dict[str, Any]) -> None:
        self.op.side_rows.setdefault(tag, []).append(row)


class ProcessOperator(KeyedOperator):
    can_spill = True
    spill: SpillKeyedRows | None

    def __init__(self, uid: str, key: KeySpec, fn: KeyedProcessFunction) -> None:
        super().__init__(uid, key)
        self.fn = fn
        self.rows: list[dict[str, Any]] = []
        self.side_rows: dict[str, list[dict[str, Any]]] = {}
        self.context = _Context(self)

    def open_spill(
        self, ctx: OperatorContext, claimed: tuple[Path, int], budget_bytes: int
    ) -> SpillKeyedRows:
        what = f"process function {self.uid!r}"
        return SpillKeyedRows(what, claimed, ctx.key_groups, ctx.max_parallelism, budget_bytes)

    def register_states(self) -> None:
        for descriptor in self.fn.state_descriptors:
            self.backend.bulk(descriptor)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self._process(batch, self.keys_of(batch), self.fn.process_key)

    def _process(self, batch: pa.RecordBatch, keys: pa.Array, call: Any) -> None:
        uniques, indices = distinct_keys(keys)
        records = batch.to_pylist()
        order = np.argsort(indices, kind="stable")
        bounds = np.searchsorted(indices[order], np.arange(len(uniques) + 1))
        for start, stop in self.key_pages(keys, uniques):  # keys in order of first appearance
            for k in range(start, stop):
                key = uniques[k]
                rows = [records[i] for i in order[bounds[k] : bounds[k + 1]]]
                self.backend.set_current_key(key)
                self.context.key = key
                self.context.ts = max((r.get("_ts") or 0) for r in rows)
                call(key, rows, self.context)
        self.flush_timer_output()

    def on_event_time(self, timer: InternalTimer[Any, Any]) -> None:
        self._fire(timer, TimeDomain.EVENT_TIME)

    def on_processing_time(self, timer: InternalTimer[Any, Any]) -> None:
        self._fire(timer, TimeDomain.PROCESSING_TIME)

    def _fire(self, timer: InternalTimer[Any, Any], domain: TimeDomain) -> None:
        spill = self.spill
        if spill is not None and not spill.holds(timer.key):
            if spill.paged_keys >= spill.page_keys:
                spill.page_out(self.backend)
            spill.page_in(self.backend, [timer.key, *self.timers.due_keys(domain, spill.page_keys)])
        self.backend.set_current_key(timer.key)
        self.context.key = timer.key
        self.context.ts = timer.timestamp
        self.fn.on_timer(timer.timestamp, self.context)

    def process_watermark(self, timestamp: int) -> None:
        self.timers.advance_processing_time(self.now_ms())
        super().process_watermark(timestamp)

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        if self.spill is not None and self.spill.paged_keys:  # never between chunks; a snapshot must
            self.spill.page_out(self.backend)  # find every key's state in the store all the same
        return super().snapshot(checkpoint_id)

    def flush_timer_output(self) -> None:
        """After a chunk or a watermark advance: state back to disk (if kept there), rows downstream."""
        if self.spill is not None:
            self.spill.page_out(self.backend)
        if self.rows:
            rows, self.rows = self.rows, []
            self.out.emit(pa.RecordBatch.from_pylist(rows))
        for tag, rows in list(self.side_rows.items()):
            if rows:
                self.out.side(tag, pa.RecordBatch.from_pylist(rows))
        self.side_rows = {}


class CoProcessOperator(ProcessOperator):
    """Two inputs keyed by ``keys[0]`` and ``keys[1]`` share the keyed state of one key domain."""

    def __init__(self, uid: str, keys: list[KeySpec], fn: CoProcessFunction) -> None:
        super().__init__(uid, keys[0], fn)  # type: ignore[arg-type]  # same state/timer contract
        self.keys = keys
        self.co_fn = fn

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self.process_input(batch, 0)

    def process_input(self, batch: pa.RecordBatch, input_index: int) -> None:
        call = self.co_fn.process_key1 if input_index == 0 else self.co_fn.process_key2
        self._process(batch, key_column(batch, self.keys[input_index]), call)
