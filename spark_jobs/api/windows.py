"""Event-time window assigners and vectorized aggregates.

Event time is the ``_ts`` column (int64 ms) that every source adds; a window ``[start, end)`` fires
when the watermark reaches ``end - 1`` (Flink's ``maxTimestamp``) and is dropped
``allowed_lateness_ms`` later. A record is late when every window it belongs to is already past
``end - 1 + allowed_lateness <= watermark``.

Aggregates run in two steps: a per-chunk partial with Arrow's ``group_by`` (vectorized), then a
merge of the partial into the accumulator kept in keyed state (one Python call per key and window
per chunk, never per record). Accumulators are JSON lists (they go into state files).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray


@dataclass(frozen=True)
class TumblingEventTimeWindows:
    size_ms: int
    offset_ms: int = 0

    def __post_init__(self) -> None:
        if self.size_ms <= 0:
            raise ValueError(f"tumbling window size_ms={self.size_ms} is invalid: use > 0")

    def assign(self, ts: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(row index, window start) of every (record, window) pair."""
        starts = ts - np.mod(ts - self.offset_ms, self.size_ms)
        return np.arange(len(ts), dtype=np.int64), starts

    def size(self) -> int:
        return self.size_ms


@dataclass(frozen=True)
class SlidingEventTimeWindows:
    size_ms: int
    slide_ms: int
    offset_ms: int = 0

    def __post_init__(self) -> None:
        if self.size_ms <= 0 or self.slide_ms <= 0 or self.size_ms % self.slide_ms:
            raise ValueError(
                f"sliding window size_ms={self.size_ms}, slide_ms={self.slide_ms} is invalid: both > 0 and "
                "size a multiple of slide"
            )

    def assign(self, ts: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        per = self.size_ms // self.slide_ms
        last = ts - np.mod(ts - self.offset_ms, self.slide_ms)
        rows = np.repeat(np.arange(len(ts), dtype=np.int64), per)
        starts = np.repeat(last, per) - np.tile(np.arange(per, dtype=np.int64) * self.slide_ms, len(ts))
        return rows, starts

    def size(self) -> int:
        return self.size_ms


@dataclass(frozen=True)
class EventTimeSessionWindows:
    """Sessions per key: a record opens ``[ts, ts + gap)``; overlapping sessions merge."""

    gap_ms: int

    def __post_init__(self) -> None:
        if self.gap_ms <= 0:
            raise ValueError(f"session gap_ms={self.gap_ms} is invalid: use > 0")


class Aggregate:
    """One aggregate column. ``arrow`` is the (column, Arrow hash-aggregate) it needs per chunk;
    ``column_merge`` names how the columnar path (``window_columns``) merges a partial into the
    accumulator -- the same result as ``merge`` -- or is None when only the heap backend can."""

    name: str
    arrow: tuple[Any, str]
    column_merge: str | None = "add"

    def partial_column(self) -> str:
        column, fn = self.arrow
        return f"{fn}" if column == [] else f"{column}_{fn}"

    def zero(self) -> Any:
        return 0

    def merge(self, acc: Any, partial: Any) -> Any:
        return acc + partial

    def result(self, acc: Any) -> Any:
        return acc

    def record_partial(self, value: Any) -> Any:
        """The partial of one record whose column holds ``value`` (None for ``Count``'s rows)."""
        return value

    def slots(self) -> list[Aggregate]:
        """The aggregates whose accumulators this one keeps (itself; ``Avg``: a sum and a count)."""
        return [self]

    def output(self, slots: list[pa.Array]) -> pa.Array:
        """The result column from this aggregate's slot columns (one column per ``slots()``)."""
        return slots[0]


class Count(Aggregate):
    def __init__(self, name: str = "count") -> None:
        self.name = name
        self.arrow = ([], "count_all")

    def record_partial(self, value: Any) -> Any:
        return 1


class Sum(Aggregate):
    """The sum of a column's values (a chunk of only nulls adds nothing)."""

    def __init__(self, column: str, name: str | None = None) -> None:
        self.name = name or f"sum_{column}"
        self.arrow = (column, "sum")

    def merge(self, acc: Any, partial: Any) -> Any:
        return acc if partial is None else acc + partial


class CountOf(Aggregate):
    """How many non-null values a column has."""

    def __init__(self, column: str, name: str | None = None) -> None:
        self.name = name or f"count_{column}"
        self.arrow = (column, "count")

    def record_partial(self, value: Any) -> Any:
        return int(value is not None)


class Avg(Aggregate):
    """The mean of a column's non-null values, a float (null when there are none). Kept as two
    slots, the sum and the count (``slots``); the mean is computed when the window fires, by Arrow
    (``float(sum) / float(count)``: the same on every path, and Spark's ``avg`` for sums below
    2**53)."""

    def __init__(self, column: str, name: str | None = None) -> None:
        self.name = name or f"avg_{column}"
        self.column = column

    def slots(self) -> list[Aggregate]:
        return [Sum(self.column, name=f"{self.name}.sum"), CountOf(self.column, name=f"{self.name}.count")]

    def output(self, slots: list[pa.Array]) -> pa.Array:
        total, count = (pc.cast(s, pa.float64(), safe=False) for s in slots)  # sums past 2**53 round
        return pc.if_else(pc.equal(count, 0.0), pa.scalar(None, pa.float64()), pc.divide(total, count))


class Min(Aggregate):
    """The smallest value. Nulls and NaN are skipped (as Arrow does within a chunk): a window whose
    values are all NaN gives NaN, whatever the chunking."""

    column_merge = "min"

    def __init__(self, column: str, name: str | None = None) -> None:
        self.name = name or f"min_{column}"
        self.arrow = (column, "min")

    def zero(self) -> Any:
        return None

    def merge(self, acc: Any, partial: Any) -> Any:
        if partial is None or partial != partial:  # null, or NaN: skipped unless nothing else came
            return partial if acc is None else acc
        return partial if acc is None or acc != acc or partial < acc else acc


class Max(Min):
    column_merge = "max"

    def __init__(self, column: str, name: str | None = None) -> None:
        self.name = name or f"max_{column}"
        self.arrow = (column, "max")

    def merge(self, acc: Any, partial: Any) -> Any:
        if partial is None or partial != partial:
            return partial if acc is None else acc
        return partial if acc is None or acc != acc or partial > acc else acc


class First(Min):
    """The value of the window's first record in arrival order (nulls skipped): within a chunk the
    record order, across chunks the order of the epoch's cut."""

    column_merge = "first"

    def __init__(self, column: str, name: str | None = None) -> None:
        self.name = name or f"first_{column}"
        self.arrow = (column, "first")

    def merge(self, acc: Any, partial: Any) -> Any:
        return partial if acc is None else acc


class Last(Min):
    """The value of the window's last record in arrival order (nulls skipped)."""

    column_merge = "last"

    def __init__(self, column: str, name: str | None = None) -> None:
        self.name = name or f"last_{column}"
        self.arrow = (column, "last")

    def merge(self, acc: Any, partial: Any) -> Any:
        return acc if partial is None else partial


class Aggregates:
    """Several aggregates computed together. The accumulator is a list with one slot per *slot
    aggregate* (``aggregates``: every aggregate's ``slots()``, in order -- one each, two for
    ``Avg``); ``outputs`` are the aggregates as the user listed them, one result column each."""

    def __init__(self, *aggregates: Aggregate) -> None:
        if not aggregates:
            raise ValueError("Aggregates needs at least one aggregate, e.g. Count()")
        names = [a.name for a in aggregates]
        if len(set(names)) != len(names):
            raise ValueError(f"aggregate names must be unique, got {names}")
        self.outputs = aggregates
        self.aggregates = tuple(slot for a in aggregates for slot in a.slots())

    @property
    def arrow(self) -> list[tuple[Any, str]]:
        """The Arrow hash aggregates a chunk needs, each once (``partial_column`` names them)."""
        out: list[tuple[Any, str]] = []
        for agg in self.aggregates:
            if agg.arrow not in out:
                out.append(agg.arrow)
        return out

    def zero(self) -> list[Any]:
        return [a.zero() for a in self.aggregates]

    def merge(self, acc: list[Any], partial: list[Any]) -> list[Any]:
        return [a.merge(x, p) for a, x, p in zip(self.aggregates, acc, partial)]

    def results(self, acc: list[Any]) -> list[Any]:
        return [a.result(x) for a, x in zip(self.aggregates, acc)]

    def output_columns(self, slots: list[pa.Array]) -> dict[str, pa.Array]:
        """Result columns by name from the slot columns (one per slot aggregate)."""
        out: dict[str, pa.Array] = {}
        at = 0
        for agg in self.outputs:
            width = len(agg.slots())
            out[agg.name] = agg.output(slots[at : at + width])
            at += width
        return out


def as_aggregates(value: Aggregate | Aggregates) -> Aggregates:
    return value if isinstance(value, Aggregates) else Aggregates(value)
