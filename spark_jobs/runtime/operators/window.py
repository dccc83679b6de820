"""Event-time window aggregation (tumbling, sliding, session) with allowed lateness.

Per chunk (vectorized): assign windows, split off late records (to the ``late`` side output),
partially aggregate per (key, window) with Arrow, merge into the accumulator in keyed state
(namespace = window start), register the firing timer ``end - 1`` for new windows. A record for a
window that already fired but is within the allowed lateness updates it and re-emits the result
at once (Flink's default trigger with lateness). Timers at ``end - 1`` emit results; timers at
``end - 1 + allowed_lateness`` (the same timer when lateness is 0) clear the window's state.

Tumbling and sliding windows (with or without allowed lateness) register no timers: the state
itself says which windows hold entries, and ``_fired_through`` -- the largest watermark processed,
kept in the operator's state (``snapshot_extra``) -- says which of them fired: a window with
``end - 1 <= _fired_through`` has. When the watermark advances, an index ``window start -> keys``
built from the restored state and kept up to date per chunk fires every window with
``_fired_through < end - 1 <= watermark`` and drops every window with ``end - 1 + allowed_lateness
<= watermark`` (firing and dropping are one step when lateness is 0) -- the same results as the
timers, without two timers per (key, window) in every snapshot. After a restore, before the first
watermark, ``watermark`` is ``_fired_through``, so a record for a window that fired before the
checkpoint is late (or, inside the lateness, re-fires it at once) instead of opening it again. Timers
restored from a checkpoint written with timers (before issue 20) still fire; with allowed lateness
such an operator stays in the timer mode.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.api.windows import (
    Aggregates,
    Avg,
    Count,
    CountOf,
    EventTimeSessionWindows,
    First,
    Last,
    Max,
    Min,
    Sum,
    as_aggregates,
)
from spark_jobs.runtime.keys import KeySpec, key_groups
from spark_jobs.runtime.operators import decimals
from spark_jobs.runtime.operators.base import OperatorSnapshot
from spark_jobs.runtime.operators.keyed import KeyedOperator
from spark_jobs.runtime.operators.session_columns import SessionColumns, Sessions
from spark_jobs.runtime.operators.window_columns import Refused, WindowColumns, unfit_keys
from state_store.core.errors import BadInputError
from state_store.core.state import KeyedStateSnapshot, StateKind, ValueStateDescriptor
from state_store.core.stream import MIN_TIMESTAMP
from state_store.core.stream.timers import InternalTimer

TS = "_ts"
log = logging.getLogger(__name__)

INDEXED_FIRING = True
"""Fire tumbling/sliding windows without lateness from the state index instead of timers (module
docstring). Switched off only by ``bench/ablation.py`` to measure what it gains."""
VECTOR_MERGE = True
"""Merge Count/Sum partials into accumulators with numpy (off: per-row merge; ablation only)."""
COLUMNAR = True
"""Keep Count/Sum accumulators of indexed windows over int keys in ``WindowColumns`` (off: the heap
backend; ablation and equivalence tests only)."""


MAX_LATENESS_MS = 1 << 62
"""Any larger allowed lateness means "keep every window": event times stay far below 2**62 ms."""
INDEXED_MODE = "indexed"
"""``window_mode`` in the operator's snapshot extra: windows fire from the state index, not timers."""
RESTORED_WITHOUT_COLUMNS = (
    "its restored state does not have columns (an earlier epoch left the fast path, or two string keys "
    "share a 64-bit hash)"
)


def event_times(batch: pa.RecordBatch) -> np.ndarray[Any, np.dtype[np.int64]]:
    index = batch.schema.get_field_index(TS)
    if index < 0:
        raise KeyError(f"the batch has no {TS!r} event-time column: keep it in map functions")
    values: np.ndarray[Any, np.dtype[np.int64]] = (
        batch.column(index).to_numpy(zero_copy_only=False).astype(np.int64)
    )
    return values


