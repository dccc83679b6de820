"""Columnar window accumulators: the fast path of ``WindowOperator``.

Used for tumbling and sliding windows without allowed lateness (the indexed mode of
``window.py``) whose aggregates are all ``Count`` / ``Sum`` of integers, over integer keys. The
heap backend keeps one Python list per (key, window); here each window start holds

    index int64[n]      sorted, unique: the packed (key group, key) of each entry, or the key
    kgs   int32[n]      key group of each entry
    acc   int64[n, w]   one column per aggregate (Count and Sum both merge by addition)

so merging a chunk's partial aggregates, firing a window and taking a snapshot are numpy
operations, and snapshots are ``IntRows`` that state files encode column-wise (restores decode them
the same way). The state files are the heap backend's, byte for byte in content: the entries are
the ``acc`` value state, namespace = window start, value = the accumulator list; either path
restores what the other wrote (savepoints, rescaling and ``epochal inspect`` see no difference).

While every key fits in 48 bits (``-2**47 <= key < 2**47``, ``packed``), ``index`` is
``key group << 48 | key + 2**47``: the entries are in (key group, key) order, the order in which
snapshots write them, so a restore concatenates each window's key-group slices and sorts nothing.
The first key outside that range moves every window to key order (``index`` is the key) for the
rest of the epoch.

Invariants:

* Exactness: every accumulator and partial stays below ``SAFE`` (2**62) in magnitude before a merge,
  so int64 addition equals Python's; otherwise the operator moves its state to the heap backend
  (``WindowOperator._demote``), which merges with Python ints, and stays there for the epoch.
* Arrays are replaced, never written in place, once a snapshot may hold them (``snapshot_rows``
  slices fresh arrays; ``merge`` copies a run before adding into it).
* ``packed`` is the same for every run of one ``WindowColumns``; ``Run.keys`` decodes either order.
* ``changed`` holds every key group whose entries changed since the restore (merges and firings):
  the snapshot's ``changed_key_groups``; the others reuse their files.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from state_store.core.keygroups import KeyGroupRange
from state_store.core.state.snapshot import KeyedStateSnapshot
from state_store.formats.int_rows import IntRows

SAFE = 1 << 62
RESTORE_THREADS = max(1, min(4, os.cpu_count() or 1))
"""Windows restored at once (sorting and gathering release the GIL)."""
PARALLEL_RESTORE_ENTRIES = 1_000_000
"""Below this many entries a restore stays on the calling thread (a thread hand-off costs more)."""
KEY_BITS = 48
"""Bits of a key in a packed index; the key group takes the 15 above (max_parallelism <= 2**15)."""
KEY_OFFSET = 1 << (KEY_BITS - 1)
KEY_MASK = (1 << KEY_BITS) - 1


@dataclass(frozen=True)
class Run:
    """The accumulators of one window start (module docstring)."""

    index: NDArray[np.int64]
    kgs: NDArray[np.int32]
    acc: NDArray[np.int64]
    packed: bool

    @property
    def keys(self) -> NDArray[np.int64]:
        """The key of each entry, in ``index`` order."""
        return (self.index & KEY_MASK) - KEY_OFFSET if self.packed else self.index


def packable(keys: NDArray[np.int64]) -> bool:
    """Whether every key fits in a packed index."""
    return not len(keys) or (int(keys.min()) >= -KEY_OFFSET and int(keys.max()) < KEY_OFFSET)


def pack(keys: NDArray[np.int64], kgs: NDArray[np.int32]) -> NDArray[np.int64]:
    """The packed index of each (key, key group): increasing in (key group, key); keys ``packable``."""
    index = kgs.astype(np.int64) << KEY_BITS
    index |= keys + KEY_OFFSET
    return index


class WindowColumns:
    """Accumulators per window start; see module docstring. One thread."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.runs: dict[int, Run] = {}
        self.changed: set[int] = set()
        self.packed = True

    # -- merge and fire --------------------------------------------------------------------------
    def fits(self, window_starts: Iterable[int], partials: NDArray[np.int64]) -> bool:
        """Whether merging ``partials`` into these windows stays exact in int64 (``SAFE``)."""
        if len(partials) and int(np.abs(partials).max()) >= SAFE:
            return False
        for ws in window_starts:
            run = self.runs.get(ws)
            if run is not None and len(run.acc) and int(np.abs(run.acc).max()) >= SAFE:
                return False
        return True

    def merge(
        self, ws: int, keys: NDArray[np.int64], kgs: NDArray[np.int32], partials: NDArray[np.int64]
    ) -> None:
        """Add ``partials`` (one row per key, keys unique) into window ``ws``; new keys are inserted."""
        if self.packed and not packable(keys):
            self._unpack()
        index = pack(keys, kgs) if self.packed else keys
        order = np.argsort(index)  # unique: any sort is stable
        index, kgs, partials = index[order], kgs[order], np.take(partials, order, axis=0)
        run = self.runs.get(ws)
        if run is None:
            self.runs[ws] = Run(index, kgs, partials.astype(np.int64, copy=False), self.packed)
        else:
            pos = np.searchsorted(run.index, index)
            hit = pos < len(run.index)
            hit[hit] = run.index[pos[hit]] == index[hit]
            acc = run.acc.copy()
            acc[pos[hit]] += partials[hit]
            new = ~hit
            if new.any():
                at = pos[new]
                self.runs[ws] = Run(
                    np.insert(run.index, at, index[new]),
                    np.insert(run.kgs, at, kgs[new]),
                    np.insert(acc, at, partials[new], axis=0),
                    self.packed,
                )
            else:
                self.runs[ws] = Run(run.index, run.kgs, acc, self.packed)
        self.changed.update(np.unique(kgs).tolist())

    def _unpack(self) -> None:
        """Move every window to key order (a key that does not fit in a packed index arrived)."""
        for ws, run in self.runs.items():
            keys = run.keys
            order = np.argsort(keys)
            self.runs[ws] = Run(keys[order], run.kgs[order], np.take(run.acc, order, axis=0), False)
        self.packed = False

    def due(self, watermark: int, size: int) -> list[int]:
        """Window starts whose window fires at ``watermark`` (``end - 1 <= watermark``), in order."""
        return sorted(ws for ws in self.runs if ws + size - 1 <= watermark)

    def pop(self, ws: int) -> Run:
        run = self.runs.pop(ws)
        self.changed.update(np.unique(run.kgs).tolist())
        return run

    # -- snapshot and restore --------------------------------------------------------------------
    def snapshot_rows(self) -> dict[int, IntRows]:
        """Every entry as ``IntRows`` per key group (rows by window start, then key)."""
        if not self.runs:
            return {}
        starts = sorted(self.runs)
        runs = [self.runs[ws] for ws in starts]
        keys = np.concatenate([r.keys for r in runs])
        kgs = np.concatenate([r.kgs for r in runs])
        namespaces = np.concatenate([np.full(len(r.keys), ws, dtype=np.int64) for ws, r in zip(starts, runs)])
        acc = np.concatenate([r.acc for r in runs])
        order = np.argsort(kgs, kind="stable")
        keys, kgs, namespaces, acc = keys[order], kgs[order], namespaces[order], np.take(acc, order, axis=0)
        groups, first = np.unique(kgs, return_index=True)
        bounds = [*first.tolist(), len(kgs)]
        return {
            int(kg): IntRows(keys[lo:hi], namespaces[lo:hi], acc[lo:hi])
            for kg, lo, hi in zip(groups.tolist(), bounds, bounds[1:])
        }

    @classmethod
    def restore(
        cls,
        width: int,
        snapshots: Iterable[KeyedStateSnapshot],
        state_name: str,
        key_groups: KeyGroupRange,
        key_groups_of: Any,
    ) -> WindowColumns | None:
        """The accumulators of ``state_name`` in ``snapshots`` (key groups outside ``key_groups`` are
        skipped), or None when an entry does not have the columnar shape (a non-int key or window,
        an accumulator that is not ``width`` ints) or another state is present: the caller restores
        into the heap backend instead. Raises ValueError, as the heap backend does, for an entry
        listed twice, and for one stored under the wrong key group unless ``key_groups_of`` is
        None (trusted files: ``OperatorRestore.trusted_key_groups``)."""
        parts: list[tuple[int, IntRows]] = []
        for snap in snapshots:
            if set(snap.kinds) - {state_name}:
                return None
            for kg, states in snap.key_groups.items():
                rows = states.get(state_name)
                if kg not in key_groups or rows is None:
                    continue
                columns = rows if isinstance(rows, IntRows) else _int_rows(rows, width)
                if columns is None or columns.values.shape[1] != width:
                    return None
                parts.append((kg, columns))
        out = cls(width)
        windows = sorted(_by_window_start(parts).items())
        out.packed = all(packable(keys) for _, pieces in windows for _, keys, _ in pieces)

        def run_of(window: tuple[int, list[_Piece]]) -> Run:
            return _sorted_run(state_name, *window, key_groups_of, out.packed)

        entries = sum(len(keys) for _, pieces in windows for _, keys, _ in pieces)
        threads = min(RESTORE_THREADS, len(windows)) if entries >= PARALLEL_RESTORE_ENTRIES else 1
        if threads > 1:  # numpy sorts and gathers without the GIL: one window per core
            with ThreadPoolExecutor(threads, thread_name_prefix="epochal-window-restore") as pool:
                runs = list(pool.map(run_of, windows))  # the first failing window in order raises
        else:
            runs = [run_of(w) for w in windows]
        out.runs = {ws: run for (ws, _), run in zip(windows, runs, strict=True)}
        return out

    def entries(self) -> Mapping[int, Run]:
        return self.runs


