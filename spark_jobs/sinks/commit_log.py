"""The commit log of one transactional sink: what readers may see, in checkpoint order.

Keys (under the job root, see ``JobLayout.sink_txn_dir``)::

    <job>/sinks/<uid>/txn-<n:010d>/<subtask:05d>-g<gen>-a<attempt>-<k>.parquet   staged files
    <job>/sinks/<uid>/_commits/<n:010d>.json      SinkCommitEntry: every file of checkpoint n
    <job>/sinks/<uid>/_fences/g<gen:010d>.json    SinkFence: generations below gen are refused
    <job>/sinks/<uid>/_retractions/<n:010d>.json  SinkRetraction: checkpoint n's commit is withdrawn

Committing checkpoint n (idempotent; every step may be retried):

1. if ``_commits/<n>.json`` exists: the same files -> no-op; other files -> SinkCommitConflict;
2. fencing: a record of a generation below the newest one (newest commit entry or fence) is
   refused with FencedTransactionError (a zombie of an earlier generation);
3. every staged file exists with the recorded size (else SinkCommitError: nothing to publish);
4. create-only write of ``_commits/<n>.json`` -- **the visibility point**. The entry's bytes are
   deterministic (no clock), so a retry after a lost response rewrites identical bytes and
   succeeds (port rule 2); a racing committer of other files loses and gets SinkCommitConflict.

Retracting checkpoint n (a restore that resumes before n because n's metadata is lost): a
create-only ``_retractions/<n>.json``; readers skip retracted commits, so the reprocessed epochs'
output replaces n's instead of doubling it. The commit entry and its files stay (audit).

Invariant: a file is visible iff a verifying commit entry lists it and no retraction names its
checkpoint; abort and the orphan sweep never delete a listed file.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from state_store.core.codec import ManifestError, decode_document, encode_document
from state_store.core.layout import JobLayout, validate_name
from state_store.core.manifests import StateHandle
from state_store.core.ports import ObjectAlreadyExists, ObjectNotFound, ObjectStore
from state_store.core.twophase import (
    FencedTransactionError,
    PreCommittedTxn,
    SinkCommitConflict,
    SinkCommitError,
)

COMMIT_KIND = "sink_commit"
FENCE_KIND = "sink_fence"
RETRACTION_KIND = "sink_retraction"


@dataclass(frozen=True, slots=True)
class SinkCommitEntry:
    """``_commits/<n>.json``: the transactions (all subtasks) of checkpoint n, by subtask."""

    job_id: str
    sink_uid: str
    checkpoint_id: int
    generation: int
    transactions: tuple[PreCommittedTxn, ...]

    @property
    def files(self) -> tuple[StateHandle, ...]:
        return tuple(h for t in self.transactions for h in t.files)

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.transactions)


@dataclass(frozen=True, slots=True)
class SinkFence:
    """``_fences/g<gen>.json``: written on restore; records of older generations are refused."""

    job_id: str
    sink_uid: str
    generation: int


@dataclass(frozen=True, slots=True)
class SinkRetraction:
    """``_retractions/<n>.json``: checkpoint n's committed output is withdrawn (see module docstring)."""

    job_id: str
    sink_uid: str
    checkpoint_id: int
    generation: int
    reason: str


