"""Staged files of an Iceberg sink transaction: Parquet in the job's store, written create-only,
read back (verified) by the commit.

Keys (``SinkLayout``, as for the Parquet and Postgres sinks)::

    <job>/sinks/<uid>/txn-<n:010d>/<subtask:05d>-g<gen>-a<attempt>-<k>.parquet

No name is ever written twice: checkpoint, subtask, generation and attempt are in it and the write
is create-only, so no zombie, retry or other attempt can replace a file a record names. Each file
is listed with its size and checksum in the record (and so in the subtask's ack); the commit reads
it back only if both still match.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.sinks.commit_log import SinkLayout
from state_store.core import checksums
from state_store.core.manifests import StateHandle
from state_store.core.ports import ObjectNotFound, ObjectStore
from state_store.core.twophase import PreCommittedTxn, SinkCommitError, TxnId
from state_store.formats.arrow_bytes import read_parquet


class Stager:
    """Writes, reads and deletes one sink's staged files in the job's store."""

    def __init__(self, store: ObjectStore, layout: SinkLayout, what: str) -> None:
        self.store = store
        self.layout = layout
        self.what = what  # how errors name the sink and its table

    def prefix(self, txn: TxnId) -> str:
        return self.layout.txn_file_prefix(txn.checkpoint_id, txn.subtask, txn.attempt, txn.generation)

    def write(
        self, txn: TxnId, data: pa.Table, max_rows_per_file: int, on_key: Callable[[str], None]
    ) -> list[StateHandle]:
        """Write ``data`` as files of at most ``max_rows_per_file`` rows; ``on_key`` hears each key
        before its file is written (so an abort after a failure deletes it)."""
        handles = []
        for k in range(max(1, math.ceil(data.num_rows / max_rows_per_file))):
            key = self.layout.staged_file(txn.checkpoint_id, txn.subtask, txn.attempt, txn.generation, k)
            sink = pa.BufferOutputStream()
            pq.write_table(data.slice(k * max_rows_per_file, max_rows_per_file), sink, compression="snappy")
            payload: bytes = sink.getvalue().to_pybytes()
            on_key(key)
            checksum = checksums.checksum_of(payload)
            checksums.put_checked(self.store, key, payload, checksum, create_only=True)
            handles.append(StateHandle(key, len(payload), checksum))
        return handles

    def read(self, checkpoint_id: int, records: Sequence[PreCommittedTxn]) -> list[pa.Table]:
        """Every subtask's staged rows, verified (prefix, size, checksum), in record order."""
        tables = []
        for record in records:
            prefix = self.prefix(record.txn_id)
            for handle in record.files:
                problem = None
                if not handle.key.startswith(prefix):
                    problem = "lies outside its transaction"
                else:
                    try:
                        payload = self.store.get(handle.key).data
                    except ObjectNotFound:
                        problem = "is missing"
                    else:
                        if len(payload) != handle.size or checksums.mismatch(handle.checksum, payload):
                            problem = f"has {len(payload)} bytes not matching its checksum"
                if problem is not None:
                    raise SinkCommitError(
                        f"{self.what}: cannot commit checkpoint {checkpoint_id}: staged file "
                        f"{handle.key} {problem} (pre-commit recorded {handle.size} bytes, "
                        f"{handle.checksum}); restore from an earlier checkpoint"
                    )
                tables.append(read_parquet(payload))
        return tables

    def delete(self, txn: TxnId, keys: Sequence[str]) -> None:
        """Delete the keys of ``txn`` among ``keys`` (missing ones are fine)."""
        prefix = self.prefix(txn)
        for key in keys:
            if key.startswith(prefix):
                self.store.delete(key)
