"""Completed checkpoints: verification, the bounded newest-first store, and recovery from storage.

A checkpoint *n* is complete iff ``chk-n/_metadata.json`` exists and **verifies**: the document
passes its checksum and every state file it references exists with the recorded size (and, on a
deep verification, every byte matches the checksum its writer recorded: BLAKE3, or SHA-256 for files
written before format 2; ``state_store.core.checksums``). Completion and recovery check presence and
size (from folder listings); restores and the audit (``epochal validate --deep``) read every byte.

Recovery rule (deterministic: the same storage always gives the same answer)
---------------------------------------------------------------------------
The job record names the chain head (``_job.json`` ``head``, moved by the fenced compare-and-swap
that commits a checkpoint, see ``state_store.core.jobrecord``). The head is the latest completed
checkpoint, full stop:

1. it must verify; if it does not, recovery stops with :class:`ChainHeadError` naming the file and
   the remedy -- it never falls back silently to an older checkpoint, whose successor's sink
   output may already be committed (falling back is the caller's explicit, checked decision);
2. the retained queue holds the head and its ancestors by their ``base`` links (the checkpoints
   the job's state continues), as long as they verify: never a checkpoint the job fell back from
   or one of an abandoned fork, whatever its id.

A job record written before chains existed (``chained`` false) -- or no job record at all -- uses
the older rule: the newest eligible candidate wins. ``LATEST`` is only a hint either way: when it
is missing, stale or corrupt, the rule above gives the answer.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from state_store.core import checksums, documents
from state_store.core.codec import ManifestError, sha256_hex
from state_store.core.errors import EpochalError
from state_store.core.layout import JobLayout
from state_store.core.manifests import CompletedMetadata, JobRecord, LatestPointer, StateHandle
from state_store.core.parallel import map_ordered
from state_store.core.ports import ObjectAlreadyExists, ObjectNotFound, ObjectStore, VersionMismatch


@dataclass(frozen=True, slots=True)
class CompletedCheckpoint:
    metadata: CompletedMetadata
    metadata_key: str
    metadata_sha256: str

    @property
    def checkpoint_id(self) -> int:
        return self.metadata.checkpoint_id

    @property
    def generation(self) -> int:
        return self.metadata.generation

    @property
    def is_savepoint(self) -> bool:
        return self.metadata.properties.savepoint


class CheckpointVerificationError(EpochalError):
    """A completed checkpoint whose files do not match its metadata."""


class ChainHeadError(CheckpointVerificationError):
    """The job's chain head (its latest completed checkpoint) cannot be used; recovery stops.

    ``checkpoint_id`` is the head, ``key`` the file that failed, ``base`` the checkpoint the head
    continued (None if unknown)."""

    def __init__(
        self,
        message: str,
        checkpoint_id: int,
        key: str,
        base: int | None = None,
        *,
        interrupted: bool = False,
    ) -> None:
        super().__init__(message)
        self.checkpoint_id = checkpoint_id
        self.key = key
        self.base = base
        #: committed, but its committer died before writing it: the next lease holder rolls it forward
        self.interrupted = interrupted


LIST_MIN_HANDLES = 16
"""A folder holding at least this many of the handles to size-check is listed instead of one HEAD
per file (only with ``concurrency`` > 1, i.e. stores that declare bulk reads: a LIST page of up
to 1,000 keys is one request; fault-injection stores keep their per-file call pattern)."""
LIST_ENTRIES_PER_HANDLE = 16
"""Listing a folder stops after this many entries per wanted handle (a folder full of other
files); the handles it has not reached yet are HEADed one by one."""


def verify_handles(
    store: ObjectStore, metadata: CompletedMetadata, *, deep: bool, concurrency: int = 1
) -> list[str]:
    """Return one problem line per state file that is missing, has another size, or (``deep``:
    every file read back) other bytes than the checksum the metadata records -- BLAKE3, or SHA-256
    for a file written before format 2. Empty list: the checkpoint verifies. Without ``deep`` no
    state file is read: the sizes come from listings (or HEADs) and the checksums are the writers'.

    ``concurrency`` > 1 checks up to that many files at once (see ``state_store.core.parallel``)
    and, for a size-only check, lists folders that hold many of the files instead of one HEAD per
    file (``LIST_MIN_HANDLES``): a listing is as consistent as a HEAD, and a file absent from a
    complete listing of its folder is missing. The problems come back in handle order and a store
    error raises as it would sequentially."""
    return [p for p in check_handles(store, metadata.handles, deep=deep, concurrency=concurrency) if p]


def check_handles(
    store: ObjectStore, handles: Iterable[StateHandle], *, deep: bool, concurrency: int = 1
) -> list[str | None]:
    """:func:`verify_handles` for any handles: per handle, in order, its problem line or None."""
    handles = list(handles)
    listed = {} if deep or concurrency <= 1 else _sizes_by_listing(store, handles)

    def check(handle: StateHandle) -> str | None:
        if deep:
            try:
                data = store.get(handle.key).data
            except ObjectNotFound:
                return f"state file {handle.key} is missing"
            if len(data) != handle.size:
                return f"state file {handle.key} has {len(data)} bytes, metadata says {handle.size}"
            actual = checksums.mismatch(handle.checksum, data)
            if actual is not None:
                return (
                    f"state file {handle.key} has checksum {actual}, metadata says {handle.checksum} "
                    "(its bytes changed after they were written)"
                )
            return None
        if handle.key in listed:
            size = listed[handle.key]
        else:
            info = store.head(handle.key)
            size = None if info is None else info.size
        if size is None:
            return f"state file {handle.key} is missing"
        if size != handle.size:
            return f"state file {handle.key} has {size} bytes, metadata says {handle.size}"
        return None

    return list(map_ordered(check, handles, concurrency))


def _sizes_by_listing(store: ObjectStore, handles: Iterable[StateHandle]) -> dict[str, int | None]:
    """Size of each handle's file (None: missing) for handles in folders worth listing; a handle
    left out of the answer is checked with a HEAD (small folder, or listing budget exhausted)."""
    folders: dict[str, set[str]] = collections.defaultdict(set)
    for handle in handles:
        folder, slash, _ = handle.key.rpartition("/")
        folders[folder + slash].add(handle.key)
    sizes: dict[str, int | None] = {}
    for folder, wanted in folders.items():
        if len(wanted) < LIST_MIN_HANDLES:
            continue
        budget = LIST_ENTRIES_PER_HANDLE * len(wanted)
        found: dict[str, int] = {}
        complete = True
        for seen, info in enumerate(store.list(folder), start=1):
            if info.key in wanted:
                found[info.key] = info.size
                if len(found) == len(wanted):
                    break
            if seen >= budget:
                complete = len(found) == len(wanted)
                break
        sizes.update(found)
        if complete:  # the whole folder (or every wanted key) was seen: the rest are missing
            sizes.update((key, None) for key in wanted if key not in found)
    return sizes


def load_completed(
    store: ObjectStore, layout: JobLayout, checkpoint_id: int, *, deep: bool = False, concurrency: int = 1
) -> CompletedCheckpoint:
    """Load and verify checkpoint ``checkpoint_id``; raise ObjectNotFound, ManifestError or
    CheckpointVerificationError with a message that names the file and the remedy."""
    key = layout.metadata(checkpoint_id)
    raw = store.get(key)
    metadata = documents.decode(raw.data, CompletedMetadata, key=key)
    if metadata.checkpoint_id != checkpoint_id or metadata.job_id != layout.job_id:
        raise ManifestError(
            f"metadata document {key!r} describes job {metadata.job_id!r} checkpoint "
            f"{metadata.checkpoint_id}; it was moved or altered: restore from another checkpoint"
        )
    problems = verify_handles(store, metadata, deep=deep, concurrency=concurrency)
    if problems:
        raise CheckpointVerificationError(
            f"checkpoint {checkpoint_id} of job {layout.job_id} failed verification: {problems[0]}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
            + f"; restore from checkpoint {checkpoint_id - 1} or a savepoint"
        )
    return CompletedCheckpoint(metadata, key, sha256_hex(raw.data))


_POINTER_CAS_RETRIES = 16


def move_latest_pointer(
    store: ObjectStore, layout: JobLayout, completed: CompletedCheckpoint, now_ms: int
) -> None:
    """CAS ``LATEST`` to ``completed`` unless it already names a newer checkpoint (or a newer
    generation): the pointer never moves backwards. A corrupt pointer is replaced."""
    pointer = LatestPointer(
        completed.checkpoint_id,
        completed.generation,
        completed.metadata_key,
        completed.metadata_sha256,
        now_ms,
    )
    data = documents.encode(pointer)
    for _ in range(_POINTER_CAS_RETRIES):
        current: LatestPointer | None
        try:
            current, raw = documents.read_versioned(store, layout.latest, LatestPointer)
        except ObjectNotFound:
            try:
                store.put_if_absent(layout.latest, data)
                return
            except ObjectAlreadyExists:
                continue
        except ManifestError:
            raw = store.get(layout.latest)
            current = None
        if current is not None and (
            current.checkpoint_id >= completed.checkpoint_id or current.generation > completed.generation
        ):
            return
        try:
            store.put_if_match(layout.latest, data, raw.version)
            return
        except VersionMismatch:
            continue
    raise RuntimeError(f"job {layout.job_id}: could not move LATEST (constant contention)")


def completed_ids(store: ObjectStore, layout: JobLayout) -> list[int]:
    """Ids of every checkpoint with a ``_metadata.json`` (verifying or not), ascending."""
    ids = {
        layout.checkpoint_id_of(info.key)
        for info in store.list(layout.checkpoints_prefix)
        if info.key.endswith("/_metadata.json")
    }
    return sorted(i for i in ids if i is not None)


def quarantined_ids(store: ObjectStore, layout: JobLayout) -> set[int]:
    ids = {
        layout.checkpoint_id_of(info.key)
        for info in store.list(layout.checkpoints_prefix)
        if info.key.endswith("/_quarantined.json")
    }
    return {i for i in ids if i is not None}


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What recovery saw: the chosen checkpoint and every candidate it skipped, with why."""

    chosen: int | None
    pointer: int | None
    skipped: tuple[str, ...] = field(default=())


