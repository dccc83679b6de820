"""A rewind through the real restore into Iceberg (issue 21), as for Delta
(``tests/unit/sinks_delta/test_rewind_restore.py``): 6 epochs, a restore of the savepoint taken
after epoch 3, the input read again. ``on_rewind="overwrite"``: the table equals the run that went
from the savepoint straight on; ``"keep"``: plus exactly the rows the rewound epochs committed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.sinks.iceberg import IcebergSink
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.testing import ManualClock
from tests.unit.sinks_delta.test_rewind_restore import epochs, job_of, run_rewound
from tests.unit.sinks_iceberg.support import both_readers


def _rows(catalog: dict[str, str], table: str) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(sorted(r.items())) for r in both_readers(catalog, table))


@pytest.mark.parametrize("policy", ["overwrite", "keep"])
def test_a_rewind_to_a_savepoint_gives_the_documented_table(
    tmp_path: Path, catalog: dict[str, str], policy: str
) -> None:
    def sink(table: str) -> IcebergSink:
        return IcebergSink(catalog=catalog, table=f"lake.{table}", on_rewind=policy)

    run_rewound(tmp_path / "rewound", sink("rewound"), rewind=True, job_id="rewound")
    run_rewound(tmp_path / "straight", sink("straight"), rewind=False, job_id="straight")
    rewound, straight = _rows(catalog, "lake.rewound"), _rows(catalog, "lake.straight")
    assert sum(straight.values()) > 10
    if policy == "overwrite":
        assert rewound == straight
        return
    clock = ManualClock(DEFAULT_START_MS)
    job, uri = job_of(sink("plain"), "plain"), (tmp_path / "plain").as_uri()
    epochs(job, uri, clock, 3)
    take_savepoint(job, uri, clock, "sp")
    first = _rows(catalog, "lake.plain")
    epochs(job, uri, clock, 3)
    doubled = _rows(catalog, "lake.plain") - first
    assert sum(doubled.values()) > 0 and rewound == straight + doubled
