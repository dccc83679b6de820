"""A rewind through the real restore into PostgreSQL (issue 21), as for Delta
(``tests/unit/sinks_delta/test_rewind_restore.py``): 6 epochs, a restore of the savepoint taken
after epoch 3, the input read again. ``on_rewind="overwrite"``: the table equals the run that went
from the savepoint straight on; ``"keep"``: plus exactly the rows the rewound epochs committed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.sinks.postgres import PostgresSink
from state_store.testing.postgres import PostgresServer
from tests.unit.sinks_delta.test_rewind_restore import epochs, job_of, run_rewound
from tests.unit.sinks_postgres.conftest import Db

COLUMNS = "page, window_start, window_end, count, sum_value"


def _rows(db: Db, table: str) -> Counter[tuple[Any, ...]]:
    return Counter(db.query(f"SELECT {COLUMNS} FROM {{s}}.{table}"))


@pytest.mark.parametrize("policy", ["overwrite", "keep"])
def test_a_rewind_to_a_savepoint_gives_the_documented_table(
    tmp_path: Path, db: Db, postgres: PostgresServer, policy: str
) -> None:
    def sink(table: str) -> PostgresSink:
        return PostgresSink(table=f"{db.schema}.{table}", dsn=db.dsn, on_rewind=policy)

    run_rewound(tmp_path / "rewound", sink("rewound"), rewind=True, job_id="rewound")
    run_rewound(tmp_path / "straight", sink("straight"), rewind=False, job_id="straight")
    rewound, straight = _rows(db, "rewound"), _rows(db, "straight")
    assert sum(straight.values()) > 10
    if policy == "overwrite":
        assert rewound == straight
        return
    from spark_jobs.lifecycle.savepoint import take_savepoint
    from state_store.testing import ManualClock

    clock = ManualClock(1_700_000_000_000)
    job, uri = job_of(sink("plain"), "plain"), (tmp_path / "plain").as_uri()
    epochs(job, uri, clock, 3)
    take_savepoint(job, uri, clock, "sp")
    first = _rows(db, "plain")
    epochs(job, uri, clock, 3)
    doubled = _rows(db, "plain") - first
    assert sum(doubled.values()) > 0 and rewound == straight + doubled