class WindowOperator(KeyedOperator):
    def __init__(
        self, uid: str, key: KeySpec, assigner: Any, aggregate: Any, allowed_lateness_ms: int
    ) -> None:
        super().__init__(uid, key)
        if allowed_lateness_ms < 0:
            raise ValueError(f"allowed_lateness_ms={allowed_lateness_ms} is invalid: use >= 0")
        self.assigner = assigner
        self.aggs: Aggregates = as_aggregates(aggregate)
        self.lateness = min(allowed_lateness_ms, MAX_LATENESS_MS)
        """Clamped so ``end - 1 + lateness`` stays in int64 (Flink caps the cleanup time likewise)."""
        self.acc = ValueStateDescriptor[list[Any]]("acc")
        self.sessions = ValueStateDescriptor[list[list[Any]]]("sessions")
        """Session windows in the timer mode: per key, the list of its ``[start, end, acc]``."""
        self.session_state = ValueStateDescriptor[list[Any]]("session")
        """Session windows in the indexed mode: namespace = start, value = ``[end, *acc]``."""
        self.session = isinstance(assigner, EventTimeSessionWindows)
        self.indexed = INDEXED_FIRING and not self.session
        self.session_indexed = INDEXED_FIRING and self.session and self.lateness == 0
        """Session windows without timers (``_process_session_chunks``): the state says when each
        session ends; with allowed lateness, or restored from a checkpoint of the timer mode, the
        timer mode (``_process_sessions``) runs instead."""
        self._session_starts: dict[Any, list[int]] = {}
        """Indexed sessions on the heap backend: key -> the starts of its open sessions, sorted."""
        self._session_due: list[tuple[int, int, Any, int]] = []
        """Indexed sessions on the heap backend: a min-heap of (end - 1, sequence, key, start); an
        entry whose session is gone or ends elsewhere now is skipped when it comes up."""
        self._sequence = itertools.count()
        self._pending: dict[int, list[Any]] = {}
        """Indexed mode: window start -> keys holding an accumulator for it (not fired yet, or fired
        and kept for the allowed lateness)."""
        self._fired_through = MIN_TIMESTAMP
        """Indexed mode: every window with ``end - 1 <= _fired_through`` has fired (the largest
        watermark this operator, or the checkpoint it restored, processed). Part of its state."""
        self._results: list[tuple[Any, int, int, list[Any]]] = []
        self._key_type: Any = None
        """uint64 when the last chunk's keys were (None: the output infers the type from the keys)."""
        self.late_records = 0
        self.columnar_restore = (
            COLUMNAR
            and (self.indexed or self.session_indexed)
            and all(a.column_merge is not None for a in self.aggs.aggregates)
        )
        """Columnar mode is possible: the runtime decodes this operator's state files to int columns."""
        self.fallback: str | None = None if self.columnar_restore else self._why_not_columnar()
        """Why this operator keeps its windows on the heap backend (one Python object per entry: the
        slow path), or None on the columnar path. Reported once per process in the log and in every
        ack's metrics (``heap_fallback``)."""
        self.cols: WindowColumns | None = None
        """Columnar mode (``window_columns``): the accumulators live here, not in the backend."""
        self.scols: SessionColumns | None = None
        """Columnar mode of session windows (``session_columns``)."""
        self._restored_from: int | None = None
        self._scales: dict[str, int] = {}
        """Decimal columns this operator aggregates, by name: their scale (``decimals``)."""

    def _why_not_columnar(self) -> str:
        if self.session and self.lateness:
            return "session windows with allowed lateness"
        if not (COLUMNAR and INDEXED_FIRING):
            return "the columnar path is switched off"
        other = [a for a in self.aggs.aggregates if a.column_merge is None]
        return f"aggregate {type(other[0]).__name__} (it has no columnar merge)" if other else "?"

    def _column_merges(self) -> list[str]:
        merges = [a.column_merge for a in self.aggs.aggregates]
        assert all(m is not None for m in merges)
        return [m for m in merges if m is not None]

    def _fall_back(self, reason: str) -> None:
        """Record (and log once per process and operator) that the heap backend holds the windows."""
        self.fallback = reason
        if (self.uid, reason) not in _REPORTED:
            _REPORTED.add((self.uid, reason))
            log.warning(
                "window operator %r keeps its state on the heap backend (the slow path): %s", self.uid, reason
            )

    def register_states(self) -> None:
        self.backend.bulk(
            self.session_state if self.session_indexed else self.sessions if self.session else self.acc
        )

    def open(self, ctx: Any, restored: Any) -> None:
        if self.columnar_restore and self.session:
            self.scols = SessionColumns(self._column_merges())
        elif self.columnar_restore:
            self.cols = WindowColumns(self._column_merges())
        elif self.fallback is not None:
            self._fall_back(self.fallback)
        super().open(ctx, restored)
        if self.indexed and self.cols is None:
            self._pending = {
                int(ns): keys for ns, keys in self.backend.keys_by_namespace(self.acc.name).items()
            }
        if self.session_indexed and self.scols is None:
            self._index_sessions()

    def restore_keyed(self, restored: Any) -> None:
        self._restored_from = restored.checkpoint_id
        parts = restored.extra.get("parts", []) if isinstance(restored.extra, dict) else []
        if self.session:
            self._restore_sessions(restored)
            return
        if self.lateness and not any(p.get("window_mode") == INDEXED_MODE for p in parts):
            # a checkpoint of the timer mode (written before issue 20): every subtask restoring it
            # keeps its timers and stays in that mode, so no subtask opens a window without timers
            self.indexed = False
            self.cols = None
            self._fall_back("its restored windows use timers (a checkpoint written before issue 20)")
        if self.cols is not None and not any(restored.timers.values()):
            cols = WindowColumns.restore(
                self.cols.merges,
                restored.keyed,
                self.acc.name,
                self.backend.key_groups,
                self.key_groups_check(restored),
            )
            if cols is not None:
                self.cols = cols
                return
        if self.cols is not None:
            self._fall_back(RESTORED_WITHOUT_COLUMNS)
        self.cols = None  # timers from an older checkpoint, or entries of another shape
        super().restore_keyed(restored)

    def _restore_sessions(self, restored: Any) -> None:
        """Sessions of this operator's mode restore onto the columns when they fit, else onto the heap
        backend; sessions of the other mode (a checkpoint written before issue 20, or with another
        allowed lateness) restore onto the heap backend and are converted (``_convert_sessions``)."""
        other = self.sessions.name if self.session_indexed else self.session_state.name
        converting = any(
            len(states.get(other) or ()) for snap in restored.keyed for states in snap.key_groups.values()
        )
        if self.scols is not None and not converting and not any(restored.timers.values()):
            cols = SessionColumns.restore(
                self.scols.merges,
                restored.keyed,
                self.session_state.name,
                self.backend.key_groups,
                self.key_groups_check(restored),
            )
            if cols is not None:
                self.scols = cols
                return
        if self.scols is not None:
            self._fall_back(
                "its restored sessions use timers (a checkpoint written before issue 20: converted)"
                if converting
                else RESTORED_WITHOUT_COLUMNS
            )
        self.scols = None
        super().restore_keyed(restored)
        if converting:
            self._convert_sessions()

    def _convert_sessions(self) -> None:
        """Move the restored sessions of the other mode into this mode's state: the timer mode keeps
        a key's sessions as one list ``[[start, end, acc], ...]`` and a timer at ``end - 1`` each; the
        indexed mode one ``[end, *acc]`` per (key, start) and no timers."""
        lists = self.backend.bulk(self.sessions)
        rows = self.backend.bulk(self.session_state)
        if self.session_indexed:
            for ns, keys in self.backend.keys_by_namespace(self.sessions.name).items():
                for key, sessions in zip(keys, lists.pop_many(keys, namespace=ns)):
                    for start, end, acc in sessions or []:
                        self.timers.delete_event_time_timer(key, start, end - 1)
                        rows.put_many([key], [[end, *acc]], namespace=start)
            return
        by_key: dict[Any, list[list[Any]]] = {}
        for ns, keys in self.backend.keys_by_namespace(self.session_state.name).items():
            for key, value in zip(keys, rows.pop_many(keys, namespace=ns)):
                if value is not None:
                    by_key.setdefault(key, []).append([int(ns), value[0], value[1:]])
        for key, sessions in by_key.items():
            sessions.sort(key=lambda session: session[0])
            lists.put_many([key], [sessions])
            for start, end, _ in sessions:
                self.timers.register_event_time_timer(key, start, end - 1)

    def _demote(self) -> None:
        """Move the columnar accumulators into the heap backend for the rest of the epoch (an
        input the columns cannot hold exactly: non-int keys or values, or int64's safe range)."""
        cols, self.cols = self.cols, None
        assert cols is not None
        if self._restored_from is not None:
            self.backend.restore([], from_checkpoint=self._restored_from)  # the base of reuse
        bulk = self.backend.bulk(self.acc)
        for ws, run in sorted(cols.entries().items()):
            keys = run.keys.to_pylist() if isinstance(run.keys, pa.Array) else run.keys.tolist()
            accs = [list(acc) for acc in zip(*(slot.tolist() for slot in run.slots))]
            bulk.put_many(keys, accs, namespace=ws)
            self._pending[ws] = keys
        self.backend.mark_changed(cols.changed)

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        cols = self.cols or self.scols
        if cols is None:
            return super().snapshot(checkpoint_id)
        name = self.session_state.name if self.session else self.acc.name
        rows = cols.snapshot_rows()
        changed = set(cols.changed)
        if self._restored_from is None:
            changed.update(rows)  # nothing to reuse: every non-empty key group is new
        keyed = KeyedStateSnapshot(
            max_parallelism=self.backend.max_parallelism,
            key_group_range=self.backend.key_groups,
            kinds={name: StateKind.VALUE},
            key_groups={kg: {name: r} for kg, r in rows.items()},  # type: ignore[dict-item]
            changed_key_groups=frozenset(changed),
            checkpoint_id=checkpoint_id,
            base_checkpoint_id=self._restored_from,
        )
        return OperatorSnapshot(keyed, self.timers.snapshot(), self.snapshot_extra())

    def reopen(self, ctx: Any, checkpoint_id: int) -> None:
        super().reopen(ctx, checkpoint_id)
        self.late_records = 0
        for cols in (self.cols, self.scols):
            if cols is not None:
                cols.changed.clear()  # the last snapshot is the base now

    def dispose(self) -> None:
        self._pending = {}
        self.cols = None
        self.scols = None
        self._session_starts = {}
        self._session_due = []
        super().dispose()

    def process_watermark(self, timestamp: int) -> None:
        self.timers.advance_watermark(timestamp)
        if self.session:  # the late boundary after a restore, in either session mode
            self._fired_through = max(self._fired_through, timestamp)
        if self.session_indexed:
            self._fire_sessions(timestamp)
        elif self.cols is not None:
            self._fire_columns(timestamp)
        elif self.indexed:
            self._fire_pending(timestamp)
        self.flush_timer_output()
        self.out.emit_watermark(timestamp)

    def _fire_pending(self, watermark: int) -> None:
        """Emit every window whose end - 1 the watermark reached and that has not fired yet; drop
        the state of every window past its allowed lateness (the same window when lateness is 0)."""
        size, fired = self.assigner.size(), self._fired_through
        due = sorted(ws for ws in self._pending if fired < ws + size - 1 <= watermark)
        gone = {ws for ws in self._pending if ws + size - 1 + self.lateness <= watermark}
        bulk = self.backend.bulk(self.acc)
        for ws in due:
            keys = self._pending[ws] if ws not in gone else self._pending.pop(ws)
            accs = bulk.get_many(keys, namespace=ws) if ws not in gone else bulk.pop_many(keys, namespace=ws)
            self._results.extend((k, ws, ws + size, a) for k, a in zip(keys, accs) if a is not None)
        for ws in sorted(gone - set(due)):
            bulk.pop_many(self._pending.pop(ws), namespace=ws)
        self._fired_through = max(fired, watermark)

    def _fire_columns(self, watermark: int) -> None:
        """``_fire_pending`` on the columns."""
        assert self.cols is not None
        size, fired = self.assigner.size(), self._fired_through
        due = [ws for ws in self.cols.due(watermark, size) if fired < ws + size - 1]
        gone = set(self.cols.due(watermark - self.lateness, size))
        self._fired_through = max(fired, watermark)
        runs = [self.cols.pop(ws) if ws in gone else self.cols.runs[ws] for ws in due]
        for ws in sorted(gone - set(due)):
            self.cols.pop(ws)
        self._emit_runs(due, runs)

    def _emit_runs(self, due: list[int], runs: list[Any]) -> None:
        """Emit the entries of ``runs`` (of window starts ``due``) as one batch."""
        if not due:
            return
        size = self.assigner.size()
        if isinstance(runs[0].keys, pa.Array):
            keys: Any = pa.concat_arrays([r.keys for r in runs])
        else:
            keys = pa.array(np.concatenate([r.keys for r in runs]), pa.int64())
        starts = np.concatenate([np.full(len(r.index), ws, dtype=np.int64) for ws, r in zip(due, runs)])
        columns: dict[str, Any] = {
            self.key_name: keys,
            "window_start": pa.array(starts, pa.int64()),
            "window_end": pa.array(starts + size, pa.int64()),
        }
        slots = [
            pa.array(np.concatenate([r.slots[j] for r in runs])) for j in range(len(self.aggs.aggregates))
        ]
        columns.update(self._output_columns(slots))
        columns["_ts"] = pa.array(starts + (size - 1), pa.int64())
        self.out.emit(pa.RecordBatch.from_pydict(columns))

    @property
    def watermark(self) -> int:
        """The event time up to which windows have fired: the timer service's watermark, or (indexed
        mode, after a restore, before the first watermark) the restored ``_fired_through``."""
        return max(self.timers.current_watermark, self._fired_through)

    # -- input ---------------------------------------------------------------------------------
    def _unscaled(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with every aggregated decimal column as its unscaled int64 values."""
        for column in {a.arrow[0] for a in self.aggs.aggregates if a.arrow[0] != []}:
            index = batch.schema.get_field_index(column)
            kind = batch.schema.field(index).type if index >= 0 else None
            if kind is None or not decimals.is_decimal(kind):
                continue
            known = self._scales.get(column, kind.scale)
            if known != kind.scale:
                raise BadInputError(
                    f"column {column!r} changed from scale {known} to {kind} in window operator "
                    f"{self.uid!r}: cast it to a decimal of scale {known} before the window"
                )
            batch = batch.set_column(index, column, decimals.unscale(batch.column(index), column))
            self._scales[column] = kind.scale
        return batch

    def _output_columns(self, slots: list[Any]) -> dict[str, Any]:
        """Result columns from slot columns. Of a decimal column, a sum, minimum, maximum, first or
        last is a decimal again; a mean is ``unscaled sum / (count * 10**scale)``, one float division
        (correctly rounded while both are below 2**53)."""
        out: dict[str, Any] = {}
        at = 0
        for agg in self.aggs.outputs:
            parts = agg.slots()
            mine = list(slots[at : at + len(parts)])
            at += len(parts)
            scale = self._scales.get(parts[0].arrow[0]) if parts[0].arrow[0] != [] else None
            if scale is not None and isinstance(agg, Avg):
                total, count = (pc.cast(_array(c, wide=pa.float64()), pa.float64(), safe=False) for c in mine)
                denominator = pc.multiply(count, float(10**scale))
                out[agg.name] = pc.if_else(
                    pc.equal(count, 0.0), pa.scalar(None, pa.float64()), pc.divide(total, denominator)
                )
                continue
            if scale is not None:
                mine = [
                    decimals.rescale(c, scale) if type(p) in _DECIMAL_RESULT else c
                    for p, c in zip(parts, mine)
                ]
            try:
                columns = [_array(c, wide=pa.float64() if isinstance(agg, Avg) else None) for c in mine]
            except (OverflowError, pa.ArrowInvalid):
                raise BadInputError(
                    f"aggregate {agg.name!r} of window operator {self.uid!r} reached a value beyond int64 "
                    "(kept exactly in its state, but it has no int64 result): cast its column to a decimal "
                    "or to float64 before the window"
                ) from None
            out[agg.name] = agg.output(columns)
        return out

    def snapshot_extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self._scales:
            extra["decimal_scales"] = dict(sorted(self._scales.items()))
        if self.indexed or self.session_indexed:
            extra["window_mode"] = INDEXED_MODE  # restores stay in this mode (restore_keyed)
        if (self.indexed or self.session) and self._fired_through > MIN_TIMESTAMP:
            extra["fired_through"] = self._fired_through
        return extra

    def restore_extra(self, extra: dict[str, Any]) -> None:
        """Decimal scales, and the event time through which the restored windows fired: the
        smallest of the restored subtasks' (with aligned barriers every subtask of a stage holds the
        same watermark at a checkpoint, so they agree)."""
        fired = []
        for part in extra.get("parts", []):
            for column, scale in part.get("decimal_scales", {}).items():
                self._scales.setdefault(column, int(scale))
            if "fired_through" in part:
                fired.append(int(part["fired_through"]))
        if fired and (self.indexed or self.session):
            self._fired_through = min(fired)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        if isinstance(self.key, str):  # heap output of uint64 keys beyond int64 (else inferred)
            kind = batch.schema.field(self.key).type
            self._key_type = kind if pa.types.is_uint64(kind) else None
        if self._scales or any(decimals.is_decimal(t) for t in batch.schema.types):
            batch = self._unscaled(batch)
        if self.session_indexed:
            self._process_session_chunks(batch)
            return
        if self.session:
            self._process_sessions(batch)
            return
        if self.cols is not None:
            if self._process_columns(batch):
                return
            self._demote()
        ts = event_times(batch)
        rows, starts = self.assigner.assign(ts)
        size = self.assigner.size()
        live = starts + size - 1 + self.lateness > self.watermark
        late_rows = _late_rows(batch.num_rows, rows, live)
        if len(late_rows):
            self.late_records += len(late_rows)
            self.out.side("late", batch.take(pa.array(late_rows)))
        rows, starts = rows[live], starts[live]
        if not len(rows):
            return
        columns: dict[str, Any] = {self.key_name: self.keys_of(batch).take(pa.array(rows)), "_ws": starts}
        for agg in self.aggs.aggregates:
            column, _ = agg.arrow
            if column != [] and column not in columns:
                columns[column] = _exact_for_sums(batch.column(column).take(pa.array(rows)))
        grouped = (
            pa.table(columns).group_by([self.key_name, "_ws"], use_threads=False).aggregate(self.aggs.arrow)
        )
        bulk = self.backend.bulk(self.acc)
        window_starts = grouped.column("_ws").to_numpy()
        keys_all = grouped.column(self.key_name).to_pylist()
        partial_arrow = [grouped.column(a.partial_column()) for a in self.aggs.aggregates]
        vector = _vector_partials(self.aggs, partial_arrow) if VECTOR_MERGE else None
        partial_cols = [] if vector is not None else [_pylist(c) for c in partial_arrow]
        for ws in np.unique(window_starts):
            idx = np.nonzero(window_starts == ws)[0]
            keys = [keys_all[i] for i in idx]
            ws_int = int(ws)
            current = bulk.get_many(keys, namespace=ws_int)
            merged = None if vector is None else _merge_vector(current, vector[idx])
            if merged is None:
                if not partial_cols:
                    partial_cols = [_pylist(c) for c in partial_arrow]
                merged = []
                for j, i in enumerate(idx):
                    stored = current[j]
                    acc = stored if stored is not None else self.aggs.zero()
                    merged.append(self.aggs.merge(acc, [col[i] for col in partial_cols]))
            for j, stored in enumerate(current):
                if stored is not None:
                    continue
                if self.indexed:
                    self._pending.setdefault(ws_int, []).append(keys[j])
                else:
                    if ws_int + size - 1 > self.watermark:  # a fired window's late entry fires below, once
                        self.timers.register_event_time_timer(keys[j], ws_int, ws_int + size - 1)
                    if self.lateness:
                        self.timers.register_event_time_timer(
                            keys[j], ws_int, ws_int + size - 1 + self.lateness
                        )
            bulk.put_many(keys, merged, namespace=ws_int)
            if ws_int + size - 1 <= self.watermark:  # late firing inside the allowed lateness
                self._results.extend((k, ws_int, ws_int + size, m) for k, m in zip(keys, merged))
        self.flush_timer_output()

    def _process_columns(self, batch: pa.RecordBatch) -> bool:
        """The columnar ``process_batch``; False (and nothing done) when the batch does not fit the
        columns: keys that are not non-null ints or strings, aggregated columns that are not non-null
        ints, floats or bools, sums beyond ``SAFE``, a string-key hash collision (``Refused``)."""
        assert self.cols is not None
        keys = _column_keys(self.keys_of(batch))
        unfit = self._unfit_for_columns(batch, keys)
        if unfit is not None:
            self._fall_back(unfit)
            return False
        ts = event_times(batch)
        rows, starts = self.assigner.assign(ts)
        size = self.assigner.size()
        watermark = self.watermark
        live = starts + size - 1 + self.lateness > watermark
        late_rows = _late_rows(batch.num_rows, rows, live)
        rows, starts = rows[live], starts[live]
        chunks: list[tuple[int, Any, Any, Any]] = []
        if len(rows):
            taken = pa.array(rows)
            columns: dict[str, Any] = {self.key_name: keys.take(taken), "_ws": starts}
            for agg in self.aggs.aggregates:
                column, _ = agg.arrow
                if column != [] and column not in columns:
                    taken_column = batch.column(column).take(taken)
                    if _exact_for_sums(taken_column) is not taken_column:
                        self._fall_back("a sum beyond the exact int64 range (2**62)")
                        return False
                    columns[column] = taken_column
            grouped = (
                pa.table(columns)
                .group_by([self.key_name, "_ws"], use_threads=False)
                .aggregate(self.aggs.arrow)
            )
            partials = [_partial_slot(grouped.column(a.partial_column())) for a in self.aggs.aggregates]
            bad = next((p for p in partials if isinstance(p, str)), None)
            if bad is not None:
                self._fall_back(bad)
                return False
            group_keys = grouped.column(self.key_name).combine_chunks()
            window_starts = grouped.column("_ws").to_numpy()
            kgs = key_groups(group_keys, self.backend.max_parallelism)
            string = pa.types.is_string(group_keys.type)
            key_values = group_keys if string else group_keys.to_numpy(zero_copy_only=False).astype(np.int64)
            outside = np.nonzero(
                (kgs < self.backend.key_groups.first) | (kgs > self.backend.key_groups.last)
            )[0]
            if len(outside):
                self.backend.set_current_key(group_keys[int(outside[0])].as_py())  # raises KeyOutOfRangeError
            for ws in np.unique(window_starts).tolist():
                idx = np.nonzero(window_starts == ws)[0]
                ws_keys = key_values.take(pa.array(idx)) if string else key_values[idx]
                chunks.append((ws, ws_keys, kgs[idx], [p[idx] for p in partials]))
        try:
            self.cols.merge_all(chunks)
        except Refused as refused:
            self._fall_back(str(refused))
            return False
        fired = [(ws, k, g) for ws, k, g, _ in chunks if ws + size - 1 <= watermark]
        if fired:  # late records inside the allowed lateness: their windows fire again at once
            self._emit_runs([ws for ws, _, _ in fired], [self.cols.lookup(ws, k, g) for ws, k, g in fired])
        if len(late_rows):
            self.late_records += len(late_rows)
            self.out.side("late", batch.take(pa.array(late_rows)))
        return True

    def _unfit_for_columns(self, batch: pa.RecordBatch, keys: pa.Array) -> str | None:
        """Why the columns cannot take ``batch`` (keys that are not non-null ints or strings,
        aggregated columns that are not non-null ints, floats or bools), or None."""
        unfit = unfit_keys(keys)
        if unfit is not None:
            return unfit
        for agg in self.aggs.aggregates:
            column, _ = agg.arrow
            if column == []:
                continue
            kind = batch.schema.field(column).type
            fits = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
            if not fits or batch.column(column).null_count:
                nulls = " with nulls" if batch.column(column).null_count else ""
                return f"column {column!r} of type {kind}{nulls}"
        return None

    # -- session windows, indexed mode -------------------------------------------------------------
    def _process_session_chunks(self, batch: pa.RecordBatch) -> None:
        """Session windows without timers: the chunk's sessions (``_session_chunk``) merge into the
        open ones, on the columns (``session_columns``) or on the heap backend, in the same order."""
        keys = self.keys_of(batch)
        if self.scols is not None:
            keys = _column_keys(keys)
            unfit = self._unfit_for_columns(batch, keys)
            if unfit is not None:
                self._fall_back(unfit)
                self._demote_sessions()
        chunk = self._session_chunk(batch, keys)
        late = np.zeros(chunk.size, dtype=np.bool_)
        if chunk.size and self.scols is not None:
            merged = self._merge_session_columns(chunk)
            if isinstance(merged, str):
                self._fall_back(merged)
                self._demote_sessions()
            else:
                late = merged
        if chunk.size and self.scols is None:
            late = self._merge_sessions_heap(chunk)
        if late.any():
            rows = np.sort(chunk.rows[late[chunk.session_of]])
            self.late_records += len(rows)
            self.out.side("late", batch.take(pa.array(rows)))

    def _session_chunk(self, batch: pa.RecordBatch, keys: pa.Array) -> SessionChunk:
        """The chunk's records as sessions: per key, in event-time order (ties in record order), a new
        session wherever a record starts after the previous one's session ended; each with the
        partial aggregate of its records (Arrow, one thread, in that order). A session that ends at
        or before the watermark is late unless it joins an open session (the merge decides), as
        Flink decides lateness on the merged window."""
        gap = self.assigner.gap_ms
        ts = event_times(batch)
        rows = np.arange(len(ts))
        if not len(rows):
            return SessionChunk(rows, rows, keys.slice(0, 0), ts[:0], ts[:0], [], False, rows == 0)
        times = ts[rows]
        codes = _key_codes(keys.take(pa.array(rows)))
        order = np.lexsort((times, codes))
        rows, times, codes = rows[order], times[order], codes[order]
        boundary = np.ones(len(rows), dtype=np.bool_)
        boundary[1:] = (codes[1:] != codes[:-1]) | (times[1:] > times[:-1] + gap)
        first = np.flatnonzero(boundary)
        last = np.append(first[1:] - 1, len(rows) - 1)
        taken = pa.array(rows)
        columns: dict[str, Any] = {"_sid": np.cumsum(boundary) - 1}
        wide = False
        for agg in self.aggs.aggregates:
            column, _ = agg.arrow
            if column != [] and column not in columns:
                values = batch.column(column).take(taken)
                columns[column] = _exact_for_sums(values)
                wide |= columns[column] is not values
        grouped = pa.table(columns).group_by("_sid", use_threads=False).aggregate(self.aggs.arrow)
        by_session = pa.array(np.argsort(grouped.column("_sid").to_numpy()))
        partials = [grouped.column(a.partial_column()).take(by_session) for a in self.aggs.aggregates]
        end = times[last] + gap
        return SessionChunk(
            rows,
            np.cumsum(boundary) - 1,
            keys.take(pa.array(rows[first])),
            times[first],
            end,
            partials,
            wide,
            end - 1 <= self.watermark,
        )

    def _merge_session_columns(self, chunk: SessionChunk) -> str | np.ndarray[Any, Any]:
        """Merge the chunk's sessions that are not late into the columns and return which are late;
        or say why the columns cannot take them (nothing changed then)."""
        assert self.scols is not None
        if chunk.wide:
            return "a sum beyond the exact int64 range (2**62)"
        slots = [_partial_slot(p) for p in chunk.partials]
        bad = next((p for p in slots if isinstance(p, str)), None)
        if bad is not None:
            return bad
        keys = chunk.keys
        kgs = key_groups(keys, self.backend.max_parallelism)
        outside = np.nonzero((kgs < self.backend.key_groups.first) | (kgs > self.backend.key_groups.last))[0]
        if len(outside):
            self.backend.set_current_key(keys[int(outside[0])].as_py())  # raises KeyOutOfRangeError
        values = (
            keys if pa.types.is_string(keys.type) else keys.to_numpy(zero_copy_only=False).astype(np.int64)
        )
        late = chunk.candidate.copy()
        if late.any():
            at = np.flatnonzero(late)
            some = values.take(pa.array(at)) if isinstance(values, pa.Array) else values[at]
            late[at] = ~self.scols.touching(some, chunk.start[at], chunk.end[at])
        keep = np.flatnonzero(~late)
        if len(keep) < chunk.size:
            values = values.take(pa.array(keep)) if isinstance(values, pa.Array) else values[keep]
            kgs, slots = kgs[keep], [s[keep] for s in slots]
        try:
            self.scols.merge(values, kgs, chunk.start[keep], chunk.end[keep], slots)  # type: ignore[arg-type]
        except Refused as refused:
            return str(refused)
        return late

    def _merge_sessions_heap(self, chunk: SessionChunk) -> np.ndarray[Any, Any]:
        """``_merge_session_columns`` on the heap backend: each chunk session (in start order per
        key) joins the open sessions of its key it overlaps or touches, folding the pieces by
        (start, open before new); a late one that touches none is left out. Returns which are late."""
        handle = self.backend.get_state(self.session_state)
        partials = [_pylist(c) for c in chunk.partials]
        starts, ends = chunk.start.tolist(), chunk.end.tolist()
        keys = chunk.keys.to_pylist()
        late = chunk.candidate.copy()
        for i in np.flatnonzero(late).tolist():  # against the open sessions before this chunk
            self.backend.set_current_key(keys[i])
            for start in self._session_starts.get(keys[i], []):
                self.backend.set_current_namespace(start)
                value = handle.value()
                if value is not None and start <= ends[i] and starts[i] <= value[0]:
                    late[i] = False
                    break
        for i in np.flatnonzero(~late).tolist():
            key = keys[i]
            low, high = starts[i], ends[i]
            self.backend.set_current_key(key)
            pieces: list[tuple[int, int, list[Any]]] = [(low, 1, [col[i] for col in partials])]
            kept = []
            for start in self._session_starts.get(key, []):
                self.backend.set_current_namespace(start)
                value = handle.value()
                assert value is not None
                if start <= high and low <= value[0]:  # overlapping or touching: joined
                    low, high = min(low, start), max(high, value[0])
                    pieces.append((start, 0, value[1:]))
                    handle.clear()
                else:
                    kept.append(start)
            pieces.sort(key=lambda piece: piece[:2])
            acc = self.aggs.merge(self.aggs.zero(), pieces[0][2])
            for piece in pieces[1:]:
                acc = self.aggs.merge(acc, piece[2])
            self.backend.set_current_namespace(low)
            handle.update([high, *acc])
            self._session_starts[key] = sorted([*kept, low])
            heapq.heappush(self._session_due, (high - 1, next(self._sequence), key, low))
        return late

    def _fire_sessions(self, watermark: int) -> None:
        """Emit and drop every session with ``end - 1 <= watermark``."""
        self._fired_through = max(self._fired_through, watermark)
        if self.scols is not None:
            fired = self.scols.fire(watermark)
            if fired is not None:
                self._emit_sessions(fired)
            return
        handle = self.backend.get_state(self.session_state)
        due = self._session_due
        while due and due[0][0] <= watermark:
            last, _, key, start = heapq.heappop(due)
            starts = self._session_starts.get(key)
            if not starts or start not in starts:
                continue  # fired or joined into another session already
            self.backend.set_current_key(key)
            self.backend.set_current_namespace(start)
            value = handle.value()
            if value is None or value[0] - 1 != last:
                continue  # the session grew since: its newer entry fires it
            handle.clear()
            starts.remove(start)
            if not starts:
                del self._session_starts[key]
            self._results.append((key, start, value[0], value[1:]))

    def _emit_sessions(self, fired: Sessions) -> None:
        keys = fired.skeys if fired.skeys is not None else pa.array(fired.index, pa.int64())
        columns: dict[str, Any] = {
            self.key_name: keys,
            "window_start": pa.array(fired.start, pa.int64()),
            "window_end": pa.array(fired.end, pa.int64()),
        }
        columns.update(self._output_columns([pa.array(s) for s in fired.slots]))
        columns["_ts"] = pa.array(fired.end - 1, pa.int64())
        self.out.emit(pa.RecordBatch.from_pydict(columns))

    def _index_sessions(self) -> None:
        """The heap backend's open sessions: ``_session_starts`` and ``_session_due`` from its state."""
        self._session_starts, self._session_due = {}, []
        bulk = self.backend.bulk(self.session_state)
        for ns, keys in self.backend.keys_by_namespace(self.session_state.name).items():
            for key, value in zip(keys, bulk.get_many(keys, namespace=ns)):
                if value is not None:
                    self._session_starts.setdefault(key, []).append(int(ns))
                    self._session_due.append((value[0] - 1, next(self._sequence), key, int(ns)))
        for starts in self._session_starts.values():
            starts.sort()
        heapq.heapify(self._session_due)

    def _demote_sessions(self) -> None:
        """Move the columnar sessions into the heap backend for the rest of the epoch."""
        cols, self.scols = self.scols, None
        assert cols is not None
        if self._restored_from is not None:
            self.backend.restore([], from_checkpoint=self._restored_from)  # the base of reuse
        rows = cols.rows
        if rows is not None and len(rows):
            bulk = self.backend.bulk(self.session_state)
            keys = rows.skeys.to_pylist() if rows.skeys is not None else rows.index.tolist()
            values = [list(v) for v in zip(*(s.tolist() for s in (rows.end, *rows.slots)))]
            for start in np.unique(rows.start).tolist():
                at = np.flatnonzero(rows.start == start).tolist()
                bulk.put_many([keys[i] for i in at], [values[i] for i in at], namespace=start)
        self.backend.mark_changed(cols.changed)
        self._index_sessions()

    # -- session windows, timer mode -----------------------------------------------------------------
    def _process_sessions(self, batch: pa.RecordBatch) -> None:
        gap = self.assigner.gap_ms
        ts = event_times(batch)
        keys = self.keys_of(batch).to_pylist()
        inputs = {
            a.arrow[0]: batch.column(a.arrow[0]).to_pylist() for a in self.aggs.aggregates if a.arrow[0] != []
        }
        handle = self.backend.get_state(self.sessions)
        for i in np.argsort(ts, kind="stable"):
            t, key = int(ts[i]), keys[i]
            partial = [
                a.record_partial(None if a.arrow[0] == [] else inputs[a.arrow[0]][i])
                for a in self.aggs.aggregates
            ]
            self.backend.set_current_key(key)
            sessions = handle.value() or []
            start, end, acc = t, t + gap, self.aggs.merge(self.aggs.zero(), partial)
            kept, joined = [], []
            for s, e, a in sessions:
                if s <= end and start <= e:  # overlapping or touching: merge (Flink's TimeWindow.intersects)
                    joined.append((s, e))
                    start, end, acc = min(s, start), max(e, end), self.aggs.merge(a, acc)
                else:
                    kept.append([s, e, a])
            if end - 1 + self.lateness <= self.watermark:  # Flink: lateness of the merged window
                self.late_records += 1
                self.out.side("late", batch.slice(int(i), 1))
                continue
            for s, e in joined:
                self.timers.delete_event_time_timer(key, s, e - 1)
            kept.append([start, end, acc])
            handle.update(sorted(kept))
            self.timers.register_event_time_timer(key, start, end - 1)
        self.flush_timer_output()

    # -- timers --------------------------------------------------------------------------------
    def on_event_time(self, timer: InternalTimer[Any, Any]) -> None:
        key, ws = timer.key, timer.namespace
        self.backend.set_current_key(key)
        if self.session:
            handle = self.backend.get_state(self.sessions)
            sessions = handle.value() or []
            remaining = []
            for s, e, a in sessions:
                if s == ws and e - 1 == timer.timestamp:
                    self._results.append((key, s, e, a))
                else:
                    remaining.append([s, e, a])
            handle.update(remaining or None)
            return
        size = self.assigner.size()
        end = ws + size
        handle = self.backend.get_state(self.acc)
        self.backend.set_current_namespace(ws)
        acc = handle.value()
        if timer.timestamp == end - 1 and acc is not None:
            self._results.append((key, ws, end, acc))
        if timer.timestamp == end - 1 + self.lateness:
            handle.clear()

    def flush_timer_output(self) -> None:
        if not self._results:
            return
        rows = self._results
        self._results = []
        columns: dict[str, Any] = {
            self.key_name: pa.array([r[0] for r in rows], self._key_type),
            "window_start": pa.array([r[1] for r in rows], pa.int64()),
            "window_end": pa.array([r[2] for r in rows], pa.int64()),
        }
        if all(type(a) in _IDENTITY_RESULT for a in self.aggs.aggregates):
            results = [r[3] for r in rows]  # result(acc) is acc: skip a call per row and aggregate
        else:
            results = [self.aggs.results(r[3]) for r in rows]
        slots = [[res[j] for res in results] for j in range(len(self.aggs.aggregates))]
        columns.update(self._output_columns(slots))
        columns["_ts"] = pa.array([r[2] - 1 for r in rows], pa.int64())
        self.out.emit(pa.RecordBatch.from_pydict(columns))

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {"late_records": self.late_records}
        if self.fallback is not None:
            out["heap_fallback"] = self.fallback
        return out


