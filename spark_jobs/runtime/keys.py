"""Vectorized key extraction and key groups for Arrow batches.

The key group of every row is ``state_store.core.keygroups.key_group_of(key)`` -- the one stable
function. Vectorization: the column is dictionary-encoded, the stable hash runs once per *distinct*
key (in Python), and the result is spread to the rows with one ``take``. The test
``tests/unit/runtime/test_keys.py`` proves equality with the scalar function, also across processes.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from state_store.core.keygroups import key_groups_of_many
from state_store.core.state.backend import shared_key_group_cache

KeySpec = str | Callable[[pa.RecordBatch], Any]


def key_column(batch: pa.RecordBatch, key: KeySpec) -> pa.Array:
    """The key of every row: a column name, or a function of the batch returning an array."""
    if isinstance(key, str):
        index = batch.schema.get_field_index(key)
        if index < 0:
            raise KeyError(f"key column {key!r} is not in the batch (columns: {batch.schema.names})")
        return batch.column(index)
    result = key(batch)
    array = result if isinstance(result, (pa.Array, pa.ChunkedArray)) else pa.array(result)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if len(array) != batch.num_rows:
        raise ValueError(f"key function returned {len(array)} keys for {batch.num_rows} rows")
    return array


def distinct_keys(keys: pa.Array) -> tuple[list[Any], NDArray[np.int64]]:
    """(distinct keys as Python values, index of each row's key in that list)."""
    encoded = pc.dictionary_encode(keys)
    uniques = encoded.dictionary.to_pylist()
    indices = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return uniques, indices


def key_groups(keys: pa.Array, max_parallelism: int) -> NDArray[np.int32]:
    """Key group of every row (int32), computed once per distinct key.

    Known keys are looked up in the process-wide cache at C speed (``map`` of ``dict.get`` read by
    ``np.fromiter``; -1 marks a miss); only the misses are hashed (``key_groups_of_many``)."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int32)
    uniques, indices = distinct_keys(keys)
    cache = shared_key_group_cache(max_parallelism) if CACHE_KEY_GROUPS else {}
    if len(cache) > _cache_limit:
        cache.clear()
    per_unique = np.fromiter(map(cache.get, uniques, repeat(-1)), dtype=np.int32, count=len(uniques))
    missing = np.flatnonzero(per_unique < 0)
    if len(missing):
        new_keys = [uniques[i] for i in missing.tolist()]
        groups = key_groups_of_many(new_keys, max_parallelism)
        per_unique[missing] = groups
        if len(cache) + len(new_keys) <= _cache_limit:
            cache.update(zip(new_keys, groups, strict=True))
    return per_unique[indices]


CACHE_KEY_GROUPS = True
"""Use the process-wide cache (``_KG_CACHE_LIMIT``); off: hash every distinct key per batch."""
_KG_CACHE_LIMIT = 4_000_000
"""The shuffle uses the state backend's process-wide key -> key group cache
(``shared_key_group_cache``): a warm process (in-process executor, reused Spark Python worker)
hashes each distinct key once, for routing and for state alike. Only hashable keys of Arrow
columns end up there (scalars and tuples of scalars), whose hash never changes."""
_CACHE_ENTRY_BYTES = 128
"""About what one cached string key costs (the str, the int, the dict slot)."""
_cache_limit = _KG_CACHE_LIMIT


def limit_key_group_cache(state_memory_mb: int | None) -> None:
    """Size the process-wide key-group cache for the job that runs: a job with ``state_memory_mb``
    keeps it to a tenth of that budget (state larger than memory must not come back as a cache of
    every key: 10M string keys are over a gigabyte); without, ``_KG_CACHE_LIMIT`` entries."""
    global _cache_limit
    _cache_limit = (
        _KG_CACHE_LIMIT
        if state_memory_mb is None
        else min(_KG_CACHE_LIMIT, (state_memory_mb << 20) // 10 // _CACHE_ENTRY_BYTES)
    )


def subtasks_of_key_groups(
    groups: NDArray[np.int32], max_parallelism: int, parallelism: int
) -> NDArray[np.int32]:
    """Flink's operator index for each key group: ``kg * parallelism // max_parallelism``."""
    return ((groups.astype(np.int64) * parallelism) // max_parallelism).astype(np.int32)


def split_by(batch: pa.RecordBatch, targets: NDArray[np.int32], n: int) -> list[pa.RecordBatch | None]:
    """Split ``batch`` into ``n`` batches by the target index of each row (order kept per target)."""
    out: list[pa.RecordBatch | None] = [None] * n
    if batch.num_rows == 0:
        return out
    order = np.argsort(targets, kind="stable")
    sorted_targets = targets[order]
    bounds = np.searchsorted(sorted_targets, np.arange(n + 1))
    taken = batch.take(pa.array(order))
    for t in range(n):
        lo, hi = int(bounds[t]), int(bounds[t + 1])
        if hi > lo:
            out[t] = taken.slice(lo, hi - lo)
    return out