_Piece = tuple[int, NDArray[np.int64], NDArray[np.int64]]
"""(key group, keys, accumulators) of one window start within one key group."""


def _sorted_run(state_name: str, ws: int, pieces: list[_Piece], key_groups_of: Any, packed: bool) -> Run:
    """One window's pieces as a run sorted by its index (packed or key); ValueError for a key listed
    twice, or (with ``key_groups_of``) stored under a key group it does not hash to. Packed, pieces
    written by ``snapshot_rows`` are already in order: they are only concatenated, by key group."""
    if packed:
        pieces = sorted(pieces, key=lambda piece: piece[0])
    keys = np.concatenate([k for _, k, _ in pieces])
    acc = np.concatenate([a for _, _, a in pieces])
    kgs = np.concatenate([np.full(len(k), kg, dtype=np.int32) for kg, k, _ in pieces])
    if key_groups_of is not None:
        actual = key_groups_of(keys)
        wrong = np.nonzero(actual != kgs)[0]
        if len(wrong):
            i = int(wrong[0])
            raise ValueError(
                f"state {state_name!r} lists key {int(keys[i])!r} under key group {int(kgs[i])}, but it "
                f"belongs to key group {int(actual[i])}: the file was written with another hash function "
                "or max_parallelism"
            )
    index = pack(keys, kgs) if packed else keys
    del keys
    if len(index) > 1 and not bool(np.all(index[1:] > index[:-1])):  # else sorted and unique already
        order = np.argsort(index)
        index, kgs, acc = index[order], kgs[order], np.take(acc, order, axis=0)
        twice = np.nonzero(index[1:] == index[:-1])[0]
        if len(twice):
            i = int(twice[0])
            key = int(Run(index[i : i + 1], kgs[i : i + 1], acc[i : i + 1], packed).keys[0])
            raise ValueError(
                f"state {state_name!r} lists key {key!r} (namespace {ws!r}) twice in key group "
                f"{int(kgs[i])}: the snapshot is corrupt"
            )
    return Run(index, kgs, acc, packed)


