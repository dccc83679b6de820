"""Operator (non-keyed) list state and its redistribution on rescale (Flink's
``DefaultOperatorStateBackend`` and ``RoundRobinOperatorStateRepartitioner``).

Each subtask holds named lists (e.g. a source's partition offsets). On restore with a new
parallelism the lists of all old subtasks are redistributed, per state name:

* **split-distribute** (``get_list_state``), :func:`redistribute`: concatenate the old lists in old
  subtask order (0, 1, ...); cut the result into ``new_parallelism`` CONTIGUOUS chunks; the first
  ``total % new_parallelism`` chunks get one element more. (Flink calls this "round robin": it is
  round robin over *subtasks* across state names, not over elements.) Across several names,
  :func:`redistribute_operator_state` rotates the start like Flink: each name starts at the first
  subtask that did not get an extra element for the previous name, so remainders spread evenly.
  Names are processed in sorted order (Flink iterates a HashMap; we fix the order so the result is
  deterministic).
* **union** (``get_union_list_state``), :func:`redistribute_union`: every new subtask gets the
  concatenation of all old lists.
* Trap -- same parallelism: exactly as Flink, split-distribute lists are returned unchanged (no
  rebalancing) and union lists are still unioned.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from state_store.core.state.table import freeze

T = TypeVar("T")


class OperatorStateMode(enum.Enum):
    """How a named operator list is redistributed on rescale."""

    SPLIT_DISTRIBUTE = "split_distribute"
    UNION = "union"


@dataclass(frozen=True, slots=True)
class OperatorStateSnapshot:
    """Frozen operator state of one subtask: ``{name: (mode, elements)}`` (elements deep-copied)."""

    states: Mapping[str, tuple[OperatorStateMode, tuple[Any, ...]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        frozen = {name: (mode, tuple(elements)) for name, (mode, elements) in sorted(self.states.items())}
        object.__setattr__(self, "states", MappingProxyType(frozen))


class OperatorListState(Generic[T]):
    """One named list of one subtask (``get``/``add``/``add_all``/``update``/``clear``)."""

    __slots__ = ("_elements", "mode", "name")

    def __init__(self, name: str, mode: OperatorStateMode) -> None:
        self.name = name
        self.mode = mode
        self._elements: list[T] = []

    def get(self) -> list[T]:
        return list(self._elements)

    def add(self, value: T) -> None:
        self._elements.append(value)

    def add_all(self, values: Iterable[T]) -> None:
        self._elements.extend(values)

    def update(self, values: Iterable[T]) -> None:
        self._elements = list(values)

    def clear(self) -> None:
        self._elements = []


class OperatorStateBackend:
    """The operator list states of one subtask."""

    def __init__(self) -> None:
        self._states: dict[str, OperatorListState[Any]] = {}

    def get_list_state(self, name: str) -> OperatorListState[Any]:
        """A split-distribute list: on rescale each new subtask gets a contiguous share."""
        return self._get(name, OperatorStateMode.SPLIT_DISTRIBUTE)

    def get_union_list_state(self, name: str) -> OperatorListState[Any]:
        """A union list: on restore every subtask gets all elements of all old subtasks."""
        return self._get(name, OperatorStateMode.UNION)

    def _get(self, name: str, mode: OperatorStateMode) -> OperatorListState[Any]:
        state = self._states.get(name)
        if state is None:
            state = self._states[name] = OperatorListState(name, mode)
        elif state.mode is not mode:
            raise ValueError(f"operator state {name!r} is a {state.mode.value} list, not a {mode.value} list")
        return state

    def snapshot(self) -> OperatorStateSnapshot:
        return OperatorStateSnapshot(
            {name: (s.mode, tuple(freeze(v) for v in s.get())) for name, s in self._states.items()}
        )

    def restore(self, snapshot: OperatorStateSnapshot) -> None:
        """Replace the lists with those of ``snapshot`` (this subtask's share after redistribution)."""
        for name, (mode, elements) in snapshot.states.items():
            self._get(name, mode).update(freeze(v) for v in elements)


def _check(lists: Sequence[object], new_parallelism: int) -> None:
    if not isinstance(new_parallelism, int) or isinstance(new_parallelism, bool) or new_parallelism < 1:
        raise ValueError(f"new_parallelism must be a positive int, got {new_parallelism!r}")
    if not lists:
        raise ValueError("need the lists of at least one old subtask (old parallelism >= 1)")


def _split(elements: list[T], new_parallelism: int, start: int) -> tuple[list[list[T]], int]:
    """Flink's ``repartitionSplitState`` for one name; returns the chunks and the next start."""
    out: list[list[T]] = [[] for _ in range(new_parallelism)]
    base, remainder = divmod(len(elements), new_parallelism)
    next_start, offset = start, 0
    for i in range(new_parallelism):
        subtask = (i + start) % new_parallelism
        count = base
        if remainder > 0:
            count += 1
            remainder -= 1
        elif remainder == 0:
            next_start = subtask
            remainder -= 1
        out[subtask] = elements[offset : offset + count]
        offset += count
    return out, next_start


def redistribute(lists_per_old_subtask: Sequence[Sequence[T]], new_parallelism: int) -> list[list[T]]:
    """Split-distribute one named list to ``new_parallelism`` subtasks (see module docstring)."""
    _check(lists_per_old_subtask, new_parallelism)
    if len(lists_per_old_subtask) == new_parallelism:
        return [list(lst) for lst in lists_per_old_subtask]
    return _split([v for lst in lists_per_old_subtask for v in lst], new_parallelism, 0)[0]


def redistribute_union(lists_per_old_subtask: Sequence[Sequence[T]], new_parallelism: int) -> list[list[T]]:
    """Every new subtask gets all elements, in old subtask order."""
    _check(lists_per_old_subtask, new_parallelism)
    union = [v for lst in lists_per_old_subtask for v in lst]
    return [list(union) for _ in range(new_parallelism)]


def redistribute_operator_state(
    snapshots_per_old_subtask: Sequence[OperatorStateSnapshot], new_parallelism: int
) -> list[OperatorStateSnapshot]:
    """Redistribute every named list of an operator (one snapshot per old subtask, in order)."""
    _check(snapshots_per_old_subtask, new_parallelism)
    modes: dict[str, OperatorStateMode] = {}
    for snap in snapshots_per_old_subtask:
        for name, (mode, _) in snap.states.items():
            if modes.setdefault(name, mode) is not mode:
                raise ValueError(
                    f"operator state {name!r} is split-distribute in one subtask and union in another"
                )
    rescaling = len(snapshots_per_old_subtask) != new_parallelism
    result: list[dict[str, tuple[OperatorStateMode, tuple[Any, ...]]]] = [{} for _ in range(new_parallelism)]
    start = 0
    for name in sorted(modes):
        lists = [list(s.states[name][1]) if name in s.states else [] for s in snapshots_per_old_subtask]
        if modes[name] is OperatorStateMode.UNION:
            shares = redistribute_union(lists, new_parallelism)
        elif not rescaling:
            shares = lists
        else:
            shares, start = _split([v for lst in lists for v in lst], new_parallelism, start)
        for subtask, share in enumerate(shares):
            result[subtask][name] = (modes[name], tuple(share))
    return [OperatorStateSnapshot(states) for states in result]
