"""Checkpoint statistics of a job, read from its storage root and cached.

One scan = one listing of ``<job>/checkpoints/`` (keys and versions only) plus reads of the few
documents of checkpoints that are new or changed since the previous scan:

1. list the checkpoint folders; for each id build a *token* from the versions of its top-level
   documents (``_pending``, ``_decision``, ``_metadata``, ``_validation``, ``_quarantined``) and its
   ack/attempt count;
2. reuse the cached row of every id whose token is unchanged (a decided checkpoint is immutable
   except for its validation result, which is part of the token), read the others (in parallel);
3. the job's statistics (overview, summaries) are recomputed only when the fingerprint of all tokens
   and of ``_job.json`` changed; within ``max_age_ms`` of the last scan no listing is done at all;
   after it, a request first *probes* what a run changes (``_job.json``, ``LATEST``, the folders of
   undecided and the two newest checkpoints, the next id): if any of it moved it scans now (the
   first load after a run shows that run), else it gets the cached answer while a background
   refresh re-lists (a long history costs seconds to list on any store; a page load must not wait
   for it when nothing a run writes has moved);
4. with ``full_relist_ms`` > 0, a refresh within that time of the last full listing re-lists only the
   folders that can change (undecided and the ``recent`` newest checkpoints) and probes the ids
   after the highest one; checkpoints that retention deleted leave the history at the next full
   listing (the default, 0, lists everything every time).

5. the job's history archive (``<job>/history/``, see :mod:`state_store.monitoring.archive`) is read
   first (its segments are immutable and cached by key and version): its rows cover checkpoints that
   retention already deleted, and a live folder whose listing equals the archived one reuses the
   archived row without a read. A live folder's row wins over the archived one for the same id. With
   ``full_relist_ms`` > 0 a cold start does not list the whole history either: it takes the archive's
   rows as its listing and lists only the folders that can change (the archive's open ids, the
   ``recent`` newest) and the new ids after the archive's highest one; the first full listing happens
   ``full_relist_ms`` later (in the background).

Invariant: a cached answer equals a cold scan of the same storage (the cache is only keyed by what
the listing and the archive show; tests compare both). Nothing is ever written.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from state_store.core import documents
from state_store.core.codec import ManifestError
from state_store.core.errors import BadInputError
from state_store.core.layout import JobLayout
from state_store.core.manifests import (
    AckRecord,
    CompletedMetadata,
    DeclineRecord,
    JobRecord,
    LatestPointer,
    PendingRecord,
    TaskSnapshot,
)
from state_store.core.ports import ObjectNotFound, ObjectStore

if TYPE_CHECKING:
    from state_store.monitoring.archive import ArchiveView
from state_store.core.history import incremental_bytes
from state_store.monitoring.model import (
    STATUSES,
    CheckpointDetail,
    CheckpointRow,
    OperatorDetail,
    Overview,
    SubtaskDetail,
    SummaryStats,
    build_overview,
    summarize,
)
from state_store.monitoring.rows import (
    Listing,
    checkpoint_row,
    list_checkpoints,
    relist,
)

_MAX_PAGE = 500


class MonitoringError(ValueError, BadInputError):
    """A bad request to the statistics service (unknown checkpoint, bad page or filter)."""


@dataclass(frozen=True, slots=True)
class JobStats:
    """The statistics of one job at one fingerprint of its storage."""

    job_id: str
    fingerprint: str
    rows: tuple[CheckpointRow, ...]  # ascending by id
    overview: Overview
    duration: SummaryStats
    state_size: SummaryStats
    incremental_size: SummaryStats
    configuration: dict[str, Any]
    scanned_ms: float
    documents_read: int

    def page(self, *, offset: int = 0, limit: int = 50, status: str | None = None) -> list[CheckpointRow]:
        """Newest first; ``status`` filters by :data:`STATUSES`."""
        if offset < 0:
            raise MonitoringError(f"offset={offset} is invalid: use 0 or more")
        if not 1 <= limit <= _MAX_PAGE:
            raise MonitoringError(f"limit={limit} is invalid: use 1..{_MAX_PAGE}")
        if status is not None and status not in STATUSES:
            raise MonitoringError(f"status {status!r} is unknown: use one of {', '.join(STATUSES)}")
        if status is None:
            end = len(self.rows) - offset
            return list(reversed(self.rows[max(0, end - limit) : max(0, end)]))
        matching = [r for r in reversed(self.rows) if r.status == status]
        return matching[offset : offset + limit]

    def count(self, status: str | None = None) -> int:
        return len(self.rows) if status is None else sum(1 for r in self.rows if r.status == status)

    def summaries_json(self) -> dict[str, Any]:
        return {
            "duration_ms": self.duration.to_json(),
            "state_size": self.state_size.to_json(),
            "incremental_size": self.incremental_size.to_json(),
        }


class CheckpointStats:
    """Statistics service over one ObjectStore; thread-safe; caches up to ``max_jobs`` jobs."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        max_age_ms: int = 2000,
        workers: int = 8,
        max_jobs: int = 32,
        full_relist_ms: int = 0,
        recent: int = 32,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_age_ms < 0:
            raise MonitoringError(f"max_age_ms={max_age_ms} is invalid: use 0 or more")
        if full_relist_ms < 0:
            raise MonitoringError(f"full_relist_ms={full_relist_ms} is invalid: use 0 or more")
        self.full_relist_ms = full_relist_ms
        self.recent = max(1, recent)
        self._listings: dict[str, tuple[float, dict[int, Listing]]] = {}
        self.store = store
        self.max_age_ms = max_age_ms
        self.workers = max(1, workers)
        self.max_jobs = max(1, max_jobs)
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._scan_lock = threading.Lock()
        self._refreshing: set[str] = set()
        self._rows: dict[str, dict[int, tuple[str, CheckpointRow]]] = {}
        self._jobs: OrderedDict[str, tuple[float, JobStats]] = OrderedDict()
        self._segments: dict[tuple[str, str], Any] = {}  # archive segments by (key, version)
        self._probes: dict[str, Probe] = {}  # what _moved compares, as of the last scan

    # -- public ----------------------------------------------------------------------------
    def stats(self, job_id: str, *, wait: bool = False) -> JobStats:
        """The job's statistics.

        * no cached answer, ``max_age_ms == 0`` or ``wait``: scan now and return the fresh answer;
        * cached and younger than ``max_age_ms``: return it (no listing at all);
        * cached but older: return it at once and refresh in the background (one refresh per job at
          a time), so a page load never waits for a full listing of a long history.
        """
        layout = JobLayout(job_id)
        with self._lock:
            cached = self._jobs.get(job_id)
        if cached is not None and not wait and self.max_age_ms > 0:
            if (self._monotonic() - cached[0]) * 1000 >= self.max_age_ms:
                if self._moved(layout):  # a run changed the job since: never serve the old answer
                    return self._refresh(layout)
                self._refresh_in_background(layout)
            return cached[1]
        return self._refresh(layout)

    def _moved(self, layout: JobLayout) -> bool:
        """Whether what a run changes moved since the last scan: ``_job.json``, ``LATEST``, the folders
        of undecided and the newest checkpoints, the next id. A few HEADs and small listings, however
        long the history (the slow full listing stays in the background refresh)."""
        with self._lock:
            probe = self._probes.get(layout.job_id)
        if probe is None:
            return True
        return probe != _probe(self.store, layout, tuple(probe[2]))

    def warm(self, job_id: str) -> None:
        """Start a background scan of ``job_id`` unless it is cached or being scanned already."""
        layout = JobLayout(job_id)
        with self._lock:
            if job_id in self._jobs:
                return
        self._refresh_in_background(layout)

    def _refresh(self, layout: JobLayout) -> JobStats:
        with self._scan_lock:
            with self._lock:
                cached = self._jobs.get(layout.job_id)
            result = self._scan(layout, cached[1] if cached else None)
            with self._lock:
                self._jobs[layout.job_id] = (self._monotonic(), result)
                self._jobs.move_to_end(layout.job_id)
                while len(self._jobs) > self.max_jobs:
                    evicted, _ = self._jobs.popitem(last=False)
                    self._rows.pop(evicted, None)
                    self._listings.pop(evicted, None)
                    self._probes.pop(evicted, None)
            return result

    def _refresh_in_background(self, layout: JobLayout) -> None:
        with self._lock:
            if layout.job_id in self._refreshing:
                return
            self._refreshing.add(layout.job_id)

        def run() -> None:
            try:
                self._refresh(layout)
            except Exception:  # the next request retries (and a synchronous one reports the error)
                pass
            finally:
                with self._lock:
                    self._refreshing.discard(layout.job_id)

        threading.Thread(target=run, name=f"epochal-stats-{layout.job_id}", daemon=True).start()

    def detail(self, job_id: str, checkpoint_id: int) -> CheckpointDetail:
        """Per-operator and per-subtask detail of one checkpoint (always read fresh)."""
        layout = JobLayout(job_id)
        if checkpoint_id < 1 or checkpoint_id >= 10**10:
            raise MonitoringError(f"checkpoint id {checkpoint_id} is invalid: use 1..9999999999")
        item = list_checkpoints(self.store, layout, layout.checkpoint_dir(checkpoint_id)).get(checkpoint_id)
        if item is None or "_pending.json" not in item.docs:
            raise MonitoringError(
                f"checkpoint {checkpoint_id} of job {job_id} is not in storage: it was never triggered or "
                "retention removed it; see the history for the checkpoints there are"
            )
        row, _ = checkpoint_row(self.store, layout, checkpoint_id, item)
        return _detail(self.store, layout, row)

    # -- scanning --------------------------------------------------------------------------
    def _listing(self, layout: JobLayout, archive: ArchiveView) -> dict[int, Listing]:
        """A full listing, or (within ``full_relist_ms`` of the last full one) an incremental update
        of it; a cold start with ``full_relist_ms`` > 0 and an archive updates the archive's listing.
        Checkpoints removed by retention leave the listing at the next full listing (their archived
        rows stay in the history)."""
        now = self._monotonic()
        previous = self._listings.get(layout.job_id)
        if previous is not None and (now - previous[0]) * 1000 < self.full_relist_ms:
            listed = relist(self.store, layout, previous[1], self.recent)
            self._listings[layout.job_id] = (previous[0], listed)
        elif previous is None and self.full_relist_ms > 0 and archive.rows:
            # the archive stands in for the listing: only its ``recent`` newest ids (which _relist
            # re-lists), its open ids and the new ids after its highest can differ from the archive
            known = {i: archive.rows[i].listed() for i in sorted(archive.rows)[-self.recent :]}
            for i in sorted(archive.open_ids - set(known)):
                found = list_checkpoints(self.store, layout, layout.checkpoint_dir(i)).get(i)
                if found is not None:
                    known[i] = found
            listed = relist(self.store, layout, dict(sorted(known.items())), self.recent)
            self._listings[layout.job_id] = (now, listed)
        else:
            listed = list_checkpoints(self.store, layout)
            self._listings[layout.job_id] = (now, listed)
        return listed

    def _scan(self, layout: JobLayout, previous: JobStats | None) -> JobStats:
        from state_store.monitoring.archive import load_archive

        started = time.perf_counter()
        archive = load_archive(self.store, layout, cache=self._segments, workers=self.workers)
        listed = self._listing(layout, archive)
        job_info = self.store.head(layout.job_record)
        latest_info = self.store.head(layout.latest)
        tokens = {i: item.token() for i, item in listed.items()}
        digest = hashlib.sha256()
        for checkpoint_id, token in tokens.items():
            digest.update(f"{checkpoint_id}:{token}\n".encode())
        digest.update(f"job={job_info.version if job_info else ''}".encode())
        digest.update(f"latest={latest_info.version if latest_info else ''}".encode())
        digest.update(f"archive={archive.fingerprint()}".encode())
        fingerprint = digest.hexdigest()
        decided = [i for i, item in listed.items() if "_decision.json" in item.docs]
        watch = sorted(
            {i for i in listed if i not in decided} | set(sorted(listed)[-2:]) | {max(listed, default=0) + 1}
        )
        probe: Probe = (
            job_info.version if job_info else "",
            latest_info.version if latest_info else "",
            {i: listed[i].token() if i in listed else "" for i in watch},
        )
        with self._lock:
            self._probes[layout.job_id] = probe
        if previous is not None and previous.fingerprint == fingerprint:
            return previous
        cache = self._rows.setdefault(layout.job_id, {})
        todo = [
            i
            for i, item in listed.items()
            if "_pending.json" in item.docs and (i not in cache or cache[i][0] != tokens[i])
        ]
        reads = archive.reads
        for i in list(todo):
            archived = archive.rows.get(i)
            if archived is not None and archived.token == tokens[i]:
                cache[i] = (tokens[i], archived.row)  # unchanged since archived: no read
                todo.remove(i)
        if todo:
            with ThreadPoolExecutor(max_workers=min(self.workers, len(todo))) as pool:
                built = list(pool.map(lambda i: checkpoint_row(self.store, layout, i, listed[i]), todo))
            for i, (row, n) in zip(todo, built):
                cache[i] = (tokens[i], row)
                reads += n
        for gone in set(cache) - {i for i, item in listed.items() if "_pending.json" in item.docs}:
            del cache[gone]
        merged = {i: a.row for i, a in archive.rows.items()}
        merged.update((i, row) for i, (_, row) in cache.items())
        rows = tuple(merged[i] for i in sorted(merged))
        job, config, n = _configuration(self.store, layout, rows)
        reads += n
        config["checkpoints_in_storage"] = sum(  # folders the listing saw (archive stand-ins excluded)
            1 for item in listed.values() if "_pending.json" in item.docs and not item.fixed_token
        )
        config["checkpoints_archived"] = len(archive.rows)
        config["checkpoints_in_history"] = len(rows)
        done = [r for r in rows if r.status == "completed"]
        return JobStats(
            job_id=layout.job_id,
            fingerprint=fingerprint,
            rows=rows,
            overview=build_overview(layout.job_id, rows, job.generation if job else 0),
            duration=summarize([r.duration_ms for r in done if r.duration_ms is not None]),
            state_size=summarize([r.state_size for r in done]),
            incremental_size=summarize([r.incremental_size for r in done]),
            configuration=config,
            scanned_ms=(time.perf_counter() - started) * 1000,
            documents_read=reads,
        )


