"""Deduplication's seen keys as columns: the fast path of ``DeduplicateOperator``.

The heap backend keeps one Python entry per seen key (the value state ``seen`` = True with a TTL);
here they are three aligned arrays

    index  int64[n]   sorted, unique: the int key, or the 64-bit hash of the string key (``mode``)
    kgs    int32[n]   key group of each entry
    expiry int64[n]   processing time at which the entry expires (``expiry <= now``: gone)
    skeys  string[n]  the string keys themselves (``mode == HASH``), aligned with ``index``

so a chunk is checked against them with one ``searchsorted``, and snapshots are ``FlagRows`` that
the typed layout writes exactly as it writes the heap backend's rows ``(key, None, True, expiry)``.

TTL, as the heap backend's ``StateTtlConfig`` (update on create and write, never return expired):
a key passes when it has no entry or its entry expired (``expiry <= now``); passing writes
``expiry = now + ttl``. A snapshot leaves expired entries out. ``changed`` holds the key groups of
every written key since the restore (the heap backend dirties exactly those).

Invariants: arrays are replaced, never written in place, once a snapshot may hold them; a hash hit
is confirmed by comparing the string keys, and two different keys with one hash are never merged
(``admit`` raises ``Refused`` having changed nothing, and the operator hands its keys to the heap).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from spark_jobs.runtime.operators import window_columns as wc
from spark_jobs.runtime.operators.window_columns import HASH, INT, Refused
from state_store.core.keygroups import KeyGroupRange
from state_store.core.state.snapshot import EntryDelta, KeyedStateSnapshot
from state_store.formats.typed_rows import FlagRows


class SeenKeys:
    """See module docstring. One thread."""

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms
        self.index: NDArray[np.int64] = np.zeros(0, np.int64)
        self.kgs: NDArray[np.int32] = np.zeros(0, np.int32)
        self.expiry: NDArray[np.int64] = np.zeros(0, np.int64)
        self.skeys: pa.Array | None = None
        self.mode: str | None = None
        self.changed: set[int] = set()
        self.from_base: NDArray[np.bool_] = np.zeros(0, np.bool_)
        """Per entry: restored and not written since (not part of the next delta)."""
        self.gone: dict[int, list[Any]] = {}
        """Per key group: keys of restored entries dropped since (expired): the delta's deletions."""

    def __len__(self) -> int:
        return len(self.index)

    def admit(self, keys: Any, kgs: NDArray[np.int32], now: int) -> NDArray[np.bool_]:
        """Which of ``keys`` (distinct; int64 array or string array) pass -- unseen or expired --
        recording them as seen until ``now + ttl``; Refused (nothing changed) when they do not fit."""
        string = isinstance(keys, pa.Array)
        mode = HASH if string else INT
        if len(self.index) and mode != self.mode:
            raise Refused("int keys and string keys in one operator")
        index = wc.HASH_FUNCTION(keys) if string else np.asarray(keys, dtype=np.int64)
        if string and len(np.unique(index)) != len(index):
            raise Refused("two string keys with the same 64-bit hash")
        pos = np.searchsorted(self.index, index)
        hit = pos < len(self.index)
        hit[hit] = self.index[pos[hit]] == index[hit]
        if string and hit.any():
            assert self.skeys is not None
            same = pc.equal(self.skeys.take(pa.array(pos[hit])), keys.filter(pa.array(hit)))
            if not pc.all(same).as_py():
                raise Refused("two string keys with the same 64-bit hash")
        live = hit.copy()
        live[hit] = self.expiry[pos[hit]] > now
        fresh = ~live
        until = now + self.ttl_ms
        expiry = self.expiry
        renewed = pos[hit & fresh]
        from_base = self.from_base
        if len(renewed):
            expiry = expiry.copy()
            expiry[renewed] = until
            from_base = from_base.copy()
            from_base[renewed] = False
        miss = np.flatnonzero(~hit)
        if len(miss):
            miss = miss[np.argsort(index[miss], kind="stable")]
            at = pos[miss]
            self.index = np.insert(self.index, at, index[miss])
            self.kgs = np.insert(self.kgs, at, kgs[miss])
            expiry = np.insert(expiry, at, np.full(len(miss), until, np.int64))
            from_base = np.insert(from_base, at, False)
            if string:
                old = self.skeys if self.skeys is not None else pa.array([], pa.string())
                perm = np.insert(np.arange(len(old)), at, len(old) + np.arange(len(miss)))
                self.skeys = pa.concat_arrays([old, keys.take(pa.array(miss))]).take(pa.array(perm))
        self.expiry = expiry
        self.from_base = from_base
        self.mode = mode
        self.changed.update(np.unique(kgs[fresh]).tolist())
        return fresh

    def snapshot_rows(self, now: int) -> dict[int, FlagRows]:
        """The live entries per key group (expired ones are dropped from the columns too)."""
        live = self.expiry > now
        if not live.all():
            self._keep(live)
        if not len(self.index):
            return {}
        order = np.argsort(self.kgs, kind="stable")
        kgs = self.kgs[order]
        groups, first = np.unique(kgs, return_index=True)
        bounds = [*first.tolist(), len(kgs)]
        keys: Any = self.skeys.take(pa.array(order)) if self.skeys is not None else self.index[order]
        expiry = self.expiry[order]
        out: dict[int, FlagRows] = {}
        for kg, lo, hi in zip(groups.tolist(), bounds, bounds[1:]):
            run = keys.slice(lo, hi - lo) if self.skeys is not None else keys[lo:hi]
            out[int(kg)] = FlagRows(run, expiry[lo:hi])
        return out

    def _keep(self, mask: NDArray[np.bool_]) -> None:
        dropped = np.flatnonzero(~mask & self.from_base)
        if len(dropped):
            keys = (
                self.skeys.take(pa.array(dropped)).to_pylist()
                if self.skeys is not None
                else self.index[dropped].tolist()
            )
            for kg, key in zip(self.kgs[dropped].tolist(), keys):
                self.gone.setdefault(kg, []).append(key)
        self.index, self.kgs, self.expiry = self.index[mask], self.kgs[mask], self.expiry[mask]
        self.from_base = self.from_base[mask]
        if self.skeys is not None:
            self.skeys = self.skeys.filter(pa.array(mask))

    def notify_checkpoint_complete(self) -> None:
        """The columns equal a completed checkpoint (their last snapshot, nothing admitted since):
        every entry is now part of the base, nothing is changed or gone since it."""
        self.changed.clear()
        self.gone.clear()
        self.from_base = np.ones(len(self.index), np.bool_)

    def deltas(self, state_name: str, now: int) -> dict[int, EntryDelta]:
        """Per changed key group, its change since the restore: the entries written since (new or
        renewed) and the restored ones dropped (expired) -- what the heap backend's incremental
        snapshot would find by comparing entries. Call after ``snapshot_rows(now)``."""
        live = self.expiry > now
        out: dict[int, EntryDelta] = {}
        for kg in sorted(self.changed | set(self.gone)):
            mine = live & (self.kgs == kg)
            new = np.flatnonzero(mine & ~self.from_base)
            keys: Any = self.skeys.take(pa.array(new)) if self.skeys is not None else self.index[new]
            deleted = tuple((state_name, key, None) for key in self.gone.get(kg, []))
            rows = {state_name: FlagRows(keys, self.expiry[new])} if len(new) else {}
            out[kg] = EntryDelta(rows, deleted, int(mine.sum()))
        return out

    @classmethod
    def restore(
        cls,
        ttl_ms: int,
        snapshots: Iterable[KeyedStateSnapshot],
        state_name: str,
        key_groups: KeyGroupRange,
        key_groups_of: Any,
    ) -> SeenKeys | None:
        """The seen keys of ``state_name`` in ``snapshots`` (key groups outside ``key_groups``
        skipped), or None when an entry is not ``(int or str key, None, True, int expiry)``, keys of
        both types appear, two string keys share a hash, or another state has entries. Raises
        ValueError for a key listed twice, and for one under the wrong key group unless
        ``key_groups_of`` is None (trusted files)."""
        out = cls(ttl_ms)
        keys_parts: list[Any] = []
        kg_parts: list[NDArray[np.int32]] = []
        expiry_parts: list[NDArray[np.int64]] = []
        for snap in snapshots:
            for kg, states in snap.key_groups.items():
                if any(len(rows) for name, rows in states.items() if name != state_name):
                    return None
                rows = states.get(state_name)
                if kg not in key_groups or not rows:
                    continue
                flags = rows if isinstance(rows, FlagRows) else _flags_of(rows)
                if flags is None:
                    return None
                keys_parts.append(flags.keys)
                kg_parts.append(np.full(len(flags), kg, np.int32))
                expiry_parts.append(flags.expiry)
        if not keys_parts:
            return out
        string = {isinstance(k, pa.Array) for k in keys_parts}
        if len(string) > 1:
            return None
        keys: Any = pa.concat_arrays(keys_parts) if True in string else np.concatenate(keys_parts)
        kgs = np.concatenate(kg_parts)
        if key_groups_of is not None:
            wrong = np.flatnonzero(key_groups_of(keys) != kgs)
            if len(wrong):
                i = int(wrong[0])
                key = keys[i].as_py() if True in string else int(keys[i])
                raise ValueError(
                    f"state {state_name!r} lists key {key!r} under key group {int(kgs[i])}, which it does "
                    "not belong to: the file was written with another hash function or max_parallelism"
                )
        index = wc.HASH_FUNCTION(keys) if True in string else keys
        order = np.argsort(index, kind="stable")
        index = index[order]
        twice = np.flatnonzero(index[1:] == index[:-1])
        skeys = keys.take(pa.array(order)) if True in string else None
        if len(twice):
            if skeys is not None:
                same = pc.equal(skeys.take(pa.array(twice)), skeys.take(pa.array(twice + 1)))
                if not pc.all(same).as_py():
                    return None  # a hash collision: the heap backend keeps both keys
            i = int(order[twice[0]])
            key = keys[i].as_py() if skeys is not None else int(keys[i])
            raise ValueError(f"state {state_name!r} lists key {key!r} twice: the snapshot is corrupt")
        out.index, out.kgs, out.expiry, out.skeys = (
            index,
            kgs[order],
            np.concatenate(expiry_parts)[order],
            skeys,
        )
        out.mode = HASH if skeys is not None else INT
        out.from_base = np.ones(len(index), np.bool_)
        return out


def _flags_of(rows: Any) -> FlagRows | None:
    """Tuple rows (an older layout) as ``FlagRows``, or None when one is not a seen flag."""
    keys, namespaces, values, expiries = (list(c) for c in zip(*rows))
    key_types = set(map(type, keys))
    if key_types not in ({int}, {str}) or set(namespaces) != {None} or set(map(repr, values)) != {"True"}:
        return None
    if not all(type(e) is int for e in expiries):
        return None
    try:
        key_arr: Any = pa.array(keys, pa.string()) if key_types == {str} else np.array(keys, np.int64)
    except OverflowError:
        return None
    return FlagRows(key_arr, np.array(expiries, np.int64))
