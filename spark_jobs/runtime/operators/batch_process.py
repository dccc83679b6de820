"""Runs a ``BatchProcessFunction``: user logic once per chunk, state and timers as columns.

Per chunk: the distinct keys of the chunk (their key groups checked, as every keyed operator
does), their state fetched in bulk as a table (``key`` + the fields of ``state_schema``, nulls for
keys without state), one call of ``fn.process(rows, state, ctx)``, then the state updates, clears
and timers the function asked for, applied in bulk. When the watermark advances, the timers it
reached are collected (the timer service fires them one by one) and handed to ``fn.on_timers`` as
one table, with the state of their keys.

Invariants: the state of a key is a list of the schema's values in field order (``batch_state``);
within one call, updates apply in row order (a key's last row wins), then clears; a timer fires
once, in the watermark advance that reaches it (also one that ``on_timers`` sets at or below it);
rows without ``_ts`` carry the chunk's largest event time (``process``) or the largest timestamp
of the timers fired together (``on_timers``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.api.functions import BATCH_STATE, BatchProcessFunction
from spark_jobs.runtime.keys import KeySpec, distinct_keys
from spark_jobs.runtime.operators.base import OperatorContext
from spark_jobs.runtime.operators.keyed import KeyedOperator
from spark_jobs.runtime.spill_state import SpillValueState, check_savepoint_types
from state_store.core.errors import BadInputError
from state_store.core.state import ValueStateDescriptor
from state_store.core.stream.timers import InternalTimer

_NS = "user"
"""The timer namespace of ``ProcessOperator`` too: a job may swap one function kind for the other."""
KEY = "key"


class _BatchContext:
    def __init__(self, op: BatchProcessOperator) -> None:
        self.op = op
        self.updates: list[pa.Table] = []
        self.clears: list[pa.Array] = []
        self.timers: list[tuple[pa.Array, pa.Array, bool]] = []

    @property
    def current_watermark(self) -> int:
        return self.op.timers.current_watermark

    @property
    def processing_time(self) -> int:
        return self.op.now_ms()

    def update_state(self, state: Any) -> None:
        table = state if isinstance(state, pa.Table) else pa.table(state)
        missing = [n for n in [KEY, *self.op.schema.names] if n not in table.column_names]
        if missing:
            raise BadInputError(
                f"update_state of batch process function {self.op.uid!r} lacks columns {missing}: pass "
                f"{KEY!r} and every field of state_schema ({self.op.schema.names})"
            )
        if table.column(KEY).null_count:
            raise BadInputError(f"update_state of batch process function {self.op.uid!r} got null keys")
        self.updates.append(table)

    def clear_state(self, keys: Any) -> None:
        keys = _array(keys)
        if keys.null_count:
            raise BadInputError(f"clear_state of batch process function {self.op.uid!r} got null keys")
        self.clears.append(keys)

    def register_timers(self, keys: Any, timestamps: Any) -> None:
        self.timers.append((*self._timers("register_timers", keys, timestamps), True))

    def delete_timers(self, keys: Any, timestamps: Any) -> None:
        self.timers.append((*self._timers("delete_timers", keys, timestamps), False))

    def _timers(self, call: str, keys: Any, timestamps: Any) -> tuple[pa.Array, pa.Array]:
        keys, timestamps = _array(keys), _array(timestamps)
        if len(keys) != len(timestamps) or keys.null_count or timestamps.null_count:
            raise BadInputError(
                f"{call} of batch process function {self.op.uid!r} got {len(keys)} keys and "
                f"{len(timestamps)} timestamps ({keys.null_count + timestamps.null_count} null): pass one "
                "non-null timestamp per non-null key"
            )
        return keys, timestamps


def _array(values: Any) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    return values if isinstance(values, pa.Array) else pa.array(values)


class BatchProcessOperator(KeyedOperator):
    can_spill = True
    """With ``Job(state_memory_mb=...)`` the value state lives in a spill store on local disk
    (``spark_jobs.runtime.spill_state``); timers stay on the heap."""

    def __init__(self, uid: str, key: KeySpec, fn: BatchProcessFunction) -> None:
        super().__init__(uid, key)
        if not isinstance(fn.state_schema, pa.Schema):
            raise BadInputError(
                f"batch process function {uid!r} has no state_schema: set it to a pyarrow.Schema of the "
                "value state each key holds, e.g. pa.schema([('count', pa.int64())])"
            )
        self.fn = fn
        self.schema: pa.Schema = fn.state_schema
        self.descriptor = ValueStateDescriptor[list[Any]](BATCH_STATE)
        self._fired: list[tuple[Any, int]] = []
        self._chunk_keys: pa.Array = pa.array([], pa.null())
        """The distinct keys of the latest chunk, and their key groups (``_groups_of``)."""
        self._chunk_groups = np.zeros(0, dtype=np.int32)

    def open_spill(
        self, ctx: OperatorContext, claimed: tuple[Path, int], budget_bytes: int
    ) -> SpillValueState:
        what = f"batch process function {self.uid!r}"
        check_savepoint_types(what, self.schema)
        return SpillValueState(what, claimed, ctx.key_groups, ctx.max_parallelism, budget_bytes, self.schema)

    def register_states(self) -> None:
        if self.spill is None:
            self.backend.bulk(self.descriptor)

    # -- input -----------------------------------------------------------------------------------
    def process_batch(self, batch: pa.RecordBatch) -> None:
        keys = self.keys_of(batch)
        uniques, _ = distinct_keys(keys)
        groups = self.owned_key_groups(uniques)  # raises first for a key of another subtask
        self._chunk_keys = pa.array(uniques) if uniques else pa.array([], pa.null())
        self._chunk_groups = groups
        rows = pa.Table.from_batches([batch]).append_column(KEY, keys)
        state = self._state_table(uniques, chunk=True)
        ts = batch.column(batch.schema.get_field_index("_ts")) if "_ts" in batch.schema.names else None
        latest = int(pc.max(ts).as_py() or 0) if ts is not None and len(ts) else 0
        ctx = _BatchContext(self)
        out = self.fn.process(rows, state, ctx)
        self._apply(ctx)
        self._emit(out, latest)

    def _state_table(self, keys: list[Any], chunk: bool = False) -> pa.Table:
        """One row per key: ``key`` and the state fields (null where a key has no state).
        ``chunk``: ``keys`` are the latest chunk's (their key groups are known)."""
        if self.spill is not None:
            key_array = self._chunk_keys if chunk else pa.array(keys) if keys else pa.array([], pa.null())
            state = self.spill.get(key_array, self._chunk_groups if chunk else None)
            return pa.Table.from_arrays([key_array, *state.columns], names=[KEY, *self.schema.names])
        stored = self.backend.bulk(self.descriptor).get_many(keys)
        columns: dict[str, Any] = {KEY: pa.array(keys) if keys else pa.array([], pa.null())}
        for j, field in enumerate(self.schema):
            columns[field.name] = pa.array([None if s is None else s[j] for s in stored], field.type)
        return pa.table(columns)

    def _apply(self, ctx: _BatchContext) -> None:
        if self.spill is not None:
            self._apply_spilled(ctx)
        else:
            self._apply_heap(ctx)
        self._apply_timers(ctx)

    def _apply_spilled(self, ctx: _BatchContext) -> None:
        assert self.spill is not None
        for table in ctx.updates:
            keys = table.column(KEY).combine_chunks()
            self.spill.put(keys, table, self._groups_of(keys))  # the store keeps a key's last row
        for keys in ctx.clears:
            self.spill.delete(keys, self._groups_of(keys))

    def _groups_of(self, keys: pa.Array) -> np.ndarray:
        """The key group of each of ``keys``: looked up among the chunk's keys (hashed once per
        chunk), hashed (and checked to be this subtask's) only for keys the chunk did not have."""
        if not len(keys) or not keys.type.equals(self._chunk_keys.type):
            return self.owned_key_groups(keys)
        at = pc.fill_null(pc.index_in(keys, value_set=self._chunk_keys), -1).to_numpy()
        if (at < 0).any():
            return self.owned_key_groups(keys)
        groups: np.ndarray = self._chunk_groups[at]
        return groups

    def _apply_heap(self, ctx: _BatchContext) -> None:
        bulk = self.backend.bulk(self.descriptor)
        for table in ctx.updates:
            keys = table.column(KEY).to_pylist()
            self.owned_key_groups(keys)
            fields = [
                table.column(n).cast(f.type).to_pylist() for n, f in zip(self.schema.names, self.schema)
            ]
            latest = dict(zip(keys, map(list, zip(*fields)) if fields else [[] for _ in keys]))
            bulk.put_many(list(latest), list(latest.values()))
        for keys in ctx.clears:
            names = keys.to_pylist()
            self.owned_key_groups(names)
            bulk.put_many(names, [None] * len(names))

    def _apply_timers(self, ctx: _BatchContext) -> None:
        for keys, stamps, register in ctx.timers:
            for key, timestamp in zip(keys.to_pylist(), stamps.to_pylist()):
                self.backend.set_current_key(key)
                if register:
                    self.timers.register_event_time_timer(key, _NS, int(timestamp))
                else:
                    self.timers.delete_event_time_timer(key, _NS, int(timestamp))

    def _emit(self, out: Any, ts: int) -> None:
        if out is None:
            return
        table = out if isinstance(out, pa.Table) else pa.table(out)
        if not table.num_rows:
            return
        if "_ts" not in table.column_names:
            table = table.append_column("_ts", pa.array(np.full(table.num_rows, ts, np.int64)))
        for batch in table.combine_chunks().to_batches():
            self.out.emit(batch)

    # -- timers ----------------------------------------------------------------------------------
    def on_event_time(self, timer: InternalTimer[Any, Any]) -> None:
        self._fired.append((timer.key, timer.timestamp))

    def flush_timer_output(self) -> None:
        while self._fired:  # timers set by on_timers at or before the watermark fire in this loop
            fired, self._fired = self._fired, []
            keys = [k for k, _ in fired]
            timers = pa.table({KEY: pa.array(keys), "timestamp": pa.array([t for _, t in fired], pa.int64())})
            ctx = _BatchContext(self)
            out = self.fn.on_timers(timers, self._state_table(keys), ctx)
            self._apply(ctx)
            self._emit(out, max(t for _, t in fired))
            self.timers.advance_watermark(self.timers.current_watermark)  # timers it set at or below