Probe = tuple[str, str, dict[int, str]]
"""(``_job.json`` version, ``LATEST`` version, listing token by watched checkpoint id; "" = absent)."""


def _probe(store: ObjectStore, layout: JobLayout, ids: tuple[int, ...]) -> Probe:
    job_info = store.head(layout.job_record)
    latest_info = store.head(layout.latest)
    tokens = {}
    for i in ids:
        item = list_checkpoints(store, layout, layout.checkpoint_dir(i)).get(i)
        tokens[i] = item.token() if item is not None else ""
    return (job_info.version if job_info else "", latest_info.version if latest_info else "", tokens)


def _configuration(
    store: ObjectStore, layout: JobLayout, rows: Sequence[CheckpointRow]
) -> tuple[JobRecord | None, dict[str, Any], int]:
    """What storage says about the job's checkpointing: its record, LATEST, the newest trigger."""
    reads = 0
    config: dict[str, Any] = {"job_id": layout.job_id}
    job: JobRecord | None = None
    try:
        job = documents.read_optional(store, layout.job_record, JobRecord)
        reads += 1
    except ManifestError as exc:
        config["job_record_error"] = str(exc)
    if job is not None:
        config.update(
            generation=job.generation,
            max_parallelism=job.max_parallelism,
            created_ms=job.created_ms,
            restored_from_checkpoint=job.restored_from,
        )
    try:
        pointer = documents.read_optional(store, layout.latest, LatestPointer)
        reads += 1
        config["latest_pointer"] = pointer.checkpoint_id if pointer else None
    except ManifestError as exc:
        config["latest_pointer"] = f"unreadable: {exc}"
    newest = next((r for r in reversed(rows) if r.status != "unreadable" and not r.savepoint), None)
    pending: PendingRecord | None = None
    if newest is not None:
        try:  # the newest row may be archived only (its folder deleted): then no configuration detail
            pending = documents.read(store, layout.pending(newest.checkpoint_id), PendingRecord)
        except (ManifestError, ObjectNotFound):
            pending = None
        reads += 1
    if pending is not None:
        config.update(
            timeout_ms=pending.deadline_ms - pending.trigger_ms,
            expected_acks=len(pending.expected),
            operators=sorted({t.uid for t in pending.expected}),
            mode_properties={
                "forced": pending.properties.forced,
                "retention": pending.properties.retention.value,
                "discard_on_subsumed": pending.properties.discard_on_subsumed,
            },
        )
    return job, config, reads


