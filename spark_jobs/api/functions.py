"""User functions with keyed state and timers (Flink's KeyedProcessFunction, Python spelling).

``process_key(key, rows, ctx)`` is called once per distinct key per chunk with that key's rows as a
list of dicts in arrival order (the vectorized grain); its default loops ``process_element``.
``ctx.state(descriptor)`` is scoped to the current key. Timers fire ``on_timer`` when the
watermark (event time) or the epoch's processing time reaches them. Emit rows with ``ctx.emit``.
"""

from __future__ import annotations

from typing import Any, Protocol


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
