"""IcebergTransactionalSink: the two-phase-commit protocol (``state_store.core.twophase``) into an
Apache Iceberg table through pyiceberg (no JVM). Exactly once: every checkpoint's rows appear in the
table exactly once, in one catalog commit, and only after the checkpoint completed.

Steps (one subtask of the sink, then the coordinator)::

    begin_transaction(n, subtask, attempt, gen)  nothing written
    write(txn, batch)                            schema checked against the table; Arrow batches buffered
    pre_commit(txn)                              create-only Parquet files in the job's store,
                                                 sinks/<uid>/txn-<n>/<subtask>-g<gen>-a<attempt>-<k>.parquet
                                                 -> PreCommittedTxn
    commit(records of n)                         1. read the table and its ledger (``iceberg_ledger``;
                                                    no table: create it from the staged rows' schema):
                                                    n already committed -> verify it is the same
                                                    commit, no-op; generation below the fence ->
                                                    FencedTransactionError
                                                 2. read back and verify every staged file (size, checksum),
                                                    check the rows against the table's schema
                                                 3. ONE catalog commit (``iceberg_publish``): the append (or
                                                    upsert) snapshot of all subtasks' rows, its summary, the
                                                    ledger property -- **the visibility point**
    abort / recover_and_abort(record)            delete that transaction's staged files (the table is
                                                 never touched: its rows are there only after a commit)

Why stage in the job's store, not in the table's folder (as the Delta sink does): the staged files
then follow the layout, create-only naming, checksums and orphan sweep of every other sink, are
listed in the subtask's ack so checkpoint completion verifies them like state files, and nothing of
an aborted or zombie attempt ever lands under the table's location; the commit hands the rows to
pyiceberg, which writes the data files itself -- with Iceberg field ids, column statistics and the
table's partition spec -- instead of hand-built data-file entries (``add_files`` would also set a
name mapping on the table), and an upsert needs the rows anyway. The cost: the coordinator reads
and rewrites each epoch's rows once (fine for epoch-sized output).

Each step may be retried, in this process or after a crash: the decision in step 1 is read from the
table itself, never from a local marker, and a commit racing another commit of the sink (or the
fence) fails the catalog's compare-and-swap -- pyiceberg's own rebase-and-retry is switched off for
these commits (``iceberg_catalog.no_retry``) -- and is decided again on the new table state.

Fencing (``fence(g)``, on restore): stored twice, as for Delta. (1) In the job's store
(``<job>/sinks/<uid>/_fences/``): it exists before the table does. (2) As the table property
``epochal/<job>/<uid>/fence``, set by a commit of its own (an empty snapshot): atomic with data
commits -- a zombie's commit built before the fence fails the catalog's check, and decided again, is
refused. A first commit creates the table, then reads the job-store fences, then decides, so a fence
that found no table is seen too. A commit of a generation below either raises
:class:`FencedTransactionError` and changes nothing.

Rewind (``retract_after``, on a restore to an older checkpoint): ``on_rewind="keep"`` (default)
leaves the rows the rewound run committed after that checkpoint; the restored run commits its own on
top (append: those epochs' rows twice; upsert: upserted again by key). ``on_rewind="overwrite"``
withdraws them in one commit first (``iceberg_rewind``), so the table ends as a run that never went
past the checkpoint. Either way the restored run's checkpoints commit: a commit is skipped only if
the table holds that very checkpoint of that generation, never because its id is below the highest
committed id (``committed_checkpoint_ids`` answers for the newest generation only).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from spark_jobs.sinks.commit_log import CommitLog, SinkLayout
from spark_jobs.sinks.delta_ledger import (
    CommitKind,
    LedgerState,
    LineagePosition,
    SinkCommitInfo,
    digest_of,
)
from spark_jobs.sinks.iceberg_catalog import IcebergTableRef, InvalidIcebergTable
from spark_jobs.sinks.iceberg_ledger import SinkKeys, read_state, verify_committed
from spark_jobs.sinks.iceberg_publish import data_transaction
from spark_jobs.sinks.iceberg_restore import Restores, commit_or_retry
from spark_jobs.sinks.iceberg_schema import agreed_schema, check_batch, conformed
from spark_jobs.sinks.iceberg_staging import Stager
from state_store.core.layout import validate_name
from state_store.core.manifests import StateHandle
from state_store.core.ports import NO_KILL, KillSwitch, ObjectStore
from state_store.core.twophase import (
    FencedTransactionError,
    PreCommittedTxn,
    SinkCommitError,
    Transaction,
    TransactionalSink,
    TxnId,
)

log = logging.getLogger(__name__)

AFTER_STAGE = "iceberg_after_stage"  # pre_commit: every staged file written, no record returned
AFTER_CREATE = "iceberg_after_create"  # commit: the table created (empty), nothing committed
BEFORE_ICEBERG_COMMIT = "iceberg_before_commit"  # commit: decided, data files written, catalog not committed
AFTER_ICEBERG_COMMIT = "iceberg_after_commit"  # commit: in the catalog, commit() not returned
KILL_POINTS = (AFTER_STAGE, AFTER_CREATE, BEFORE_ICEBERG_COMMIT, AFTER_ICEBERG_COMMIT)
"""The sink's fault-injection points, in order (the sink's ``kill`` switch is called there)."""

MODES = ("append", "upsert")
ON_REWIND = ("keep", "overwrite")
DEFAULT_MAX_ROWS_PER_FILE = 1_000_000


@dataclass(frozen=True, kw_only=True)
class IcebergSink:
    """Exactly-once output into the Iceberg table ``table`` ("namespace.table") of ``catalog``: a
    dict of pyiceberg catalog properties (``{"type": "sql", "uri": "sqlite:///...", "warehouse":
    "file:///..."}``, a REST catalog's ``{"type": "rest", "uri": ...}``; optional ``"name"``) or the
    name of a configured catalog. One catalog commit per checkpoint, see
    ``spark_jobs.sinks.iceberg`` and the "Iceberg sink" section of ``docs/writing-jobs.md``.

    ``mode="append"`` adds every checkpoint's rows; ``mode="upsert"`` upserts them by ``unique_key``.
    ``on_rewind``: on a restore to an older checkpoint, ``"keep"`` the rows the rewound run
    committed after it, or ``"overwrite"`` (withdraw them in one commit). The catalog properties
    never appear in the repr (they may hold credentials). Invalid options raise at construction,
    one line each; nothing connects until the sink is used."""

    catalog: str | Mapping[str, str] = field(repr=False)
    table: str
    mode: str = "append"
    unique_key: tuple[str, ...] = ()
    on_rewind: str = "keep"
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE

    def __post_init__(self) -> None:
        self.ref()  # validates the catalog and the identifier
        where = f"IcebergSink(table={self.table!r})"
        if not isinstance(self.catalog, str):
            object.__setattr__(self, "catalog", dict(self.catalog))
        if self.mode not in MODES:
            raise InvalidIcebergTable(f"{where}: mode {self.mode!r} is not one of {list(MODES)}")
        key = (self.unique_key,) if isinstance(self.unique_key, str) else self.unique_key
        if not isinstance(key, (tuple, list)) or not all(isinstance(k, str) and k for k in key):
            raise InvalidIcebergTable(f"{where}: unique_key must be a tuple of column names, got {key!r}")
        if len(set(key)) != len(key):
            raise InvalidIcebergTable(f"{where}: unique_key {list(key)} names a column twice")
        object.__setattr__(self, "unique_key", tuple(key))
        if self.mode == "upsert" and not self.unique_key:
            raise InvalidIcebergTable(f"{where}: mode='upsert' upserts by key: give unique_key=(column, ...)")
        if self.mode == "append" and self.unique_key:
            raise InvalidIcebergTable(
                f"{where}: unique_key is used by mode='upsert' only; set mode='upsert' or drop unique_key"
            )
        if self.on_rewind not in ON_REWIND:
            raise InvalidIcebergTable(
                f"{where}: on_rewind {self.on_rewind!r} is not one of {list(ON_REWIND)}"
            )
        if not isinstance(self.max_rows_per_file, int) or self.max_rows_per_file < 1:
            raise InvalidIcebergTable(
                f"{where}: max_rows_per_file must be a positive integer, got {self.max_rows_per_file!r}"
            )

    def ref(self) -> IcebergTableRef:
        return IcebergTableRef.parse(self.catalog, self.table)

    def create(self, store: ObjectStore, job_id: str, uid: str) -> IcebergTransactionalSink:
        return IcebergTransactionalSink(store, job_id, uid, self)


class IcebergTransactionalSink(TransactionalSink[Any]):
    """Exactly-once output of one sink uid of one job into one Iceberg table (module docstring).

    Cheap to construct (the catalog is opened on first use, once per process and configuration).
    ``kill`` is called at :data:`KILL_POINTS` (fault injection; production passes NO_KILL)."""

    stages_in_job_store = True  # staged files are job-store keys: the ack lists them, completion verifies

    def __init__(
        self,
        store: ObjectStore,
        job_id: str,
        uid: str,
        spec: IcebergSink,
        *,
        kill: KillSwitch = NO_KILL,
        commit_attempts: int = 6,
    ) -> None:
        super().__init__(uid)
        validate_name("job id", job_id)
        self.store = store
        self.job_id = job_id
        self.spec = spec
        self.ref = spec.ref()
        self.keys = SinkKeys(job_id, uid)
        self.stager = Stager(store, SinkLayout(job_id, uid), f"sink {uid} (Iceberg table {self.ref.name})")
        self.fences = CommitLog(store, job_id, uid)  # the job-store fence documents only
        self.kill = kill
        self.commit_attempts = max(1, commit_attempts)
        self._table_checked = False
        self._expected: Any = None  # the table's Iceberg schema at the first write (None: no table)

    @property
    def name(self) -> str:
        return self.ref.name

    # -- reading the ledger ----------------------------------------------------------------
    def ledger(self) -> tuple[Any, LedgerState]:
        table = self.ref.load()
        return table, read_state(table, self.keys, self.name)

    def newest_generation(self, state: LedgerState) -> int:
        """The fence: the newest generation of the table's ledger and of the job store's fences."""
        return max(state.newest_generation, self.fences.newest_generation())

    def committed_checkpoint_ids(self) -> AbstractSet[int]:
        """Checkpoint ids committed in the newest generation's view (``LedgerState.committed_ids``:
        none until that generation commits, so an id a restored run reuses is not taken as done)."""
        _, state = self.ledger()
        return state.committed_ids(self.newest_generation(state))

    # -- restore side (``iceberg_restore``) -------------------------------------------------
    def fence(self, generation: int) -> None:
        """On restore into ``generation``: refuse older generations' commits from now on. Call it
        after ``recover_and_commit`` of the restored checkpoint's records (they carry the previous
        generation and must still be committed). Idempotent."""
        self.restores().fence(generation)

    def retract_after(
        self, checkpoint_id: int, generation: int, reason: str, *, before: int | None = None
    ) -> tuple[int, ...]:
        """On a restore to ``checkpoint_id`` in ``generation``: with ``on_rewind="overwrite"``
        withdraw, in one commit, the rows older generations committed for checkpoints above it
        (below ``before``, the restore's import); returns their ids. With ``"keep"`` nothing is
        withdrawn and () is returned (module docstring). Idempotent."""
        return self.restores().retract_after(checkpoint_id, generation, reason, before=before)

    def retracted_ids(self) -> frozenset[int]:
        """Checkpoint ids whose rows a rewind withdrew (restore refuses to resume from them)."""
        return self.restores().retracted_ids()

    def restores(self) -> Restores:
        return Restores(self.ref, self.keys, self.fences, self.spec.on_rewind, self.commit_attempts)

    # -- hooks: subtask side ---------------------------------------------------------------
    def _write(self, txn: Transaction[Any], batch: Any) -> None:
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        for b in batches:
            if not isinstance(b, pa.RecordBatch):
                raise TypeError(
                    f"sink {self.uid} accepts pyarrow RecordBatch or Table, got {type(b).__name__}"
                )
            self._check_batch(txn, b)
            txn.batches.append(b)

    def _check_batch(self, txn: Transaction[Any], batch: pa.RecordBatch) -> None:
        first = txn.batches[0].schema if txn.batches else None
        check_batch(self.name, self._table_schema(), first, batch, self.spec.unique_key)

    def _table_schema(self) -> Any:
        if not self._table_checked:
            table = self.ref.load()
            self._expected = table.schema() if table is not None else None
            self._table_checked = True
        return self._expected

    def _pre_commit(self, txn: Transaction[Any]) -> PreCommittedTxn:
        t = txn.id
        handles: list[StateHandle] = []
        rows = 0
        if txn.batches:
            data = pa.Table.from_batches(txn.batches)
            rows = data.num_rows
            handles = self.stager.write(t, data, self.spec.max_rows_per_file, txn.staged.append)
        self.kill(AFTER_STAGE, t.checkpoint_id)
        return PreCommittedTxn(
            t.sink_uid, t.checkpoint_id, t.subtask, t.attempt, t.generation, tuple(handles), rows
        )

    # -- hooks: coordinator side -----------------------------------------------------------
    def _commit_checkpoint(self, checkpoint_id: int, records: tuple[PreCommittedTxn, ...]) -> bool:
        if not records:
            raise SinkCommitError(f"sink {self.uid}: no records to commit for checkpoint {checkpoint_id}")
        position = LineagePosition(records[0].generation, checkpoint_id)
        digest = digest_of(records)
        staged: list[pa.Table] | None = None
        has_rows = any(r.files for r in records)
        for attempt in range(self.commit_attempts):
            table, state = self.ledger()
            if table is None:
                self._refuse_if_fenced(position, self.fences.newest_generation())
                if not has_rows:
                    return False  # no table and nothing to add: an empty checkpoint needs no record
                staged = staged if staged is not None else self.stager.read(checkpoint_id, records)
                table = self._create(staged, checkpoint_id)
                self.kill(AFTER_CREATE, checkpoint_id)
                state = read_state(table, self.keys, self.name)
            newest = self.newest_generation(state)  # the job-store fences, read after the table
            if state.is_committed(position):
                if has_rows:  # an empty checkpoint's commit need not be verified
                    verify_committed(table, self.keys, position, digest, newest, self.name)
                return False
            self._refuse_if_fenced(position, newest)
            if has_rows and staged is None:
                staged = self.stager.read(checkpoint_id, records)
            what = f"checkpoint {checkpoint_id}'s staged rows"
            rows = conformed(self.name, table.schema(), table.format_version, staged or [], what)
            info = SinkCommitInfo(
                CommitKind.DATA,
                self.job_id,
                self.uid,
                position.generation,
                checkpoint_id,
                sum(r.rows for r in records),
                sum(len(r.files) for r in records),
                digest,
            )
            with self.ref.reaching(f"writing checkpoint {checkpoint_id}'s data files"):
                tx = data_transaction(table, rows, info, position, self.keys, self.spec.unique_key)
            self.kill(BEFORE_ICEBERG_COMMIT, checkpoint_id)
            if commit_or_retry(self.ref, tx, f"committing {position}", attempt, self.commit_attempts):
                self.kill(AFTER_ICEBERG_COMMIT, checkpoint_id)
                return True
        raise AssertionError("unreachable")  # the last attempt commits or raises

    def _refuse_if_fenced(self, position: LineagePosition, newest: int) -> None:
        if position.generation < newest:
            raise FencedTransactionError(
                f"sink {self.uid}: refusing to commit {position} into Iceberg table {self.name}: "
                f"generation {newest} already committed or fenced it (a zombie of an earlier run); "
                "its staged files are removed by abort or the orphan sweep"
            )

    def _create(self, staged: list[pa.Table], checkpoint_id: int) -> Any:
        """The table, created from the staged rows' schema (every subtask must agree on it)."""
        schema = agreed_schema(self.name, staged, f"checkpoint {checkpoint_id}'s staged rows")
        table = self.ref.create(schema)
        log.info("Iceberg table %s created by sink %s", self.name, self.uid)
        return table

    def _discard(self, txn_id: TxnId, keys: Sequence[str]) -> None:
        """Delete the transaction's staged files. Never touches the table: committed rows are in
        the table's own data files, and the staged ones are not needed once committed."""
        self.stager.delete(txn_id, keys)