_REPORTED: set[tuple[str | None, str]] = set()


@dataclass(frozen=True)
class SessionChunk:
    """A chunk as sessions (``WindowOperator._session_chunk``): its rows (positions, in session
    order) with the session of each, and per chunk session (by key, then start) its key, ``[start,
    end)`` and partial aggregates; ``wide`` when an int column was summed as decimals (a sum that
    could leave int64); ``candidate`` where the session ends at or before the watermark (late unless
    it joins an open session)."""

    rows: np.ndarray[Any, Any]
    session_of: np.ndarray[Any, Any]
    keys: pa.Array
    start: np.ndarray[Any, Any]
    end: np.ndarray[Any, Any]
    partials: list[Any]
    wide: bool
    candidate: np.ndarray[Any, Any]

    @property
    def size(self) -> int:
        return len(self.start)


def _column_keys(keys: pa.Array) -> pa.Array:
    """Keys as the columns take them (large strings as strings)."""
    return keys.cast(pa.string()) if pa.types.is_large_string(keys.type) else keys


def _key_codes(keys: pa.Array) -> np.ndarray[Any, Any]:
    """An int per key, equal exactly for equal keys (their order means nothing)."""
    if pa.types.is_integer(keys.type) and not keys.null_count:
        return np.asarray(keys.to_numpy(), dtype=np.int64)
    if not keys.null_count:
        try:
            return np.asarray(pc.dictionary_encode(keys).indices.to_numpy(), dtype=np.int64)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            pass
    codes: dict[Any, int] = {}
    return np.array([codes.setdefault(_hashable(k), len(codes)) for k in keys.to_pylist()], dtype=np.int64)


