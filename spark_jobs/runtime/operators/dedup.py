"""Deduplication: the first record of every key passes; a key is remembered for ``ttl_ms`` of
processing time (the epoch's trigger time), after which it may pass again (Flink's state TTL).

The seen keys live in columns (``dedup_columns.SeenKeys``) while the keys are non-null ints or
strings; otherwise -- or after two string keys share a 64-bit hash -- in the heap backend (one
Python entry per key), which the operator then reports once in its log and in every ack's metrics
(``heap_fallback``). Both write the same state (``seen`` = True with its expiry, typed layout), so
either restores the other's files. With ``Job(state_memory_mb=...)`` the seen keys live in a spill
store on local disk, paged through the heap backend a chunk's keys at a time
(``spark_jobs.runtime.spill_rows``); its canonical rows are the same, so every form restores every
other.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.runtime.keys import KeySpec, distinct_keys, key_groups
from spark_jobs.runtime.operators.base import OperatorContext, OperatorSnapshot
from spark_jobs.runtime.operators.dedup_columns import SeenKeys
from spark_jobs.runtime.operators.keyed import KeyedOperator
from spark_jobs.runtime.operators.window_columns import Refused, unfit_keys
from spark_jobs.runtime.spill_rows import SpillKeyedRows
from state_store.core.state import KeyedStateSnapshot, StateKind, StateTtlConfig, ValueStateDescriptor

COLUMNAR = True
"""Keep the seen keys in columns (off: the heap backend; equivalence tests and ablation only)."""
RESTORED_WITHOUT_COLUMNS = (
    "its restored seen keys do not have columns (or two string keys share a 64-bit hash)"
)


class DeduplicateOperator(KeyedOperator):
    can_spill = True
    spill: SpillKeyedRows | None

    def __init__(self, uid: str, key: KeySpec, ttl_ms: int) -> None:
        super().__init__(uid, key)
        self.ttl_ms = ttl_ms
        self.seen = ValueStateDescriptor[bool]("seen", ttl=StateTtlConfig(ttl_ms))
        self.dropped = 0
        self.columnar_restore = COLUMNAR
        """The runtime decodes this operator's state files to columns (``FlagRows``)."""
        self.cols: SeenKeys | None = None
        self.fallback: str | None = None if COLUMNAR else "the columnar path is switched off"
        """Why the seen keys are on the heap backend (the slow path), or None."""
        self._restored_from: int | None = None

    def register_states(self) -> None:
        self.backend.bulk(self.seen)

    def open_spill(
        self, ctx: OperatorContext, claimed: tuple[Path, int], budget_bytes: int
    ) -> SpillKeyedRows:
        what = f"deduplicate operator {self.uid!r}"
        return SpillKeyedRows(what, claimed, ctx.key_groups, ctx.max_parallelism, budget_bytes)

    def open(self, ctx: Any, restored: Any) -> None:
        if ctx.state_memory_mb is not None:
            self.columnar_restore = False  # the seen keys are on disk, paged through the heap backend
        elif self.columnar_restore:
            self.cols = SeenKeys(self.ttl_ms)
        elif self.fallback is not None:
            self._fall_back(self.fallback)
        super().open(ctx, restored)

    def restore_keyed(self, restored: Any) -> None:
        self._restored_from = restored.checkpoint_id
        if self.cols is not None:
            cols = SeenKeys.restore(
                self.ttl_ms,
                restored.keyed,
                self.seen.name,
                self.backend.key_groups,
                self.key_groups_check(restored),
            )
            if cols is not None:
                self.cols = cols
                return
            self._fall_back(RESTORED_WITHOUT_COLUMNS)
        self.cols = None
        super().restore_keyed(restored)

    def _fall_back(self, reason: str) -> None:
        self.fallback = reason
        if (self.uid, reason) not in _REPORTED:  # once per process, operator and reason
            _REPORTED.add((self.uid, reason))
            log.warning("deduplicate operator %r keeps its seen keys on the heap backend (the slow path): %s",
                        self.uid, reason)  # fmt: skip

    def process_batch(self, batch: pa.RecordBatch) -> None:
        keys = self.keys_of(batch)
        keep = self._admit_columns(keys) if self.cols is not None else None
        if keep is None:
            if self.cols is not None:
                self._demote()
            keep = self._admit_heap(keys)
        self.dropped += batch.num_rows - len(keep)
        if len(keep):
            self.out.emit(batch.take(pa.array(keep)))

    def _admit_columns(self, keys: pa.Array) -> np.ndarray[Any, Any] | None:
        """Rows that pass (the first of each unseen or expired key), from the columns; None (nothing
        changed) when the keys do not fit them."""
        assert self.cols is not None
        if pa.types.is_large_string(keys.type):
            keys = keys.cast(pa.string())
        unfit = unfit_keys(keys)
        if unfit is not None:
            self._fall_back(unfit)
            return None
        if pa.types.is_string(keys.type):
            encoded = pc.dictionary_encode(keys)
            uniques: Any = encoded.dictionary
            _, first_rows = np.unique(encoded.indices.to_numpy(), return_index=True)
        else:
            uniques, first_rows = np.unique(keys.to_numpy().astype(np.int64), return_index=True)
        kgs = key_groups(
            uniques if isinstance(uniques, pa.Array) else pa.array(uniques), self.backend.max_parallelism
        )
        outside = np.flatnonzero((kgs < self.backend.key_groups.first) | (kgs > self.backend.key_groups.last))
        if len(outside):
            self.backend.set_current_key(
                keys[int(first_rows[outside[0]])].as_py()
            )  # raises KeyOutOfRangeError
        try:
            fresh = self.cols.admit(uniques, kgs, self.now_ms())
        except Refused as refused:
            self._fall_back(str(refused))
            return None
        return np.sort(first_rows[fresh])

    def _admit_heap(self, keys: pa.Array) -> np.ndarray[Any, Any]:
        """Rows that pass, from the heap backend (the keys paged in from disk a page at a time when
        the seen keys are kept there)."""
        uniques, indices = distinct_keys(keys)
        _, first_rows = np.unique(indices, return_index=True)
        bulk = self.backend.bulk(self.seen)
        fresh: list[int] = []
        for start, stop in self.key_pages(keys, uniques):
            unseen = [start + i for i, s in enumerate(bulk.get_many(uniques[start:stop])) if not s]
            if unseen:
                bulk.put_many([uniques[i] for i in unseen], [True] * len(unseen))
            fresh += unseen
        return np.sort(first_rows[fresh]) if fresh else np.zeros(0, dtype=np.int64)

    def _demote(self) -> None:
        """Hand the seen keys to the heap backend, expiries unchanged, for the rest of the epoch."""
        cols, self.cols = self.cols, None
        assert cols is not None
        rows = cols.snapshot_rows(self.now_ms())
        snap = KeyedStateSnapshot(
            self.backend.max_parallelism,
            self.backend.key_groups,
            {self.seen.name: StateKind.VALUE},
            {kg: {self.seen.name: r} for kg, r in rows.items()},  # type: ignore[dict-item]
        )
        self.backend.restore([snap], from_checkpoint=self._restored_from, verify_keys=False)
        self.backend.mark_changed(cols.changed)

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        if self.cols is None:
            return super().snapshot(checkpoint_id)
        rows = self.cols.snapshot_rows(self.now_ms())
        changed = set(self.cols.changed)
        if self._restored_from is None:
            changed.update(rows)  # nothing to reuse: every non-empty key group is new
        keyed = KeyedStateSnapshot(
            max_parallelism=self.backend.max_parallelism,
            key_group_range=self.backend.key_groups,
            kinds={self.seen.name: StateKind.VALUE},
            key_groups={kg: {self.seen.name: r} for kg, r in rows.items()},  # type: ignore[dict-item]
            changed_key_groups=frozenset(changed),
            checkpoint_id=checkpoint_id,
            base_checkpoint_id=self._restored_from,
            entry_deltas={}
            if self._restored_from is None
            else self.cols.deltas(self.seen.name, self.now_ms()),
        )
        return OperatorSnapshot(keyed, self.timers.snapshot(), self.snapshot_extra())

    def dispose(self) -> None:
        self.cols = None
        super().dispose()

    def reopen(self, ctx: Any, checkpoint_id: int) -> None:
        super().reopen(ctx, checkpoint_id)
        self.dropped = 0
        if self.cols is not None:
            self.cols.notify_checkpoint_complete()

    def metrics(self) -> dict[str, Any]:
        """Duplicates dropped, and ``heap_fallback`` when the seen keys are on the heap backend."""
        out: dict[str, Any] = {**super().metrics(), "duplicates_dropped": self.dropped}
        if self.fallback is not None:
            out["heap_fallback"] = self.fallback
        return out


_REPORTED: set[tuple[str | None, str]] = set()
log = logging.getLogger(__name__)
