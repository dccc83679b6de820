"""The second example job (issue 21): orders that another system drops as JSON-lines files into a
landing zone, revenue per customer per hour, exactly once into a Delta Lake table and/or a
PostgreSQL table::

    PrefixSource "orders" (landing/orders/date=YYYY-MM-DD/*.json, one partition per date folder)
      -> key_by(order_id).deduplicate(ttl 1 day)            uid "dedup"    (redelivered orders)
      -> key_by(customer).window(tumbling 1 h, count, sum)  uid "revenue"
      -> DeltaSink merge by (customer, window_start)         uid "revenue-delta"
      `-> PostgresSink upsert by (customer, window_start)    uid "revenue-postgres"

Both sinks tap the window's output (fan-out to sinks): each checkpoint commits the same hours to
both tables, each exactly once. ``build_job(landing_uri, store_uri, delta=..., postgres=...)``
(either or both); ``write_orders`` drops a file the way an upstream system would;
``tests/unit/examples/test_landing_orders.py`` runs each table alone and both together.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import DeltaSink, PostgresSink
from spark_jobs.api.windows import Aggregates, Count, Sum, TumblingEventTimeWindows
from spark_jobs.sources import PrefixSource

JOB_ID = "landing-orders"
HOUR_MS = 3_600_000
ORDERS = pa.schema(
    [
        pa.field("order_id", pa.string(), nullable=False),
        pa.field("customer", pa.string(), nullable=False),
        pa.field("amount_cents", pa.int64(), nullable=False),
        pa.field("event_time", pa.timestamp("ms", tz="UTC"), nullable=False),
    ]
)


def build_job(
    landing_uri: str,
    store_uri: str,
    *,
    delta: DeltaSink | None = None,
    postgres: PostgresSink | None = None,
    job_id: str = JOB_ID,
    settle_ms: int = 30_000,
    clock: Any = None,
) -> Job:
    """The job; ``store_uri`` is where it keeps checkpoints (and the landing zone's manifest);
    ``delta``: ``delta_table(path)``, ``postgres``: ``postgres_table(table, dsn=...)``; at least one."""
    if delta is None and postgres is None:
        raise ValueError(
            "landing_orders.build_job: pass delta=delta_table(...) and/or postgres=postgres_table(...)"
        )
    orders = PrefixSource(
        "orders",
        landing_uri,
        "orders",
        job_id=job_id,
        state_store=store_uri,
        schema=ORDERS,
        format="jsonl",
        partitions="folder",
        settle_ms=settle_ms,
        **({"clock": clock} if clock is not None else {}),
    )
    job = Job(job_id, parallelism=2, max_parallelism=16)
    revenue = (
        job.source(orders, uid="orders", out_of_orderness_ms=60_000, idleness_ms=HOUR_MS)
        .key_by("order_id")
        .deduplicate(ttl_ms=24 * HOUR_MS, uid="dedup")
        .key_by("customer")
        .window(
            TumblingEventTimeWindows(HOUR_MS),
            Aggregates(Count(name="orders"), Sum("amount_cents", name="revenue_cents")),
            uid="revenue",
        )
    )
    if delta is not None:
        revenue.sink(delta, uid="revenue-delta")
    if postgres is not None:
        revenue.sink(postgres, uid="revenue-postgres")
    return job


KEY = ("customer", "window_start")


def delta_table(path: str, **options: Any) -> DeltaSink:
    """The revenue table in Delta Lake, upserted by (customer, window_start)."""
    return DeltaSink(path, mode="merge", unique_key=KEY, **options)


def postgres_table(table: str, **connection: Any) -> PostgresSink:
    """The revenue table in PostgreSQL (``dsn=`` or ``conn_id=``), upserted likewise."""
    return PostgresSink(table=table, unique_key=KEY, **connection)


def write_orders(landing: Path, date: str, name: str, orders: Sequence[dict[str, Any]]) -> Path:
    """Drop a JSON-lines file of ``orders`` into ``landing/orders/date=<date>/`` (written aside and
    renamed, as a careful upstream system does)."""
    folder = landing / "orders" / f"date={date}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(order) + "\n" for order in orders))
    tmp.rename(path)
    return path