def _by_window_start(parts: list[tuple[int, IntRows]]) -> dict[int, list[_Piece]]:
    """Per window start, its (key group, keys, accumulators) pieces: a snapshot's rows come by window
    start within each key group (``snapshot_rows``), so each piece is a slice; other orders are
    sorted by window start first. No global sort: a restore sorts each window at most once."""
    out: dict[int, list[_Piece]] = {}
    for kg, rows in parts:
        keys, starts, acc = rows.keys, rows.namespaces, rows.values
        if len(starts) > 1 and bool(np.any(starts[1:] < starts[:-1])):
            order = np.argsort(starts, kind="stable")
            keys, starts, acc = keys[order], starts[order], acc[order]
        bounds = [0, *(np.flatnonzero(starts[1:] != starts[:-1]) + 1).tolist(), len(starts)]
        for lo, hi in itertools.pairwise(bounds):
            if hi > lo:
                out.setdefault(int(starts[lo]), []).append((kg, keys[lo:hi], acc[lo:hi]))
    return out


def _int_rows(rows: Iterable[Any], width: int) -> IntRows | None:
    """Rows of the columnar shape as ``IntRows`` (the slow path: rows decoded one by one)."""
    rows = list(rows)
    keys = [r[0] for r in rows]
    namespaces = [r[1] for r in rows]
    values = [r[2] for r in rows]
    if (
        set(map(type, keys)) != {int}
        or set(map(type, namespaces)) != {int}
        or set(map(type, values)) != {list}
        or any(r[3] is not None for r in rows)
        or set(map(len, values)) != {width}
        or any(type(v) is not int for value in values for v in value)
    ):
        return None
    try:
        return IntRows(
            np.array(keys, dtype=np.int64),
            np.array(namespaces, dtype=np.int64),
            np.array(values, dtype=np.int64).reshape(len(rows), width),
        )
    except OverflowError:
        return None
