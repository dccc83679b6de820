"""The landing-zone example (``spark_jobs.examples.landing_orders``) end to end: files dropped
between epochs (one redelivering an order), a crash in the middle, and the revenue table -- in Delta
Lake, read back with delta-rs and pyarrow, and in PostgreSQL, read back with SQL -- equal to the
revenue computed by pandas from the distinct orders, each closed hour once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from spark_jobs.examples.landing_orders import HOUR_MS, build_job, delta_table, postgres_table, write_orders
from spark_jobs.runtime.cycle import run_cycle
from state_store.faults import KillAt, SimulatedCrash
from state_store.testing import ManualClock
from tests.unit.sinks_delta.support import both_readers
from tests.unit.sinks_postgres.conftest import Db, db, postgres  # noqa: F401 -- fixtures

T0 = pd.Timestamp("2026-11-21T10:00:00Z")


def order(n: int, customer: str, cents: int, minutes: int) -> dict[str, Any]:
    at = T0 + pd.Timedelta(minutes=minutes)
    return {"order_id": f"o{n}", "customer": customer, "amount_cents": cents, "event_time": at.isoformat()}


FILES = [
    ("batch-1.json", [order(1, "ada", 1200, 5), order(2, "bob", 800, 20), order(3, "ada", 300, 50)]),
    ("batch-2.json", [order(4, "bob", 500, 70), order(2, "bob", 800, 20), order(5, "cy", 990, 95)]),
    ("batch-3.json", [order(6, "ada", 100, 190)]),  # moves the watermark past 12:00
]


def expected() -> list[tuple[Any, ...]]:
    """Revenue per customer and closed hour from the distinct orders (pandas)."""
    orders = pd.DataFrame([o for _, batch in FILES for o in batch]).drop_duplicates("order_id")
    times = pd.to_datetime(orders["event_time"]).astype("int64") // 1_000_000
    orders["window_start"] = times - times % HOUR_MS
    watermark = int(times.max()) - 60_000 - 1
    closed = orders[orders["window_start"] + HOUR_MS - 1 <= watermark]
    grouped = closed.groupby(["customer", "window_start"]).agg(
        orders=("order_id", "count"), revenue_cents=("amount_cents", "sum")
    )
    return sorted((c, int(w), int(n), int(r)) for (c, w), (n, r) in grouped.iterrows())


def run(tmp: Path, job_id: str, **tables: Any) -> None:
    landing, store = tmp / "landing", (tmp / "store").as_uri()
    job = build_job(landing.as_uri(), store, job_id=job_id, settle_ms=0, **tables)
    clock = ManualClock(int(T0.timestamp() * 1000))
    for i, (name, orders) in enumerate(FILES):
        write_orders(landing, "2026-11-21", name, orders)
        for attempt in range(2):  # a file is read once two listings agree on it
            clock.advance(60_000)
            if i == 1 and attempt == 1:
                with pytest.raises(SimulatedCrash):
                    run_cycle(job, store, clock, executor="local", kill=KillAt("after_ack"))
            run_cycle(job, store, clock, executor="local")
    clock.advance(60_000)
    run_cycle(job, store, clock, executor="local")


def delta_rows(path: Path) -> list[tuple[Any, ...]]:
    rows = both_readers(path)
    return sorted((r["customer"], r["window_start"], r["orders"], r["revenue_cents"]) for r in rows)


def postgres_rows(database: Db) -> list[tuple[Any, ...]]:
    got = database.query(
        "SELECT customer, window_start, orders, revenue_cents FROM {s}.revenue ORDER BY 1, 2"
    )
    return [tuple(r) for r in got]


def test_the_example_fills_a_delta_table_exactly_once(tmp_path: Path) -> None:
    run(tmp_path, "orders-delta", delta=delta_table(str(tmp_path / "revenue")))
    got = delta_rows(tmp_path / "revenue")
    assert got == expected() and len(got) >= 4


def test_the_example_fills_a_postgres_table_exactly_once(tmp_path: Path, db: Db) -> None:  # noqa: F811
    run(tmp_path, "orders-pg", postgres=postgres_table(f"{db.schema}.revenue", dsn=db.dsn))
    assert postgres_rows(db) == expected()


def test_one_job_fills_both_tables_exactly_once(tmp_path: Path, db: Db) -> None:  # noqa: F811
    """Fan-out: the Delta and the PostgreSQL sink tap the same window; through the crash after the
    acks both tables hold every closed hour once."""
    delta = delta_table(str(tmp_path / "revenue"))
    run(tmp_path, "orders-both", delta=delta, postgres=postgres_table(f"{db.schema}.revenue", dsn=db.dsn))
    assert delta_rows(tmp_path / "revenue") == postgres_rows(db) == expected()
