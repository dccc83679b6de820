"""One keyed state's storage inside a backend: ``key_group -> {(key, namespace): entry}`` plus TTL.

Entry shapes (``expiry`` is ``expiry_ms`` or None for "never expires")::

    value / reducing / aggregating   (value, expiry)
    list                             [(element, expiry), ...]            never empty
    map                              {user_key: (user_value, expiry)}    never empty

Invariants: no empty list, map or key-group dict is ever stored (an emptied entry is deleted), so
"has state" means "is present". Every mutation adds the key group to the backend's shared dirty set.

``now`` arguments are only meaningful when the table has a TTL (callers pass 0 otherwise). If the
registered descriptor has no TTL, stored expiries (from a snapshot taken with a TTL) are ignored
and the next write stores None. The TTL rules themselves are in ``descriptors``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any, Final

from state_store.core.state.descriptors import (
    AnyDescriptor,
    StateKind,
    StateTtlConfig,
    TtlUpdateType,
    TtlVisibility,
)
from state_store.core.state.snapshot import StateRow


class _Absent:
    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()
"""Returned by lookups that found nothing visible (None is a legitimate stored value)."""

_KEEP: Final = object()
_IMMUTABLE = frozenset({type(None), bool, int, float, str, bytes})
_SINGLE = frozenset({StateKind.VALUE, StateKind.REDUCING, StateKind.AGGREGATING})

EntryKey = tuple[Any, Any]
_new_tuple = tuple.__new__


def _row(fields: tuple[Any, Any, Any, int | None]) -> StateRow:
    """``StateRow(*fields)`` without the Python-level ``NamedTuple.__new__`` (hot in snapshots)."""
    return _new_tuple(StateRow, fields)


def freeze(value: Any) -> Any:
    """A copy of ``value`` that later mutation of the original cannot change (scalars are shared)."""
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if kind is tuple:
        return tuple(freeze(v) for v in value)
    if kind is list and _IMMUTABLE.issuperset(map(type, value)):
        return value[:]  # a flat list of scalars (e.g. a window accumulator): a shallow copy is a copy
    return copy.deepcopy(value)


_JSON_SCALARS = frozenset({type(None), bool, int, float, str})


def json_form(value: Any) -> Any:
    """``value`` as a state file gives it back: tuples as lists, dicts with their keys sorted,
    nested; anything else as it is (a value that is not JSON fails when it is written). A per-key
    handle stores this form, so what a read returns never depends on whether the value went
    through a checkpoint, a restore or a page on disk since it was written: the output of a replayed
    epoch equals the first run's wherever its boundaries fall."""
    kind = type(value)
    if kind in _JSON_SCALARS:
        return value
    if kind is list:
        if _JSON_SCALARS.issuperset(map(type, value)):
            return value
        return [json_form(v) for v in value]
    if kind is tuple:
        return [json_form(v) for v in value]
    if kind is dict and all(type(k) is str for k in value):
        return {k: json_form(value[k]) for k in sorted(value)}
    return value


