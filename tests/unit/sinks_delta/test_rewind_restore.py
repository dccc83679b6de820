"""A rewind through the real restore (issue 21): 6 epochs, a restore of the savepoint taken after
epoch 3, 3 more epochs over the same input. With ``on_rewind="overwrite"`` the table then equals a
run that went from the savepoint straight on (nothing doubled, nothing dropped); with ``"keep"`` it
also keeps exactly the rows the rewound epochs 4-6 committed. The input is finite (``max_records``)
and every run reads all of it, so every run closes the same windows over the same records, however
its epochs cut the input."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import DeltaSink
from spark_jobs.api.windows import Aggregates, Count, Sum, TumblingEventTimeWindows
from spark_jobs.lifecycle.restore import RestoreRequest, restore
from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.testing import ManualClock
from tests.unit.sinks_delta.support import both_readers

STEP_MS = 10_000


def job_of(sink: Any, job_id: str = "rewind") -> Job:
    """One job per table: a sink's commit ledger may be shared (a database) and is per job and uid."""
    job = Job(job_id, parallelism=2, max_parallelism=16)
    clicks = GeneratorSource(
        uid="clicks", partitions=2, seed=5, events_per_second=30, out_of_orderness_ms=1_000,
        keys=40, start_ms=DEFAULT_START_MS, max_records=1_400,
    )  # fmt: skip
    (
        job.source(clicks, uid="clicks", out_of_orderness_ms=1_000)
        .key_by("page")
        .window(TumblingEventTimeWindows(10_000), Aggregates(Count(), Sum("value")), uid="page-counts")
        .sink(sink, uid="out")
    )
    return job


def epochs(job: Job, uri: str, clock: ManualClock, count: int) -> None:
    for _ in range(count):
        clock.advance(STEP_MS)
        assert run_cycle(job, uri, clock, executor="local").status in ("completed", "skipped")  # input done


def run_rewound(tmp: Path, sink: Any, rewind: bool, job_id: str = "rewind") -> None:
    """Epochs 1-3, a savepoint, (with ``rewind``: epochs 4-6), a restore of the savepoint, epochs
    4-6 again."""
    clock = ManualClock(DEFAULT_START_MS)
    job, uri = job_of(sink, job_id), (tmp / "store").as_uri()
    epochs(job, uri, clock, 3)
    info = take_savepoint(job, uri, clock, "sp")
    if rewind:
        epochs(job, uri, clock, 3)
    restore(job, uri, clock, RestoreRequest(source=info["location"]))
    epochs(job, uri, clock, 3)


def first_run_rows(tmp: Path, sink_of: Any) -> list[dict[str, Any]]:
    """The rows epochs 4-6 committed in the rewound run (6 epochs without a restore, minus 1-3)."""
    clock = ManualClock(DEFAULT_START_MS)
    table = tmp / "plain"
    job, uri = job_of(sink_of(table)), (tmp / "plain-store").as_uri()
    epochs(job, uri, clock, 3)
    take_savepoint(job, uri, clock, "sp")
    first = both_readers(table)
    epochs(job, uri, clock, 3)
    return list((Counter(_key(r) for r in both_readers(table)) - Counter(_key(r) for r in first)).elements())


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(row.items()))


@pytest.mark.parametrize("policy", ["overwrite", "keep"])
def test_a_rewind_to_a_savepoint_gives_the_documented_table(tmp_path: Path, policy: str) -> None:
    def sink_of(table: Path) -> DeltaSink:
        return DeltaSink(str(table), on_rewind=policy)

    run_rewound(tmp_path / "rewound", sink_of(tmp_path / "rewound" / "table"), rewind=True)
    run_rewound(tmp_path / "straight", sink_of(tmp_path / "straight" / "table"), rewind=False)
    rewound = Counter(_key(r) for r in both_readers(tmp_path / "rewound" / "table"))
    straight = Counter(_key(r) for r in both_readers(tmp_path / "straight" / "table"))
    assert sum(straight.values()) > 10
    if policy == "overwrite":
        assert rewound == straight
    else:
        doubled = Counter(first_run_rows(tmp_path, sink_of))
        assert sum(doubled.values()) > 0 and rewound == straight + doubled