class CompletedCheckpointStore:
    """Bounded, newest-first queue of the retained completed checkpoints (seed 002: N handles).

    ``add`` returns the checkpoints that fell out of the queue; deleting their files is the
    cleaner's job (retention), never the store's.
    """

    def __init__(self, max_retained: int) -> None:
        if max_retained < 1:
            raise ValueError(f"max_retained={max_retained} is invalid: keep at least 1 checkpoint")
        self.max_retained = max_retained
        self._queue: collections.deque[CompletedCheckpoint] = collections.deque()

    def add(self, checkpoint: CompletedCheckpoint) -> list[CompletedCheckpoint]:
        if any(c.checkpoint_id == checkpoint.checkpoint_id for c in self._queue):
            return []
        self._queue.append(checkpoint)
        ordered = sorted(self._queue, key=lambda c: c.checkpoint_id, reverse=True)
        self._queue = collections.deque(ordered[: self.max_retained])
        return ordered[self.max_retained :]

    def latest(self) -> CompletedCheckpoint | None:
        return self._queue[0] if self._queue else None

    def __iter__(self) -> Iterator[CompletedCheckpoint]:
        return iter(self._queue)

    def __len__(self) -> int:
        return len(self._queue)

    @classmethod
    def recover(
        cls, store: ObjectStore, layout: JobLayout, max_retained: int, *, deep: bool = False
    ) -> tuple[CompletedCheckpointStore, RecoveryReport]:
        """Rebuild the queue from storage alone (see the module's recovery rule)."""
        result = cls(max_retained)
        skipped: list[str] = []
        job = documents.read_optional(store, layout.job_record, JobRecord)
        pointer = _read_pointer(store, layout, skipped)
        quarantined = quarantined_ids(store, layout)
        eligible: list[CompletedCheckpoint] = []
        chained = job is not None and job.chained
        head = job.head.checkpoint_id if job is not None and job.head is not None else None
        if chained:
            if head is not None:
                if head in quarantined:
                    raise ChainHeadError(
                        f"checkpoint {head} of job {layout.job_id} is the latest completed but failed "
                        f"validation and is quarantined ({layout.quarantined(head)}): resume from an older "
                        f"checkpoint with `epochal restore --from <id> --force` (it retracts the sink "
                        "output committed since), or fix the expectations and restore from it with --force",
                        head,
                        layout.quarantined(head),
                        job.head.base if job is not None and job.head is not None else None,
                    )
                eligible = lineage(
                    store, layout, load_head(store, layout, head, deep=deep), max_retained, deep
                )
            return _queue(cls(max_retained), eligible, pointer, skipped)
        for checkpoint_id in sorted(completed_ids(store, layout), reverse=True):
            if len(eligible) >= max_retained:
                break
            if checkpoint_id in quarantined:
                skipped.append(f"checkpoint {checkpoint_id}: quarantined by validation")
                continue
            try:
                cp = load_completed(store, layout, checkpoint_id, deep=deep)
            except (ManifestError, CheckpointVerificationError, ObjectNotFound) as exc:
                skipped.append(f"checkpoint {checkpoint_id}: {exc}")
                continue
            if cp.is_savepoint:
                continue
            if job is not None and cp.generation != job.generation and checkpoint_id != job.restored_from:
                skipped.append(
                    f"checkpoint {checkpoint_id}: generation {cp.generation} precedes the restore "
                    f"to checkpoint {job.restored_from} (generation {job.generation})"
                )
                continue
            eligible.append(cp)
        return _queue(result, eligible, pointer, skipped)


