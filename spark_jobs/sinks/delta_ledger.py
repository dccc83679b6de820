"""What a Delta table's own log says about one Epochal sink: application transactions + commit info.

Three application ids per sink (Delta ``txn`` actions: the table snapshot keeps the newest version
of each, checkpoints and log cleanup included)::

    epochal/<job>/<uid>          version = lineage position of the newest data commit
                                 (generation * 10**10 + checkpoint id)
    epochal/<job>/<uid>/fence    version = the newest generation fenced or committed
    epochal/<job>/<uid>/rewind   version = the newest generation that rewound the table

A data commit carries the first two, a fence commit the second, a rewind commit all three. delta-rs's
conflict checker fails a commit when a concurrent winner carries a ``txn`` of an app id the loser
carries too, so any two commits of one sink that race conflict, and the loser decides again from the
new snapshot: "already committed? fenced?" and the commit are one atomic step.

Every commit of the sink also carries ``commitInfo.epochal`` (:class:`SinkCommitInfo`): job, sink,
generation, checkpoint, rows, and a digest of the committed records. The decision never needs it; it
identifies a retried commit (same digest: a no-op) against another one of the same checkpoint (a
conflict), and it is the audit trail (``DeltaTable.history()``).

Invariant (lineage order): the data commits of one sink, in table version order, have strictly
increasing lineage positions. Generations only grow (a fence refuses older ones), checkpoint ids
grow within a generation, and the runtime commits checkpoints in ascending id (``twophase``). Hence
for every checkpoint of the job's lineage: *(g, n) is committed iff position(g, n) <= the version of
the first app id*. A checkpoint below a committed one that was never committed is not in the lineage
(aborted, or abandoned by a restore), and the runtime never asks to commit it.
"""

from __future__ import annotations

import enum
import hashlib
import logging
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from state_store.core.codec import ManifestError, canonical_json, from_jsonable, to_jsonable
from state_store.core.twophase import (
    FencedTransactionError,
    PreCommittedTxn,
    SinkCommitConflict,
    SinkCommitError,
)

log = logging.getLogger(__name__)

GENERATION_SPAN = 10**10
"""Checkpoint ids stay below this (as in the Parquet sink's commit log), so a position is one int."""

