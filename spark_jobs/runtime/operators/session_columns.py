"""Columnar session windows: the fast path of ``WindowOperator`` for event-time session windows.

The state of a session window, on both paths, is the value state ``session``: namespace = the
session's start, value = ``[end, *accumulator]`` (one row per open session of a key; a key may have
several). The heap backend keeps one Python list per session; here all open sessions are one set of
aligned arrays

    index int64[n]        the entry's int key, or the 64-bit hash of its string key (``mode``)
    kgs   int32[n]        key group of each entry
    start, end int64[n]   the session ``[start, end)``
    slots w arrays[n]     one column per aggregate slot, int64, float64 or bool
    skeys string[n]       the string keys themselves (``mode == HASH``)

in no particular order, so merging a chunk, firing and snapshotting are numpy operations and
snapshots are ``IntRows``/``TypedRows`` (slot 0 = end) that the heap backend writes the same way.

Merging (``merge``): the chunk arrives as chunk sessions -- its records of one key, in event-time
order, cut where the next record starts after the previous one's session ended (``t > t_prev +
gap``), each with its partial aggregate. Every open session of a key the chunk touches and the
chunk's sessions of that key are sorted by (start, open before new) and joined where one starts at
or before the running end of those before it (sessions that only touch merge, as Flink's
``TimeWindow.intersects``). A joined session's accumulator is the fold ``merge(merge(p1, p2), p3)``
of its pieces in that order, with ``Min``/``Max``/``First``/``Last``/adding merges element for
element as the heap backend's ``Aggregates.merge`` -- the heap path folds in the same order
(``WindowOperator._merge_sessions_heap``), so float sums agree bit for bit.

Invariants:

* The open sessions of one key are disjoint and do not touch (a merge joins every pair that would).
* Exactness: an adding int slot merges only while both sides are below ``SAFE`` in magnitude;
  otherwise, and for keys or slots of another type or a hash collision, ``merge`` raises ``Refused``
  having changed nothing, and the operator hands its sessions to the heap backend.
* Arrays are replaced, never written in place.
* ``changed`` holds every key group whose sessions changed since the restore.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from spark_jobs.runtime.operators import window_columns as wc
from spark_jobs.runtime.operators.window_columns import ADD, FIRST, HASH, INT, INT64, MAX, MIN, SAFE, Refused
from state_store.core.keygroups import KeyGroupRange
from state_store.core.state.snapshot import KeyedStateSnapshot
from state_store.formats.int_rows import IntRows
from state_store.formats.typed_columns import typed_rows_of
from state_store.formats.typed_rows import TypedRows


@dataclass(frozen=True)
class Sessions:
    """Aligned arrays of sessions (module docstring); ``skeys`` only for string keys."""

    index: NDArray[np.int64]
    kgs: NDArray[np.int32]
    start: NDArray[np.int64]
    end: NDArray[np.int64]
    slots: tuple[NDArray[Any], ...]
    skeys: pa.Array | None = None

    def __len__(self) -> int:
        return len(self.index)

    @property
    def keys(self) -> Any:
        """Each session's key: a string array (hashed keys) or the int64 index itself."""
        return self.skeys if self.skeys is not None else self.index

    def take(self, order: NDArray[Any]) -> Sessions:
        """The sessions at ``order`` (indices, or a boolean mask)."""
        if order.dtype == np.bool_:
            order = np.flatnonzero(order)
        skeys = None if self.skeys is None else self.skeys.take(pa.array(order, pa.int64()))
        return Sessions(
            self.index[order],
            self.kgs[order],
            self.start[order],
            self.end[order],
            tuple(s[order] for s in self.slots),
            skeys,
        )

    @staticmethod
    def concat(parts: Sequence[Sessions]) -> Sessions:
        skeys = None if parts[0].skeys is None else pa.concat_arrays([p.skeys for p in parts])
        return Sessions(
            np.concatenate([p.index for p in parts]),
            np.concatenate([p.kgs for p in parts]),
            np.concatenate([p.start for p in parts]),
            np.concatenate([p.end for p in parts]),
            tuple(np.concatenate([p.slots[j] for p in parts]) for j in range(len(parts[0].slots))),
            skeys,
        )


