"""The Iceberg commits a sink makes: one per checkpoint (append or upsert), a fence, a rewind.

Each is ONE catalog commit built on a :func:`~spark_jobs.sinks.iceberg_catalog.no_retry` view of
the table as the sink read it, holding at least one snapshot (so it fails if anything committed to
the table meanwhile) whose summary carries the sink's commit info, and the sink's table properties
(``iceberg_ledger``):

* data, ``append``: one append snapshot of all subtasks' rows (pyiceberg writes the data files:
  field ids, statistics and the table's partition spec are its own); an empty checkpoint is an
  empty append snapshot, which only moves the ledger;
* data, ``upsert``: pyiceberg's ``Transaction.upsert`` by ``unique_key`` (the last row of a key in
  the checkpoint wins, in subtask then row order): its overwrite snapshot (copy-on-write: files
  holding matched keys rewritten) and append snapshots, all in the one catalog commit -- the table's
  current state never shows one without the others; an upsert that changes nothing adds an empty
  snapshot instead;
* fence: an empty append snapshot;
* rewind: one overwrite snapshot deleting and re-adding data files (``iceberg_rewind``).

pyiceberg writes a data commit's files into the table's ``data/`` folder before the catalog
commit; a commit that then fails or crashes leaves them unreferenced (invisible to every reader;
Iceberg's orphan-file removal deletes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.sinks.delta_ledger import LineagePosition, SinkCommitInfo
from spark_jobs.sinks.delta_rewind import RewindRefused
from spark_jobs.sinks.iceberg_catalog import no_retry
from spark_jobs.sinks.iceberg_ledger import SinkKeys, summary_of
from spark_jobs.sinks.iceberg_rewind import NO_ROWS, RewindPlan

_ROW = "__epochal_row__"


def retryable() -> tuple[type[BaseException], ...]:
    """Failures after which the commit did not land, or may have: read the table, decide again."""
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

    return (CommitFailedException, CommitStateUnknownException)


def last_per_key(data: pa.Table, keys: Sequence[str]) -> pa.Table:
    """One row per key: the last one in ``data``'s order (subtask, then row order)."""
    if data.num_rows == 0:
        return data
    indexed = data.append_column(_ROW, pa.array(range(data.num_rows), pa.int64()))
    last = indexed.group_by(list(keys), use_threads=False).aggregate([(_ROW, "max")])
    rows = pc.sort_indices(last[f"{_ROW}_max"])
    return data.take(pc.take(last[f"{_ROW}_max"], rows))


def _empty_snapshot(tx: Any, summary: dict[str, str]) -> None:
    with tx.update_snapshot(snapshot_properties=summary).fast_append():
        pass


def _adds_snapshot(tx: Any, table: Any) -> bool:
    return bool(tx.table_metadata.current_snapshot_id != table.metadata.current_snapshot_id)


def data_transaction(
    table: Any,
    data: pa.Table | None,
    info: SinkCommitInfo,
    position: LineagePosition,
    keys: SinkKeys,
    unique_key: Sequence[str],
) -> Any:
    """The transaction of one checkpoint's data commit (``unique_key`` empty: append)."""
    tx = no_retry(table).transaction()
    summary = summary_of(info)
    if data is not None and data.num_rows:
        if unique_key:
            tx.upsert(last_per_key(data, unique_key), join_cols=list(unique_key), snapshot_properties=summary)
        else:
            tx.append(data, snapshot_properties=summary)
    if not _adds_snapshot(tx, table):
        _empty_snapshot(tx, summary)
    tx.set_properties({keys.commits: str(position.version)})
    return tx


def fence_transaction(table: Any, info: SinkCommitInfo, keys: SinkKeys) -> Any:
    tx = no_retry(table).transaction()
    _empty_snapshot(tx, summary_of(info))
    tx.set_properties({keys.fence: str(info.generation)})
    return tx


def live_files(table: Any, snapshot_id: int, name: str) -> dict[str, Any]:
    """The data files of a snapshot by path (:data:`NO_ROWS`: none). Delete files (written by
    another engine's merge-on-read) refuse a rewind: restoring data files would not restore them."""
    if snapshot_id == NO_ROWS:
        return {}
    files: dict[str, Any] = {}
    for task in table.scan(snapshot_id=snapshot_id).plan_files():
        if task.delete_files:
            raise RewindRefused(
                f"Iceberg table {name}: snapshot {snapshot_id} has delete files (merge-on-read "
                "deletes by another engine), which on_rewind='overwrite' cannot restore; compact the "
                "table first, or use on_rewind='keep'"
            )
        files[task.file.file_path] = task.file
    return files


def rewind_transaction(
    table: Any, plan: RewindPlan, info: SinkCommitInfo, keys: SinkKeys, fence: int, name: str
) -> Any:
    """One overwrite snapshot giving the table the data files of ``plan.target``."""
    current = table.metadata.current_snapshot_id
    now = live_files(table, current, name) if current is not None else {}
    target = live_files(table, plan.target, name)
    back = [target[p] for p in sorted(target.keys() - now.keys())]
    gone = [p for p in back if not table.io.new_input(p.file_path).exists()]
    if gone:
        raise RewindRefused(
            f"Iceberg table {name}: data file {gone[0].file_path} of snapshot {plan.target} "
            "was deleted (snapshot expiry or orphan removal), so the table cannot be rewound to it: "
            "remove the rows of the rewound checkpoints yourself, or use on_rewind='keep'"
        )
    tx = no_retry(table).transaction()
    summary = summary_of(info)
    drop = [now[p] for p in sorted(now.keys() - target.keys())]
    if drop or back:
        with tx.update_snapshot(snapshot_properties=summary).overwrite() as overwrite:
            for data_file in drop:
                overwrite.delete_data_file(data_file)
            for data_file in back:
                overwrite.append_data_file(data_file)
    else:
        _empty_snapshot(tx, summary)
    tx.set_properties({keys.fence: str(fence), keys.rewind: str(info.generation)})
    return tx
