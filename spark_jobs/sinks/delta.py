"""DeltaTransactionalSink: the two-phase-commit protocol (``state_store.core.twophase``) into a Delta
Lake table (delta-rs, no JVM). Exactly once: every checkpoint's rows appear in the table exactly
once, in one Delta commit, and only after the checkpoint completed.

Steps (one subtask of the sink, then the coordinator)::

    begin_transaction(n, subtask, attempt, gen)  nothing written
    write(txn, batch)                            schema checked against the table; Arrow batches buffered
    pre_commit(txn)                              staged Parquet files in the table folder, not in the log
                                                 (``delta_staging``) -> PreCommittedTxn
    commit(records of n)                         1. read the table's ledger (``delta_ledger``): n already
                                                    committed -> verify it is the same commit, no-op;
                                                    generation below the fence -> FencedTransactionError
                                                 2. verify every staged file (size, footer)
                                                 3. ONE Delta commit of all subtasks' files (append: add
                                                    actions; merge: a MERGE by unique_key) carrying the app
                                                    transactions and commit info -- **the visibility point**
                                                 4. merge mode: delete the staged inputs
    abort / recover_and_abort(record)            delete that transaction's staged files that no commit
                                                 can still use (``_discard``)

Each step may be retried, in this process or after a crash: the decision in step 1 is read from
the table's own log, never from a local marker, and a commit racing another commit of the same sink
fails in delta-rs's conflict checker and is decided again. So does a commit that finds a staged file
gone (a racing commit of the same checkpoint merged and deleted it): it reloads the ledger and
returns "already committed", or, still uncommitted, raises one line naming the file.

Fencing (``fence(g)``, on restore): stored twice, because a fence is a commit and a commit needs a
table. (1) In the job's store (``<job>/sinks/<uid>/_fences/``, the Parquet sink's documents): it
exists before the table does, and every committer of the job reads the job store. (2) As the fence
app transaction in the table (when it exists): atomic with commits -- a zombie's commit racing the
fence conflicts with it and, decided again, is refused. Before the table exists, the commit that
creates it and the fence meet through create-claims in the job store (``delta_claims``). A commit of
a generation below either raises :class:`FencedTransactionError` and changes nothing. Invariant:
after ``fence(g)`` returns, no commit of a generation below g lands in the table.

Rewind (``retract_after``, on a restore to an older checkpoint): ``on_rewind="keep"`` (default)
leaves the rows the rewound run committed after that checkpoint in the table; the restored run
commits its own on top (append mode: those epochs' rows twice; merge mode: upserted again by key).
``on_rewind="overwrite"`` withdraws them in one commit first (``delta_rewind``), so the table ends as
a run that never went past the checkpoint. Either way the restored run's checkpoints commit: a
commit is skipped only if the table holds that very checkpoint of that generation (``delta_ledger``),
never because its id is below the highest committed id.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import pyarrow as pa
from deltalake import Transaction
from deltalake.exceptions import CommitFailedError, DeltaError

from spark_jobs.sinks.commit_log import CommitLog
from spark_jobs.sinks.delta_claims import CreateClaims
from spark_jobs.sinks.delta_ledger import (
    CommitKind,
    LedgerState,
    LineagePosition,
    SinkAppIds,
    SinkCommitInfo,
    digest_of,
    read_state,
    verify_committed,
)
from spark_jobs.sinks.delta_location import DeltaLocation
from spark_jobs.sinks.delta_options import DeltaSinkOptions
from spark_jobs.sinks.delta_publish import Publisher, SchemaChanged, load, properties
from spark_jobs.sinks.delta_restore import Restores
from spark_jobs.sinks.delta_schema import DeltaSchemaMismatch, arrow_of, check_batch, conform, merged
from spark_jobs.sinks.delta_staging import StagedFileMissing, Stager, belongs_to
from state_store.core.ports import NO_KILL, KillSwitch, ObjectStore
from state_store.core.twophase import (
    FencedTransactionError,
    PreCommittedTxn,
    SinkCommitError,
    TransactionalSink,
    TxnId,
)
from state_store.core.twophase import (
    Transaction as SinkTransaction,
)

log = logging.getLogger(__name__)

AFTER_STAGE = "delta_after_stage"  # pre_commit: every staged file written, no record returned
BEFORE_DELTA_COMMIT = "delta_before_commit"  # commit: decided and verified, nothing in the log
AFTER_DELTA_COMMIT = "delta_after_commit"  # commit: in the log, staged merge inputs not deleted
KILL_POINTS = (AFTER_STAGE, BEFORE_DELTA_COMMIT, AFTER_DELTA_COMMIT)

_RETRYABLE = (CommitFailedError, DeltaError, SchemaChanged)


class DeltaTransactionalSink(TransactionalSink[Any]):
    """Exactly-once output of one sink uid of one job into one Delta table (module docstring)."""

    stages_in_job_store = False  # staged files live in the table folder; step 2 of commit verifies them

    def __init__(
        self,
        store: ObjectStore,
        job_id: str,
        uid: str,
        options: DeltaSinkOptions,
        *,
        storage_options: Mapping[str, str] | None = None,
        kill: KillSwitch = NO_KILL,
        commit_attempts: int = 6,
        claim_wait_s: float = 30.0,
    ) -> None:
        super().__init__(uid)
        self.options = options
        self.location = DeltaLocation.parse(options.table_uri, storage_options)
        self.ids = SinkAppIds(job_id, uid)
        self.fences = CommitLog(store, job_id, uid)  # the job-store fence documents only
        self.claims = CreateClaims(store, job_id, uid)  # before the table exists (``delta_claims``)
        self.claim_wait_s = claim_wait_s
        self.kill = kill
        self.commit_attempts = max(1, commit_attempts)
        self._stager: Stager | None = None
        self._table_checked = False
        self._expected: Any = None  # the table's Delta schema at the first write (None: no table)

    @property
    def name(self) -> str:
        return self.location.uri

    @property
    def stager(self) -> Stager:
        if self._stager is None:
            files = self.location.files()
            self._stager = Stager(files, self.name, self.options.partition_by, self.options.compression)
        return self._stager

    def publisher(self) -> Publisher:
        o = self.options
        return Publisher(
            self.location,
            self.stager,
            mode=o.mode,
            unique_key=o.unique_key,
            partition_by=o.partition_by,
            evolve=o.evolve,
            kill=self.kill,
        )

    # -- reading the ledger ----------------------------------------------------------------
    def ledger(self) -> tuple[Any, LedgerState]:
        table = load(self.location)
        return table, read_state(table, self.ids)

    def newest_generation(self, state: LedgerState) -> int:
        """The fence: the newest generation of the table's ledger and of the job store's fences."""
        return max(state.newest_generation, self.fences.newest_generation())

    def committed_checkpoint_ids(self) -> AbstractSet[int]:
        """Checkpoint ids committed in the newest generation's view (``LedgerState.committed_ids``)."""
        _, state = self.ledger()
        return state.committed_ids(self.newest_generation(state))

    # -- restore side (``delta_restore``) ---------------------------------------------------
    def fence(self, generation: int) -> None:
        """On restore into ``generation``: refuse older generations' commits from now on -- once it
        returns, none lands (it may wait up to ``claim_wait_s`` for a creation of the table an older
        generation claimed: ``delta_claims``). Call it after ``recover_and_commit`` of the restored
        checkpoint's records (they carry the previous generation and must still be committed).
        Idempotent."""
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
        return Restores(
            self.location,
            self.ids,
            self.fences,
            self.options.on_rewind,
            self.publisher,
            self.commit_attempts,
            self.claims,
            self.claim_wait_s,
        )

    # -- hooks -----------------------------------------------------------------------------
    def _write(self, txn: SinkTransaction[Any], batch: Any) -> None:
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        for b in batches:
            if not isinstance(b, pa.RecordBatch):
                raise TypeError(
                    f"sink {self.uid} accepts pyarrow RecordBatch or Table, got {type(b).__name__}"
                )
            self._check_batch(txn, b)
        txn.batches.extend(batches)

    def _check_batch(self, txn: SinkTransaction[Any], batch: pa.RecordBatch) -> None:
        o = self.options
        expected = self._table_schema()
        if expected is None and txn.batches:
            check_batch(self.name, merged(None, [txn.batches[0].schema], self.name), batch.schema, o.evolve)
        elif expected is not None:
            check_batch(self.name, expected, batch.schema, o.evolve)
        for column in (*o.partition_by, *o.unique_key):
            if column not in batch.schema.names:
                raise DeltaSchemaMismatch(
                    f"Delta table {self.name}: the batch lacks column {column!r} named in the sink's "
                    "partition_by/unique_key; add it to the sink's input, or fix the sink's options"
                )
        for column in o.unique_key:
            if batch.column(column).null_count:
                raise DeltaSchemaMismatch(
                    f"Delta table {self.name}: unique_key column {column!r} has nulls, which a merge "
                    "cannot match; fill or drop those rows before the sink"
                )

    def _table_schema(self) -> Any:
        if not self._table_checked:
            table = load(self.location)
            if table is not None:
                self.publisher().check_layout(table)
                self._expected = table.schema()
            self._table_checked = True
        return self._expected

    def _pre_commit(self, txn: SinkTransaction[Any]) -> PreCommittedTxn:
        t = txn.id
        o = self.options
        handles: tuple[Any, ...] = ()
        rows = 0
        if txn.batches:
            expected = self._table_schema()
            schemas = [b.schema for b in txn.batches]
            schema = (
                expected if expected is not None and not o.evolve else merged(expected, schemas, self.name)
            )
            tables = [pa.Table.from_batches([b]) for b in txn.batches]
            data = conform(
                pa.concat_tables(tables, promote_options="permissive"), arrow_of(schema), self.name
            )
            rows = data.num_rows
            handles = tuple(
                self.stager.write(
                    t,
                    data,
                    schema,
                    split_partitions=o.mode == "append",
                    max_rows_per_file=o.max_rows_per_file,
                    on_key=txn.staged.append,
                )
            )
        self.kill(AFTER_STAGE, t.checkpoint_id)
        return PreCommittedTxn(t.sink_uid, t.checkpoint_id, t.subtask, t.attempt, t.generation, handles, rows)

    def _commit_checkpoint(self, checkpoint_id: int, records: tuple[PreCommittedTxn, ...]) -> bool:
        self._check_records(checkpoint_id, records)
        position = LineagePosition(records[0].generation, checkpoint_id)
        digest = digest_of(records)
        for attempt in range(self.commit_attempts):
            table, state = self.ledger()
            if self._decided(table, state, position, digest, records):
                return False
            self.location.check_commit_safety()
            try:
                recorded = self._publish(table, position, digest, records)
            except StagedFileMissing:
                # a racing commit of this checkpoint may have merged and deleted the staged inputs
                # after our decision: decide again on the table as it is now
                table, state = self.ledger()
                if self._decided(table, state, position, digest, records):
                    return False
                raise  # still uncommitted: one line naming the file and the checkpoint
            except _RETRYABLE as exc:
                if attempt + 1 == self.commit_attempts:
                    raise SinkCommitError(
                        f"sink {self.uid}: could not commit {position} into Delta table {self.name} in "
                        f"{self.commit_attempts} attempts (last: {exc}); retry the notify step"
                    ) from exc
                log.info("Delta table %s: commit of %s decided again (%s)", self.name, position, exc)
                continue
            self.kill(AFTER_DELTA_COMMIT, checkpoint_id)
            self._cleanup(records)
            return recorded
        raise AssertionError("unreachable")  # the loop returns or raises

    def _decided(
        self,
        table: Any,
        state: LedgerState,
        position: LineagePosition,
        digest: str,
        records: Sequence[PreCommittedTxn],
    ) -> bool:
        """Step 1 of a commit: True if ``position`` is committed already (verified to be these
        records); FencedTransactionError if a newer generation fenced it; False: commit it."""
        newest = self.newest_generation(state)
        if state.is_committed(position):
            if any(r.files for r in records):  # an empty checkpoint may have left no commit
                verify_committed(table, self.ids, position, digest, newest, self.name)
            self._cleanup(records)
            return True
        if position.generation < newest:
            raise self._fenced(position, newest)
        return False

    def _publish(
        self, table: Any, position: LineagePosition, digest: str, records: Sequence[PreCommittedTxn]
    ) -> bool:
        """Steps 2-3 of a commit: verify the staged files, then the one Delta commit. A commit that
        creates the table first claims the creation and reads the fences again (``delta_claims``)."""
        checkpoint_id = position.checkpoint_id
        files = self.stager.inspect([h for r in records for h in r.files], checkpoint_id)
        info = SinkCommitInfo(
            CommitKind.DATA,
            self.ids.job_id,
            self.uid,
            position.generation,
            checkpoint_id,
            sum(r.rows for r in records),
            len(files),
            digest,
        )
        txns = [
            Transaction(self.ids.commits, position.version),
            Transaction(self.ids.fence, position.generation),
        ]
        self.kill(BEFORE_DELTA_COMMIT, checkpoint_id)
        claimed: list[str] = []

        def claim_creation(schema: Any) -> None:
            claimed.append(
                self.claims.claim(
                    position.generation, checkpoint_id, schema.to_json(), self.options.partition_by
                )
            )
            newest = self.fences.newest_generation()  # read after the claim is written
            if position.generation < newest:
                raise self._fenced(position, newest)

        try:
            return self.publisher().data(table, files, properties(info, txns), checkpoint_id, claim_creation)
        finally:
            for key in claimed:
                self.claims.release(key)

    def _fenced(self, position: LineagePosition, newest: int) -> FencedTransactionError:
        return FencedTransactionError(
            f"sink {self.uid}: refusing to commit {position} into Delta table {self.name}: "
            f"generation {newest} already committed or fenced it (a zombie of an earlier run); "
            "its staged files are removed by abort, or by VACUUM"
        )

    def _check_records(self, checkpoint_id: int, records: Sequence[PreCommittedTxn]) -> None:
        if not records:
            raise SinkCommitError(f"sink {self.uid}: no records to commit for checkpoint {checkpoint_id}")
        for r in records:
            stray = [h.key for h in r.files if not belongs_to(h.key, r.txn_id)]
            if stray:
                raise SinkCommitError(f"record of {r.txn_id} lists files outside its transaction: {stray}")

    def _cleanup(self, records: Sequence[PreCommittedTxn]) -> None:
        if self.options.mode == "merge":  # the staged files were the merge's input, never in the log
            self.stager.delete([h.key for r in records for h in r.files])

    def _discard(self, txn_id: TxnId, keys: Sequence[str]) -> None:
        """Delete the staged files of ``txn_id`` that no commit can still use.

        Invariant: abort never deletes a file that a commit lists or may still list. Who may delete:

        * the owner of a live transaction that never produced a record (open, or failed before its
          pre-commit returned): nobody else knows its files;
        * the owner of a live pre-committed transaction (its checkpoint will not complete: the
          owner aborts it instead of committing it) -- except, in append mode, once its
          checkpoint of its generation is committed (a committed file stays for time travel);
        * another process, from a record (``recover_and_abort``), only if that record's commit can
          never land: its generation is below the fence -- which this call first settles
          (``fence(newest)``, idempotent: after it no commit of an older generation lands) -- and,
          in append mode, its checkpoint is not committed; or, in merge mode, its checkpoint is
          committed (the merge read its inputs before committing). A record of the newest
          generation whose checkpoint is not committed may be being committed right now (a
          verified file deleted under a running commit would be listed by a table version without
          its data), so its files are kept: invisible to readers, removed by an abort after the
          next fence, or by a VACUUM that removes untracked files (delta-rs: ``full=True``)."""
        mine = [k for k in keys if belongs_to(k, txn_id)]
        if not mine:
            return
        live = self._live.get(txn_id)  # twophase.abort calls this before it forgets the txn
        if live is not None and live.record is None:
            self.stager.delete(mine)
            return
        position = LineagePosition(txn_id.generation, txn_id.checkpoint_id)
        _, state = self.ledger()
        if live is None:
            newest = self.newest_generation(state)
            if position.generation < newest:
                self.fence(newest)
                _, state = self.ledger()
            elif not state.is_committed(position):
                log.info(
                    "Delta table %s: staged files of %s kept: its checkpoint may still be committed "
                    "(abort it after the next fence, or let VACUUM remove them)",
                    self.name,
                    txn_id,
                )
                return
        if self.options.mode == "append" and state.is_committed(position):
            return
        self.stager.delete(mine)
