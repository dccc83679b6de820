"""Deduplication: the first record of every key passes; a key is remembered for ``ttl_ms`` of
processing time (the epoch's trigger time), after which it may pass again (Flink's state TTL)."""

from __future__ import annotations

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

    def metrics(self) -> dict[str, int]:
        return {"duplicates_dropped": self.dropped}
