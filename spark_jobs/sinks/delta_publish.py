"""The Delta commits a sink makes: one per checkpoint (append, merge, or ledger only), a fence, a rewind.

Each is ONE Delta commit carrying the sink's application transactions (``delta_ledger``) and its
``commitInfo.epochal``. The only exception: with ``schema_evolution="merge"`` in append mode, new
columns are added by their own commit just before the data commit (delta-rs adds files and changes
a schema in one commit only when overwriting); a crash between the two leaves the table with the new,
empty, nullable columns and no rows of the checkpoint, which the retried commit then adds. After
adding them the publisher raises :class:`SchemaChanged`: the caller decides again on the new
snapshot, so the data commit never rests on a decision older than the snapshot it commits on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.transaction import create_table_with_add_actions

from spark_jobs.sinks.delta_ledger import SinkCommitInfo
from spark_jobs.sinks.delta_location import DeltaLocation
from spark_jobs.sinks.delta_rewind import RewindPlan
from spark_jobs.sinks.delta_schema import arrow_of, check_staged, merged, new_fields
from spark_jobs.sinks.delta_staging import StagedFile, Stager, now_ms
from state_store.core.ports import NO_KILL, KillSwitch
from state_store.core.twophase import SinkCommitError

AFTER_SCHEMA_CHANGE = "delta_after_schema_change"
_ROW = "__epochal_row__"


class SchemaChanged(Exception):
    """The columns were added (their own commit): decide again on the new snapshot, then commit."""


def _nothing(schema: DeltaSchema) -> None:
    pass


def properties(info: SinkCommitInfo, txns: Sequence[Transaction]) -> CommitProperties:
    return CommitProperties(custom_metadata=info.to_metadata(), app_transactions=list(txns))


def load(location: DeltaLocation) -> DeltaTable | None:
    """The table's newest snapshot, or None when no table exists at the location yet."""
    if not DeltaTable.is_deltatable(location.uri, location.options or None):
        return None
    return DeltaTable(location.uri, storage_options=location.options or None)


def last_per_key(data: pa.Table, keys: Sequence[str]) -> pa.Table:
    """One row per key: the last one in ``data``'s order (subtask, then row order)."""
    if data.num_rows == 0:
        return data
    indexed = data.append_column(_ROW, pa.array(range(data.num_rows), pa.int64()))
    last = indexed.group_by(list(keys), use_threads=False).aggregate([(_ROW, "max")])
    rows = pc.sort_indices(last[f"{_ROW}_max"])
    return data.take(pc.take(last[f"{_ROW}_max"], rows))


