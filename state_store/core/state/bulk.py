"""Vectorized state access for one chunk of records: the fast path.

``backend.bulk(descriptor)`` returns an accessor whose methods take parallel sequences (``keys``
plus values/partials, e.g. Arrow columns converted with ``to_pylist()``) and a namespace shared by
the whole call. Per call:

1. the key group of every *distinct* key is computed once (cached by the backend) and every key
   is checked against the subtask's range before anything is written: a key outside the range
   fails the whole call with nothing changed;
2. the clock is read once (TTL states only): all entries touched by one call get the same time;
3. pairs are applied in order, so ``put_many(["a", "a"], [1, 2])`` leaves 2 -- exactly the result
   of the per-record calls in the same order.

The typical aggregation loop pre-aggregates a chunk with Arrow/pandas (``groupby``), then calls
``merge_many(distinct_keys, partial_accumulators)``: one Python call per distinct key, not per record.
Sequences of different lengths are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from state_store.core.state.descriptors import AggregateFunction
from state_store.core.state.table import ABSENT, StateTable

if TYPE_CHECKING:
    from state_store.core.state.backend import KeyedStateBackend

T = TypeVar("T")
IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")
UK = TypeVar("UK")
UV = TypeVar("UV")


class _Bulk:
    __slots__ = ("_backend", "_table")

    def __init__(self, backend: KeyedStateBackend, table: StateTable) -> None:
        self._backend = backend
        self._table = table

    def _prepare(self, keys: Sequence[Any], *others: Sequence[Any]) -> tuple[list[int], int]:
        for other in others:
            if len(other) != len(keys):
                raise ValueError(
                    f"bulk access to state {self._table.name!r}: {len(keys)} keys but {len(other)} values"
                )
        groups = self._backend.key_groups_for(keys, self._table.name)
        return groups, self._backend.now_for(self._table)

    def clear_many(self, keys: Sequence[Any], namespace: Any = None) -> None:
        groups, _ = self._prepare(keys)
        table = self._table
        if table.ttl is not None:
            for kg, key in zip(groups, keys):
                table.remove(kg, (key, namespace))
            return
        by_group, touched = table.groups, set()
        for kg, key in zip(groups, keys):  # StateTable.remove, inlined (no TTL to consult)
            group = by_group.get(kg)
            if group is not None and group.pop((key, namespace), None) is not None:
                touched.add(kg)
                if not group:
                    del by_group[kg]
        table.dirty.update(touched)


class BulkValueState(_Bulk, Generic[T]):
    __slots__ = ("_default",)

    def __init__(self, backend: KeyedStateBackend, table: StateTable, default: T | None) -> None:
        super().__init__(backend, table)
        self._default = default

    def get_many(self, keys: Sequence[Any], namespace: Any = None) -> list[T | None]:
        groups, now = self._prepare(keys)
        table, default = self._table, self._default
        out: list[T | None] = []
        if table.ttl is None:  # StateTable.get, inlined: no expiry to check or refresh
            by_group = table.groups
            for kg, key in zip(groups, keys):
                group = by_group.get(kg)
                cell = None if group is None else group.get((key, namespace))
                out.append(default if cell is None else cell[0])
            return out
        for kg, key in zip(groups, keys):
            found = table.get(kg, (key, namespace), now)
            out.append(default if found is ABSENT else found)
        return out

    def pop_many(self, keys: Sequence[Any], namespace: Any = None) -> list[T | None]:
        """``get_many`` then ``clear_many`` of the same keys, in one pass when there is no TTL (a
        window firing: read every accumulator of the window, then drop the window)."""
        table = self._table
        if table.ttl is not None:
            values = self.get_many(keys, namespace)
            self.clear_many(keys, namespace)
            return values
        groups, _ = self._prepare(keys)
        by_group, touched, default = table.groups, set(), self._default
        out: list[T | None] = []
        for kg, key in zip(groups, keys):
            group = by_group.get(kg)
            cell = None if group is None else group.pop((key, namespace), None)
            if cell is None:
                out.append(default)
                continue
            out.append(cell[0])
            touched.add(kg)
            if not group:
                del by_group[kg]
        table.dirty.update(touched)
        return out

    def put_many(self, keys: Sequence[Any], values: Sequence[T | None], namespace: Any = None) -> None:
        """Store each value under its key; a None value clears that key (as ``update(None)``)."""
        groups, now = self._prepare(keys, values)
        table = self._table
        if table.ttl is None:  # StateTable.put, inlined: every entry is stored without expiry
            by_group, touched = table.groups, set()
            for kg, key, value in zip(groups, keys, values):
                if value is None:
                    table.remove(kg, (key, namespace))
                    continue
                group = by_group.get(kg)
                if group is None:
                    group = by_group[kg] = {}
                group[(key, namespace)] = (value, None)
                touched.add(kg)
            table.dirty.update(touched)
            return
        for kg, key, value in zip(groups, keys, values):
            if value is None:
                table.remove(kg, (key, namespace))
            else:
                table.put(kg, (key, namespace), value, now)


class BulkListState(_Bulk, Generic[T]):
    __slots__ = ()

    def get_many(self, keys: Sequence[Any], namespace: Any = None) -> list[list[T]]:
        groups, now = self._prepare(keys)
        return [self._table.list_get(kg, (key, namespace), now) for kg, key in zip(groups, keys)]

    def add_many(self, keys: Sequence[Any], values: Sequence[T], namespace: Any = None) -> None:
        """Append each value to its key's list, in order."""
        groups, now = self._prepare(keys, values)
        for kg, key, value in zip(groups, keys, values):
            self._table.list_add(kg, (key, namespace), (value,), now)