@dataclass(frozen=True, slots=True)
class SinkLayout:
    """Keys of one sink of one job (pure string functions)."""

    job_id: str
    uid: str

    def __post_init__(self) -> None:
        validate_name("sink uid", self.uid)

    @property
    def job(self) -> JobLayout:
        return JobLayout(self.job_id)

    @property
    def root(self) -> str:
        return f"{self.job_id}/sinks/{self.uid}/"

    @property
    def staged_prefix(self) -> str:
        return self.root + "txn-"

    def txn_dir(self, checkpoint_id: int) -> str:
        return self.job.sink_txn_dir(self.uid, checkpoint_id)

    def txn_file_prefix(self, checkpoint_id: int, subtask: int, attempt: int, generation: int) -> str:
        return f"{self.txn_dir(checkpoint_id)}{subtask:05d}-g{generation}-a{attempt}-"

    def staged_file(self, checkpoint_id: int, subtask: int, attempt: int, generation: int, k: int) -> str:
        return f"{self.txn_file_prefix(checkpoint_id, subtask, attempt, generation)}{k}.parquet"

    @property
    def commits_prefix(self) -> str:
        return self.root + "_commits/"

    def commit_entry(self, checkpoint_id: int) -> str:
        if checkpoint_id < 1 or checkpoint_id >= 10**10:
            raise ValueError(f"checkpoint id {checkpoint_id} is out of range 1..9999999999")
        return f"{self.commits_prefix}{checkpoint_id:010d}.json"

    @property
    def fences_prefix(self) -> str:
        return self.root + "_fences/"

    def fence(self, generation: int) -> str:
        return f"{self.fences_prefix}g{generation:010d}.json"

    @property
    def retractions_prefix(self) -> str:
        return self.root + "_retractions/"

    def retraction(self, checkpoint_id: int) -> str:
        return f"{self.retractions_prefix}{checkpoint_id:010d}.json"


