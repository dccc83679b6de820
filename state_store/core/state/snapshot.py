"""The synchronous part of a keyed-state snapshot: a frozen copy organised per key group.

::

    KeyedStateSnapshot.key_groups = {key_group: {state_name: (StateRow, ...)}}
    StateRow = (key, namespace, value, expiry_ms | None)

One row per *physical entry*, so that the snapshot can be written as a flat table:

| kind                  | rows per (key, namespace)         | ``value``                       |
|-----------------------|-----------------------------------|---------------------------------|
| value                 | one                               | the value                       |
| reducing, aggregating | one                               | the reduced value / accumulator |
| list                  | one per element, in list order    | the element                     |
| map                   | one per map entry                 | ``(user_key, user_value)``      |

Invariants
----------
* Immutable: mappings are read-only views and mutable values are deep copies, so mutating the
  backend after ``snapshot()`` never changes a snapshot (and restoring copies again).
* Only non-empty key groups and states appear; ``kinds`` lists every registered state, even empty.
* Every key group in ``key_groups`` lies in ``key_group_range``; rows hold no expired entries at the
  snapshot time.
* ``changed_key_groups`` (within the range) lists the key groups whose content may differ from
  checkpoint ``base_checkpoint_id``. A key group in the range that is neither changed nor in
  ``key_groups`` was empty then and is empty now. If ``base_checkpoint_id`` is None nothing can be
  reused: every non-empty key group is in ``changed_key_groups``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from state_store.core.keygroups import KeyGroupRange, check_max_parallelism
from state_store.core.state.descriptors import StateKind


class StateRow(NamedTuple):
    """One physical state entry (a plain tuple: ``(key, namespace, value, expiry_ms)``)."""

    key: Any
    namespace: Any
    value: Any
    expiry_ms: int | None


class RowColumns(Sequence[StateRow]):
    """Rows of one (key group, state) held column-wise by a subclass (``state_store.formats.
    int_rows.IntRows``: int64 arrays). A read-only sequence of :class:`StateRow` like a tuple of
    rows -- iterating it builds the rows -- that snapshots keep as is, so that writers which know
    the columns skip the rows. Equal to any sequence of the same rows."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]


KeyGroupStates = Mapping[str, tuple[StateRow, ...]]


@dataclass(frozen=True)
class EntryDelta:
    """A key group's change since the base checkpoint: ``rows`` per state (the new and changed
    entries), ``deleted`` (state, key, namespace) of the entries gone, and ``size``: how many entries
    the key group holds now."""

    rows: Mapping[str, Sequence[StateRow]]
    deleted: tuple[tuple[str, Any, Any], ...]
    size: int


@dataclass(frozen=True, slots=True)
class KeyedStateSnapshot:
    """Keyed state of one subtask (or a part of it: some key groups), frozen. See module docstring."""

    max_parallelism: int
    key_group_range: KeyGroupRange
    kinds: Mapping[str, StateKind]
    key_groups: Mapping[int, KeyGroupStates]
    changed_key_groups: frozenset[int] = field(default_factory=frozenset)
    checkpoint_id: int | None = None
    base_checkpoint_id: int | None = None
    entry_deltas: Mapping[int, EntryDelta] = field(default_factory=dict)
    """Optional, from a columnar operator that knows them: per changed key group, its entries that
    are new or changed since ``base_checkpoint_id`` and those deleted (an incremental writer may
    store these instead of the whole key group; without them it compares entries itself)."""

    def __post_init__(self) -> None:
        check_max_parallelism(self.max_parallelism)
        if self.key_group_range.last >= self.max_parallelism:
            raise ValueError(
                f"key group range {self.key_group_range} exceeds max_parallelism {self.max_parallelism}"
            )
        groups: dict[int, KeyGroupStates] = {}
        for kg in sorted(self.key_groups):
            if kg not in self.key_group_range:
                raise ValueError(f"key group {kg} lies outside the snapshot's range {self.key_group_range}")
            states = {
                name: rows if isinstance(rows, RowColumns) else tuple(rows)
                for name, rows in sorted(self.key_groups[kg].items())
                if len(rows)
            }
            unknown = [name for name in states if name not in self.kinds]
            if unknown:
                raise ValueError(f"key group {kg} holds states {unknown} that have no kind in the snapshot")
            if states:
                groups[kg] = MappingProxyType(states)
        object.__setattr__(self, "key_groups", MappingProxyType(groups))
        object.__setattr__(self, "kinds", MappingProxyType(dict(sorted(self.kinds.items()))))
        object.__setattr__(
            self,
            "changed_key_groups",
            frozenset(kg for kg in self.changed_key_groups if kg in self.key_group_range),
        )

    @property
    def reusable_key_groups(self) -> frozenset[int]:
        """Non-empty key groups whose file of checkpoint ``base_checkpoint_id`` may be reused."""
        if self.base_checkpoint_id is None:
            return frozenset()
        return frozenset(kg for kg in self.key_groups if kg not in self.changed_key_groups)

    def part(self, key_groups: KeyGroupRange) -> KeyedStateSnapshot:
        """The same snapshot restricted to ``key_groups`` (intersected with this range)."""
        rng = self.key_group_range.intersect(key_groups)
        return KeyedStateSnapshot(
            max_parallelism=self.max_parallelism,
            key_group_range=rng,
            kinds=self.kinds,
            key_groups={kg: states for kg, states in self.key_groups.items() if kg in rng},
            changed_key_groups=self.changed_key_groups,
            checkpoint_id=self.checkpoint_id,
            base_checkpoint_id=self.base_checkpoint_id,
        )

    def rows(self, state_name: str) -> Iterator[tuple[int, StateRow]]:
        """Every ``(key_group, row)`` of one state, in key-group order."""
        for kg, states in self.key_groups.items():
            for row in states.get(state_name, ()):
                yield kg, row

    @property
    def num_rows(self) -> int:
        return sum(len(rows) for states in self.key_groups.values() for rows in states.values())

    def is_empty(self) -> bool:
        return not self.key_groups


def merge_kinds(parts: Iterable[Mapping[str, StateKind]]) -> dict[str, StateKind]:
    """Union of state kinds; a state listed with two different kinds is refused."""
    merged: dict[str, StateKind] = {}
    for kinds in parts:
        for name, kind in kinds.items():
            if merged.setdefault(name, kind) is not kind:
                raise ValueError(
                    f"state {name!r} is a {merged[name].value} state in one snapshot and a {kind.value} "
                    "state in another: these snapshots do not belong to the same operator"
                )
    return merged
