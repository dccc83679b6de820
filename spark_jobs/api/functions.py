"""User functions with keyed state and timers (Flink's KeyedProcessFunction, Python spelling).

``process_key(key, rows, ctx)`` is called once per distinct key per chunk with that key's rows as a
list of dicts in arrival order (the vectorized grain); its default loops ``process_element``.
``ctx.state(descriptor)`` is scoped to the current key. Timers fire ``on_timer`` when the
watermark (event time) or the epoch's processing time reaches them. Emit rows with ``ctx.emit``.
"""

from __future__ import annotations

from typing import Any, Protocol

from state_store.core.state import ValueStateDescriptor


class ProcessContext(Protocol):
    @property
    def current_key(self) -> Any: ...

    @property
    def current_watermark(self) -> int: ...

    @property
    def processing_time(self) -> int: ...

    def state(self, descriptor: Any) -> Any: ...

    def register_event_time_timer(self, timestamp: int) -> None: ...

    def register_processing_time_timer(self, timestamp: int) -> None: ...

    def delete_event_time_timer(self, timestamp: int) -> None: ...

    def emit(self, row: dict[str, Any]) -> None: ...

    def side_output(self, tag: str, row: dict[str, Any]) -> None: ...


class KeyedProcessFunction:
    """Subclass and override ``process_element`` (and ``on_timer`` if you register timers).

    ``state_descriptors`` lists the descriptors the function uses, so that empty state still
    appears in snapshots and restore plans.
    """

    state_descriptors: tuple[Any, ...] = ()

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: ProcessContext) -> None:
        for row in rows:
            self.process_element(row, ctx)

    def process_element(self, row: dict[str, Any], ctx: ProcessContext) -> None:
        raise NotImplementedError("override process_element(row, ctx) or process_key(key, rows, ctx)")

    def on_timer(self, timestamp: int, ctx: ProcessContext) -> None:
        return None


class CoProcessFunction:
    """Two keyed inputs, one keyed state (Flink's KeyedCoProcessFunction): override
    ``process_element1``/``process_element2`` (or ``process_key1``/``process_key2``) and ``on_timer``."""

    state_descriptors: tuple[Any, ...] = ()

    def process_key1(self, key: Any, rows: list[dict[str, Any]], ctx: ProcessContext) -> None:
        for row in rows:
            self.process_element1(row, ctx)

    def process_key2(self, key: Any, rows: list[dict[str, Any]], ctx: ProcessContext) -> None:
        for row in rows:
            self.process_element2(row, ctx)

    def process_element1(self, row: dict[str, Any], ctx: ProcessContext) -> None:
        raise NotImplementedError("override process_element1(row, ctx)")

    def process_element2(self, row: dict[str, Any], ctx: ProcessContext) -> None:
        raise NotImplementedError("override process_element2(row, ctx)")

    def on_timer(self, timestamp: int, ctx: ProcessContext) -> None:
        return None


class BatchContext(Protocol):
    """What a ``BatchProcessFunction`` may do besides returning rows (all vectorized)."""

    @property
    def current_watermark(self) -> int: ...

    @property
    def processing_time(self) -> int: ...

    def update_state(self, state: Any) -> None:
        """Set the state of every key in ``state`` (a table: the key column ``key`` and every field
        of ``state_schema``); a key listed twice keeps its last row."""
        ...

    def clear_state(self, keys: Any) -> None:
        """Drop the state of ``keys`` (an array)."""
        ...

    def register_timers(self, keys: Any, timestamps: Any) -> None:
        """Event-time timers: ``on_timers`` gets ``(key, timestamp)`` once the watermark reaches
        ``timestamp`` (one timer per key and timestamp, as Flink's)."""
        ...

    def delete_timers(self, keys: Any, timestamps: Any) -> None: ...


class BatchProcessFunction:
    """A vectorized keyed process function (Spark's ``transformWithStateInPandas``; Flink's
        KeyedProcessFunction a chunk at a time): user logic runs once per chunk, not per record.

        ``state_schema`` (a ``pyarrow.Schema``) is the value state every key may hold: one row per key.
        ``process(rows, state, ctx)`` gets the chunk's records of this subtask (a ``pyarrow.Table`` in
        arrival order, with a ``key`` column added: the key of each row) and ``state``: one row per
        distinct key of ``rows`` (column ``key``, then the fields of ``state_schema``; all null for a key
        without state). It returns the rows to emit (a table or None; without ``_ts`` they carry the
        chunk's largest event time) and changes state and timers through ``ctx``. ``on_timers(timers,
        state, ctx)`` gets every timer the watermark reached (columns ``key``, ``timestamp``; ``state``
        has one row per timer, in the same order) and returns rows the same way (without ``_ts`` they carry
    the largest timestamp of the timers fired together).

        State is kept as one list of the schema's values per key (state name ``batch_state``): fixed-width
        fields write the typed state-file layout; a savepoint lists them like any value state.
    """

    state_schema: Any = None

    @property
    def state_descriptors(self) -> tuple[Any, ...]:
        return (ValueStateDescriptor[list[Any]](BATCH_STATE),)

    def process(self, rows: Any, state: Any, ctx: BatchContext) -> Any:
        raise NotImplementedError("override process(rows, state, ctx)")

    def on_timers(self, timers: Any, state: Any, ctx: BatchContext) -> Any:
        return None


BATCH_STATE = "batch_state"
