"""PostgresSink: exactly-once output into a PostgreSQL table, one database transaction per epoch.

Steps (one subtask of the sink, then the coordinator)::

    begin_transaction(n, subtask, attempt, gen)  nothing written
    write(txn, batch)                            Arrow batches buffered in memory (types checked)
    pre_commit(txn)                              create-only Parquet files in the job's store,
                                                 sinks/<uid>/txn-<n>/<subtask>-g<gen>-a<attempt>-<k>.parquet
    commit(records of n)                         ONE database transaction (postgres_ledger): fence
                                                 row locked, upsert/insert every subtask's rows, commit
                                                 row (job, uid, n, gen) inserted, COMMIT
    abort / recover_and_abort(record)            delete that transaction's staged files

Why stage in the object store rather than in a staging table: a pre-commit runs on a Spark
executor, which then needs no database connection or credentials; the staged files follow the
layout, checksums, create-only naming and orphan sweep of every other sink (a zombie attempt can
never replace another attempt's file; an aborted transaction leaves nothing in the database); and
the database sees one short transaction per checkpoint, from the coordinator only. The cost: the
coordinator reads the staged rows back and COPYs them in (fine for epoch-sized outputs).

Exactly-once: rows become visible only in checkpoint n's commit transaction, which also inserts
the commit row whose primary key (job, uid, n, generation) makes a second commit of the same
records a no-op -- checked inside the transaction, under the fence row's lock. A crash or a lost
connection before COMMIT rolls everything back; after COMMIT, the retry finds the commit row. A
zombie of an older generation is refused under the same lock (FencedTransactionError), so it
cannot slip in between a restore's fence and its own check.

``on_rewind`` -- what :meth:`retract_after` (a restore to an older snapshot) does to the rows that
the withdrawn commits wrote (the commits are withdrawn either way, so the new generation may commit
the same checkpoint ids again):

* ``"keep"`` (default): the rows stay. With a ``unique_key`` the reprocessed epochs overwrite the
  keys they write again; rows of keys they do not write again stay as the old run left them.
  Without a key, reprocessed rows are appended beside the old ones.
* ``"overwrite"``: the table is rewound to what it was after the restored checkpoint: rows written
  by the withdrawn commits are deleted and the rows they replaced restored. The target then carries
  two provenance columns (``epochal_checkpoint_id``, ``epochal_generation``: the commit that last
  wrote the row) and, with a ``unique_key``, every replaced row's pre-image is kept in
  ``epochal_sink_undo`` (delete the entries of checkpoints older than your oldest savepoint).
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.sinks.commit_log import SinkLayout
from spark_jobs.sinks.postgres_conn import (
    PostgresFailure,
    PostgresSinkConfigError,
    PostgresSinkError,
    connect,
    endpoint_of,
    first_line,
    resolve_conninfo,
)
from spark_jobs.sinks.postgres_ledger import AFTER_FENCE_CHECK, AFTER_UPSERT, CommitRequest, Ledger
from spark_jobs.sinks.postgres_schema import (
    TableName,
    check_output_schema,
    ensure_control_tables,
    resolve_names,
)
from state_store.core import checksums
from state_store.core.layout import validate_name
from state_store.core.manifests import StateHandle
from state_store.core.ports import NO_KILL, KillSwitch, ObjectNotFound, ObjectStore
from state_store.core.twophase import (
    PreCommittedTxn,
    SinkCommitError,
    Transaction,
    TransactionalSink,
    TxnId,
)
from state_store.formats.arrow_bytes import read_parquet

BEFORE_TRANSACTION = "pg_before_transaction"  # staged rows read, no transaction open
AFTER_COMMIT = "pg_after_commit"  # COMMIT acknowledged, commit() not returned
KILL_POINTS = (BEFORE_TRANSACTION, AFTER_FENCE_CHECK, AFTER_UPSERT, AFTER_COMMIT)
"""The commit path's fault-injection points, in order (the sink's ``kill`` switch is called there)."""
DEFAULT_MAX_ROWS_PER_FILE = 1_000_000


class RewindPolicy(enum.Enum):
    KEEP = "keep"
    OVERWRITE = "overwrite"


@dataclass(frozen=True, kw_only=True)
class PostgresSink:
    """Exactly-once output into PostgreSQL table ``table`` (see the module docstring).

    ``dsn``: a libpq conninfo string or URI; or ``conn_id``: an Airflow connection id (see
    ``postgres_conn``). ``unique_key``: upsert by these columns (``INSERT ... ON CONFLICT``); empty:
    plain append. ``on_rewind``: ``"keep"`` or ``"overwrite"``. Building the spec checks the
    options; nothing connects until a commit."""

    table: str
    dsn: str | None = field(default=None, repr=False)  # may hold a password: never in repr or logs
    conn_id: str | None = None
    unique_key: tuple[str, ...] = ()
    on_rewind: str = RewindPolicy.KEEP.value

    def __post_init__(self) -> None:
        if bool(self.dsn) == bool(self.conn_id):
            raise PostgresSinkConfigError(
                f"PostgresSink(table={self.table!r}) needs exactly one of dsn=... (a conninfo string) "
                "or conn_id=... (an Airflow connection id)"
            )
        TableName.parse(self.table)
        key = (self.unique_key,) if isinstance(self.unique_key, str) else tuple(self.unique_key)
        if not all(isinstance(k, str) and k for k in key) or len(set(key)) != len(key):
            raise PostgresSinkConfigError(
                f"PostgresSink(table={self.table!r}): unique_key {self.unique_key!r} must be distinct "
                "column names"
            )
        object.__setattr__(self, "unique_key", key)
        policies = [p.value for p in RewindPolicy]
        if self.on_rewind not in policies:
            raise PostgresSinkConfigError(
                f"PostgresSink(table={self.table!r}): on_rewind={self.on_rewind!r} is unknown: use "
                f"{' or '.join(repr(p) for p in policies)}"
            )

    def create(self, store: ObjectStore, job_id: str, uid: str) -> PostgresTransactionalSink:
        return PostgresTransactionalSink(
            store,
            job_id,
            uid,
            table=self.table,
            dsn=self.dsn,
            conn_id=self.conn_id,
            unique_key=self.unique_key,
            on_rewind=RewindPolicy(self.on_rewind),
        )


class PostgresTransactionalSink(TransactionalSink[Any]):
    """Exactly-once output of one sink uid of one job into one table (see the module docstring).

    Cheap to construct (no connection: executors build one per subtask); every database operation
    opens its own connection, so a broken connection never outlives the call that saw it.
    ``kill`` is called at :data:`KILL_POINTS` (fault injection; production passes NO_KILL)."""

    def __init__(
        self,
        store: ObjectStore,
        job_id: str,
        uid: str,
        *,
        table: str,
        dsn: str | None = None,
        conn_id: str | None = None,
        unique_key: Sequence[str] = (),
        on_rewind: RewindPolicy = RewindPolicy.KEEP,
        kill: KillSwitch = NO_KILL,
        max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    ) -> None:
        super().__init__(uid)
        validate_name("job id", job_id)
        self.store = store
        self.job_id = job_id
        self.layout = SinkLayout(job_id, uid)
        self.table = TableName.parse(table)
        self.dsn, self.conn_id = dsn, conn_id
        self.unique_key = tuple(unique_key)
        self.on_rewind = on_rewind
        self.kill = kill
        self.max_rows_per_file = max_rows_per_file
        self.what = f"postgres sink {uid} (table {self.table})"

    # -- coordinator side: the database ----------------------------------------------------
    def committed_checkpoint_ids(self) -> frozenset[int]:
        """Checkpoints with a live (not retracted) commit row, of any generation."""
        with self._ledger("reading the commit table") as ledger:
            return ledger.committed_ids()

    def retracted_checkpoint_ids(self) -> frozenset[int]:
        """Checkpoints whose every commit was withdrawn by a restore."""
        with self._ledger("reading the commit table") as ledger:
            return ledger.retracted_ids()

    def retracted_ids(self) -> frozenset[int]:
        """``retracted_checkpoint_ids``, under the name the restore checks every sink by."""
        return self.retracted_checkpoint_ids()

    def retract_after(
        self, checkpoint_id: int, generation: int, reason: str, *, before: int | None = None
    ) -> tuple[int, ...]:
        """Withdraw the commits of generations below ``generation`` above ``checkpoint_id`` (and
        below ``before``, the restore's import); ``on_rewind`` decides what happens to their rows
        (module docstring). One transaction; idempotent."""
        overwrite = self.on_rewind is RewindPolicy.OVERWRITE
        with self._ledger(f"retraction after checkpoint {checkpoint_id}") as ledger:
            return ledger.retract_after(checkpoint_id, generation, reason, before, overwrite)

    def fence(self, generation: int) -> None:
        """On restore into ``generation``: refuse older generations' commits from now on. Returns
        once no older commit can land any more (it waits for one in progress)."""
        with self._ledger(f"fencing generation {generation}") as ledger:
            ledger.fence(generation)

    def fence_generation(self) -> int:
        """The newest generation that committed or fenced this sink (-1: none)."""
        with self._ledger("reading the fence") as ledger:
            return ledger.fence_generation()

    # -- hooks -----------------------------------------------------------------------------
    def _write(self, txn: Transaction[Any], batch: Any) -> None:
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        for b in batches:
            if not isinstance(b, pa.RecordBatch):
                raise TypeError(f"{self.what} accepts pyarrow RecordBatch or Table, got {type(b).__name__}")
            if txn.batches and not b.schema.equals(txn.batches[0].schema):
                raise ValueError(
                    f"{self.what}: batch schema {b.schema} differs from the transaction's "
                    f"{txn.batches[0].schema}"
                )
            if not txn.batches:
                self._check_schema(b.schema)
            self._check_keys(b)
            txn.batches.append(b)

    def _pre_commit(self, txn: Transaction[Any]) -> PreCommittedTxn:
        t = txn.id
        handles: list[StateHandle] = []
        rows = 0
        if txn.batches:
            table = pa.Table.from_batches(txn.batches)
            rows = table.num_rows
            for k in range(max(1, math.ceil(rows / self.max_rows_per_file))):
                part = table.slice(k * self.max_rows_per_file, self.max_rows_per_file)
                key = self.layout.staged_file(t.checkpoint_id, t.subtask, t.attempt, t.generation, k)
                sink = pa.BufferOutputStream()
                pq.write_table(part, sink, compression="snappy")
                data: bytes = sink.getvalue().to_pybytes()
                txn.staged.append(key)
                checksum = checksums.checksum_of(data)
                checksums.put_checked(self.store, key, data, checksum, create_only=True)
                handles.append(StateHandle(key, len(data), checksum))
        return PreCommittedTxn(
            t.sink_uid, t.checkpoint_id, t.subtask, t.attempt, t.generation, tuple(handles), rows
        )

    def _commit_checkpoint(self, checkpoint_id: int, records: tuple[PreCommittedTxn, ...]) -> bool:
        generation = records[0].generation
        digest = records_digest(records)
        with self._ledger(f"commit of checkpoint {checkpoint_id}") as ledger:
            if ledger.digest_of(checkpoint_id, generation) == digest:
                return False  # committed before (a retry after a lost response or a crash)
            rows = self._read_staged(checkpoint_id, records)
            self.kill(BEFORE_TRANSACTION, checkpoint_id)
            request = CommitRequest(
                self.job_id,
                self.uid,
                checkpoint_id,
                generation,
                digest,
                rows,
                self.unique_key,
                self.on_rewind is RewindPolicy.OVERWRITE,
            )
            done = ledger.commit(request, self.kill)
        self.kill(AFTER_COMMIT, checkpoint_id)
        return done

    def _discard(self, txn_id: TxnId, keys: Sequence[str]) -> None:
        """Delete the transaction's staged files. Never touches the database: committed rows are
        there, and the staged files are not needed once the commit row exists."""
        prefix = self.layout.txn_file_prefix(
            txn_id.checkpoint_id, txn_id.subtask, txn_id.attempt, txn_id.generation
        )
        for key in keys:
            if key.startswith(prefix):
                self.store.delete(key)

    # -- internals -------------------------------------------------------------------------
    def _check_schema(self, schema: pa.Schema) -> None:
        check_output_schema(schema, self.what)
        missing = [k for k in self.unique_key if k not in schema.names]
        if missing:
            raise PostgresSinkConfigError(
                f"{self.what}: unique_key column(s) {missing} are not output columns "
                f"({', '.join(schema.names)}): fix unique_key or the job's output"
            )

    def _check_keys(self, batch: pa.RecordBatch) -> None:
        """Refuse null ``unique_key`` values before anything is staged: an upsert matches keys with
        ``=``, under which NULL equals nothing, so a null key would be inserted again by every epoch
        that writes it instead of replacing its row (the table's key columns are NOT NULL as well:
        ``postgres_schema``, a second line of defence for records staged before this check)."""
        for column in self.unique_key:
            nulls = batch.column(column).null_count
            if nulls:
                raise PostgresSinkConfigError(
                    f"{self.what}: unique_key column {column!r} has {nulls} null value(s), which an "
                    "upsert by key cannot match; fill or drop those rows before the sink"
                )

    def _read_staged(self, checkpoint_id: int, records: Sequence[PreCommittedTxn]) -> pa.Table | None:
        """Every subtask's staged rows, verified (size, checksum), in subtask order."""
        tables = []
        for record in records:
            prefix = self.layout.txn_file_prefix(
                record.checkpoint_id, record.subtask, record.attempt, record.generation
            )
            for handle in record.files:
                problem = None
                if not handle.key.startswith(prefix):
                    problem = "lies outside its transaction"
                else:
                    try:
                        data = self.store.get(handle.key).data
                    except ObjectNotFound:
                        problem = "is missing"
                    else:
                        if len(data) != handle.size or checksums.mismatch(handle.checksum, data):
                            problem = f"has {len(data)} bytes not matching its checksum"
                if problem is not None:
                    raise SinkCommitError(
                        f"{self.what}: cannot commit checkpoint {checkpoint_id}: staged file "
                        f"{handle.key} {problem} (pre-commit recorded {handle.size} bytes, "
                        f"{handle.checksum}); restore from an earlier checkpoint"
                    )
                tables.append(read_parquet(data))
        if not tables:
            return None
        try:
            return pa.concat_tables(tables)
        except pa.ArrowInvalid:
            schemas = sorted({str(t.schema).replace("\n", ", ") for t in tables})
            raise SinkCommitError(
                f"{self.what}: cannot commit checkpoint {checkpoint_id}: its subtasks staged "
                f"different schemas ({' | '.join(schemas)}): make every subtask emit the same columns"
            ) from None

    @contextmanager
    def _ledger(self, action: str) -> Iterator[Ledger]:
        """A connection with the control tables in place; database errors as one-line errors."""
        conninfo = resolve_conninfo(self.dsn, self.conn_id, self.what)
        with connect(conninfo, sink=self.what, application_name=f"epochal {self.job_id}/{self.uid}") as conn:
            try:
                names = resolve_names(conn, self.table)
                ensure_control_tables(conn, names)
                yield Ledger(conn, names, self.job_id, self.uid)
            except psycopg.OperationalError as exc:
                raise PostgresSinkError(
                    PostgresFailure.INTERRUPTED,
                    f"{self.what}: {action} at {endpoint_of(conninfo)} was interrupted "
                    f"({first_line(exc)}): retry it (a commit that reached the database is "
                    "recognized by its commit row and never applied twice)",
                ) from None
            except psycopg.Error as exc:
                raise PostgresSinkError(
                    PostgresFailure.REJECTED,
                    f"{self.what}: {action} was refused by the database ({first_line(exc)}): fix the "
                    "job's output or the table; nothing was committed",
                ) from None


def records_digest(records: Sequence[PreCommittedTxn]) -> str:
    """SHA-256 of a checkpoint's records (canonical JSON): the identity of one commit."""
    ordered = sorted(records, key=lambda r: (r.subtask, r.attempt))
    text = json.dumps([r.to_json() for r in ordered], sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
