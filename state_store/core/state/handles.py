"""Per-record state handles (Flink's ``ValueState``, ``ListState``, ``MapState``, ``ReducingState``,
``AggregatingState``), scoped to the backend's current key and namespace.

This is the slow path: one Python call per record. Process chunks with ``backend.bulk(...)``.

A handle is bound to its backend; every call reads the *current* key and namespace at call time,
so one handle serves every key. Calling without a current key raises :class:`NoCurrentKeyError`.
Returned lists and pair lists are fresh copies; returned values are the stored objects (do not
mutate them in place -- write them back with ``update``/``put`` so dirty tracking sees the change).
Values are stored in their JSON form (``table.json_form``: tuples as lists, dict keys sorted), the
form a checkpoint gives back, so a read is the same before and after any checkpoint or restore.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from state_store.core.state.descriptors import (
    AggregateFunction,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from state_store.core.state.table import ABSENT, StateTable, json_form

if TYPE_CHECKING:
    from state_store.core.state.backend import KeyedStateBackend

T = TypeVar("T")
IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")
UK = TypeVar("UK")
UV = TypeVar("UV")


class _Handle:
    __slots__ = ("_backend", "_table")

    def __init__(self, backend: KeyedStateBackend, table: StateTable) -> None:
        self._backend = backend
        self._table = table

    @property
    def name(self) -> str:
        return self._table.name

    def _at(self) -> tuple[int, tuple[Any, Any], int]:
        """(key group, (key, namespace), now) of the current key."""
        kg, ek = self._backend.current_entry(self._table.name)
        return kg, ek, self._backend.now_for(self._table)

    def clear(self) -> None:
        """Remove the state of the current key and namespace."""
        kg, ek = self._backend.current_entry(self._table.name)
        self._table.remove(kg, ek)


class ValueState(_Handle, Generic[T]):
    __slots__ = ("_default",)

    def __init__(self, backend: KeyedStateBackend, table: StateTable, descriptor: ValueStateDescriptor[T]):
        super().__init__(backend, table)
        self._default = descriptor.default

    def value(self) -> T | None:
        """The stored value, or the descriptor's default when unset (or expired)."""
        kg, ek, now = self._at()
        found = self._table.get(kg, ek, now)
        return self._default if found is ABSENT else found

    def update(self, value: T | None) -> None:
        """Store ``value`` (in its JSON form, ``json_form``); ``update(None)`` clears, as in Flink."""
        kg, ek, now = self._at()
        if value is None:
            self._table.remove(kg, ek)
        else:
            self._table.put(kg, ek, json_form(value), now)


class ListState(_Handle, Generic[T]):
    __slots__ = ()

    def get(self) -> list[T]:
        """A new list of the elements (empty when unset)."""
        kg, ek, now = self._at()
        return self._table.list_get(kg, ek, now)

    def add(self, value: T) -> None:
        kg, ek, now = self._at()
        self._table.list_add(kg, ek, (json_form(value),), now)

    def add_all(self, values: Iterable[T]) -> None:
        kg, ek, now = self._at()
        self._table.list_add(kg, ek, map(json_form, values), now)

    def update(self, values: Iterable[T]) -> None:
        """Replace the list; an empty iterable clears."""
        kg, ek, now = self._at()
        self._table.list_set(kg, ek, map(json_form, values), now)


class MapState(_Handle, Generic[UK, UV]):
    __slots__ = ()

    def get(self, user_key: UK) -> UV | None:
        kg, ek, now = self._at()
        found = self._table.map_get(kg, ek, user_key, now)
        return None if found is ABSENT else found

    def put(self, user_key: UK, value: UV) -> None:
        kg, ek, now = self._at()
        self._backend.check_user_key(self._table.name, user_key)
        self._table.map_put(kg, ek, user_key, json_form(value), now)

    def put_all(self, entries: Mapping[UK, UV]) -> None:
        for user_key, value in entries.items():
            self.put(user_key, value)

    def remove(self, user_key: UK) -> None:
        kg, ek = self._backend.current_entry(self._table.name)
        self._table.map_remove(kg, ek, user_key)

    def contains(self, user_key: UK) -> bool:
        kg, ek, now = self._at()
        return self._table.map_get(kg, ek, user_key, now) is not ABSENT

    def items(self) -> list[tuple[UK, UV]]:
        kg, ek, now = self._at()
        return self._table.map_items(kg, ek, now)

    def keys(self) -> list[UK]:
        return [k for k, _ in self.items()]

    def values(self) -> list[UV]:
        return [v for _, v in self.items()]

    def is_empty(self) -> bool:
        return not self.items()


class ReducingState(_Handle, Generic[T]):
    __slots__ = ("_reduce",)

    def __init__(
        self, backend: KeyedStateBackend, table: StateTable, descriptor: ReducingStateDescriptor[T]
    ) -> None:
        super().__init__(backend, table)
        self._reduce = descriptor.reduce_fn

    def get(self) -> T | None:
        kg, ek, now = self._at()
        found = self._table.get(kg, ek, now)
        return None if found is ABSENT else found

    def add(self, value: T) -> None:
        """Store ``reduce_fn(stored, value)``, or ``value`` when nothing (live) is stored."""
        kg, ek, now = self._at()
        current = self._table.get_for_update(kg, ek, now)
        reduced = value if current is ABSENT else self._reduce(current, value)
        self._table.put(kg, ek, json_form(reduced), now)


class AggregatingState(_Handle, Generic[IN, ACC, OUT]):
    __slots__ = ("_fn",)

    def __init__(self, backend: KeyedStateBackend, table: StateTable, fn: AggregateFunction[IN, ACC, OUT]):
        super().__init__(backend, table)
        self._fn = fn

    def get(self) -> OUT | None:
        """``get_result(accumulator)``, or None when no accumulator is stored."""
        kg, ek, now = self._at()
        found = self._table.get(kg, ek, now)
        return None if found is ABSENT else self._fn.get_result(found)

    def add(self, value: IN) -> None:
        kg, ek, now = self._at()
        acc = self._table.get_for_update(kg, ek, now)
        if acc is ABSENT:
            acc = self._fn.create_accumulator()
        self._table.put(kg, ek, json_form(self._fn.add(value, acc)), now)

    def get_accumulator(self) -> ACC | None:
        kg, ek, now = self._at()
        found = self._table.get(kg, ek, now)
        return None if found is ABSENT else found

    def merge_accumulator(self, partial: ACC) -> None:
        """Fold a partial accumulator (e.g. computed for a whole chunk) into the stored one."""
        kg, ek, now = self._at()
        acc = self._table.get_for_update(kg, ek, now)
        merged = partial if acc is ABSENT else self._fn.merge(acc, partial)
        self._table.put(kg, ek, json_form(merged), now)