METADATA_KEY = "epochal"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True, order=True)
class LineagePosition:
    """(generation, checkpoint id), ordered as the job's lineage runs; encoded as one ``txn`` version."""

    generation: int
    checkpoint_id: int

    def __post_init__(self) -> None:
        if self.generation < 0 or not 0 <= self.checkpoint_id < GENERATION_SPAN:
            raise ValueError(
                f"lineage position (generation {self.generation}, checkpoint {self.checkpoint_id}) "
                f"is out of range: generation >= 0, checkpoint id 0..{GENERATION_SPAN - 1}"
            )

    @property
    def version(self) -> int:
        return self.generation * GENERATION_SPAN + self.checkpoint_id

    @classmethod
    def of_version(cls, version: int) -> LineagePosition:
        return cls(version // GENERATION_SPAN, version % GENERATION_SPAN)

    def __str__(self) -> str:
        return f"checkpoint {self.checkpoint_id} of generation {self.generation}"


@dataclass(frozen=True, slots=True)
class SinkAppIds:
    """The application ids of one sink of one job (module docstring)."""

    job_id: str
    uid: str

    @property
    def commits(self) -> str:
        return f"epochal/{self.job_id}/{self.uid}"

    @property
    def fence(self) -> str:
        return f"{self.commits}/fence"

    @property
    def rewind(self) -> str:
        return f"{self.commits}/rewind"


class CommittedPrefix(AbstractSet[int]):
    """Checkpoint ids ``1..up_to``: the ids a sink reports committed (see ``LedgerState``).

    A set view, so a job that ran millions of epochs costs nothing to ask."""

    __slots__ = ("up_to",)

    def __init__(self, up_to: int) -> None:
        self.up_to = max(0, up_to)

    def __contains__(self, item: object) -> bool:
        return isinstance(item, int) and not isinstance(item, bool) and 1 <= item <= self.up_to

    def __iter__(self) -> Iterator[int]:
        return iter(range(1, self.up_to + 1))

    def __len__(self) -> int:
        return self.up_to

    def __repr__(self) -> str:
        return f"CommittedPrefix(1..{self.up_to})" if self.up_to else "CommittedPrefix(none)"


@dataclass(frozen=True, slots=True)
class LedgerState:
    """The sink's app transactions in one table snapshot (``table_version`` None: no table yet)."""

    table_version: int | None
    committed: LineagePosition | None
    fenced: int = -1
    rewound: int = -1

    @property
    def newest_generation(self) -> int:
        """Generations below this one may no longer commit (-1: no generation seen)."""
        return max(self.fenced, self.committed.generation if self.committed else -1)

    def is_committed(self, position: LineagePosition) -> bool:
        """Position at or below the newest data commit (exact for the lineage: module docstring)."""
        return self.committed is not None and position <= self.committed

    def committed_ids(self, fenced: int) -> CommittedPrefix:
        """Ids committed *in the newest generation's view* (``fenced``: the newest generation known,
        table and job store): none while that generation has not committed yet, so a checkpoint id a
        new generation reuses is never mistaken for an older generation's commit of the same id."""
        if self.committed is None or self.committed.generation < fenced:
            return CommittedPrefix(0)
        return CommittedPrefix(self.committed.checkpoint_id)


def read_state(table: Any, ids: SinkAppIds) -> LedgerState:
    """The ledger of ``table`` (a ``DeltaTable`` or None)."""
    if table is None:
        return LedgerState(None, None)
    committed = table.transaction_version(ids.commits)
    fenced = table.transaction_version(ids.fence)
    rewound = table.transaction_version(ids.rewind)
    return LedgerState(
        table.version(),
        LineagePosition.of_version(committed) if committed is not None and committed > 0 else None,
        -1 if fenced is None else fenced,
        -1 if rewound is None else rewound,
    )


class CommitKind(enum.Enum):
    DATA = "data"
    FENCE = "fence"
    REWIND = "rewind"


@dataclass(frozen=True, slots=True)
class SinkCommitInfo:
    """``commitInfo.epochal`` of one commit of a sink (module docstring).

    ``checkpoint_id``: the committed checkpoint (data), 0 (fence), or the checkpoint the table was
    rewound to (rewind, with the ``withdrawn`` checkpoint ids and the table version it restored,
    ``restored_version`` -1 when it removed every row)."""

    kind: CommitKind
    job_id: str
    sink_uid: str
    generation: int
    checkpoint_id: int = 0
    rows: int = 0
    files: int = 0
    digest: str = ""
    withdrawn: tuple[int, ...] = ()
    restored_version: int = -1
    format_version: int = FORMAT_VERSION

    @property
    def position(self) -> LineagePosition:
        return LineagePosition(self.generation, self.checkpoint_id)

    def to_metadata(self) -> dict[str, Any]:
        """The ``custom_metadata`` of ``CommitProperties``."""
        return {METADATA_KEY: to_jsonable(self)}

    @classmethod
    def from_commit(cls, commit: dict[str, Any], ids: SinkAppIds) -> SinkCommitInfo | None:
        """This sink's entry of a ``history()`` item, or None (another writer, another sink, or an
        entry this version cannot read -- it is then treated as another writer's commit)."""
        raw = commit.get(METADATA_KEY)
        if not isinstance(raw, dict) or raw.get("sink_uid") != ids.uid or raw.get("job_id") != ids.job_id:
            return None
        if not isinstance(raw.get("format_version"), int) or raw["format_version"] > FORMAT_VERSION:
            return None
        try:
            return from_jsonable(cls, raw, what=f"commit info of sink {ids.uid}")
        except ManifestError:
            return None


@dataclass(frozen=True, slots=True)
class LoggedCommit:
    """One table version as ``history()`` reports it; ``info`` None: not a commit of this sink."""

    version: int
    operation: str
    info: SinkCommitInfo | None


def newest_first(table: Any, ids: SinkAppIds, *, page: int = 32) -> Iterator[LoggedCommit]:
    """The table's commits, newest first, read in growing pages (a caller that stops early -- the
    common case: a retried commit is among the newest -- reads little of a long log). Ends at
    version 0, or at the oldest commit the log still keeps (log cleanup)."""
    seen = 0
    limit = page
    while True:
        items = table.history(limit)
        for item in items[seen:]:
            yield LoggedCommit(
                int(item.get("version", -1)),
                str(item.get("operation", "")),
                SinkCommitInfo.from_commit(item, ids),
            )
        if len(items) < limit:
            return
        seen, limit = len(items), limit * 4


def digest_of(records: Sequence[PreCommittedTxn]) -> str:
    """Identity of a checkpoint's records (every subtask's files with sizes and checksums)."""
    ordered = sorted(records, key=lambda r: (r.subtask, r.attempt))
    return hashlib.sha256(canonical_json([r.to_json() for r in ordered])).hexdigest()[:32]


def verify_committed(
    table: Any, ids: SinkAppIds, position: LineagePosition, digest: str, newest: int, name: str
) -> None:
    """Called when the ledger says ``position`` is committed: the table's commit of it holds exactly
    the records of ``digest``, else raise -- another attempt's commit: SinkCommitConflict; none,
    though a later checkpoint is committed: FencedTransactionError (its generation is below
    ``newest``) or SinkCommitError (not in the lineage). A log cleaned up before that commit cannot
    be checked: the commit is taken as this one (logged)."""
    oldest = None
    for commit in newest_first(table, ids):
        oldest = commit.version
        info = commit.info
        if info is None or info.kind is not CommitKind.DATA or info.position > position:
            continue
        if info.position == position:
            if info.digest == digest:
                return
            raise SinkCommitConflict(
                f"sink {ids.uid}: {position} is already in Delta table {name} (version "
                f"{commit.version}) with other files ({info.files} file(s), {info.rows} rows); "
                "refusing these records: they belong to another attempt; abort them"
            )
        break
    else:
        if oldest is not None and oldest > 0:
            log.warning(
                "Delta table %s: log before version %s cleaned up; %s taken as committed",
                name,
                oldest,
                position,
            )
            return
    if position.generation < newest:
        raise FencedTransactionError(
            f"sink {ids.uid}: refusing to commit {position} into Delta table {name}: generation "
            f"{newest} fenced it and it was never committed (a zombie of an earlier run); abort its records"
        )
    raise SinkCommitError(
        f"sink {ids.uid}: {position} was never committed to Delta table {name}, but a later "
        "checkpoint of its lineage was: it is not part of the job's lineage; abort its records"
    )