class CommitLog:
    """Reads and appends the commit log of one sink through the ObjectStore port."""

    def __init__(self, store: ObjectStore, job_id: str, uid: str) -> None:
        self.store = store
        self.layout = SinkLayout(job_id, uid)

    # -- reading ---------------------------------------------------------------------------
    def committed_ids(self) -> tuple[int, ...]:
        prefix = self.layout.commits_prefix
        ids = (_id_of(info.key[len(prefix) :]) for info in self.store.list(prefix))
        return tuple(sorted(i for i in ids if i is not None))

    def read(self, checkpoint_id: int) -> SinkCommitEntry | None:
        key = self.layout.commit_entry(checkpoint_id)
        try:
            data = self.store.get(key).data
        except ObjectNotFound:
            return None
        entry = decode_document(data, COMMIT_KIND, SinkCommitEntry, key=key)
        if (entry.job_id, entry.sink_uid, entry.checkpoint_id) != (
            self.layout.job_id,
            self.layout.uid,
            checkpoint_id,
        ):
            raise ManifestError(
                f"sink commit entry {key!r} describes job {entry.job_id!r} sink {entry.sink_uid!r} "
                f"checkpoint {entry.checkpoint_id}; it was moved or altered: do not edit the commit log"
            )
        return entry

    def retracted_ids(self) -> frozenset[int]:
        prefix = self.layout.retractions_prefix
        ids = (_id_of(info.key[len(prefix) :]) for info in self.store.list(prefix))
        return frozenset(i for i in ids if i is not None)

    def entries(
        self, up_to: int | None = None, *, include_retracted: bool = False
    ) -> Iterator[SinkCommitEntry]:
        """Every visible commit entry in ascending checkpoint id (``<= up_to`` if given);
        ``include_retracted``: retracted ones too (their files are kept)."""
        retracted = frozenset() if include_retracted else self.retracted_ids()
        for checkpoint_id in self.committed_ids():
            if up_to is not None and checkpoint_id > up_to:
                break
            if checkpoint_id in retracted:
                continue
            entry = self.read(checkpoint_id)
            if entry is not None:
                yield entry

    def newest_generation(self) -> int:
        """The highest generation of the newest commit entry and of every fence (-1: none)."""
        generations = [-1]
        ids = self.committed_ids()
        if ids:
            entry = self.read(ids[-1])
            generations.append(entry.generation if entry is not None else -1)
        for info in self.store.list(self.layout.fences_prefix):
            name = info.key[len(self.layout.fences_prefix) :]
            if name.startswith("g") and name.endswith(".json") and name[1:-5].isdigit():
                generations.append(int(name[1:-5]))
        return max(generations)

    # -- writing ---------------------------------------------------------------------------
    def commit(self, checkpoint_id: int, records: Sequence[PreCommittedTxn]) -> bool:
        """Steps 1-4 of the module docstring; True if this call made checkpoint n visible."""
        entry = self._entry(checkpoint_id, records)
        try:
            existing = self.read(checkpoint_id)
        except ManifestError:  # a torn write of this very entry (no reader could use it): redo it
            self._verify_staged(entry)
            self.store.put(self.layout.commit_entry(checkpoint_id), encode_document(COMMIT_KIND, entry))
            return True
        if existing is not None:
            return self._same_or_conflict(existing, entry)
        newest = self.newest_generation()
        if entry.generation < newest:
            raise FencedTransactionError(
                f"sink {self.layout.uid}: refusing to commit checkpoint {checkpoint_id} of generation "
                f"{entry.generation}: generation {newest} already committed or fenced it (a zombie of "
                "an earlier run); its staged files will be removed by abort or the orphan sweep"
            )
        self._verify_staged(entry)
        key = self.layout.commit_entry(checkpoint_id)
        try:
            self.store.put_if_absent(key, encode_document(COMMIT_KIND, entry))
        except ObjectAlreadyExists:
            raced = self.read(checkpoint_id)
            if raced is None:
                raise
            return self._same_or_conflict(raced, entry)
        return True

    def retract(self, checkpoint_id: int, generation: int, reason: str) -> bool:
        """Withdraw checkpoint n's committed output (idempotent); False if it was not committed."""
        if self.read(checkpoint_id) is None:
            return False
        record = SinkRetraction(self.layout.job_id, self.layout.uid, checkpoint_id, generation, reason)
        try:
            self.store.put_if_absent(
                self.layout.retraction(checkpoint_id), encode_document(RETRACTION_KIND, record)
            )
        except ObjectAlreadyExists:
            pass
        return True

    def fence(self, generation: int) -> None:
        """Refuse commits of generations below ``generation`` from now on (idempotent)."""
        fence = SinkFence(self.layout.job_id, self.layout.uid, generation)
        self.store.put_if_absent(self.layout.fence(generation), encode_document(FENCE_KIND, fence))

    def _entry(self, checkpoint_id: int, records: Sequence[PreCommittedTxn]) -> SinkCommitEntry:
        if not records:
            raise SinkCommitError(
                f"sink {self.layout.uid}: no records to commit for checkpoint {checkpoint_id}"
            )
        for r in records:
            if r.sink_uid != self.layout.uid or r.checkpoint_id != checkpoint_id:
                raise SinkCommitError(
                    f"sink {self.layout.uid} checkpoint {checkpoint_id}: got a record of {r.txn_id}"
                )
            prefix = self.layout.txn_file_prefix(r.checkpoint_id, r.subtask, r.attempt, r.generation)
            stray = [h.key for h in r.files if not h.key.startswith(prefix)]
            if stray:
                raise SinkCommitError(f"record of {r.txn_id} lists files outside its transaction: {stray}")
        ordered = tuple(sorted(records, key=lambda r: (r.subtask, r.attempt)))
        return SinkCommitEntry(
            self.layout.job_id, self.layout.uid, checkpoint_id, ordered[0].generation, ordered
        )

    def _same_or_conflict(self, existing: SinkCommitEntry, entry: SinkCommitEntry) -> bool:
        if existing == entry:
            return False
        raise SinkCommitConflict(
            f"sink {self.layout.uid}: checkpoint {entry.checkpoint_id} is already committed with "
            f"{len(existing.files)} file(s) of generation {existing.generation} "
            f"(attempts {sorted({t.attempt for t in existing.transactions})}); refusing the other "
            f"{len(entry.files)} file(s) of generation {entry.generation} "
            f"(attempts {sorted({t.attempt for t in entry.transactions})}): a fenced zombie tried "
            "to commit; abort its records"
        )

    def _verify_staged(self, entry: SinkCommitEntry) -> None:
        for handle in entry.files:
            info = self.store.head(handle.key)
            if info is None or info.size != handle.size:
                found = "is missing" if info is None else f"has {info.size} bytes"
                raise SinkCommitError(
                    f"sink {self.layout.uid}: cannot commit checkpoint {entry.checkpoint_id}: staged "
                    f"file {handle.key} {found}, the pre-commit recorded {handle.size} bytes; "
                    "the transaction cannot be published: restore from an earlier checkpoint"
                )


def _id_of(name: str) -> int | None:
    stem = name[:-5] if name.endswith(".json") else ""
    return int(stem) if len(stem) == 10 and stem.isdigit() else None
