"""Heap keyed state backend of one subtask (Flink's ``HeapKeyedStateBackend``), pure and in memory.

The subtask owns a :class:`KeyGroupRange` of a job with a fixed ``max_parallelism``. Records must
already be routed by ``subtask_for_key``: ``set_current_key`` and every bulk call refuse a key whose
key group (``stable_hash(key) % max_parallelism``) is outside the range -- silently keeping it would
lose its state on the next restore, which only reads the key groups a subtask owns.

Checkpoint cycle (the synchronous part; serialization and upload are the caller's async part)::

    restore(snapshots, from_checkpoint=k)   once, before processing (any number of old ranges)
    ... set_current_key / get_state / bulk ...
    snap = snapshot(checkpoint_id=n)        frozen copy; write snap.changed_key_groups, reuse others
    notify_checkpoint_complete(n)           n becomes the base of later incremental snapshots

Dirty tracking (incremental checkpoints)
----------------------------------------
``changed_key_groups`` of a snapshot is relative to ``base_checkpoint_id``: the last checkpoint this
backend was restored from or was notified complete. Trap: it is NOT "since the previous snapshot" --
if checkpoint n is taken and then aborted, its changes must still be written by n + 1, so changes
stay pending until a checkpoint that contains them completes. A savepoint
(``snapshot(checkpoint_id=None)``) is always complete and never moves the base. Reading a TTL state
can also change it (expired entries are removed, ``ON_READ_AND_WRITE`` refreshes expiry); expiry
by the mere passage of time does not mark a key group changed.

Restore (rescaling) takes snapshots of any key-group ranges, keeps only the key groups this
subtask owns, refuses two snapshots that both cover one owned key group, refuses a different
``max_parallelism``, and (by default) verifies that every key really hashes to the group it is
stored under.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, overload

from state_store.core.keygroups import KeyGroupRange, check_key_type, check_max_parallelism, stable_hash
from state_store.core.state.bulk import (
    BulkAggregatingState,
    BulkListState,
    BulkMapState,
    BulkReducingState,
    BulkValueState,
)
from state_store.core.state.descriptors import (
    AggregatingStateDescriptor,
    AnyDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from state_store.core.state.handles import AggregatingState, ListState, MapState, ReducingState, ValueState
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow, merge_kinds
from state_store.core.state.table import StateTable

T = TypeVar("T")
IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")
UK = TypeVar("UK")
UV = TypeVar("UV")

VOID_NAMESPACE: Any = None
"""The namespace of state that is not windowed (Flink's ``VoidNamespace``)."""

_CACHE_LIMIT = 1 << 22
_SHARED_KG_CACHE: dict[int, dict[Any, int]] = {}
"""key -> key group per max_parallelism, shared by the backends of one process (a warm process
hashes each key once, not once per epoch); cleared when it reaches ``_CACHE_LIMIT`` keys."""


def shared_key_group_cache(max_parallelism: int) -> dict[Any, int]:
    """The process-wide ``key -> key group`` dict for ``max_parallelism`` that every backend uses
    (the runtime's shuffle fills the same one, so a key is hashed once per process)."""
    return _SHARED_KG_CACHE.setdefault(max_parallelism, {})


class NoCurrentKeyError(RuntimeError):
    """Keyed state was accessed before ``set_current_key``."""


class KeyOutOfRangeError(ValueError):
    """A key whose key group this subtask does not own."""


class StateRegistrationError(ValueError):
    """A state name registered again with another kind or TTL, or a TTL without a clock."""


class KeyedStateBackend:
    """Keyed state of one subtask; see the module docstring. One thread per backend."""

    def __init__(
        self, key_groups: KeyGroupRange, max_parallelism: int, *, now_ms: Callable[[], int] | None = None
    ) -> None:
        check_max_parallelism(max_parallelism)
        if key_groups.last >= max_parallelism:
            raise ValueError(
                f"key group range {key_groups} exceeds max_parallelism {max_parallelism} "
                f"(key groups are 0..{max_parallelism - 1})"
            )
        self._range = key_groups
        self._max_parallelism = max_parallelism
        self._clock = now_ms
        self._tables: dict[str, StateTable] = {}
        self._handles: dict[tuple[str, bool], Any] = {}
        self._kg_cache: dict[Any, int] = shared_key_group_cache(max_parallelism)
        self._key: Any = None
        self._has_key = False
        self._kg = -1
        self._namespace: Any = VOID_NAMESPACE
        self._dirty: set[int] = set()
        self._pending: dict[int, frozenset[int]] = {}
        self._base: int | None = None
        self._restored: list[KeyGroupRange] = []

    # -- identity -------------------------------------------------------------------------------
    @property
    def key_groups(self) -> KeyGroupRange:
        return self._range

    @property
    def max_parallelism(self) -> int:
        return self._max_parallelism

    @property
    def state_names(self) -> tuple[str, ...]:
        return tuple(sorted(self._tables))

    def kind_of(self, state_name: str) -> StateKind | None:
        table = self._tables.get(state_name)
        return None if table is None else table.kind

    # -- current key and namespace --------------------------------------------------------------
    def key_group_of(self, key: Any) -> int:
        """``stable_hash(key) % max_parallelism``, cached per distinct key."""
        try:
            kg = self._kg_cache.get(key)
        except TypeError:  # unhashable: let key_bytes explain which types are supported
            kg = None
        if kg is None:
            kg = stable_hash(key) % self._max_parallelism
            if len(self._kg_cache) >= _CACHE_LIMIT:
                self._kg_cache.clear()
            self._kg_cache[key] = kg
        return kg

    def _owned_key_group(self, key: Any, state_name: str | None = None) -> int:
        kg = self.key_group_of(key)
        if kg not in self._range:
            target = f"state {state_name!r}" if state_name else "keyed state"
            raise KeyOutOfRangeError(
                f"key {key!r} belongs to key group {kg}, but this subtask owns key groups {self._range} "
                f"(max_parallelism {self._max_parallelism}), so it cannot hold {target}: route records "
                "with subtask_for_key(key, max_parallelism, parallelism) before processing them"
            )
        return kg

    def set_current_key(self, key: Any) -> None:
        """Scope every handle to ``key``; refuses keys of key groups this subtask does not own."""
        self._kg = self._owned_key_group(key)
        self._key = key
        self._has_key = True

    @property
    def current_key(self) -> Any:
        if not self._has_key:
            raise NoCurrentKeyError("no current key: call set_current_key(key) first")
        return self._key

    @property
    def current_key_group(self) -> int:
        self.current_key  # noqa: B018 - raises when unset
        return self._kg

    def set_current_namespace(self, namespace: Any) -> None:
        """Scope handles to ``namespace`` (e.g. a window as ``(start, end)``); None is the default."""
        check_key_type(namespace, "namespace")
        self._namespace = namespace

    @property
    def current_namespace(self) -> Any:
        return self._namespace

    # -- for the state handles (handles.py, bulk.py): the current entry, owned key groups, TTL time --
    def current_entry(self, state_name: str) -> tuple[int, tuple[Any, Any]]:
        if not self._has_key:
            raise NoCurrentKeyError(
                f"no current key: call set_current_key(key) before accessing keyed state {state_name!r}"
            )
        return self._kg, (self._key, self._namespace)

    def key_groups_for(self, keys: Sequence[Any], state_name: str) -> list[int]:
        """Owned key group of every key (the per-key path of ``_owned_key_group``, unrolled)."""
        get = self._kg_cache.get
        first, last = self._range.first, self._range.last
        out: list[int] = []
        append = out.append
        for key in keys:
            try:
                kg = get(key)
            except TypeError:
                kg = None
            if kg is None or not first <= kg <= last:
                kg = self._owned_key_group(key, state_name)
            append(kg)
        return out

    def now_for(self, table: StateTable) -> int:
        if table.ttl is None or self._clock is None:
            return 0
        return self._clock()

    def check_user_key(self, state_name: str, user_key: Any) -> None:
        try:
            check_key_type(user_key, "map key")
        except TypeError as exc:
            raise TypeError(f"map state {state_name!r}: {exc}") from None

    # -- registration ---------------------------------------------------------------------------
    def _register(self, descriptor: AnyDescriptor) -> StateTable:
        name = descriptor.name
        if not isinstance(name, str) or not name:
            raise StateRegistrationError(f"state name must be a non-empty string, got {name!r}")
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = StateTable(name, descriptor.kind, self._dirty)
        if table.kind is not descriptor.kind:
            raise StateRegistrationError(
                f"state {name!r} is a {table.kind.value} state (registered or restored) and cannot be "
                f"used as a {descriptor.kind.value} state: pick another name or migrate the state"
            )
        if table.descriptor is None:
            if descriptor.ttl is not None and self._clock is None:
                raise StateRegistrationError(
                    f"state {name!r} has a TTL but the backend has no clock: "
                    "pass now_ms= to KeyedStateBackend"
                )
            table.descriptor, table.ttl = descriptor, descriptor.ttl
        elif table.ttl != descriptor.ttl:
            raise StateRegistrationError(
                f"state {name!r} is already registered with ttl {table.ttl}, not {descriptor.ttl}"
            )
        return table

    @overload
    def get_state(self, descriptor: ValueStateDescriptor[T]) -> ValueState[T]: ...
    @overload
    def get_state(self, descriptor: ListStateDescriptor[T]) -> ListState[T]: ...
    @overload
    def get_state(self, descriptor: MapStateDescriptor[UK, UV]) -> MapState[UK, UV]: ...
    @overload
    def get_state(self, descriptor: ReducingStateDescriptor[T]) -> ReducingState[T]: ...
    @overload
    def get_state(
        self, descriptor: AggregatingStateDescriptor[IN, ACC, OUT]
    ) -> AggregatingState[IN, ACC, OUT]: ...
    def get_state(self, descriptor: AnyDescriptor) -> Any:
        """The per-record handle of ``descriptor`` (registered on first use, same handle after)."""
        table = self._register(descriptor)
        handle = self._handles.get((table.name, False))
        if handle is None:
            first = table.descriptor
            if isinstance(first, ValueStateDescriptor):
                handle = ValueState(self, table, first)
            elif isinstance(first, ListStateDescriptor):
                handle = ListState(self, table)
            elif isinstance(first, MapStateDescriptor):
                handle = MapState(self, table)
            elif isinstance(first, ReducingStateDescriptor):
                handle = ReducingState(self, table, first)
            else:
                assert isinstance(first, AggregatingStateDescriptor)
                handle = AggregatingState(self, table, first.aggregate_function)
            self._handles[(table.name, False)] = handle
        return handle

    @overload
    def bulk(self, descriptor: ValueStateDescriptor[T]) -> BulkValueState[T]: ...
    @overload
    def bulk(self, descriptor: ListStateDescriptor[T]) -> BulkListState[T]: ...
    @overload
    def bulk(self, descriptor: MapStateDescriptor[UK, UV]) -> BulkMapState[UK, UV]: ...
    @overload
    def bulk(self, descriptor: ReducingStateDescriptor[T]) -> BulkReducingState[T]: ...
    @overload
    def bulk(
        self, descriptor: AggregatingStateDescriptor[IN, ACC, OUT]
    ) -> BulkAggregatingState[IN, ACC, OUT]: ...
    def bulk(self, descriptor: AnyDescriptor) -> Any:
        """The vectorized accessor of ``descriptor`` (see ``state_store.core.state.bulk``)."""
        table = self._register(descriptor)
        accessor = self._handles.get((table.name, True))
        if accessor is None:
            first = table.descriptor
            if isinstance(first, ValueStateDescriptor):
                accessor = BulkValueState(self, table, first.default)
            elif isinstance(first, ListStateDescriptor):
                accessor = BulkListState(self, table)
            elif isinstance(first, MapStateDescriptor):
                accessor = BulkMapState(self, table)
            elif isinstance(first, ReducingStateDescriptor):
                accessor = BulkReducingState(self, table, first.reduce_fn)
            else:
                assert isinstance(first, AggregatingStateDescriptor)
                accessor = BulkAggregatingState(self, table, first.aggregate_function)
            self._handles[(table.name, True)] = accessor
        return accessor

    def keys(self, state_name: str, namespace: Any = VOID_NAMESPACE) -> list[Any]:
        """Keys holding ``state_name`` in ``namespace``, in key-group order (expiry not checked)."""
        table = self._tables.get(state_name)
        if table is None:
            return []
        return [key for kg in sorted(table.groups) for key, ns in table.groups[kg] if ns == namespace]

    def keys_by_namespace(self, state_name: str) -> dict[Any, list[Any]]:
        """Keys holding ``state_name`` grouped by namespace, in key-group order (expiry not checked)."""
        table = self._tables.get(state_name)
        out: dict[Any, list[Any]] = {}
        if table is None:
            return out
        for kg in sorted(table.groups):
            for key, ns in table.groups[kg]:
                out.setdefault(ns, []).append(key)
        return out

    # -- TTL cleanup ----------------------------------------------------------------------------
    def cleanup_expired(self) -> int:
        """Remove every expired entry now (needs the clock); return how many were removed."""
        if self._clock is None:
            return 0
        now = self._clock()
        return sum(t.cleanup_expired(now) for t in self._tables.values() if t.filters_expired())

    # -- snapshot and dirty tracking ------------------------------------------------------------
    @property
    def changed_key_groups(self) -> frozenset[int]:
        """Key groups whose content may differ from checkpoint ``base_checkpoint_id``."""
        changed = set(self._dirty)
        for groups in self._pending.values():
            changed |= groups
        return frozenset(changed)

    @property
    def base_checkpoint_id(self) -> int | None:
        return self._base

    def snapshot(self, checkpoint_id: int | None = None) -> KeyedStateSnapshot:
        """Freeze all state (expired entries left out). With a checkpoint id, the snapshot's changes
        stay pending until ``notify_checkpoint_complete``; without (a savepoint), nothing moves."""
        if checkpoint_id is not None:
            latest = max([*self._pending, self._base if self._base is not None else -1])
            if checkpoint_id <= latest:
                raise ValueError(
                    f"checkpoint {checkpoint_id} is not newer than checkpoint {latest} this backend "
                    "already snapshotted or restored: checkpoint ids must increase"
                )
        now = self._clock() if self._clock is not None else None
        groups: dict[int, dict[str, tuple[StateRow, ...]]] = {}
        for name in sorted(self._tables):
            table = self._tables[name]
            cutoff = now if table.filters_expired() else None
            for kg in table.groups:
                rows = table.snapshot_rows(kg, cutoff)
                if rows:
                    groups.setdefault(kg, {})[name] = tuple(rows)
        snapshot = KeyedStateSnapshot(
            max_parallelism=self._max_parallelism,
            key_group_range=self._range,
            kinds={name: table.kind for name, table in self._tables.items()},
            key_groups=groups,
            changed_key_groups=self.changed_key_groups,
            checkpoint_id=checkpoint_id,
            base_checkpoint_id=self._base,
        )
        if checkpoint_id is not None:
            self._pending[checkpoint_id] = frozenset(self._dirty)
            self._dirty.clear()
        return snapshot

    def notify_checkpoint_complete(self, checkpoint_id: int) -> bool:
        """Checkpoint ``checkpoint_id`` committed: it becomes the base. False if this backend did not
        snapshot it (unknown, or already subsumed by a newer completed checkpoint)."""
        if checkpoint_id not in self._pending:
            return False
        for pending_id in [p for p in self._pending if p <= checkpoint_id]:
            del self._pending[pending_id]
        self._base = checkpoint_id
        return True

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` will never complete. Nothing to undo: its changes stay pending
        (so later snapshots keep reporting them) until a newer checkpoint, whose snapshot included
        them, completes and subsumes it."""
        return None

    def mark_changed(self, key_groups: Iterable[int]) -> None:
        """Count ``key_groups`` (those this backend owns) as changed since the base checkpoint: their
        content was changed outside this backend (an operator that kept it elsewhere hands it over)."""
        self._dirty.update(kg for kg in key_groups if kg in self._range)

    def dispose(self) -> None:
        """Drop all state: the owner is done with this backend. Its entries are freed at once by
        reference counting (handles and the backend form reference cycles, so without this the
        whole state waits for -- and is traversed by -- the cyclic garbage collector)."""
        for table in self._tables.values():
            table.groups = {}

    # -- paging (the backend as a cache in front of state kept elsewhere) ------------------------
    def page_in(
        self, key_groups: Mapping[int, Mapping[str, Sequence[StateRow]]], kinds: Mapping[str, StateKind]
    ) -> None:
        """Add the rows of keys this backend does not hold (their state is kept elsewhere, e.g. on
        disk, and paged in for the keys a chunk touches). A state name not registered yet gets a
        table of its kind; a kind that differs from the registered one raises
        :class:`StateRegistrationError`; a key already held raises ValueError (single-value kinds).
        Paged-in keys do not count as changed."""
        for name, kind in kinds.items():
            table = self._tables.get(name)
            if table is None:
                self._tables[name] = StateTable(name, kind, self._dirty)
            elif table.kind is not kind:
                raise StateRegistrationError(
                    f"state {name!r} is a {table.kind.value} state, but its state on disk is a "
                    f"{kind.value} state: pick another name or migrate the state"
                )
        for kg, states in key_groups.items():
            if kg not in self._range:
                self._owned_key_group(next(iter(next(iter(states.values())))).key)  # raises
            for name, rows in states.items():
                self._tables[name].load_rows(kg, rows)

    def page_out(self) -> dict[int, dict[str, list[StateRow]]]:
        """Every live row this backend holds (expired ones left out, as a snapshot does), per key
        group and state; then the backend holds nothing (the tables stay registered)."""
        now = self._clock() if self._clock is not None else None
        out: dict[int, dict[str, list[StateRow]]] = {}
        for name, table in self._tables.items():
            cutoff = now if table.filters_expired() else None
            for kg in table.groups:
                rows = table.snapshot_rows(kg, cutoff)
                if rows:
                    out.setdefault(kg, {})[name] = rows
            table.groups = {}
        return out

    # -- restore --------------------------------------------------------------------------------
    def restore(
        self,
        snapshots: Iterable[KeyedStateSnapshot],
        *,
        from_checkpoint: int | None = None,
        verify_keys: bool = True,
    ) -> int:
        """Load the owned key groups of ``snapshots``; return how many non-empty key groups were loaded.

        ``from_checkpoint``: the checkpoint these snapshots belong to; it becomes the base and the
        restored key groups count as unchanged (their files may be reused). Without it they count
        as changed.
        """
        snapshots = list(snapshots)
        for snap in snapshots:
            if snap.max_parallelism != self._max_parallelism:
                raise ValueError(
                    f"snapshot of key groups {snap.key_group_range} was taken with max_parallelism "
                    f"{snap.max_parallelism}, this job uses {self._max_parallelism}: max_parallelism cannot "
                    f"change across restores (keys would move); run the job with max_parallelism "
                    f"{snap.max_parallelism}"
                )
        kinds = merge_kinds([{n: t.kind for n, t in self._tables.items()}, *(s.kinds for s in snapshots)])
        covered = list(self._restored)
        for snap in snapshots:
            owned = snap.key_group_range.intersect(self._range)
            for other in covered:
                overlap = owned.intersect(other)
                if len(overlap):
                    raise ValueError(
                        f"key groups {overlap} are covered by two restored snapshots (ranges {other} and "
                        f"{snap.key_group_range}): restore each key group from exactly one state file"
                    )
            if len(owned):
                covered.append(owned)
        owned_groups = [
            (kg, states) for snap in snapshots for kg, states in snap.key_groups.items() if kg in self._range
        ]
        for kg, states in owned_groups:  # verify everything before changing anything
            if any(kg in t.groups for t in self._tables.values()):
                raise ValueError(f"key group {kg} already holds state: restore before processing records")
            if verify_keys:
                self._verify_rows(kg, states)
        for name, kind in kinds.items():
            if name not in self._tables:
                self._tables[name] = StateTable(name, kind, self._dirty)
        for kg, states in owned_groups:
            for name, rows in states.items():
                self._tables[name].load_rows(kg, rows)
            if from_checkpoint is None:
                self._dirty.add(kg)
        self._restored = covered
        if from_checkpoint is not None:
            self._base = from_checkpoint
        return len(owned_groups)

    def _verify_rows(self, kg: int, states: Mapping[str, tuple[StateRow, ...]]) -> None:
        for name, rows in states.items():
            for row in rows:
                actual = self.key_group_of(row.key)
                if actual != kg:
                    raise ValueError(
                        f"state {name!r} lists key {row.key!r} under key group {kg}, but it belongs to key "
                        f"group {actual}: the file was written with another hash function or max_parallelism"
                    )
