"""The keyed state of a per-key process function on local disk (``Job(state_memory_mb=...)``), with
the heap backend as a page cache in front of it.

A ``KeyedProcessFunction`` (or ``CoProcessFunction``) reads and writes its ``ValueState``,
``ListState``, ``MapState``, ``ReducingState`` and ``AggregatingState`` through the heap backend's
per-key handles, as without a budget. Under a budget the spill store holds every key's state as one
text (``state_store.formats.key_rows``: all states of the key, their rows, expiries) and the heap
backend holds only the keys being processed:

* **page in** before a chunk runs (its distinct keys) or a timer fires (the keys of the next timers
  due, ``TimerService.due_keys``): one bulk ``get`` of their texts, decoded into the backend;
* **page out** after the chunk (or the watermark advance, or every ``page_keys`` keys of timers):
  the backend's rows, encoded per key; the keys whose text changed are written to the store, the
  keys whose state is gone are deleted, then the backend is emptied.

So the user code sees exactly the heap backend's semantics (TTL included), and a snapshot, taken
between chunks, finds every key's state in the store. Memory: the store's budget plus one chunk's
keys (``page_peak_bytes`` counts their texts; the ack reports both).

Invariants: between chunks the backend holds no key; a key's text is written only when it changed
(canonical JSON: equal rows give equal texts); the state kinds the store holds are listed in every
snapshot (``SpillPart.kinds``), so the canonical rows (savepoints, a heap-backed restore) name them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from spark_jobs.runtime.spill_state import ROWS_FORM, SpillSource, SpillValueState
from state_store.core.errors import BadInputError
from state_store.core.keygroups import KeyGroupRange
from state_store.core.state import KeyedStateBackend
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot
from state_store.formats.key_rows import (
    decode_key_rows,
    encode_key_rows,
    latest_expiry,
    merged_states,
    rows_by_key,
)
from state_store.spill import SpillStore

ROWS = "rows"
EXPIRES = "expires"
ROWS_SCHEMA = pa.schema([(ROWS, pa.string()), (EXPIRES, pa.int64())])
"""A key's value on disk: its text, and when all of its rows have expired (null: a row never does),
which lets a full compaction drop the key (``SpillStore.expires_field``)."""
PAGE_FRACTION = 4
"""A page of keys holds at most about 1/PAGE_FRACTION of the budget (as text); the store gets the rest."""
FIRST_PAGE_KEYS = 64
"""Keys in the first page, before the size of a key's state is known."""