def merge_predicate(keys: Sequence[str]) -> str:
    def quoted(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    return " AND ".join(f"t.{quoted(k)} = s.{quoted(k)}" for k in keys)


class Publisher:
    """Makes the commits of one sink on one table (see module docstring)."""

    def __init__(
        self,
        location: DeltaLocation,
        stager: Stager,
        *,
        mode: str,
        unique_key: Sequence[str],
        partition_by: Sequence[str],
        evolve: bool,
        kill: KillSwitch = NO_KILL,
    ) -> None:
        self.location = location
        self.stager = stager
        self.mode = mode
        self.unique_key = tuple(unique_key)
        self.partition_by = tuple(partition_by)
        self.evolve = evolve
        self.kill = kill

    @property
    def name(self) -> str:
        return self.location.uri

    def data(
        self,
        table: DeltaTable | None,
        files: Sequence[StagedFile],
        props: CommitProperties,
        checkpoint_id: int,
        before_create: Callable[[DeltaSchema], None] = _nothing,
    ) -> bool:
        """Commit checkpoint n's staged files; False if there was nothing to record (no rows and no
        table yet: an empty checkpoint cannot create a table, and needs no record).
        ``before_create(schema)`` runs just before a commit that creates the table (with that
        schema): the sink's create-claim (``delta_claims``); it may raise to refuse the commit."""
        if table is not None:
            self.check_layout(table)
            for schema in {f.schema.to_json(): f.schema for f in files}.values():
                check_staged(self.name, table.schema(), schema, self.evolve)
        if self.mode == "merge":
            return self._merge(table, files, props, checkpoint_id, before_create)
        if table is None:
            if not files:
                return False
            self._same_schemas(files, checkpoint_id)
            before_create(files[0].schema)
            create_table_with_add_actions(
                self.location.uri,
                files[0].schema,
                [f.add_action(now_ms()) for f in files],
                mode="error",
                partition_by=list(self.partition_by) or None,
                storage_options=self.location.options or None,
                commit_properties=props,
            )
            return True
        table = self._evolve(table, files, checkpoint_id)
        stamp = now_ms()
        table.create_write_transaction(
            [f.add_action(stamp) for f in files],
            "append",
            table.schema(),
            partition_by=table.metadata().partition_columns or None,
            commit_properties=props,
        )
        return True

    def _merge(
        self,
        table: DeltaTable | None,
        files: Sequence[StagedFile],
        props: CommitProperties,
        checkpoint_id: int,
        before_create: Callable[[DeltaSchema], None],
    ) -> bool:
        expected = table.schema() if table is not None else None
        schemas = [arrow_of(f.schema) for f in files]
        target = (
            expected if expected is not None and not self.evolve else merged(expected, schemas, self.name)
        )
        source = last_per_key(self.stager.read(files, arrow_of(target), checkpoint_id), self.unique_key)
        if table is None:
            if source.num_rows == 0:
                return False
            before_create(target)
            write_deltalake(
                self.location.uri,
                source,
                mode="error",
                partition_by=list(self.partition_by) or None,
                storage_options=self.location.options or None,
                commit_properties=props,
            )
            return True
        if source.num_rows == 0:
            self.ledger_only(table, props)
            return True
        merger = table.merge(
            source,
            merge_predicate(self.unique_key),
            source_alias="s",
            target_alias="t",
            merge_schema=self.evolve,
            commit_properties=props,
        )
        merger.when_matched_update_all().when_not_matched_insert_all().execute()
        return True

    def ledger_only(self, table: DeltaTable, props: CommitProperties) -> None:
        """A commit without rows: the app transactions and commit info only (fences, empty epochs)."""
        table.create_write_transaction([], "append", table.schema(), commit_properties=props)

    def rewind(self, table: DeltaTable, plan: RewindPlan, props: CommitProperties) -> None:
        """One commit: restore the table to ``plan.target``, or delete every row (target -1)."""
        if plan.target < 0:
            table.delete(commit_properties=props)
        else:
            table.restore(plan.target, commit_properties=props)

    def check_layout(self, table: DeltaTable) -> None:
        """The table is partitioned as the sink is (a one-line error naming both otherwise)."""
        have = list(table.metadata().partition_columns)
        if have != list(self.partition_by):
            raise SinkCommitError(
                f"Delta table {self.name} is partitioned by {have}, the sink by "
                f"{list(self.partition_by)}: set the sink's partition_by to {have}, or write to a new table"
            )

    def _evolve(self, table: DeltaTable, files: Sequence[StagedFile], checkpoint_id: int) -> DeltaTable:
        if not self.evolve:
            return table
        added: dict[str, Any] = {}
        for f in files:
            for field in new_fields(table.schema(), f.schema):
                added.setdefault(field.name, field)
        if not added:
            return table
        table.alter.add_columns(list(added.values()))
        self.kill(AFTER_SCHEMA_CHANGE, checkpoint_id)
        raise SchemaChanged(f"columns {sorted(added)} added to {self.name}")

    def _same_schemas(self, files: Sequence[StagedFile], checkpoint_id: int) -> None:
        first = files[0].schema
        for f in files[1:]:
            if f.schema.to_json() != first.to_json():
                check_staged(self.name, first, f.schema, evolve=False)
                raise SinkCommitError(
                    f"Delta table {self.name}: the staged files of checkpoint {checkpoint_id} disagree on "
                    f"the schema ({f.handle.key}); every subtask must emit one schema"
                )
