"""What an Iceberg table says about one Epochal sink: three table properties and its snapshots'
summaries.

Table properties (one value per sink of one job; kept in the table metadata, so they survive
snapshot expiry)::

    epochal/<job>/<uid>/commits   lineage position of the newest data commit
                                  (generation * 10**10 + checkpoint id)
    epochal/<job>/<uid>/fence     the newest generation fenced
    epochal/<job>/<uid>/rewind    the newest generation that rewound the table

(``/`` separates the parts because job ids and uids may contain dots.) A data commit sets the
first, a fence commit the second, a rewind commit the last two. Every commit of the sink also adds
a snapshot -- an empty one when it has no rows to add -- so its requirement "branch main is still
at the snapshot I read" makes any two commits of one sink that race conflict in the catalog's
compare-and-swap; the loser reads the table again and decides again (``iceberg_catalog``): "already
committed? fenced?" and the commit are one atomic step.

Each such snapshot's summary carries ``epochal`` = the canonical JSON of :class:`SinkCommitInfo`
(the Delta sink's commit info: job, sink, kind, generation, checkpoint, rows, files, a digest of the
committed records; for a rewind the withdrawn ids and, in ``restored_version``, the snapshot id whose
data files it restored, -1 for none). The decision never needs it; it tells a retried commit (same
digest: a no-op) from another one of the same checkpoint (a conflict), plans a rewind, and is the
audit trail (``table.snapshots()``).

Invariant (lineage order, as in ``delta_ledger``): along the ancestors of the current snapshot, the
sink's data snapshots have non-decreasing lineage positions (equal only within one commit: an upsert
is several snapshots of one catalog commit). Hence *(g, n) is committed iff position(g, n) <= the
commits property* for every checkpoint of the job's lineage.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from spark_jobs.sinks.delta_ledger import CommitKind, LedgerState, LineagePosition, SinkCommitInfo
from state_store.core.codec import ManifestError, canonical_json, from_jsonable, to_jsonable
from state_store.core.twophase import FencedTransactionError, SinkCommitConflict, SinkCommitError

log = logging.getLogger(__name__)

SUMMARY_KEY = "epochal"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class SinkKeys:
    """The table property names of one sink of one job (module docstring)."""

    job_id: str
    uid: str

    @property
    def prefix(self) -> str:
        return f"epochal/{self.job_id}/{self.uid}"

    @property
    def commits(self) -> str:
        return f"{self.prefix}/commits"

    @property
    def fence(self) -> str:
        return f"{self.prefix}/fence"

    @property
    def rewind(self) -> str:
        return f"{self.prefix}/rewind"


def _int_property(table: Any, key: str, name: str) -> int | None:
    raw = table.properties.get(key)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise SinkCommitError(
            f"Iceberg table {name}: property {key!r} is {raw!r}, not an integer (edited by hand?); "
            "restore it from the table's metadata history or remove it to start the sink afresh"
        ) from None


def read_state(table: Any, keys: SinkKeys, name: str) -> LedgerState:
    """The sink's ledger in ``table`` (a pyiceberg ``Table`` or None: no table yet).
    ``table_version`` is the current snapshot id (None without one)."""
    if table is None:
        return LedgerState(None, None)
    committed = _int_property(table, keys.commits, name)
    fenced = _int_property(table, keys.fence, name)
    rewound = _int_property(table, keys.rewind, name)
    return LedgerState(
        table.metadata.current_snapshot_id,
        LineagePosition.of_version(committed) if committed is not None and committed > 0 else None,
        -1 if fenced is None else fenced,
        -1 if rewound is None else rewound,
    )


def summary_of(info: SinkCommitInfo) -> dict[str, str]:
    """The snapshot summary properties of one commit of the sink."""
    return {SUMMARY_KEY: canonical_json(to_jsonable(info)).decode()}


def info_of(summary: Any, keys: SinkKeys) -> SinkCommitInfo | None:
    """This sink's commit info in a snapshot summary, or None (another writer or sink, or an entry
    this version cannot read -- treated as another writer's snapshot)."""
    raw = summary.get(SUMMARY_KEY) if summary is not None else None
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or value.get("sink_uid") != keys.uid or value.get("job_id") != keys.job_id:
        return None
    if not isinstance(value.get("format_version"), int) or value["format_version"] > FORMAT_VERSION:
        return None
    try:
        return from_jsonable(SinkCommitInfo, value, what=f"snapshot summary of sink {keys.uid}")
    except ManifestError:
        return None


@dataclass(frozen=True, slots=True)
class LoggedSnapshot:
    """One ancestor of the current snapshot; ``info`` None: not a snapshot of this sink.
    ``changes_rows``: it added or removed rows (per its summary)."""

    snapshot_id: int
    parent_id: int | None
    operation: str
    info: SinkCommitInfo | None
    changes_rows: bool


_ROW_CHANGES = (
    "added-records",
    "deleted-records",
    "added-data-files",
    "deleted-data-files",
    "added-delete-files",
    "removed-delete-files",
)


def _changes_rows(summary: Any) -> bool:
    for key in _ROW_CHANGES:
        try:
            if int(summary.get(key) or 0):
                return True
        except ValueError:
            return True  # unreadable: assume it did
    return False


def newest_first(table: Any, keys: SinkKeys) -> Iterator[LoggedSnapshot]:
    """The current snapshot and its ancestors, newest first. Ends at the first snapshot, or at one
    whose parent was expired (its ``parent_id`` then names a snapshot the table no longer has)."""
    from pyiceberg.table.snapshots import ancestors_of

    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary
        yield LoggedSnapshot(
            snapshot.snapshot_id,
            snapshot.parent_snapshot_id,
            str(summary.operation.value) if summary is not None else "",
            info_of(summary, keys),
            summary is not None and _changes_rows(summary),
        )


def verify_committed(
    table: Any, keys: SinkKeys, position: LineagePosition, digest: str, newest: int, name: str
) -> None:
    """Called when the ledger says ``position`` is committed: the table's snapshot of it holds
    exactly the records of ``digest``, else raise -- another attempt's commit: SinkCommitConflict;
    none, though a later checkpoint is committed: FencedTransactionError (its generation is below
    ``newest``) or SinkCommitError (not in the lineage). Snapshots expired before that commit cannot
    be checked: the commit is taken as this one (logged)."""
    last: LoggedSnapshot | None = None
    for snapshot in newest_first(table, keys):
        last = snapshot
        info = snapshot.info
        if info is None or info.kind is not CommitKind.DATA or info.position > position:
            continue
        if info.position == position:
            if info.digest == digest:
                return
            raise SinkCommitConflict(
                f"sink {keys.uid}: {position} is already in Iceberg table {name} (snapshot "
                f"{snapshot.snapshot_id}) with other files ({info.files} file(s), {info.rows} rows); "
                "refusing these records: they belong to another attempt; abort them"
            )
        break
    else:
        if last is not None and last.parent_id is not None:
            log.warning(
                "Iceberg table %s: snapshots before %s expired; %s taken as committed",
                name,
                last.snapshot_id,
                position,
            )
            return
    if position.generation < newest:
        raise FencedTransactionError(
            f"sink {keys.uid}: refusing to commit {position} into Iceberg table {name}: generation "
            f"{newest} fenced it and it was never committed (a zombie of an earlier run); abort its records"
        )
    raise SinkCommitError(
        f"sink {keys.uid}: {position} was never committed to Iceberg table {name}, but a later "
        "checkpoint of its lineage was: it is not part of the job's lineage; abort its records"
    )
