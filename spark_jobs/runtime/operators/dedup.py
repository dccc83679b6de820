"""Deduplication: the first record of every key passes; a key is remembered for ``ttl_ms`` of
processing time (the epoch's trigger time), after which it may pass again (Flink's state TTL)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyarrow as pa

from spark_jobs.runtime.keys import KeySpec, distinct_keys
from spark_jobs.runtime.operators.keyed import KeyedOperator
from state_store.core.state import StateTtlConfig, ValueStateDescriptor


class DeduplicateOperator(KeyedOperator):
    def __init__(self, uid: str, key: KeySpec, ttl_ms: int) -> None:
        super().__init__(uid, key)
        self.seen = ValueStateDescriptor[bool]("seen", ttl=StateTtlConfig(ttl_ms))
        self.dropped = 0

    def register_states(self) -> None:
        self.backend.bulk(self.seen)
        if self.uid not in _REPORTED:  # once per process and operator, as the window operator does
            _REPORTED.add(self.uid)
            log.warning("deduplicate operator %r: %s (the slow path)", self.uid, HEAP_ONLY)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        uniques, indices = distinct_keys(self.keys_of(batch))
        _, first_rows = np.unique(indices, return_index=True)
        seen = self.backend.bulk(self.seen).get_many(uniques)
        fresh = [i for i, s in enumerate(seen) if not s]
        if fresh:
            self.backend.bulk(self.seen).put_many([uniques[i] for i in fresh], [True] * len(fresh))
        keep = np.sort(first_rows[fresh]) if fresh else np.zeros(0, dtype=np.int64)
        self.dropped += batch.num_rows - len(keep)
        if len(keep):
            self.out.emit(batch.take(pa.array(keep)))

    def metrics(self) -> dict[str, Any]:
        """Duplicates dropped, and ``heap_fallback``: deduplication has no columnar path yet (its
        seen-keys live in the heap backend, one Python entry per key; their state files take the
        typed layout), which the workload matrix's dedup cell measures."""
        return {"duplicates_dropped": self.dropped, "heap_fallback": HEAP_ONLY}


_REPORTED: set[str | None] = set()
log = logging.getLogger(__name__)
HEAP_ONLY = "deduplication keeps its seen keys on the heap backend (no columnar path yet)"
