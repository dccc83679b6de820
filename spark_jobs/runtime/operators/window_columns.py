"""Columnar window accumulators: the fast path of ``WindowOperator``.

Used for tumbling and sliding windows, with or without allowed lateness (the indexed mode of ``window.py``)
whose aggregates all have columns (``Count``, ``Sum``, ``Min``, ``Max``, ``First``, ``Last``) over
int or string keys and int, float or bool values. The heap backend keeps one Python list per
(key, window); here each window start holds

    index int64[n]        sorted, unique: the entry's packed (key group, key), its key, or the
                          64-bit hash of its string key (``mode``)
    kgs   int32[n]        key group of each entry
    slots w arrays[n]     one column per aggregate, int64, float64 or bool (``dtypes``)
    skeys string[n]       the string keys themselves (``mode == HASH``), aligned with ``index``

so merging a chunk's partial aggregates, firing a window and taking a snapshot are numpy operations
and snapshots are ``IntRows`` (int keys, int slots) or ``TypedRows`` that state files encode
column-wise (format versions 2 and 3; restores decode them the same way). The state files hold the
heap backend's rows: the entries are the ``acc`` value state, namespace = window start, value = the
accumulator list; either path restores what the other wrote (savepoints, rescaling and
``epochal inspect`` see no difference).

Merges are the heap backend's, element for element: ``Count``/``Sum`` add (``acc + partial``: for
floats the same IEEE addition as Python's), ``Min``/``Max`` keep the accumulator unless the partial
is strictly smaller/greater or the accumulator is NaN and the partial is not (``Min.merge``),
``First`` keeps the accumulator and ``Last`` takes the partial.

Int keys: while every key fits in 48 bits (``-2**47 <= key < 2**47``), ``index`` is ``key group
<< 48 | key + 2**47`` (``PACKED``): the entries are in (key group, key) order, the order in which
snapshots write them, so a restore concatenates each window's key-group slices and sorts nothing.
The first key outside that range moves every window to key order (``INT``) for the rest of the
epoch. String keys (``HASH``): ``index`` is ``HASH(key)``; a hit on equal hashes is confirmed by
comparing the keys, and two different keys with one hash (a collision) are never merged: the
operator hands its state to the heap backend, which keeps both exactly.

Invariants:

* Exactness: every int accumulator and partial of an adding slot stays below ``SAFE`` (2**62) in
  magnitude before a merge, so int64 addition equals Python's; otherwise -- and for keys or values
  of another type, or a hash collision -- ``merge_all`` refuses the whole chunk before changing
  anything and the operator moves its state to the heap backend (``WindowOperator._demote``).
* Arrays are replaced, never written in place, once a snapshot may hold them (``snapshot_rows``
  slices fresh arrays; ``merge`` copies a slot before writing into it).
* Every run of one ``WindowColumns`` has its ``mode`` and its slots its ``dtypes``.
* ``changed`` holds every key group whose entries changed since the restore (merges and firings):
  the snapshot's ``changed_key_groups``; the others reuse their files.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from state_store.core.keygroups import KeyGroupRange
from state_store.core.state.snapshot import KeyedStateSnapshot
from state_store.formats.int_rows import IntRows
from state_store.formats.typed_columns import typed_rows_of
from state_store.formats.typed_rows import TypedRows

SAFE = 1 << 62
RESTORE_THREADS = max(1, min(4, os.cpu_count() or 1))
"""Windows restored at once (sorting and gathering release the GIL)."""
PARALLEL_RESTORE_ENTRIES = 1_000_000
"""Below this many entries a restore stays on the calling thread (a thread hand-off costs more)."""
KEY_BITS = 48
"""Bits of a key in a packed index; the key group takes the 15 above (max_parallelism <= 2**15)."""
KEY_OFFSET = 1 << (KEY_BITS - 1)
KEY_MASK = (1 << KEY_BITS) - 1

PACKED, INT, HASH = "packed", "int", "hash"
ADD, MIN, MAX, FIRST, LAST = "add", "min", "max", "first", "last"
MERGES = (ADD, MIN, MAX, FIRST, LAST)
INT64, FLOAT64, BOOL = np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.bool_)


def hash_keys(keys: pa.Array) -> NDArray[np.int64]:
    """A 64-bit hash of every string key (pandas' SipHash-2-4 of the UTF-8 bytes), as int64."""
    hashed: NDArray[np.uint64] = pd.util.hash_array(keys.to_numpy(zero_copy_only=False), categorize=False)
    return hashed.view(np.int64)


HASH_FUNCTION: Callable[[pa.Array], NDArray[np.int64]] = hash_keys
"""The string-key hash; tests swap in a weak one to force collisions."""


def unfit_keys(keys: pa.Array) -> str | None:
    """Why the columns cannot hold ``keys`` (not non-null ints or strings, or unsigned ints beyond
    int64, which an int64 index would wrap), or None."""
    if not (pa.types.is_integer(keys.type) or pa.types.is_string(keys.type)) or keys.null_count:
        return f"keys of type {keys.type}{' with nulls' if keys.null_count else ''}"
    if pa.types.is_uint64(keys.type) and len(keys) and pc.max(keys).as_py() >= 1 << 63:
        return "keys of type uint64 beyond int64"
    return None


class Refused(ValueError):
    """The columns cannot take a chunk exactly; the message says why (for the fallback report)."""


@dataclass(frozen=True)
class Run:
    """The accumulators of one window start (module docstring)."""

    index: NDArray[np.int64]
    kgs: NDArray[np.int32]
    slots: tuple[NDArray[Any], ...]
    mode: str
    skeys: pa.Array | None = None

    @property
    def keys(self) -> Any:
        """The key of each entry, in ``index`` order: int64 array, or a string array (``HASH``)."""
        if self.mode == HASH:
            return self.skeys
        return (self.index & KEY_MASK) - KEY_OFFSET if self.mode == PACKED else self.index

    @property
    def packed(self) -> bool:
        return self.mode == PACKED

    @property
    def acc(self) -> NDArray[Any]:
        """The slots as one ``(n, w)`` matrix (int slots only stay exact ints)."""
        return np.column_stack(self.slots) if self.slots else np.zeros((len(self.index), 0), np.int64)

    def take(self, order: NDArray[np.int64]) -> Run:
        skeys = None if self.skeys is None else self.skeys.take(pa.array(order))
        return Run(self.index[order], self.kgs[order], tuple(s[order] for s in self.slots), self.mode, skeys)


def packable(keys: NDArray[np.int64]) -> bool:
    """Whether every key fits in a packed index."""
    return not len(keys) or (int(keys.min()) >= -KEY_OFFSET and int(keys.max()) < KEY_OFFSET)


def pack(keys: NDArray[np.int64], kgs: NDArray[np.int32]) -> NDArray[np.int64]:
    """The packed index of each (key, key group): increasing in (key group, key); keys ``packable``."""
    index = kgs.astype(np.int64) << KEY_BITS
    index |= keys + KEY_OFFSET
    return index


Chunk = tuple[int, Any, NDArray[np.int32], Any]
"""(window start, keys: int64 array or string array, key groups, partials: (n, w) or w arrays)."""


class WindowColumns:
    """Accumulators per window start; see module docstring. One thread."""

    def __init__(self, merges: int | Sequence[str]) -> None:
        self.merges = (ADD,) * merges if isinstance(merges, int) else tuple(merges)
        unknown = [m for m in self.merges if m not in MERGES]
        if unknown:
            raise ValueError(f"unknown column merges {unknown}: use {MERGES}")
        self.width = len(self.merges)
        self.runs: dict[int, Run] = {}
        self.changed: set[int] = set()
        self.mode = PACKED
        self.dtypes: tuple[np.dtype[Any], ...] | None = None

    @property
    def packed(self) -> bool:
        return self.mode == PACKED

    # -- merge and fire --------------------------------------------------------------------------
    def merge(self, ws: int, keys: Any, kgs: NDArray[np.int32], partials: Any) -> None:
        """Merge one window's partials (one row per key, keys unique); Refused when they do not fit."""
        self.merge_all([(ws, keys, kgs, partials)])

    def merge_all(self, chunks: Sequence[Chunk]) -> None:
        """Merge every chunk (distinct window starts), or raise Refused having changed nothing."""
        if not chunks:
            return
        prepared = [(ws, keys, kgs, _slots(partials, self.width)) for ws, keys, kgs, partials in chunks]
        hashes = self._check(prepared)
        string = isinstance(prepared[0][1], pa.Array)
        if not self.runs:
            self.mode = HASH if string else PACKED
        if self.dtypes is None:
            self.dtypes = tuple(s.dtype for s in prepared[0][3])
        if self.mode == PACKED and not all(packable(keys) for _, keys, _, _ in prepared):
            self._unpack()
        for (ws, keys, kgs, slots), hashed in zip(prepared, hashes, strict=True):
            self._merge_one(ws, keys, kgs, slots, hashed)

    def _check(
        self, chunks: Sequence[tuple[int, Any, NDArray[np.int32], tuple[NDArray[Any], ...]]]
    ) -> list[NDArray[np.int64] | None]:
        """Refused (with the reason) unless every chunk merges exactly; changes nothing. Returns
        each chunk's key hashes (string keys) for the merge."""
        string = {isinstance(keys, pa.Array) for _, keys, _, _ in chunks}
        if len(string) != 1 or (self.runs and (self.mode == HASH) not in string):
            raise Refused("int keys and string keys in one operator")
        dtypes = {tuple(s.dtype for s in slots) for _, _, _, slots in chunks}
        if len(dtypes) != 1 or (self.runs and self.dtypes is not None and self.dtypes not in dtypes):
            new = ", ".join(sorted("/".join(d.name for d in t) for t in dtypes))
            old = "/".join(d.name for d in self.dtypes or ())
            raise Refused(f"aggregate columns of type {new} after {old}")
        (types,) = dtypes
        adding = [j for j, (m, d) in enumerate(zip(self.merges, types)) if m == ADD and d == INT64]
        for _, _, _, slots in chunks:
            if any(len(slots[j]) and int(np.abs(slots[j]).max()) >= SAFE for j in adding):
                raise Refused("a sum beyond the exact int64 range (2**62)")
        hashes: list[NDArray[np.int64] | None] = []
        for ws, keys, _, _ in chunks:
            run = self.runs.get(ws)
            if run is not None and any(
                len(run.slots[j]) and int(np.abs(run.slots[j]).max()) >= SAFE for j in adding
            ):
                raise Refused("a sum beyond the exact int64 range (2**62)")
            hashes.append(self._check_hashes(run, keys) if isinstance(keys, pa.Array) else None)
        return hashes

    @staticmethod
    def _check_hashes(run: Run | None, keys: pa.Array) -> NDArray[np.int64]:
        index = HASH_FUNCTION(keys)
        if len(np.unique(index)) != len(index):
            raise Refused("two string keys with the same 64-bit hash")
        if run is None or not len(run.index):
            return index
        pos = np.searchsorted(run.index, index)
        hit = pos < len(run.index)
        hit[hit] = run.index[pos[hit]] == index[hit]
        if hit.any():
            assert run.skeys is not None
            same = pc.equal(run.skeys.take(pa.array(pos[hit])), keys.filter(pa.array(hit)))
            if not pc.all(same).as_py():
                raise Refused("two string keys with the same 64-bit hash")
        return index

    def _merge_one(
        self,
        ws: int,
        keys: Any,
        kgs: NDArray[np.int32],
        slots: tuple[NDArray[Any], ...],
        hashed: NDArray[np.int64] | None,
    ) -> None:
        skeys = None
        if self.mode == HASH:
            skeys, index = keys, hashed if hashed is not None else HASH_FUNCTION(keys)
        else:
            index = pack(keys, kgs) if self.mode == PACKED else keys
        order = np.argsort(index)  # unique: any sort is stable
        new = Run(index, kgs, slots, self.mode, skeys).take(order)
        run = self.runs.get(ws)
        self.changed.update(np.unique(kgs).tolist())
        if run is None:
            self.runs[ws] = new
            return
        pos = np.searchsorted(run.index, new.index)
        hit = pos < len(run.index)
        hit[hit] = run.index[pos[hit]] == new.index[hit]
        at = pos[hit]
        merged = []
        for merge, old, part in zip(self.merges, run.slots, new.slots):
            if merge == FIRST or not len(at):
                merged.append(old)
                continue
            col = old.copy()
            got = part[hit]
            if merge == ADD:
                col[at] += got
            elif merge in (MIN, MAX):  # Min.merge / Max.merge: NaN only while nothing else came
                cur = col[at]
                better = got < cur if merge == MIN else got > cur
                col[at] = np.where(better | ((cur != cur) & (got == got)), got, cur)
            else:  # LAST
                col[at] = got
            merged.append(col)
        fresh = ~hit
        if not fresh.any():
            self.runs[ws] = Run(run.index, run.kgs, tuple(merged), self.mode, run.skeys)
            return
        where = pos[fresh]
        out_keys = None
        if self.mode == HASH:
            assert run.skeys is not None and new.skeys is not None
            perm = np.insert(np.arange(len(run.index)), where, len(run.index) + np.flatnonzero(fresh))
            out_keys = pa.concat_arrays([run.skeys, new.skeys]).take(pa.array(perm))
        self.runs[ws] = Run(
            np.insert(run.index, where, new.index[fresh]),
            np.insert(run.kgs, where, new.kgs[fresh]),
            tuple(np.insert(col, where, part[fresh]) for col, part in zip(merged, new.slots)),
            self.mode,
            out_keys,
        )

    def _unpack(self) -> None:
        """Move every window to key order (a key that does not fit in a packed index arrived)."""
        for ws, run in self.runs.items():
            keys = run.keys
            order = np.argsort(keys)
            self.runs[ws] = Run(keys[order], run.kgs[order], tuple(s[order] for s in run.slots), INT)
        self.mode = INT

    def lookup(self, ws: int, keys: Any, kgs: NDArray[np.int32]) -> Run:
        """The entries of window ``ws`` for ``keys`` (all present), in index order."""
        run = self.runs[ws]
        index = HASH_FUNCTION(keys) if self.mode == HASH else pack(keys, kgs) if self.mode == PACKED else keys
        return run.take(np.searchsorted(run.index, np.sort(index)))

    def due(self, watermark: int, size: int) -> list[int]:
        """Window starts whose window fires at ``watermark`` (``end - 1 <= watermark``), in order."""
        return sorted(ws for ws in self.runs if ws + size - 1 <= watermark)

    def pop(self, ws: int) -> Run:
        run = self.runs.pop(ws)
        self.changed.update(np.unique(run.kgs).tolist())
        return run

    # -- snapshot and restore --------------------------------------------------------------------
    def snapshot_rows(self) -> dict[int, IntRows | TypedRows]:
        """Every entry per key group (rows by window start, then index): ``IntRows`` for int keys
        and int slots, ``TypedRows`` otherwise."""
        if not self.runs:
            return {}
        starts = sorted(self.runs)
        runs = [self.runs[ws] for ws in starts]
        kgs = np.concatenate([r.kgs for r in runs])
        namespaces = np.concatenate(
            [np.full(len(r.index), ws, dtype=np.int64) for ws, r in zip(starts, runs)]
        )
        order = np.argsort(kgs, kind="stable")
        kgs, namespaces = kgs[order], namespaces[order]
        slots = [np.concatenate([r.slots[j] for r in runs])[order] for j in range(self.width)]
        if self.mode == HASH:
            keys: Any = pa.concat_arrays([r.keys for r in runs]).take(pa.array(order))
        else:
            keys = np.concatenate([r.keys for r in runs])[order]
        groups, first = np.unique(kgs, return_index=True)
        bounds = [*first.tolist(), len(kgs)]
        ints = self.mode != HASH and all(s.dtype == INT64 for s in slots)
        matrix = np.column_stack(slots) if ints else None
        out: dict[int, IntRows | TypedRows] = {}
        for kg, lo, hi in zip(groups.tolist(), bounds, bounds[1:]):
            if matrix is not None:
                out[int(kg)] = IntRows(keys[lo:hi], namespaces[lo:hi], matrix[lo:hi])
            else:
                run_keys = keys.slice(lo, hi - lo) if self.mode == HASH else keys[lo:hi]
                out[int(kg)] = TypedRows(run_keys, namespaces[lo:hi], [s[lo:hi] for s in slots])
        return out

    @classmethod
    def restore(
        cls,
        merges: int | Sequence[str],
        snapshots: Iterable[KeyedStateSnapshot],
        state_name: str,
        key_groups: KeyGroupRange,
        key_groups_of: Any,
    ) -> WindowColumns | None:
        """The accumulators of ``state_name`` in ``snapshots`` (key groups outside ``key_groups`` are
        skipped), or None when an entry does not have the columnar shape (a key that is neither an
        int nor a str, a window that is not an int, an accumulator that is not ``width`` ints,
        floats or bools of one type per slot, two string keys with one hash) or another state is
        present: the caller restores into the heap backend instead. Raises ValueError, as the heap
        backend does, for an entry listed twice, and for one stored under the wrong key group
        unless ``key_groups_of`` is None (trusted files: ``OperatorRestore.trusted_key_groups``)."""
        out = cls(merges)
        parts: list[tuple[int, TypedRows]] = []
        for snap in snapshots:
            if set(snap.kinds) - {state_name}:
                return None
            for kg, states in snap.key_groups.items():
                rows = states.get(state_name)
                if kg not in key_groups or rows is None:
                    continue
                typed = typed_rows_of(rows)
                if typed is None or typed.width != out.width:
                    return None
                parts.append((kg, typed))
        if len({(isinstance(t.keys, pa.Array), tuple(s.dtype for s in t.slots)) for _, t in parts}) > 1:
            return None
        windows = sorted(_by_window_start(parts).items())
        if parts:
            first = parts[0][1]
            out.dtypes = tuple(s.dtype for s in first.slots)
            if isinstance(first.keys, pa.Array):
                out.mode = HASH
            elif not all(packable(keys) for _, pieces in windows for _, keys, _ in pieces):
                out.mode = INT

        def run_of(window: tuple[int, list[_Piece]]) -> Run:
            return _sorted_run(state_name, *window, key_groups_of, out.mode)

        entries = sum(len(keys) for _, pieces in windows for _, keys, _ in pieces)
        threads = min(RESTORE_THREADS, len(windows)) if entries >= PARALLEL_RESTORE_ENTRIES else 1
        try:
            if threads > 1:  # numpy sorts and gathers without the GIL: one window per core
                with ThreadPoolExecutor(threads, thread_name_prefix="epochal-window-restore") as pool:
                    runs = list(pool.map(run_of, windows))  # the first failing window in order raises
            else:
                runs = [run_of(w) for w in windows]
        except Refused:
            return None  # a hash collision: the heap backend keeps both keys
        out.runs = {ws: run for (ws, _), run in zip(windows, runs, strict=True)}
        return out

    def entries(self) -> Mapping[int, Run]:
        return self.runs


def _slots(partials: Any, width: int) -> tuple[NDArray[Any], ...]:
    """Partials as one array per slot (an ``(n, w)`` matrix or a sequence of ``w`` arrays)."""
    slots = (
        tuple(partials[:, j] for j in range(partials.shape[1]))
        if isinstance(partials, np.ndarray)
        else tuple(partials)
    )
    if len(slots) != width:
        raise ValueError(f"{len(slots)} partial columns for {width} aggregates")
    return slots


_Piece = tuple[int, Any, tuple[NDArray[Any], ...]]
"""(key group, keys, slots) of one window start within one key group."""


def _sorted_run(state_name: str, ws: int, pieces: list[_Piece], key_groups_of: Any, mode: str) -> Run:
    """One window's pieces as a run sorted by its index; ValueError for a key listed twice, or (with
    ``key_groups_of``) stored under a key group it does not hash to; Refused for two string keys
    with one hash. Packed, pieces written by ``snapshot_rows`` are already in order: they are only
    concatenated, by key group."""
    if mode == PACKED:
        pieces = sorted(pieces, key=lambda piece: piece[0])
    width = len(pieces[0][2])
    if mode == HASH:
        keys: Any = pa.concat_arrays([k for _, k, _ in pieces])
    else:
        keys = np.concatenate([k for _, k, _ in pieces])
    slots = tuple(np.concatenate([s[j] for _, _, s in pieces]) for j in range(width))
    kgs = np.concatenate([np.full(len(k), kg, dtype=np.int32) for kg, k, _ in pieces])
    if key_groups_of is not None:
        actual = key_groups_of(keys)
        wrong = np.nonzero(actual != kgs)[0]
        if len(wrong):
            i = int(wrong[0])
            key = keys[i].as_py() if mode == HASH else int(keys[i])
            raise ValueError(
                f"state {state_name!r} lists key {key!r} under key group {int(kgs[i])}, but it "
                f"belongs to key group {int(actual[i])}: the file was written with another hash function "
                "or max_parallelism"
            )
    index = HASH_FUNCTION(keys) if mode == HASH else pack(keys, kgs) if mode == PACKED else keys
    run = Run(index, kgs, slots, mode, keys if mode == HASH else None)
    del keys
    if len(index) > 1 and not bool(np.all(index[1:] > index[:-1])):  # else sorted and unique already
        run = run.take(np.argsort(index))
        twice = np.nonzero(run.index[1:] == run.index[:-1])[0]
        if len(twice):
            i = int(twice[0])
            if mode == HASH:
                assert run.skeys is not None
                clash = [j for j in twice.tolist() if run.skeys[j].as_py() != run.skeys[j + 1].as_py()]
                if clash:
                    raise Refused("two string keys with the same 64-bit hash")
            key = run.take(np.array([i])).keys[0]
            key = key.as_py() if mode == HASH else int(key)
            raise ValueError(
                f"state {state_name!r} lists key {key!r} (namespace {ws!r}) twice in key group "
                f"{int(run.kgs[i])}: the snapshot is corrupt"
            )
    return run


def _by_window_start(parts: list[tuple[int, TypedRows]]) -> dict[int, list[_Piece]]:
    """Per window start, its (key group, keys, slots) pieces: a snapshot's rows come by window start
    within each key group (``snapshot_rows``), so each piece is a slice; other orders are sorted by
    window start first. No global sort: a restore sorts each window at most once."""
    out: dict[int, list[_Piece]] = {}
    for kg, rows in parts:
        keys, starts, slots = rows.keys, rows.namespaces, rows.slots
        if len(starts) > 1 and bool(np.any(starts[1:] < starts[:-1])):
            order = np.argsort(starts, kind="stable")
            keys = keys.take(pa.array(order)) if isinstance(keys, pa.Array) else keys[order]
            starts, slots = starts[order], tuple(s[order] for s in slots)
        bounds = [0, *(np.flatnonzero(starts[1:] != starts[:-1]) + 1).tolist(), len(starts)]
        for lo, hi in itertools.pairwise(bounds):
            if hi > lo:
                piece_keys = keys.slice(lo, hi - lo) if isinstance(keys, pa.Array) else keys[lo:hi]
                out.setdefault(int(starts[lo]), []).append((kg, piece_keys, tuple(s[lo:hi] for s in slots)))
    return out
