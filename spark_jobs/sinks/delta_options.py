"""The options of a Delta sink, validated once: every bad value is one line naming it and the fix."""

from __future__ import annotations

from dataclasses import dataclass

from state_store.core.errors import BadInputError

MODES = ("append", "merge")
ON_REWIND = ("keep", "overwrite")
SCHEMA_EVOLUTION = (None, "merge")
COMPRESSIONS = ("snappy", "zstd", "gzip", "lz4", "none")


class InvalidDeltaSinkOptions(ValueError, BadInputError):
    """A Delta sink option the sink cannot honour."""


def _columns(what: str, value: object, table: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (tuple, list)):
        raise InvalidDeltaSinkOptions(
            f"Delta sink for {table}: {what} must be a tuple of column names, e.g. ({value!r},), "
            f"not {type(value).__name__}"
        )
    names = tuple(value)
    bad = [n for n in names if not isinstance(n, str) or not n]
    if bad or len(set(names)) != len(names):
        raise InvalidDeltaSinkOptions(
            f"Delta sink for {table}: {what} {list(names)} must name distinct, non-empty columns"
        )
    return names


@dataclass(frozen=True, slots=True)
class DeltaSinkOptions:
    """What to write where (``storage_options`` are kept apart: they may hold secrets).

    ``mode``: ``append`` (every checkpoint's rows added) or ``merge`` (upsert by ``unique_key``: the
    last row of a key in a checkpoint wins, in subtask then row order). ``partition_by``: Hive-style
    partition columns (string, integer, boolean or date). ``schema_evolution``: None (a batch must
    match the table) or ``merge`` (new columns added, missing ones null). ``on_rewind``: ``keep`` or
    ``overwrite`` (see ``spark_jobs.sinks.delta``)."""

    table_uri: str
    mode: str = "append"
    unique_key: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    schema_evolution: str | None = None
    on_rewind: str = "keep"
    max_rows_per_file: int = 1_000_000
    compression: str = "snappy"

    def __post_init__(self) -> None:
        table = self.table_uri
        if self.mode not in MODES:
            raise InvalidDeltaSinkOptions(
                f"Delta sink for {table}: mode {self.mode!r} is not one of {list(MODES)}"
            )
        object.__setattr__(self, "unique_key", _columns("unique_key", self.unique_key, table))
        object.__setattr__(self, "partition_by", _columns("partition_by", self.partition_by, table))
        if self.mode == "merge" and not self.unique_key:
            raise InvalidDeltaSinkOptions(
                f"Delta sink for {table}: mode='merge' upserts by key: give unique_key=(column, ...)"
            )
        if self.schema_evolution not in SCHEMA_EVOLUTION:
            raise InvalidDeltaSinkOptions(
                f"Delta sink for {table}: schema_evolution {self.schema_evolution!r} is not None or 'merge'"
            )
        if self.on_rewind not in ON_REWIND:
            raise InvalidDeltaSinkOptions(
                f"Delta sink for {table}: on_rewind {self.on_rewind!r} is not one of {list(ON_REWIND)}"
            )
        if not isinstance(self.max_rows_per_file, int) or self.max_rows_per_file < 1:
            raise InvalidDeltaSinkOptions(
                f"Delta sink for {table}: max_rows_per_file must be a positive integer, "
                f"got {self.max_rows_per_file!r}"
            )
        if self.compression not in COMPRESSIONS:
            raise InvalidDeltaSinkOptions(
                f"Delta sink for {table}: compression {self.compression!r} is not one of {list(COMPRESSIONS)}"
            )

    @property
    def evolve(self) -> bool:
        return self.schema_evolution == "merge"
