"""ParquetTransactionalSink: the two-phase-commit protocol (``state_store.core.twophase``) over an
ObjectStore, writing Parquet files and publishing them through the sink's commit log.

Steps (one subtask of the sink, then the coordinator)::

    begin_transaction(n, subtask, attempt, gen)  nothing written
    write(txn, batch)                            Arrow batches buffered in memory
    pre_commit(txn)                              create-only txn-<n>/<subtask>-g<gen>-a<attempt>-<k>.parquet,
                                                 one file per ``max_rows_per_file`` rows -> PreCommittedTxn
    commit(records of n)                         create-only _commits/<n>.json (see commit_log)
    abort / recover_and_abort(record)            delete that transaction's staged files, never a committed one

Staged files are written create-only: a retry of the same attempt with the same data is a no-op,
a retry with other data fails (use a new attempt number), and a zombie attempt can never replace
another attempt's file because the attempt and generation are part of the name.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.sinks.commit_log import CommitLog
from state_store.core import checksums
from state_store.core.codec import ManifestError
from state_store.core.manifests import StateHandle
from state_store.core.ports import ObjectStore
from state_store.core.twophase import PreCommittedTxn, Transaction, TransactionalSink, TxnId

DEFAULT_MAX_ROWS_PER_FILE = 1_000_000


class ParquetTransactionalSink(TransactionalSink[Any]):
    """Exactly-once Parquet output of one sink uid of one job (see module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        job_id: str,
        uid: str,
        *,
        max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
        compression: str = "snappy",
    ) -> None:
        super().__init__(uid)
        if max_rows_per_file < 1:
            raise ValueError(f"max_rows_per_file must be at least 1, got {max_rows_per_file}")
        self.store = store
        self.job_id = job_id
        self.log = CommitLog(store, job_id, uid)
        self.max_rows_per_file = max_rows_per_file
        self.compression = compression

    def committed_checkpoint_ids(self) -> frozenset[int]:
        """Checkpoints whose commit entry exists; the newest one only if it decodes (a torn commit
        write, the only one in progress, is not a commit: it is committed again)."""
        ids = self.log.committed_ids()
        if ids:
            try:
                self.log.read(ids[-1])
            except ManifestError:
                ids = ids[:-1]
        return frozenset(ids)

    def retract_after(
        self, checkpoint_id: int, generation: int, reason: str, *, before: int | None = None
    ) -> tuple[int, ...]:
        """Withdraw every committed checkpoint above ``checkpoint_id`` (and below ``before``, the
        restore's import: the epochs after it are never withdrawn); see ``commit_log``."""
        ids = [n for n in self.log.committed_ids() if n > checkpoint_id and (before is None or n < before)]
        return tuple(n for n in ids if self.log.retract(n, generation, reason))

    def retracted_ids(self) -> frozenset[int]:
        """Checkpoints whose committed output a forced restore withdrew (see ``commit_log``)."""
        return self.log.retracted_ids()

    def fence(self, generation: int) -> None:
        """On restore into ``generation``: refuse older generations' commits from now on.

        Call it after ``recover_and_commit`` of the restored checkpoint's records (those carry
        the previous generation and must still be committed).
        """
        self.log.fence(generation)

    # -- hooks -----------------------------------------------------------------------------
    def _write(self, txn: Transaction[Any], batch: Any) -> None:
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        for b in batches:
            if not isinstance(b, pa.RecordBatch):
                raise TypeError(
                    f"sink {self.uid} accepts pyarrow RecordBatch or Table, got {type(b).__name__}"
                )
            if txn.batches and not b.schema.equals(txn.batches[0].schema):
                raise ValueError(
                    f"sink {self.uid}: batch schema {b.schema} differs from the transaction's "
                    f"{txn.batches[0].schema}"
                )
        txn.batches.extend(batches)

    def _pre_commit(self, txn: Transaction[Any]) -> PreCommittedTxn:
        t = txn.id
        handles: list[StateHandle] = []
        rows = 0
        if txn.batches:
            table = pa.Table.from_batches(txn.batches)
            rows = table.num_rows
            chunks = max(1, math.ceil(rows / self.max_rows_per_file))
            for k in range(chunks):
                part = table.slice(k * self.max_rows_per_file, self.max_rows_per_file)
                key = self.log.layout.staged_file(t.checkpoint_id, t.subtask, t.attempt, t.generation, k)
                data = self._encode(part)
                txn.staged.append(key)
                checksum = checksums.checksum_of(data)
                checksums.put_checked(self.store, key, data, checksum, create_only=True)
                handles.append(StateHandle(key, len(data), checksum))
        return PreCommittedTxn(
            t.sink_uid, t.checkpoint_id, t.subtask, t.attempt, t.generation, tuple(handles), rows
        )

    def _commit_checkpoint(self, checkpoint_id: int, records: tuple[PreCommittedTxn, ...]) -> bool:
        return self.log.commit(checkpoint_id, records)

    def _discard(self, txn_id: TxnId, keys: Sequence[str]) -> None:
        entry = self.log.read(txn_id.checkpoint_id)
        visible = {h.key for h in entry.files} if entry is not None else set()
        prefix = self.log.layout.txn_file_prefix(
            txn_id.checkpoint_id, txn_id.subtask, txn_id.attempt, txn_id.generation
        )
        for key in keys:
            if key not in visible and key.startswith(prefix):
                self.store.delete(key)

    def _encode(self, table: Any) -> bytes:
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression=self.compression)
        data: bytes = sink.getvalue().to_pybytes()
        return data