def _hashable(key: Any) -> Any:
    if isinstance(key, dict):
        return tuple((k, _hashable(v)) for k, v in key.items())
    if isinstance(key, list):
        return tuple(_hashable(v) for v in key)
    return key


"""(operator uid, reason) pairs already logged by this process."""

_ = MIN_TIMESTAMP


def _late_rows(num_rows: int, rows: np.ndarray[Any, Any], live: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Rows none of whose windows is live. ``rows`` lists each row once per window it belongs to;
    when that is once (tumbling windows: ``rows`` is ``0..n-1``), the late rows are the dead ones."""
    late: np.ndarray[Any, Any] = (
        rows[~live] if len(rows) == num_rows else np.setdiff1d(np.arange(num_rows), rows[live])
    )
    return late


def _exact_for_sums(column: Any) -> Any:
    """``column``, or -- when it holds ints whose sum over the chunk could pass int64 (Arrow's grouped
    sum would wrap silently) -- the same values as ``decimal128(38, 0)``, which Arrow sums exactly."""
    if not pa.types.is_integer(column.type) or not len(column):
        return column
    bounds = pc.min_max(column).as_py()
    low, high = bounds["min"], bounds["max"]
    if low is None or max(abs(low), abs(high)) * len(column) < _INT_SAFE:
        return column
    return column.cast(pa.decimal128(38, 0))


def _pylist(column: Any) -> list[Any]:
    """A partial column's values; exact decimal sums of ints (``_exact_for_sums``) as ints."""
    values: list[Any] = column.to_pylist()
    if pa.types.is_decimal(column.type) and column.type.scale == 0:
        return [None if v is None else int(v) for v in values]
    return values


def _array(values: Any, wide: Any = None) -> Any:
    """A slot column as an Arrow array: as it is, or from the heap path's Python values; with
    ``wide``, ints beyond int64 (exact Python sums) become that type instead of failing."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    try:
        return pa.array(values)
    except (OverflowError, pa.ArrowInvalid):
        if wide is None:
            raise
        return pa.array([None if v is None else float(v) for v in values], wide)


def _partial_slot(column: Any) -> np.ndarray[Any, Any] | str:
    """A partial-aggregate column as the slot array the columns merge (int64, float64 or bool, the
    values ``to_pylist`` gives the heap backend), or the reason it has none."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    kind = column.type
    if column.null_count:
        return f"a partial aggregate of type {kind} with nulls"
    if pa.types.is_integer(kind):
        try:
            return np.asarray(column.cast(pa.int64()).to_numpy())
        except pa.ArrowInvalid:
            return f"a partial aggregate of type {kind} beyond int64"
    if pa.types.is_floating(kind):
        return np.asarray(column.cast(pa.float64()).to_numpy())
    if pa.types.is_boolean(kind):
        return np.asarray(column.to_numpy(zero_copy_only=False))
    return f"a partial aggregate of type {kind}"


_INT_SAFE = 1 << 62
_IDENTITY_RESULT = (Count, CountOf, Sum, Min, Max, First, Last)
_DECIMAL_RESULT = (Sum, Min, Max, First, Last)


def _vector_partials(aggs: Aggregates, columns: list[Any]) -> np.ndarray[Any, Any] | None:
    """The per-(key, window) partials as an int64 matrix (one column per aggregate) when every
    aggregate is exactly ``Count`` or ``Sum`` over integers without nulls -- the case whose merge is
    ``acc + partial`` element-wise; None otherwise (the generic per-row merge is used)."""
    if not all(type(a) in (Count, Sum) for a in aggs.aggregates):
        return None
    arrays = []
    for col in columns:
        if col.null_count or not pa.types.is_integer(col.type):
            return None
        arrays.append(col.to_numpy().astype(np.int64, copy=False))
    return np.column_stack(arrays)


def _merge_vector(current: list[Any], partials: np.ndarray[Any, Any]) -> list[Any] | None:
    """``acc + partial`` for every row at once (a missing accumulator is zero). None when a stored
    accumulator is not a list of ints of the right width, or a result could leave int64's safe range
    (Python ints never overflow; then the exact per-row merge runs instead)."""
    width = partials.shape[1]
    zero = [0] * width
    try:
        stored = np.array([c if c is not None else zero for c in current])
    except (ValueError, OverflowError):
        return None
    if stored.dtype != np.int64 or stored.shape != partials.shape:
        return None
    if len(stored) and (np.abs(stored).max() >= _INT_SAFE or np.abs(partials).max() >= _INT_SAFE):
        return None
    merged: list[Any] = (stored + partials).tolist()
    return merged