def merge_slot(merge: str, acc: NDArray[Any], part: NDArray[Any]) -> NDArray[Any]:
    """``merge`` of two aligned slot columns, element for element as the heap backend's merge (a new
    array): add, keep the first, take the last, or keep the smaller/greater where ``Min``/``Max``
    would (NaN only while nothing else came)."""
    if merge == ADD:
        total: NDArray[Any] = acc + part
        return total
    if merge == FIRST:
        return acc.copy()
    if merge in (MIN, MAX):
        better = part < acc if merge == MIN else part > acc
        return np.where(better | ((acc != acc) & (part == part)), part, acc)
    return part.copy()  # LAST


class SessionColumns:
    """The open sessions of one operator subtask as columns; see module docstring. One thread."""

    def __init__(self, merges: Sequence[str]) -> None:
        self.merges = tuple(merges)
        unknown = [m for m in self.merges if m not in wc.MERGES]
        if unknown:
            raise ValueError(f"unknown column merges {unknown}: use {wc.MERGES}")
        self.width = len(self.merges)
        self.rows: Sessions | None = None
        self.mode: str | None = None
        """INT or HASH once a session arrived (or was restored)."""
        self.changed: set[int] = set()

    def __len__(self) -> int:
        return 0 if self.rows is None else len(self.rows)

    # -- merge and fire --------------------------------------------------------------------------
    def merge(
        self,
        keys: Any,
        kgs: NDArray[np.int32],
        start: NDArray[np.int64],
        end: NDArray[np.int64],
        slots: Sequence[NDArray[Any]],
    ) -> None:
        """Merge a chunk's sessions (``keys``: int64 array or string array) into the open ones, or
        raise ``Refused`` having changed nothing."""
        if len(slots) != self.width:
            raise ValueError(f"{len(slots)} partial columns for {self.width} aggregates")
        if not len(start):
            return
        string = isinstance(keys, pa.Array)
        mode = HASH if string else INT
        old = self.rows
        if old is not None and len(old):
            if mode != self.mode:
                raise Refused("int keys and string keys in one operator")
            new_types, old_types = [s.dtype for s in slots], [s.dtype for s in old.slots]
            if new_types != old_types:
                raise Refused(
                    f"aggregate columns of type {'/'.join(d.name for d in new_types)} after "
                    f"{'/'.join(d.name for d in old_types)}"
                )
        index = wc.HASH_FUNCTION(keys) if string else np.asarray(keys, dtype=np.int64)
        new = Sessions(index, kgs, start, end, tuple(slots), keys if string else None)
        if old is None or not len(old):
            rows, fresh, kept = new, np.ones(len(new), dtype=np.bool_), None
        else:  # only the open sessions of the chunk's keys take part
            touched = np.isin(old.index, index)
            mine = old.take(touched)
            rows = Sessions.concat([mine, new])
            fresh = np.concatenate([np.zeros(len(mine), np.bool_), np.ones(len(new), np.bool_)])
            kept = old.take(~touched)
        joined, touched_groups = self._join(rows, fresh)
        self.rows = Sessions.concat([kept, joined]) if kept is not None and len(kept) else joined
        self.mode = mode
        self.changed.update(np.unique(joined.kgs[touched_groups]).tolist())

    def _join(self, rows: Sessions, fresh: NDArray[np.bool_]) -> tuple[Sessions, NDArray[np.bool_]]:
        """The sessions of ``rows`` joined (module docstring) and, per joined session, whether a
        fresh piece is in it. Raises Refused for a hash collision or an inexact sum."""
        order = np.lexsort((fresh, rows.start, rows.index))
        rows, fresh = rows.take(order), fresh[order]
        n = len(rows)
        same = np.zeros(n, dtype=np.bool_)
        same[1:] = rows.index[1:] == rows.index[:-1]
        if rows.skeys is not None and same.any():
            at = np.flatnonzero(same)
            equal = pc.equal(rows.skeys.take(pa.array(at)), rows.skeys.take(pa.array(at - 1)))
            if not pc.all(equal).as_py():
                raise Refused("two string keys with the same 64-bit hash")
        running = pd.Series(rows.end).groupby(np.cumsum(~same)).cummax().to_numpy()
        boundary = ~same
        boundary[1:] |= rows.start[1:] > running[:-1]
        first = np.flatnonzero(boundary)
        group = np.cumsum(boundary) - 1
        slots = [s[first] for s in rows.slots]
        if len(first) < n:
            position = np.arange(n) - first[group]
            later = np.flatnonzero(position > 0)
            later = later[np.argsort(position[later], kind="stable")]
            bounds = np.flatnonzero(np.diff(position[later])) + 1
            adding = [j for j, m in enumerate(self.merges) if m == ADD and rows.slots[j].dtype == INT64]
            for step in np.split(later, bounds):  # one piece of each joined session per step
                into = group[step]
                for j in adding:
                    if (
                        int(np.abs(slots[j][into]).max()) >= SAFE
                        or int(np.abs(rows.slots[j][step]).max()) >= SAFE
                    ):
                        raise Refused("a sum beyond the exact int64 range (2**62)")
                for j, merge in enumerate(self.merges):
                    column = slots[j].copy()
                    column[into] = merge_slot(merge, slots[j][into], rows.slots[j][step])
                    slots[j] = column
        joined = Sessions(
            rows.index[first],
            rows.kgs[first],
            rows.start[first],
            np.maximum.reduceat(rows.end, first),
            tuple(slots),
            None if rows.skeys is None else rows.skeys.take(pa.array(first)),
        )
        return joined, np.logical_or.reduceat(fresh, first)

    def touching(self, keys: Any, start: NDArray[np.int64], end: NDArray[np.int64]) -> NDArray[np.bool_]:
        """Whether each ``[start[i], end[i])`` of ``keys[i]`` overlaps or touches an open session of
        its key (a string key's hash twin counts too: the merge then refuses the collision)."""
        out = np.zeros(len(start), dtype=np.bool_)
        rows = self.rows
        if rows is None or not len(rows) or not len(start):
            return out
        index = wc.HASH_FUNCTION(keys) if isinstance(keys, pa.Array) else np.asarray(keys, dtype=np.int64)
        mine = rows.take(np.isin(rows.index, index))
        order = np.lexsort((mine.start, mine.index))
        at, starts, ends = mine.index[order], mine.start[order], mine.end[order]
        lo, hi = np.searchsorted(at, index, "left"), np.searchsorted(at, index, "right")
        for i in np.flatnonzero(hi > lo).tolist():  # open sessions of a key are disjoint, by start
            j = int(lo[i]) + int(np.searchsorted(starts[lo[i] : hi[i]], end[i], "right")) - 1
            out[i] = j >= lo[i] and ends[j] >= start[i]
        return out

    def fire(self, watermark: int) -> Sessions | None:
        """Remove and return every session with ``end - 1 <= watermark``, or None."""
        if self.rows is None or not len(self.rows):
            return None
        due = self.rows.end - 1 <= watermark
        if not due.any():
            return None
        fired = self.rows.take(due)
        self.rows = self.rows.take(~due)
        self.changed.update(np.unique(fired.kgs).tolist())
        return fired

    # -- snapshot and restore --------------------------------------------------------------------
    def snapshot_rows(self) -> dict[int, IntRows | TypedRows]:
        """Every session per key group as the heap backend's rows (namespace = start, value =
        ``[end, *acc]``), by start then index: ``IntRows`` for int keys and int slots, else
        ``TypedRows``."""
        rows = self.rows
        if rows is None or not len(rows):
            return {}
        rows = rows.take(np.lexsort((rows.index, rows.start, rows.kgs)))
        values = [rows.end, *rows.slots]
        groups, first = np.unique(rows.kgs, return_index=True)
        bounds = [*first.tolist(), len(rows)]
        ints = rows.skeys is None and all(s.dtype == INT64 for s in values)
        matrix = np.column_stack(values) if ints else None
        out: dict[int, IntRows | TypedRows] = {}
        for kg, lo, hi in zip(groups.tolist(), bounds, bounds[1:]):
            if matrix is not None:
                out[int(kg)] = IntRows(rows.index[lo:hi], rows.start[lo:hi], matrix[lo:hi])
            else:
                keys = rows.skeys.slice(lo, hi - lo) if rows.skeys is not None else rows.index[lo:hi]
                out[int(kg)] = TypedRows(keys, rows.start[lo:hi], [v[lo:hi] for v in values])
        return out

    @classmethod
    def restore(
        cls,
        merges: Sequence[str],
        snapshots: Iterable[KeyedStateSnapshot],
        state_name: str,
        key_groups: KeyGroupRange,
        key_groups_of: Any,
    ) -> SessionColumns | None:
        """The sessions of ``state_name`` in ``snapshots`` (key groups outside ``key_groups``
        skipped), or None when an entry does not have the columnar shape (keys neither ints nor
        strings, a value that is not ``[end, *acc]`` of fixed-width types, slots of another type in
        another file, two string keys with one hash) or another state has entries: the caller then
        restores into the heap backend. Raises ValueError, as the heap backend does, for a session
        listed twice, and for one stored under the wrong key group unless ``key_groups_of`` is None
        (trusted files)."""
        out = cls(merges)
        parts: list[Sessions] = []
        for snap in snapshots:
            for kg, states in snap.key_groups.items():
                if any(len(rows) for name, rows in states.items() if name != state_name):
                    return None  # another state has entries
                found = states.get(state_name)
                if kg not in key_groups or found is None:
                    continue
                typed = typed_rows_of(found)
                if typed is None or typed.width != out.width + 1 or typed.slots[0].dtype != INT64:
                    return None
                string = isinstance(typed.keys, pa.Array)
                n = len(typed)
                parts.append(
                    Sessions(
                        wc.HASH_FUNCTION(typed.keys) if string else typed.keys,
                        np.full(n, kg, dtype=np.int32),
                        typed.namespaces,
                        typed.slots[0],
                        tuple(typed.slots[1:]),
                        typed.keys if string else None,
                    )
                )
        if not parts:
            return out
        if len({(p.skeys is None, tuple(s.dtype for s in p.slots)) for p in parts}) > 1:
            return None
        rows = Sessions.concat(parts) if len(parts) > 1 else parts[0]
        if key_groups_of is not None:
            actual = key_groups_of(rows.keys)
            wrong = np.flatnonzero(actual != rows.kgs)
            if len(wrong):
                i = int(wrong[0])
                key = rows.keys[i].as_py() if rows.skeys is not None else int(rows.keys[i])
                raise ValueError(
                    f"state {state_name!r} lists key {key!r} under key group {int(rows.kgs[i])}, but it "
                    f"belongs to key group {int(actual[i])}: the file was written with another hash "
                    "function or max_parallelism"
                )
        order = np.lexsort((rows.start, rows.index))
        index, start = rows.index[order], rows.start[order]
        same = index[1:] == index[:-1]
        if rows.skeys is not None and same.any():
            at = order[1:][same]
            before = order[:-1][same]
            if not pc.all(pc.equal(rows.skeys.take(pa.array(at)), rows.skeys.take(pa.array(before)))).as_py():
                return None  # a hash collision: the heap backend keeps both keys
        twice = np.flatnonzero(same & (start[1:] == start[:-1]))
        if len(twice):
            i = int(order[twice[0]])
            key = rows.keys[i].as_py() if rows.skeys is not None else int(rows.keys[i])
            raise ValueError(
                f"state {state_name!r} lists key {key!r} (namespace {int(rows.start[i])}) twice in key "
                f"group {int(rows.kgs[i])}: the snapshot is corrupt"
            )
        out.rows = rows
        out.mode = HASH if rows.skeys is not None else INT
        return out