class BulkMapState(_Bulk, Generic[UK, UV]):
    __slots__ = ()

    def get_many(
        self, keys: Sequence[Any], user_keys: Sequence[UK], namespace: Any = None
    ) -> list[UV | None]:
        groups, now = self._prepare(keys, user_keys)
        out: list[UV | None] = []
        for kg, key, user_key in zip(groups, keys, user_keys):
            found = self._table.map_get(kg, (key, namespace), user_key, now)
            out.append(None if found is ABSENT else found)
        return out

    def put_many(
        self, keys: Sequence[Any], user_keys: Sequence[UK], values: Sequence[UV], namespace: Any = None
    ) -> None:
        groups, now = self._prepare(keys, user_keys, values)
        for user_key in user_keys:
            self._backend.check_user_key(self._table.name, user_key)
        for kg, key, user_key, value in zip(groups, keys, user_keys, values):
            self._table.map_put(kg, (key, namespace), user_key, value, now)


class BulkReducingState(_Bulk, Generic[T]):
    __slots__ = ("_reduce",)

    def __init__(self, backend: KeyedStateBackend, table: StateTable, reduce_fn: Callable[[T, T], T]) -> None:
        super().__init__(backend, table)
        self._reduce = reduce_fn

    def get_many(self, keys: Sequence[Any], namespace: Any = None) -> list[T | None]:
        groups, now = self._prepare(keys)
        out: list[T | None] = []
        for kg, key in zip(groups, keys):
            found = self._table.get(kg, (key, namespace), now)
            out.append(None if found is ABSENT else found)
        return out

    def add_many(self, keys: Sequence[Any], values: Sequence[T], namespace: Any = None) -> None:
        groups, now = self._prepare(keys, values)
        table, reduce = self._table, self._reduce
        for kg, key, value in zip(groups, keys, values):
            ek = (key, namespace)
            current = table.get_for_update(kg, ek, now)
            table.put(kg, ek, value if current is ABSENT else reduce(current, value), now)


class BulkAggregatingState(_Bulk, Generic[IN, ACC, OUT]):
    __slots__ = ("_fn",)

    def __init__(self, backend: KeyedStateBackend, table: StateTable, fn: AggregateFunction[IN, ACC, OUT]):
        super().__init__(backend, table)
        self._fn = fn

    def get_many(self, keys: Sequence[Any], namespace: Any = None) -> list[OUT | None]:
        """``get_result`` of each key's accumulator (None where there is none)."""
        groups, now = self._prepare(keys)
        out: list[OUT | None] = []
        for kg, key in zip(groups, keys):
            found = self._table.get(kg, (key, namespace), now)
            out.append(None if found is ABSENT else self._fn.get_result(found))
        return out

    def get_accumulators(self, keys: Sequence[Any], namespace: Any = None) -> list[ACC | None]:
        groups, now = self._prepare(keys)
        out: list[ACC | None] = []
        for kg, key in zip(groups, keys):
            found = self._table.get(kg, (key, namespace), now)
            out.append(None if found is ABSENT else found)
        return out

    def add_many(self, keys: Sequence[Any], inputs: Sequence[IN], namespace: Any = None) -> None:
        groups, now = self._prepare(keys, inputs)
        table, fn = self._table, self._fn
        for kg, key, value in zip(groups, keys, inputs):
            ek = (key, namespace)
            acc = table.get_for_update(kg, ek, now)
            table.put(kg, ek, fn.add(value, fn.create_accumulator() if acc is ABSENT else acc), now)

    def merge_many(self, keys: Sequence[Any], partials: Sequence[ACC], namespace: Any = None) -> None:
        """Fold each partial accumulator into its key's stored one (``merge(stored, partial)``)."""
        groups, now = self._prepare(keys, partials)
        table, merge = self._table, self._fn.merge
        for kg, key, partial in zip(groups, keys, partials):
            ek = (key, namespace)
            acc = table.get_for_update(kg, ek, now)
            table.put(kg, ek, partial if acc is ABSENT else merge(acc, partial), now)