def lineage(
    store: ObjectStore, layout: JobLayout, head: CompletedCheckpoint, max_retained: int, deep: bool
) -> list[CompletedCheckpoint]:
    """The head and its ancestors by their ``base`` links, newest first, up to ``max_retained``:
    only checkpoints the job's state actually continues (never one it fell back from, whatever its
    id). The walk stops at an import (no base) or at an ancestor that no longer verifies."""
    chain = [head]
    while len(chain) < max_retained:
        base = chain[-1].metadata.barrier.base
        if base is None or base <= 0:
            break
        try:
            chain.append(load_completed(store, layout, base, deep=deep))
        except (ManifestError, CheckpointVerificationError, ObjectNotFound):
            break
    return chain


def _queue(
    result: CompletedCheckpointStore,
    eligible: list[CompletedCheckpoint],
    pointer: LatestPointer | None,
    skipped: list[str],
) -> tuple[CompletedCheckpointStore, RecoveryReport]:
    for cp in _oldest_first(eligible):
        result.add(cp)
    latest = result.latest()
    return result, RecoveryReport(
        chosen=latest.checkpoint_id if latest else None,
        pointer=pointer.checkpoint_id if pointer else None,
        skipped=tuple(skipped),
    )


def _oldest_first(items: Iterable[CompletedCheckpoint]) -> list[CompletedCheckpoint]:
    return sorted(items, key=lambda c: c.checkpoint_id)


