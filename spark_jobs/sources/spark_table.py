"""An incremental read of any table Spark can read (a Parquet/ORC/Delta path, JDBC, a catalog
table) by a monotonic column: the column's high-water mark is the source's position.

Positions
---------
The table is one partition (``p0``). Its position is an **encoded value of** ``order_by``, not a
record count: integers as they are, timestamps as microseconds since the Unix epoch (UTC; a
``TIMESTAMP_NTZ`` column's wall-clock time read as UTC, so the same mark in every session time
zone and no DST gap or fold), dates as days. A
position is an *exclusive* high-water mark, exactly like an end offset of
:mod:`spark_jobs.sources.base`: the cut of an epoch is the rows with ``start <= value < end``.

1. The trigger (``cycle.trigger_epoch``) asks :meth:`end_offsets` (``max(value) + 1``, one Spark
   aggregation) and :meth:`epoch_end` (the cap: at most ``max_rows_per_epoch`` and the job's
   ``max_records_per_epoch`` rows, never splitting rows of one value) and writes ``[start, end)``
   into ``_pending.json`` *before* anything is processed; the completed checkpoint keeps ``end``
   as the next epoch's ``start``.
2. The driver reads the cut with :meth:`spark_frame` (``spark_jobs.runtime.spark_stage``): a
   replay of the epoch (a new attempt after a crash, or a restore) reads ``[start, end)`` again,
   so exactly the same rows, as long as the table only grows above its high-water mark.

Invariants and traps
--------------------
* ``order_by`` must be **monotonic at commit**: a row committed to the table later must not have a
  value below one already visible. A row that arrives with a value below the position of the
  latest checkpoint is *late*: no epoch reads it (Spark's and Flink's JDBC incremental readers
  have the same rule). Use a commit sequence or ingestion-time column where writers race. Late
  rows are not detected (the snapshot keeps a value, not a count).
* Positions start at 0: a null ``order_by``, or a value below 0 (a time before 1970), would
  never be read, so :meth:`end_offsets` refuses the table with a one-line SparkTableError.
* Rows of one value are never split between epochs: a cut may exceed the cap by the rows of its
  last value.
* The source holds no Spark session (it is pickled into every Spark task); the driver's session is
  ``driver_spark()`` (the active one, else a ``local[1]`` one per process). Catalog tables need
  that session configured for the catalog.
* A table Spark cannot read, or an ``order_by`` column it does not have, is a one-line
  :class:`SparkTableError` naming the table and the remedy, raised at the trigger: nothing is
  allocated or committed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from spark_jobs.sources.base import DEFAULT_CHUNK_SIZE, OFFSET_COLUMN, check_range, validate_uid
from spark_jobs.sources.dead_letters import DeadLetters
from spark_jobs.sources.errors import InvalidPartitionError
from spark_jobs.sources.spark_table_session import driver_spark
from state_store.core.errors import BadInputError

PARTITION = "p0"
_KINDS = ("integer", "timestamp", "timestamp_ntz", "date")
_EPOCH = dt.datetime(1970, 1, 1)
"""Position 0 of a ``TIMESTAMP_NTZ`` column (a wall-clock time, read as UTC)."""


class SparkTableError(ValueError, BadInputError):
    """A table Spark cannot read, or a column it cannot order by; one line with the remedy."""


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class SparkTableSource:
    """Rows of a Spark-readable table, read incrementally by ``order_by`` (module docstring).

    Exactly one of ``table`` (a catalog table name) or ``path`` (read with ``format``, default
    Parquet), or ``format="jdbc"`` with ``options`` (``url``, ``dbtable``/``query``, ...).
    ``event_time_column``: the rows' event time (timestamp or int64 ms), default ``order_by``.
    """

    def __init__(
        self,
        uid: str,
        *,
        order_by: str,
        table: str | None = None,
        path: str | None = None,
        format: str = "parquet",
        options: Mapping[str, str] | None = None,
        event_time_column: str | None = None,
        max_rows_per_epoch: int | None = None,
    ) -> None:
        self._uid = validate_uid(uid)
        jdbc = format == "jdbc"
        if sum(x is not None for x in (table, path)) + int(jdbc) != 1:
            raise SparkTableError(
                f"source {uid!r}: name exactly one table: table='db.name', path='...' (format={format!r}) "
                "or format='jdbc' with options={'url': ..., 'dbtable': ...}"
            )
        if jdbc and not ({"dbtable", "query"} & set(options or {})):
            raise SparkTableError(
                f"source {uid!r}: a JDBC table needs options 'url' and 'dbtable' (or 'query')"
            )
        if max_rows_per_epoch is not None and (
            not isinstance(max_rows_per_epoch, int) or max_rows_per_epoch < 1
        ):
            raise SparkTableError(
                f"source {uid!r}: max_rows_per_epoch={max_rows_per_epoch!r} is invalid: "
                "use an integer >= 1 or None"
            )
        self.order_by = order_by
        self.table = table
        self.path = path
        self.format = format
        self.options = dict(options or {})
        self.max_rows_per_epoch = max_rows_per_epoch
        self._event_time_column = event_time_column or order_by
        self._schema: pa.Schema | None = None

    # -- what it reads -----------------------------------------------------------------------------
    @property
    def describe(self) -> str:
        """The table as a user named it (in every error)."""
        if self.table is not None:
            return f"table {self.table}"
        if self.format == "jdbc":
            return f"JDBC table {self.options.get('dbtable') or self.options.get('query')}"
        return f"{self.format} table at {self.path}"

    def frame(self, spark: Any) -> Any:
        """The whole table as a DataFrame; SparkTableError when Spark cannot read it."""
        try:
            if self.table is not None:
                df = spark.read.options(**self.options).table(self.table)
            elif self.format == "jdbc":
                df = spark.read.format("jdbc").options(**self.options).load()
            else:
                df = spark.read.format(self.format).options(**self.options).load(self.path)
            columns = set(df.columns)
        except Exception as exc:
            raise SparkTableError(
                f"source {self._uid!r}: Spark cannot read {self.describe} ({_first_line(exc)}): "
                "create it, or fix table=/path=/options="
            ) from exc
        for role, name in (("order_by", self.order_by), ("event_time_column", self._event_time_column)):
            if name not in columns:
                raise SparkTableError(
                    f"source {self._uid!r}: {self.describe} has no column {name!r} ({role}); it has "
                    f"{', '.join(sorted(columns))}: name one of them"
                )
        self._kind(df)
        return df

    def _kind(self, df: Any) -> str:
        from pyspark.sql import types as T

        kind = df.schema[self.order_by].dataType
        if isinstance(kind, T.IntegralType):
            return "integer"
        if isinstance(kind, T.TimestampType):
            return "timestamp"
        if isinstance(kind, T.TimestampNTZType):
            return "timestamp_ntz"
        if isinstance(kind, T.DateType):
            return "date"
        raise SparkTableError(
            f"source {self._uid!r}: order_by column {self.order_by!r} of {self.describe} is "
            f"{kind.simpleString()}: order by an integer, timestamp or date column that grows "
            "with every commit"
        )

    def _encoded(self, df: Any) -> Any:
        """``order_by`` as the position's integer (module docstring)."""
        from pyspark.sql import functions as F

        column = F.col(self.order_by)
        kind = self._kind(df)
        if kind == "integer":
            return column.cast("long")
        if kind == "timestamp":
            return F.unix_micros(column)
        if kind == "timestamp_ntz":  # wall-clock micros: the same in every session time zone
            second = F.date_part(F.lit("SECOND"), column)  # with the microseconds
            utc = F.make_timestamp(
                F.year(column), F.month(column), F.dayofmonth(column), F.hour(column), F.minute(column),
                second, F.lit("UTC"),
            )  # fmt: skip
            return F.unix_micros(utc)
        return F.unix_date(column).cast("long")

    def _bound(self, df: Any, position: int) -> Any:
        """A literal of ``order_by``'s type at ``position`` (comparisons Spark can push down)."""
        from pyspark.sql import functions as F

        kind, value = self._kind(df), F.lit(position)
        if kind == "integer":
            return value
        if kind == "timestamp":
            return F.timestamp_micros(value)
        if kind == "timestamp_ntz":
            wall = _EPOCH + dt.timedelta(microseconds=position)
            return F.expr(f"TIMESTAMP_NTZ'{wall.isoformat(sep=' ', timespec='microseconds')}'")
        return F.date_from_unix_date(value)

    def _between(self, df: Any, start: int, end: int) -> Any:
        from pyspark.sql import functions as F

        column = F.col(self.order_by)
        return df.where((column >= self._bound(df, start)) & (column < self._bound(df, end)))

    def spark_frame(self, spark: Any, partition: str, start: int, end: int) -> Any:
        """The cut ``[start, end)`` as a DataFrame: ``_offset`` (the encoded value) then the
        table's columns (``spark_jobs.runtime.spark_stage`` reads it on the driver)."""
        self._check_partition(partition)
        check_range(partition, start, end, 1)
        df = self.frame(spark)
        return self._between(df, start, end).select(self._encoded(df).alias(OFFSET_COLUMN), "*")

    # -- the ReplayableSource protocol --------------------------------------------------------------
    @property
    def uid(self) -> str:
        return self._uid

    @property
    def schema(self) -> pa.Schema:
        """The table's columns as Arrow (read from Spark once, then cached)."""
        if self._schema is None:
            from pyspark.sql.pandas.types import to_arrow_schema

            self._schema = to_arrow_schema(self.frame(driver_spark()).schema, timezone="UTC")
        return self._schema

    @property
    def event_time_column(self) -> str:
        return self._event_time_column

    def partitions(self) -> list[str]:
        return [PARTITION]

    def _check_partition(self, partition: str) -> None:
        if partition != PARTITION:
            raise InvalidPartitionError(
                f"source {self._uid!r} has one partition, {PARTITION!r}, not {partition!r}"
            )

    def end_offsets(self, now_ms: int | None = None) -> dict[str, int]:
        """``max(order_by) + 1`` as a position (0 for an empty table); ``now_ms`` is ignored.

        Rows no mark can reach (a null ``order_by``, or one below position 0) are a
        SparkTableError naming the table, never silently skipped (one aggregation with the max)."""
        from pyspark.sql import functions as F

        df = self.frame(driver_spark())
        value = self._encoded(df)
        row = df.select(
            F.max(value).alias("top"),
            F.min(value).alias("low"),
            F.count(F.when(F.col(self.order_by).isNull(), 1)).alias("nulls"),
        ).first()
        if row is None:
            return {PARTITION: 0}
        self._check_reachable(int(row["nulls"]), 0 if row["low"] is None else int(row["low"]))
        return {PARTITION: 0 if row["top"] is None else int(row["top"]) + 1}

    def _check_reachable(self, nulls: int, low: int) -> None:
        where = f"source {self._uid!r}: {self.describe}"
        if nulls:
            raise SparkTableError(
                f"{where} has {nulls} row{'s' if nulls != 1 else ''} with a null order_by column "
                f"{self.order_by!r}, which no high-water mark reaches: read a view that fills or "
                "filters them, or order by a column that is never null"
            )
        if low < 0:
            raise SparkTableError(
                f"{where} has rows with order_by column {self.order_by!r} below position 0 "
                f"(encoded {low}; before 1970 for a time), which would never be read: order by a "
                "column whose values are >= 0, or read a view that shifts it"
            )

    def epoch_end(self, partition: str, start: int, available: int, max_records: int) -> int:
        """The end of a cut from ``start`` of at most ``max_records`` (and ``max_rows_per_epoch``)
        rows, extended to the last row of its highest value; ``available`` when fewer rows wait."""
        from pyspark.sql import functions as F

        self._check_partition(partition)
        cap = min(max_records, self.max_rows_per_epoch or max_records)
        if available <= start:
            return start
        df = self.frame(driver_spark())
        first = (
            self._between(df, start, available).select(self._encoded(df).alias("v")).orderBy("v").limit(cap)
        )
        row = first.agg(F.count("v").alias("n"), F.max("v").alias("top")).first()
        if row is None or row["n"] < cap:
            return available
        return min(available, int(row["top"]) + 1)

    def read(
        self,
        partition: str,
        start: int,
        end: int,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        dead_letters: DeadLetters | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The cut ``[start, end)`` read on the driver's session, ordered by ``_offset`` (tools and
        tests; an epoch reads it through ``spark_frame``). No record is ever a dead letter."""
        table = self.spark_frame(driver_spark(), partition, start, end).toArrow().sort_by(OFFSET_COLUMN)
        yield from table.to_batches(max_chunksize=chunk_size)


__all__ = ["SparkTableError", "SparkTableSource"]