class SpillKeyedRows(SpillValueState):
    """All keyed state of a subtask, one text per key, in a spill store; see the module docstring."""

    form = ROWS_FORM

    def __init__(
        self,
        what: str,
        claimed: tuple[Path, int],
        key_group_range: KeyGroupRange,
        max_parallelism: int,
        budget_bytes: int,
    ) -> None:
        self.page_budget = budget_bytes // PAGE_FRACTION
        super().__init__(
            what, claimed, key_group_range, max_parallelism, budget_bytes - self.page_budget, ROWS_SCHEMA
        )
        self._kinds: dict[str, StateKind] = {}
        self._paged: dict[Any, str | None] = {}
        """Keys paged in since the last page out, and their text as read (None: no state)."""
        self._paged_groups: dict[Any, int] = {}
        """The key group of every paged-in key (hashed once per page, passed to the store)."""
        self._paged_bytes = 0
        self.page_peak_bytes = 0
        self.now_ms: int | None = None
        self._key_bytes = max(1, self.page_budget // FIRST_PAGE_KEYS)
        """Bytes of one key's text, as the last pages wrote them (it rises at once, falls by halves)."""

    def _configure(self, store: SpillStore) -> None:
        store.expires_field = EXPIRES
        store.now_ms = self.now_ms

    def set_now(self, now_ms: int) -> None:
        """The epoch's processing time: state TTL's clock, for the store's TTL compaction filter."""
        self.now_ms = now_ms
        if self.store is not None:
            self.store.now_ms = now_ms

    def _texts(self, texts: dict[Any, str], expiries: dict[Any, int | None]) -> pa.Table:
        keys = list(texts)
        return pa.table(
            {
                ROWS: pa.array([texts[k] for k in keys], pa.string()),
                EXPIRES: pa.array([expiries[k] for k in keys], pa.int64()),
            }
        )

    # -- kinds -----------------------------------------------------------------------------------
    def kinds(self) -> dict[str, str]:
        return {name: kind.value for name, kind in sorted(self._kinds.items())}

    def _note_kinds(self, kinds: dict[str, StateKind]) -> None:
        for name, kind in kinds.items():
            known = self._kinds.setdefault(name, kind)
            if known is not kind:
                raise BadInputError(
                    f"{self.what}: state {name!r} is a {known.value} state and a {kind.value} state in "
                    "its restored state: restore from a checkpoint or savepoint of one job version"
                )

    # -- restore ---------------------------------------------------------------------------------
    def _restore_native(self, used: Sequence[SpillSource]) -> None:
        super()._restore_native(used)
        for source in used:
            self._note_kinds({name: StateKind(kind) for name, kind in source.kinds.items()})

    def load_rows(self, parts: Sequence[KeyedStateSnapshot]) -> None:
        """Write canonical rows of any states (a heap checkpoint or a savepoint) into the store, a
        key group at a time, each key's rows of every state as its text."""
        for part in parts:
            kinds = dict(part.kinds)
            for kg, states in part.key_groups.items():
                per_key = rows_by_key(states, kinds)
                if not per_key:
                    continue
                self._note_kinds({name: kinds[name] for name in states if states[name]})
                keys = self._keys(pa.array(list(per_key)))
                self._check_groups(keys, kg)
                texts: dict[Any, str] = {}
                for key, states_of in per_key.items():
                    text = encode_key_rows(key, states_of)
                    assert text is not None  # rows_by_key lists only keys with rows
                    texts[key] = text
                expiries = {key: latest_expiry(states_of) for key, states_of in per_key.items()}
                self.put(keys, self._texts(texts, expiries))

    # -- paging ----------------------------------------------------------------------------------
    def holds(self, key: Any) -> bool:
        """Whether ``key`` is paged in (its state, if any, is in the backend)."""
        return key in self._paged

    @property
    def paged_keys(self) -> int:
        return len(self._paged)

    @property
    def page_keys(self) -> int:
        """How many keys a page holds: its budget over the size of a key's state (at least 16)."""
        return max(16, self.page_budget // self._key_bytes)

    def pages(
        self, backend: KeyedStateBackend, keys: Sequence[Any], groups: np.ndarray | None = None
    ) -> Iterator[tuple[int, int]]:
        """``(start, stop)`` spans of ``keys``, a page each, in order: each span's keys are paged in
        before it is yielded and out after the caller is done with it. ``groups``: the keys' key
        groups when the caller has them already."""
        start = 0
        while start < len(keys):
            stop = min(len(keys), start + self.page_keys)
            self.page_in(backend, keys[start:stop], None if groups is None else groups[start:stop])
            yield start, stop
            self.page_out(backend)
            start = stop

    def page_in(
        self, backend: KeyedStateBackend, keys: Sequence[Any], groups: np.ndarray | None = None
    ) -> None:
        """Load the state of ``keys`` (owned by the subtask; those paged in already are skipped)
        from the store into ``backend``. ``groups``: the keys' key groups, if known."""
        first: dict[Any, int] = {}
        for i, key in enumerate(keys):
            if key not in self._paged:
                first.setdefault(key, i)  # a key listed twice (two of its timers due) loads once
        fresh = list(first.values())
        if not fresh:
            return
        new = [keys[i] for i in fresh]
        key_array = pa.array(new)
        new_groups = self._groups(key_array) if groups is None else groups[fresh]
        texts = self.get(key_array, new_groups).column(ROWS).to_pylist()
        decoded = []
        for key, kg, text in zip(new, new_groups.tolist(), texts):
            self._paged[key] = text
            self._paged_groups[key] = kg
            if text is not None:
                self._paged_bytes += len(text)
                decoded.append((kg, decode_key_rows(key, text)))
        self.page_peak_bytes = max(self.page_peak_bytes, self._paged_bytes)
        states, kinds = merged_states(decoded)
        self._note_kinds(kinds)
        backend.page_in(states, kinds)

    def page_out(self, backend: KeyedStateBackend) -> None:
        """Write the keys whose state changed back to the store, delete the keys whose state is
        gone, and empty ``backend``."""
        groups = backend.page_out()
        kinds = {name: kind for name in backend.state_names if (kind := backend.kind_of(name)) is not None}
        texts: dict[Any, str] = {}
        expiries: dict[Any, int | None] = {}
        for states in groups.values():
            for key, states_of in rows_by_key(states, kinds).items():
                text = encode_key_rows(key, states_of)
                assert text is not None  # rows_by_key lists only keys with rows
                texts[key] = text
                expiries[key] = latest_expiry(states_of)
        self._note_kinds({name: kinds[name] for states in groups.values() for name in states})
        held = sum(len(text) for text in texts.values())
        self.page_peak_bytes = max(self.page_peak_bytes, held)
        if texts:
            self._key_bytes = max(1, held // len(texts), self._key_bytes // 2)
        changed = [key for key, text in texts.items() if text != self._paged.get(key)]
        gone = [key for key, text in self._paged.items() if text is not None and key not in texts]
        known = self._paged_groups
        self._paged, self._paged_groups, self._paged_bytes = {}, {}, 0
        if changed:
            self.put(
                pa.array(changed), self._texts({k: texts[k] for k in changed}, expiries), _of(changed, known)
            )
        if gone:
            self.delete(pa.array(gone), _of(gone, known))

    @property
    def peak_memory_bytes(self) -> int:
        """The store's peak plus the largest page of texts held at once (an upper bound of both)."""
        return super().peak_memory_bytes + self.page_peak_bytes


def _of(keys: list[Any], known: dict[Any, int]) -> np.ndarray | None:
    """The key groups of ``keys`` if all were paged in (a key a timer created may not have been)."""
    try:
        return np.fromiter((known[key] for key in keys), dtype=np.int32, count=len(keys))
    except KeyError:
        return None