def _detail(store: ObjectStore, layout: JobLayout, row: CheckpointRow) -> CheckpointDetail:
    pending = documents.read(store, layout.pending(row.checkpoint_id), PendingRecord)
    by_uid: dict[str, dict[int, SubtaskDetail]] = {}
    for task in pending.expected:
        by_uid.setdefault(task.uid, {})[task.subtask] = SubtaskDetail(task.subtask, "pending", 0, 0, 0, 0)
    attempt = 0
    meta = documents.read_optional(store, layout.metadata(row.checkpoint_id), CompletedMetadata)
    if meta is not None:
        for t in meta.tasks:
            attempt = max(attempt, t.attempt)
            by_uid.setdefault(t.task.uid, {})[t.task.subtask] = _subtask(layout, t.task.subtask, t.attempt, t)
    else:
        attempts = [
            int(i.key.rsplit("/", 1)[1].split(".")[0])
            for i in store.list(layout.attempts_prefix(row.checkpoint_id))
        ]
        attempt = max(attempts, default=0)
        for info in store.list(layout.acks_prefix(row.checkpoint_id)):
            try:
                ack = documents.read(store, info.key, AckRecord)
            except (ManifestError, ObjectNotFound):
                continue
            if ack.attempt == attempt and ack.generation == pending.generation:
                snap = TaskSnapshot(ack.task, ack.attempt, ack.handles, ack.metrics, ack.snapshot)
                by_uid.setdefault(ack.task.uid, {})[ack.task.subtask] = _subtask(
                    layout, ack.task.subtask, ack.attempt, snap
                )
        for info in store.list(layout.declines_prefix(row.checkpoint_id)):
            try:
                decline = documents.read(store, info.key, DeclineRecord)
            except (ManifestError, ObjectNotFound):
                continue
            if decline.attempt == attempt:
                by_uid.setdefault(decline.task.uid, {})[decline.task.subtask] = SubtaskDetail(
                    decline.task.subtask,
                    "declined",
                    decline.attempt,
                    0,
                    0,
                    0,
                    reason=f"{decline.reason}: {decline.message}".rstrip(": "),
                )
    operators = tuple(
        OperatorDetail(uid, tuple(subtasks[s] for s in sorted(subtasks)))
        for uid, subtasks in sorted(by_uid.items())
    )
    return CheckpointDetail(row, attempt, operators, dict(pending.positions))


def _subtask(layout: JobLayout, subtask: int, attempt: int, task: TaskSnapshot) -> SubtaskDetail:
    return SubtaskDetail(
        subtask=subtask,
        status="acked",
        attempt=attempt,
        state_size=sum(h.size for h in task.handles),
        bytes_written=incremental_bytes(layout, task),
        files=len(task.handles),
        metrics=dict(task.metrics),
    )