class StateTable:
    """Storage of one named state; see module docstring. Not thread-safe (one subtask, one thread)."""

    __slots__ = ("descriptor", "dirty", "groups", "kind", "name", "ttl")

    def __init__(self, name: str, kind: StateKind, dirty: set[int]) -> None:
        self.name = name
        self.kind = kind
        self.dirty = dirty
        self.descriptor: AnyDescriptor | None = None
        self.ttl: StateTtlConfig | None = None
        self.groups: dict[int, dict[EntryKey, Any]] = {}

    # -- TTL ------------------------------------------------------------------------------------
    def expiry(self, now: int) -> int | None:
        return None if self.ttl is None else now + self.ttl.ttl_ms

    def _read(self, value: Any, expiry: int | None, now: int) -> tuple[Any, Any]:
        """(visible value or ABSENT, replacement: _KEEP, None = delete, or a new (value, expiry))."""
        ttl = self.ttl
        if ttl is None:
            return value, _KEEP
        if expiry is not None and expiry <= now:
            if ttl.visibility is TtlVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP:
                return value, None
            return ABSENT, None
        if ttl.update_type is TtlUpdateType.ON_READ_AND_WRITE:
            return value, (value, now + ttl.ttl_ms)
        return value, _KEEP

    def filters_expired(self) -> bool:
        """Whether snapshots and cleanup drop expired entries of this table."""
        return self.ttl is not None or self.descriptor is None

    # -- single-value kinds ---------------------------------------------------------------------
    def get(self, kg: int, ek: EntryKey, now: int) -> Any:
        group = self.groups.get(kg)
        cell = None if group is None else group.get(ek)
        if cell is None or group is None:
            return ABSENT
        result, replacement = self._read(cell[0], cell[1], now)
        if replacement is not _KEEP:
            self._replace(kg, group, ek, replacement)
        return result

    def get_for_update(self, kg: int, ek: EntryKey, now: int) -> Any:
        """The live value, ignoring visibility: an expired accumulator is never folded into."""
        group = self.groups.get(kg)
        cell = None if group is None else group.get(ek)
        if cell is None:
            return ABSENT
        if self.ttl is not None and cell[1] is not None and cell[1] <= now:
            return ABSENT
        return cell[0]

    def put(self, kg: int, ek: EntryKey, value: Any, now: int) -> None:
        group = self.groups.get(kg)
        if group is None:
            group = self.groups[kg] = {}
        group[ek] = (value, self.expiry(now))
        self.dirty.add(kg)

    def remove(self, kg: int, ek: EntryKey) -> None:
        group = self.groups.get(kg)
        if group is not None and ek in group:
            self._replace(kg, group, ek, None)

    def _replace(self, kg: int, group: dict[EntryKey, Any], ek: EntryKey, replacement: Any) -> None:
        if replacement is None:
            del group[ek]
            if not group:
                del self.groups[kg]
        else:
            group[ek] = replacement
        self.dirty.add(kg)

    # -- list -----------------------------------------------------------------------------------
    def list_get(self, kg: int, ek: EntryKey, now: int) -> list[Any]:
        group = self.groups.get(kg)
        elements = None if group is None else group.get(ek)
        if elements is None or group is None:
            return []
        if self.ttl is None:
            return [v for v, _ in elements]
        result: list[Any] = []
        kept: list[tuple[Any, int | None]] = []
        changed = False
        for value, expiry in elements:
            visible, replacement = self._read(value, expiry, now)
            if visible is not ABSENT:
                result.append(visible)
            if replacement is _KEEP:
                kept.append((value, expiry))
            else:
                changed = True
                if replacement is not None:
                    kept.append(replacement)
        if changed:
            self._replace(kg, group, ek, kept or None)
        return result

    def list_add(self, kg: int, ek: EntryKey, values: Iterable[Any], now: int) -> None:
        expiry = self.expiry(now)
        new = [(v, expiry) for v in values]
        if not new:
            return
        group = self.groups.get(kg)
        if group is None:
            group = self.groups[kg] = {}
        elements = group.get(ek)
        if elements is None:
            group[ek] = new
        else:
            elements.extend(new)
        self.dirty.add(kg)

    def list_set(self, kg: int, ek: EntryKey, values: Iterable[Any], now: int) -> None:
        self.remove(kg, ek)
        self.list_add(kg, ek, values, now)

    # -- map ------------------------------------------------------------------------------------
    def _map(self, kg: int, ek: EntryKey) -> dict[Any, tuple[Any, int | None]] | None:
        group = self.groups.get(kg)
        return None if group is None else group.get(ek)

    def map_get(self, kg: int, ek: EntryKey, user_key: Any, now: int) -> Any:
        entries = self._map(kg, ek)
        cell = None if entries is None else entries.get(user_key)
        if cell is None or entries is None:
            return ABSENT
        result, replacement = self._read(cell[0], cell[1], now)
        if replacement is not _KEEP:
            self._map_replace(kg, ek, entries, user_key, replacement)
        return result

    def map_put(self, kg: int, ek: EntryKey, user_key: Any, value: Any, now: int) -> None:
        group = self.groups.get(kg)
        if group is None:
            group = self.groups[kg] = {}
        entries = group.get(ek)
        if entries is None:
            entries = group[ek] = {}
        entries[user_key] = (value, self.expiry(now))
        self.dirty.add(kg)

    def map_remove(self, kg: int, ek: EntryKey, user_key: Any) -> None:
        entries = self._map(kg, ek)
        if entries is not None and user_key in entries:
            self._map_replace(kg, ek, entries, user_key, None)

    def map_items(self, kg: int, ek: EntryKey, now: int) -> list[tuple[Any, Any]]:
        entries = self._map(kg, ek)
        if entries is None:
            return []
        if self.ttl is None:
            return [(uk, cell[0]) for uk, cell in entries.items()]
        result: list[tuple[Any, Any]] = []
        for user_key, cell in list(entries.items()):
            visible, replacement = self._read(cell[0], cell[1], now)
            if visible is not ABSENT:
                result.append((user_key, visible))
            if replacement is not _KEEP:
                self._map_replace(kg, ek, entries, user_key, replacement)
        return result

    def _map_replace(
        self, kg: int, ek: EntryKey, entries: dict[Any, Any], user_key: Any, replacement: Any
    ) -> None:
        if replacement is None:
            del entries[user_key]
            if not entries:
                self._replace(kg, self.groups[kg], ek, None)
                return
        else:
            entries[user_key] = replacement
        self.dirty.add(kg)

    # -- snapshot, restore, cleanup -------------------------------------------------------------
    def snapshot_rows(self, kg: int, now: int | None) -> list[StateRow]:
        """Frozen rows of one key group; entries with ``expiry <= now`` are left out (now=None: keep)."""
        kind = self.kind
        group = self.groups.get(kg, {})
        if kind in _SINGLE and now is None:  # the common case, without per-entry branching
            return [_row((key, ns, freeze(value), expiry)) for (key, ns), (value, expiry) in group.items()]
        rows: list[StateRow] = []
        for (key, namespace), entry in group.items():
            if kind in _SINGLE:
                cells: Iterable[tuple[Any, int | None]] = (entry,)
            elif kind is StateKind.LIST:
                cells = entry
            else:
                cells = (((uk, uv), expiry) for uk, (uv, expiry) in entry.items())
            for value, expiry in cells:
                if now is None or expiry is None or expiry > now:
                    rows.append(StateRow(key, namespace, freeze(value), expiry))
        return rows

    def load_rows(self, kg: int, rows: Iterable[StateRow]) -> None:
        """``load_row`` for every row, with the same checks; a single-value kind loading into an
        empty key group takes one dict update (a duplicate (key, namespace) shows as a short count:
        the group is dropped and the per-row path raises the usual error)."""
        rows = rows if isinstance(rows, (list, tuple)) else list(rows)
        if self.kind not in _SINGLE or kg in self.groups:
            for row in rows:
                self.load_row(kg, row)
            return
        group = dict(((r[0], r[1]), (freeze(r[2]), r[3])) for r in rows)
        if len(group) != len(rows):
            for row in rows:
                self.load_row(kg, row)  # raises on the duplicate
        if group:
            self.groups[kg] = group

    def load_row(self, kg: int, row: StateRow) -> None:
        """Add one restored row (values are copied, so the snapshot stays immutable)."""
        group = self.groups.get(kg)
        if group is None:
            group = self.groups[kg] = {}
        ek = (row.key, row.namespace)
        cell = (freeze(row.value), row.expiry_ms)
        if self.kind in _SINGLE:
            if ek in group:
                raise ValueError(
                    f"state {self.name!r} lists key {row.key!r} (namespace {row.namespace!r}) twice "
                    f"in key group {kg}: the snapshot is corrupt"
                )
            group[ek] = cell
        elif self.kind is StateKind.LIST:
            group.setdefault(ek, []).append(cell)
        else:
            pair = cell[0]
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise ValueError(
                    f"map state {self.name!r} row for key {row.key!r} must hold (user_key, user_value), "
                    f"got {type(pair).__name__}: the snapshot is corrupt"
                )
            group.setdefault(ek, {})[pair[0]] = (pair[1], cell[1])

    def cleanup_expired(self, now: int) -> int:
        """Remove every entry with ``expiry <= now``; return how many were removed."""
        removed = 0
        for kg in list(self.groups):
            group = self.groups[kg]
            for ek in list(group):
                entry = group[ek]
                if self.kind in _SINGLE:
                    if entry[1] is not None and entry[1] <= now:
                        removed += 1
                        self._replace(kg, group, ek, None)
                    continue
                cells = entry if self.kind is StateKind.LIST else list(entry.values())
                live = sum(1 for _, e in cells if e is None or e > now)
                if live == len(cells):
                    continue
                removed += len(cells) - live
                kept: Any
                if self.kind is StateKind.LIST:
                    kept = [c for c in entry if c[1] is None or c[1] > now]
                else:
                    kept = {uk: c for uk, c in entry.items() if c[1] is None or c[1] > now}
                self._replace(kg, group, ek, kept or None)
        return removed
