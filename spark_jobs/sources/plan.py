"""Fix the barrier positions of an epoch: which offsets of each partition it consumes.

Step 1 of the epoch cycle (DESIGN section 3): when checkpoint *n* is triggered, the coordinator reads
the source's ``end_offsets()`` and fixes, per partition, the range ``[start, end)`` that epoch *n*
consumes; ``end`` is barrier *n*'s position and the next epoch's ``start``.

Rules
-----
* ``start`` is the position restored from the latest completed checkpoint (an end offset, i.e. the
  first offset *not yet* consumed). A partition absent from ``start_offsets`` is new: it starts at 0.
* ``end`` never passes what is available (``end_offsets``) and the epoch reads at most
  ``max_records_per_epoch`` records **in total over all partitions**. The budget is shared max-min
  fairly: partitions with little new input get all of it, the rest split what remains evenly; ties
  and the integer remainder are settled by (lag, partition id), so the plan is deterministic.
* Every partition appears in the plan, with ``start == end`` when it has nothing new; an epoch
  whose plan is empty everywhere can be skipped.
* A partition whose available end is *below* its start (the log was truncated or replaced) or that
  vanished from ``end_offsets`` is an error: silently moving a position would lose or repeat data.
"""

from __future__ import annotations

from collections.abc import Mapping

from spark_jobs.sources.errors import OffsetOutOfRangeError


def plan_epoch(
    start_offsets: Mapping[str, int],
    end_offsets: Mapping[str, int],
    max_records_per_epoch: int | None = None,
) -> dict[str, tuple[int, int]]:
    """Return ``{partition: (start, end)}`` (end exclusive) for every partition of ``end_offsets``."""
    if max_records_per_epoch is not None and max_records_per_epoch < 1:
        raise ValueError(f"max_records_per_epoch must be at least 1 (or None), got {max_records_per_epoch}")
    vanished = sorted(set(start_offsets) - set(end_offsets))
    if vanished:
        raise OffsetOutOfRangeError(
            f"partitions {', '.join(vanished)} have recorded positions but the source no longer lists "
            "them: restore the input or drop their positions explicitly"
        )
    starts: dict[str, int] = {}
    lags: dict[str, int] = {}
    for partition in sorted(end_offsets):
        start, available = start_offsets.get(partition, 0), end_offsets[partition]
        if start < 0 or available < start:
            raise OffsetOutOfRangeError(
                f"partition {partition!r} ends at offset {available} but its position is {start}: the "
                "input was truncated or replaced; restore it or restart from an explicit position"
            )
        starts[partition], lags[partition] = start, available - start
    takes = _share(lags, max_records_per_epoch)
    return {p: (starts[p], starts[p] + takes[p]) for p in sorted(end_offsets)}


def _share(lags: Mapping[str, int], budget: int | None) -> dict[str, int]:
    """Max-min fair split of ``budget`` over partitions wanting ``lags`` records each."""
    if budget is None or sum(lags.values()) <= budget:
        return dict(lags)
    takes: dict[str, int] = {}
    remaining = budget
    ordered = sorted(lags.items(), key=lambda item: (item[1], item[0]))
    for index, (partition, lag) in enumerate(ordered):
        take = min(lag, remaining // (len(ordered) - index))
        takes[partition] = take
        remaining -= take
    return takes
