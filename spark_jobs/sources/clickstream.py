"""Deterministic clickstream records: the record at (partition, offset) is a pure function.

Every column is computed for a whole chunk of offsets at once with numpy and Arrow kernels (no
per-record Python objects). Randomness is counter-based: ``mix64(offset ^ key(seed, partition,
column))`` with the SplitMix64 finalizer, so any offset can be computed without the ones before it,
which is what makes any range replayable in any chunking.

Record schema (:data:`CLICKSTREAM_SCHEMA`, all fields required)
---------------------------------------------------------------
``event_id: string``          ``<uid>-<partition>-<offset>`` of the original event; a *duplicate*
                              repeats the id of an earlier offset of the same partition
``user_id: string``           ``u<k>``, k in ``[0, keys)`` (``key_skew > 1`` favours small k)
``page: string``              one of ``pages``
``event_time: timestamp[ms, tz=UTC]``  milliseconds since the Unix epoch (timestamp, not int64:
                              self-describing in Parquet/Spark; ``event_time_ms`` gives the ints)
``value: int64``              in ``[1, 1000]``

A duplicate is a redelivery: it repeats the original's ``event_id``, ``user_id``, ``page`` and
``value`` but keeps its own ``event_time`` (so out-of-orderness stays bounded). Its original is a
non-duplicate at a smaller offset: each duplicate points back 1..``duplicate_max_distance`` offsets,
and when it lands on another duplicate it follows that one's pointer, until an original.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from spark_jobs.sources.base import batch_schema

CLICKSTREAM_SCHEMA: Final = pa.schema(
    [
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("user_id", pa.string(), nullable=False),
        pa.field("page", pa.string(), nullable=False),
        pa.field("event_time", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("value", pa.int64(), nullable=False),
    ]
)
"""Schema of valid generator records (batches add ``_offset`` first)."""

DEFAULT_PAGES: Final[tuple[str, ...]] = (
    "/", "/home", "/search", "/product", "/cart", "/checkout", "/account", "/help",
)  # fmt: skip

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def mix64(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """SplitMix64 finalizer: a bijection of uint64 with full avalanche (wrapping arithmetic)."""
    z = x + np.uint64(_GAMMA)
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    out: NDArray[np.uint64] = z ^ (z >> np.uint64(31))
    return out


def _scalar_mix(x: int) -> int:
    z = (x + _GAMMA) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class Column:
    """Stream numbers: each random quantity uses its own key."""

    DUPLICATE, DISTANCE, JITTER, USER, PAGE, VALUE = range(6)


@dataclass(frozen=True, slots=True)
class PartitionRandom:
    """Counter-based random numbers of one (seed, partition)."""

    seed: int
    partition: int

    def bits(self, column: int, offsets: NDArray[np.int64]) -> NDArray[np.uint64]:
        key = _scalar_mix(_scalar_mix(self.seed & _MASK64) ^ (self.partition << 8) ^ column)
        return mix64(offsets.astype(np.uint64) ^ np.uint64(key))

    def below(
        self, column: int, offsets: NDArray[np.int64], bound: NDArray[np.int64] | int
    ) -> NDArray[np.int64]:
        """Integers in ``[0, bound)`` (bound < 2**32; bound may vary per offset)."""
        high = self.bits(column, offsets) >> np.uint64(32)
        out: NDArray[np.int64] = ((high * np.asarray(bound, dtype=np.uint64)) >> np.uint64(32)).astype(
            np.int64
        )
        return out

    def unit(self, column: int, offsets: NDArray[np.int64]) -> NDArray[np.float64]:
        """Floats in ``[0, 1)``."""
        out: NDArray[np.float64] = (self.bits(column, offsets) >> np.uint64(11)).astype(np.float64) * 2.0**-53
        return out


@dataclass(frozen=True, slots=True)
class ClickstreamShape:
    """What the records of one partition look like (everything except time)."""

    source_uid: str
    partition_id: str
    random: PartitionRandom
    keys: int
    key_skew: float
    pages: Sequence[str]
    duplicate_fraction: float
    duplicate_max_distance: int

    def is_duplicate(self, offsets: NDArray[np.int64]) -> NDArray[np.bool_]:
        dup: NDArray[np.bool_] = (self.random.unit(Column.DUPLICATE, offsets) < self.duplicate_fraction) & (
            offsets >= 1
        )
        return dup

    def originals(self, offsets: NDArray[np.int64]) -> NDArray[np.int64]:
        """The offset whose event each record carries: itself, or for a duplicate an earlier
        non-duplicate offset (vectorized fixed point; each hop strictly decreases the offset)."""
        target = offsets.copy()
        pending = self.is_duplicate(target)
        while pending.any():
            hop = target[pending]
            distance = 1 + self.random.below(
                Column.DISTANCE, hop, np.minimum(hop, self.duplicate_max_distance)
            )
            target[pending] = hop - distance
            pending[pending] = self.is_duplicate(target[pending])
        return target

    def batch(self, offsets: NDArray[np.int64], event_ms: NDArray[np.int64]) -> pa.RecordBatch:
        """The records at ``offsets`` with the given event times, as one batch."""
        source = self.originals(offsets)
        prefix = f"{self.source_uid}-{self.partition_id}-"
        event_id = pc.binary_join_element_wise(prefix, pc.cast(pa.array(source), pa.string()), "")
        draw = self.random.unit(Column.USER, source)
        user = np.minimum((self.keys * draw**self.key_skew).astype(np.int64), self.keys - 1)
        user_id = pc.binary_join_element_wise("u", pc.cast(pa.array(user), pa.string()), "")
        page = pa.array(list(self.pages), pa.string()).take(
            pa.array(self.random.below(Column.PAGE, source, len(self.pages)))
        )
        value = 1 + self.random.below(Column.VALUE, source, 1000)
        arrays = [
            pa.array(offsets, pa.int64()),
            event_id,
            user_id,
            page,
            pa.array(event_ms, pa.timestamp("ms", tz="UTC")),
            pa.array(value, pa.int64()),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=batch_schema(CLICKSTREAM_SCHEMA))