def load_head(
    store: ObjectStore, layout: JobLayout, checkpoint_id: int, *, deep: bool = False
) -> CompletedCheckpoint:
    """Load the chain head; ChainHeadError (the file, the reason, the remedy) if it cannot be used."""
    key = layout.metadata(checkpoint_id)
    try:
        completed = load_completed(store, layout, checkpoint_id, deep=deep)
        _check_against_its_records(store, layout, completed)
        return completed
    except ObjectNotFound:
        missing = "its decision" if store.head(layout.decision(checkpoint_id)) is None else "_metadata.json"
        raise ChainHeadError(
            f"checkpoint {checkpoint_id} of job {layout.job_id} (the latest completed) is committed but "
            f"{missing} is not written yet (a commit in progress, or one whose writer died): the holder "
            "of the job's lease finishes it, or else the next `epochal run` or epoch DAG run",
            checkpoint_id,
            key,
            interrupted=True,
        ) from None
    except (ManifestError, CheckpointVerificationError) as exc:
        base = _base_of(store, layout, checkpoint_id)
        older = (
            f"`epochal restore --from {base} --force`" if base else "`epochal restore --from <id> --force`"
        )
        raise ChainHeadError(
            f"checkpoint {checkpoint_id} of job {layout.job_id} is the latest completed but does not "
            f"verify ({_first_line(exc)}): restore {key} from a backup or replica, or resume from an "
            f"older checkpoint with {older}, which also retracts the sink output committed since it",
            checkpoint_id,
            key,
            base,
        ) from None


def _check_against_its_records(store: ObjectStore, layout: JobLayout, completed: CompletedCheckpoint) -> None:
    """ManifestError unless the head's metadata agrees with its trigger record and its decision
    (a body edited with a recomputed checksum still contradicts them): generation, base, input cut
    and trigger time as triggered; completion time and attempt as decided."""
    from state_store.core.manifests import DecisionRecord, PendingRecord

    meta, n = completed.metadata, completed.checkpoint_id
    pending = documents.read(store, layout.pending(n), PendingRecord)
    decision = documents.read_optional(store, layout.decision(n), DecisionRecord)
    wrong = [
        name
        for name, ours, theirs in (
            ("generation", meta.generation, pending.generation),
            ("base", meta.barrier.base, pending.barrier.base),
            ("input positions", meta.barrier.ranges, pending.barrier.ranges),
            ("trigger time", meta.trigger_ms, pending.trigger_ms),
        )
        if ours != theirs
    ]
    if decision is not None:
        if meta.completed_ms != decision.decided_ms:
            wrong.append("completion time (its decision)")
        if any(t.attempt != decision.attempt for t in meta.tasks):
            wrong.append("attempt (its decision)")
    if wrong:
        raise ManifestError(
            f"metadata document {completed.metadata_key!r} contradicts its checkpoint's records "
            f"({', '.join(wrong)}): it was altered"
        )


def _base_of(store: ObjectStore, layout: JobLayout, checkpoint_id: int) -> int | None:
    from state_store.core.manifests import PendingRecord

    try:
        pending = documents.read(store, layout.pending(checkpoint_id), PendingRecord)
    except (ObjectNotFound, ManifestError):
        return None
    return pending.barrier.base


def _first_line(exc: BaseException) -> str:
    text = str(exc).split("; ")[0]
    return text.splitlines()[0] if text else type(exc).__name__


def _read_pointer(store: ObjectStore, layout: JobLayout, skipped: list[str]) -> LatestPointer | None:
    try:
        return documents.read_optional(store, layout.latest, LatestPointer)
    except ManifestError as exc:
        skipped.append(f"LATEST pointer ignored: {exc}")
        return None
