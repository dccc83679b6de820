"""Review of issue 23 item 1 (commit c2f4266): a state schema the spill store holds but the canonical
form (savepoints, heap restores: JSON values) cannot -- decimal and timestamp fields.

The disk backend checkpoints such state without complaint, so a job runs for weeks and then cannot
take a savepoint, nor be restored on the in-memory backend (issue 23: "a savepoint written from
either restores on the other"). Either the savepoint works and restores, or the job is refused when
it is defined/first run, before any state is written, with a remedy."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

from spark_jobs.lifecycle.restore import RestoreRequest, restore
from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.runtime import warm
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core.errors import EpochalError
from state_store.testing import ManualClock
from tests.unit.review23b.test_spill_equivalence import STEP, Typed, job_of

RICH = pa.schema(
    [
        ("amt", pa.decimal128(12, 2)),
        ("seen", pa.timestamp("ms", tz="UTC")),
    ]
)


class Rich(Typed):
    """A running decimal sum and the latest event time per key."""

    state_schema = RICH

    def process(self, rows: pa.Table, state: pa.Table, ctx: Any) -> pa.Table:
        current = {r["key"]: r for r in state.to_pylist()}
        updates = []
        for r in rows.select(["key", "value", "event_time"]).to_pylist():
            old = current.get(r["key"]) or {}
            new = {"key": r["key"], "amt": (old.get("amt") or Decimal("0.00")) + Decimal(r["value"]) / 100,
                   "seen": r["event_time"]}  # fmt: skip
            current[r["key"]] = new
            updates.append(new)
        ctx.update_state(pa.Table.from_pylist(updates, RICH.append(pa.field("key", pa.string()))))
        return pa.table({"k": pa.array([], pa.string()), "before": pa.array([], pa.string())})


def test_decimal_and_timestamp_state_on_disk_can_be_savepointed_or_is_refused_up_front(
    tmp_path: Path,
) -> None:
    warm.clear()
    uri = (tmp_path / "store").as_uri()
    clock = ManualClock(DEFAULT_START_MS)
    ran = 0
    try:
        for _ in range(2):
            clock.advance(STEP)
            job = job_of(2, True, tmp_path / "state", fn=Rich, keys=100)
            assert run_cycle(job, uri, clock, executor="local").status == "completed"
            ran += 1
    except EpochalError as exc:  # refused up front: fine if it is before any checkpoint, with a remedy
        assert ran == 0 and "state_schema" in str(exc), exc
        return
    info = take_savepoint(job_of(2, True, tmp_path / "state", fn=Rich, keys=100), uri, clock, "sp")
    target = (tmp_path / "target").as_uri()
    heap_job = job_of(3, False, tmp_path / "state", fn=Rich, keys=100)
    assert restore(heap_job, target, clock, RestoreRequest(source=info["location"])).plan.ok
