"""A replayable source over a landing zone: files other systems drop under a folder or an S3 prefix.

Producers write Parquet, JSON-lines or CSV files with names of their own, in any order, optionally
in ``key=value/`` folders. The runtime wants partitions of offsets (:mod:`spark_jobs.sources.base`),
so the source keeps a durable, append-only **manifest** per partition in the job's store
(:mod:`spark_jobs.sources.prefix_manifest`) and offsets are cumulative record counts along it.

How an epoch uses it
--------------------
1. ``end_offsets()`` (the trigger, under the job's lease) runs one discovery round
   (:mod:`spark_jobs.sources.prefix_discovery`): list the prefix once; per partition skip the files
   admitted before; keep back files younger than ``settle_ms`` or not yet seen unchanged by two
   listings (the half-written rule); admit the oldest settled ones up to ``max_files_per_epoch`` /
   ``max_bytes_per_epoch``; fetch each admitted file once to count its records and fingerprint it
   (version + SHA-256); if any is unreadable (and ``on_unreadable_file="fail"``) stop here, nothing
   admitted. Then per partition create the next chunk (create-only: the commit point) and move the
   head (compare-and-swap). Only then return the ends: no epoch can read an offset that is not
   durably mapped to a file row.
2. ``read(p, start, end)`` walks the chunks back from the head to ``start``, fetches the files that
   hold ``[start, end)`` and decodes exactly those rows (:mod:`spark_jobs.sources.prefix_formats`),
   checking each file's fingerprint. The same range always yields the same rows and dead letters.

A file's partition never changes: ``p<stable_hash(path) % n>`` with ``partitions=n``, or its first
folder with ``partitions="folder"``. Names starting with ``_`` or ``.`` (anywhere in the path) are
ignored, as Spark ignores them. ``end_offsets``'s ``now_ms`` is ignored: settling is judged by the
source's own clock against the store's modification times.

After admission a file must not change: a changed file (other bytes) fails the read
(:class:`FileChangedError`); a deleted one fails it too (:class:`FileMissingError`) unless
``on_missing_file="skip"``, which dead-letters its offsets. See ``docs/sources-prefix.md``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from spark_jobs.sources.base import (
    DEFAULT_CHUNK_SIZE,
    batch_schema,
    check_event_time_column,
    check_range,
    validate_partition_id,
    validate_uid,
)
from spark_jobs.sources.dead_letters import DeadLetters
from spark_jobs.sources.errors import InvalidPartitionError
from spark_jobs.sources.prefix_discovery import Listed, Rules, classify, is_known, next_head, select
from spark_jobs.sources.prefix_errors import PrefixSourceError, SourceDefinitionChangedError
from spark_jobs.sources.prefix_files import LandingFiles
from spark_jobs.sources.prefix_formats import FORMATS, CsvOptions, FileFormat
from spark_jobs.sources.prefix_manifest import (
    SOURCE_KIND,
    Conflict,
    Head,
    Manifest,
    ManifestLayout,
    SourceRecord,
)
from state_store.clocks import SystemClock
from state_store.core.codec import decode_document
from state_store.core.keygroups import stable_hash
from state_store.core.layout import validate_name
from state_store.core.ports import Clock, InvalidKeyError, ObjectNotFound, ObjectStore, validate_key
from state_store.storage import open_store

log = logging.getLogger(__name__)
_DAY_MS = 86_400_000
_ROUNDS = 5


@dataclass(frozen=True, slots=True)
class UnreadFiles:
    """``PrefixSource.unread_files``: the settled files not admitted yet (oldest first) and the
    manifest's heads they were judged against (``partition=version``, comma-separated): a round of
    the job that changed a head (e.g. saw a file once, to admit it at the next round) changes it."""

    files: tuple[Listed, ...]
    manifest_state: str


class PrefixSource:
    """Files under ``prefix`` of a store (a folder or an S3 prefix) as a replayable source.

    ``job_id`` names the job whose store (``state_store``, default: the landing store) keeps the
    manifest under ``<job_id>/sources/<uid>/``. Pass stores as URIs when epochs run on Spark (a URI
    travels to the executors; an open S3 client does not).
    """

    def __init__(
        self,
        uid: str,
        store_or_uri: ObjectStore | str,
        prefix: str = "",
        *,
        job_id: str,
        schema: pa.Schema,
        format: FileFormat = "parquet",
        event_time_column: str = "event_time",
        partitions: int | Literal["folder"] = 4,
        settle_ms: int = 30_000,
        confirm_listing: bool = True,
        max_files_per_epoch: int | None = 1_000,
        max_bytes_per_epoch: int | None = 1 << 30,
        max_file_age_ms: int = 7 * _DAY_MS,
        max_tracked_files: int = 100_000,
        on_missing_file: Literal["fail", "skip"] = "fail",
        on_unreadable_file: Literal["fail", "dead_letter"] = "fail",
        suffix: str | None = None,
        csv: CsvOptions | None = None,
        state_store: ObjectStore | str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._uid = validate_uid(uid)
        validate_name("job id", job_id)
        if format not in FORMATS:
            raise ValueError(f"file format {format!r} is not supported: use one of {', '.join(FORMATS)}")
        self._prefix = prefix.strip("/")
        if self._prefix:
            validate_key(self._prefix)
        batch_schema(schema)
        self._schema = schema
        self._format: FileFormat = format
        self._event_time_column = check_event_time_column(schema, event_time_column)
        if partitions != "folder" and (not isinstance(partitions, int) or isinstance(partitions, bool)):
            raise ValueError(f"partitions={partitions!r} is invalid: use a number of partitions or 'folder'")
        if isinstance(partitions, int) and partitions < 1:
            raise ValueError(f"partitions={partitions} is invalid: use at least 1 (or 'folder')")
        self._partitions = partitions
        for name, value in (
            ("max_files_per_epoch", max_files_per_epoch),
            ("max_bytes_per_epoch", max_bytes_per_epoch),
        ):
            if value is not None and value < 1:
                raise ValueError(f"{name}={value} is invalid: use at least 1, or None for no cap")
        if settle_ms < 0 or max_file_age_ms < 0 or max_tracked_files < 1:
            raise ValueError("settle_ms and max_file_age_ms must be >= 0 and max_tracked_files >= 1")
        if on_missing_file not in ("fail", "skip"):
            raise ValueError(f"on_missing_file={on_missing_file!r} is invalid: use 'fail' or 'skip'")
        if on_unreadable_file not in ("fail", "dead_letter"):
            raise ValueError(
                f"on_unreadable_file={on_unreadable_file!r} is invalid: use 'fail' or 'dead_letter'"
            )
        self._rules = Rules(
            settle_ms,
            confirm_listing,
            max_files_per_epoch,
            max_bytes_per_epoch,
            max_file_age_ms,
            max_tracked_files,
        )
        self._suffix = suffix
        self._files = LandingFiles(
            self._uid, self._prefix, format, schema, csv or CsvOptions(), on_missing_file, on_unreadable_file
        )
        self._landing_ref = store_or_uri
        self._state_ref = store_or_uri if state_store is None else state_store
        self._clock: Clock = clock or SystemClock()
        self._layout = ManifestLayout(job_id, self._uid)
        self._opened: dict[str, Any] = {}
        self._checked = False
        self._check_layout()

    # -- wiring ----------------------------------------------------------------------------------
    def _open(self, ref: ObjectStore | str) -> ObjectStore:
        if not isinstance(ref, str):
            return ref
        if ref not in self._opened:
            self._opened[ref] = open_store(ref)
        store: ObjectStore = self._opened[ref]
        return store

    @property
    def landing(self) -> ObjectStore:
        return self._open(self._landing_ref)

    @property
    def manifest(self) -> Manifest:
        if "manifest" not in self._opened:
            self._opened["manifest"] = Manifest(self._open(self._state_ref), self._layout)
        manifest: Manifest = self._opened["manifest"]
        return manifest

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_opened"] = {}  # stores opened from URIs are reopened where the source is unpickled
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _check_layout(self) -> None:
        same = self._landing_ref is self._state_ref or (self.landing.uri == self._open(self._state_ref).uri)
        root = self._layout.root
        if same and (not self._prefix or root.startswith(self._prefix + "/")):
            raise ValueError(
                f"source {self._uid!r}: its manifest ({root}) would lie inside the landing prefix "
                f"{self._prefix!r} of the same store; give the source a landing prefix of its own "
                "(or pass the job's store as state_store=)"
            )

    def _definition(self) -> SourceRecord:
        parts = "folder" if self._partitions == "folder" else f"hash:{self._partitions}"
        return SourceRecord(self._uid, self._prefix, self._format, parts)

    def _check_definition(self, *, record: bool = True) -> None:
        """Refuse a source opened other than it was started. ``record=False`` (the read-only
        watcher): never create the source record; without one there is nothing to compare yet."""
        if self._checked:
            return
        wanted = self._definition()
        if record:
            stored = self.manifest.source_record(wanted)
        else:
            key = self._layout.source
            try:
                raw = self._open(self._state_ref).get(key)
            except ObjectNotFound:
                return  # no epoch has started the source: judged again at the next call
            stored = decode_document(raw.data, SOURCE_KIND, SourceRecord, key=key)
        if stored != wanted:
            raise SourceDefinitionChangedError(
                f"source {self._uid!r} of job {self._layout.job_id} was started with prefix "
                f"{stored.prefix!r}, format {stored.format}, partitioning {stored.partitioning} but is now "
                f"opened with {wanted.prefix!r}, {wanted.format}, {wanted.partitioning}: the recorded "
                "offsets depend on them; open it as before, or read the new layout under a new source uid"
            )
        self._checked = True

    # -- the ReplayableSource protocol ------------------------------------------------------------
    @property
    def uid(self) -> str:
        return self._uid

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    @property
    def event_time_column(self) -> str:
        return self._event_time_column

    @property
    def format(self) -> FileFormat:
        return self._format

    def partitions(self) -> list[str]:
        """``p0 .. p<n-1>``, or (folder mode) every folder the manifest has a head for, sorted."""
        if self._partitions == "folder":
            return self.manifest.partitions()
        return [f"p{i}" for i in range(self._partitions)]

    def end_offsets(self, now_ms: int | None = None) -> dict[str, int]:
        """Run one discovery round (module docstring) and return every partition's end offset."""
        self._check_definition()
        listed = self._list()
        for _ in range(_ROUNDS):
            try:
                return self._round(listed)
            except Conflict:
                continue
        raise PrefixSourceError(
            f"source {self._uid!r}: another writer kept changing the manifest during {_ROUNDS} discovery "
            f"rounds; make sure one trigger at a time runs job {self._layout.job_id} (it holds the lease)"
        )

    def read(
        self,
        partition: str,
        start: int,
        end: int,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        dead_letters: DeadLetters | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Yield the valid records of ``[start, end)`` (see :class:`ReplayableSource`); the range is
        checked against the manifest at the call, the files are fetched as the batches are taken."""
        validate_partition_id(partition)
        if self._partitions != "folder" and partition not in self.partitions():
            raise InvalidPartitionError(
                f"source {self._uid!r} has no partition {partition!r}; it has p0 .. p{self._partitions - 1}"
            )
        check_range(partition, start, end, chunk_size)
        head, _, _ = self.manifest.load_head(partition)
        entries = self.manifest.covering(head, start, end)
        return self._files.read(self.landing, partition, entries, start, end, chunk_size, dead_letters)

    # -- watching (read-only) --------------------------------------------------------------------
    @property
    def asset_uri(self) -> str:
        """The landing prefix as a URI without query (``file:///.../landing/orders``,
        ``s3://bucket/orders``): the Airflow Asset that stands for this source."""
        base = self.landing.uri.split("?", 1)[0].rstrip("/")
        return f"{base}/{self._prefix}" if self._prefix else base

    def unread_files(self) -> UnreadFiles:
        """The source's files that no epoch has admitted yet and that are older than ``settle_ms``,
        oldest first -- what the next epochs will read -- and the manifest's state they were judged
        against. Read-only: one listing and one head read per partition, nothing written (the job's
        trigger alone moves the manifest, and creates the source record)."""
        self._check_definition(record=False)
        listed = self._list()
        now = self._clock.now_ms()
        unread: list[Listed] = []
        heads: list[str] = []
        for partition in sorted(set(listed) | set(self.partitions())):
            head, version, _ = self.manifest.load_head(partition)
            heads.append(f"{partition}={version}")
            seen = {entry.path: entry.modified_ms for entry in head.seen}
            unread += [
                f
                for f in listed.get(partition, [])
                if not is_known(head, f.path, f.modified_ms, seen)
                and now - f.modified_ms >= self._rules.settle_ms
            ]
        return UnreadFiles(tuple(sorted(unread, key=lambda f: (f.modified_ms, f.path))), ",".join(heads))

    # -- discovery -------------------------------------------------------------------------------
    def partition_of(self, path: str) -> str | None:
        """The partition of a landing-zone path (relative to the prefix); None: not a source file."""
        if self._partitions == "folder":
            folder, slash, _ = path.partition("/")
            return folder if slash else None
        return f"p{stable_hash(path) % self._partitions}"

    def _list(self) -> dict[str, list[Listed]]:
        base = f"{self._prefix}/" if self._prefix else ""
        grouped: dict[str, list[Listed]] = defaultdict(list)
        loose = 0
        try:
            for info in self.landing.list(base):
                path = info.key[len(base) :]
                if any(part.startswith(("_", ".")) for part in path.split("/")):
                    continue
                if self._suffix is not None and not path.endswith(self._suffix):
                    continue
                partition = self.partition_of(path)
                if partition is None:
                    loose += 1
                    continue
                grouped[partition].append(Listed(path, partition, info.size, info.version, info.modified_ms))
        except InvalidKeyError as exc:
            raise PrefixSourceError(
                f"the landing zone {self.landing.uri} prefix {self._prefix!r} of source {self._uid!r} holds "
                f"a file the store cannot address ({exc}): rename it using letters, digits and _.=@+,-/"
            ) from None
        if loose:
            log.warning(
                "source %s: %d file(s) directly under %r are ignored: with partitions='folder' files go "
                "into a folder (its name is the partition)", self._uid, loose, self._prefix,
            )  # fmt: skip
        return grouped

    def _round(self, listed: dict[str, list[Listed]]) -> dict[str, int]:
        manifest = self.manifest
        names = sorted(set(self.partitions()) | set(listed))
        loaded = {p: manifest.load_head(p) for p in names}
        now = self._clock.now_ms()
        views = {p: classify(loaded[p][0], listed.get(p, []), now, self._rules) for p in names}
        for view in views.values():
            for path in view.rewritten:
                log.warning(
                    "source %s: file %r was rewritten after it was admitted; its new content is not "
                    "read (write new data under new names)", self._uid, path,
                )  # fmt: skip
        admitted = select(views, self._rules)
        landing = self.landing
        chunks = {p: self._files.admit(landing, views[p].head, admitted[p]) for p in names}  # may raise
        ends: dict[str, int] = {}
        for p in names:
            head, version, stored = loaded[p]
            taken = {f.path for f in admitted[p]}
            unadmitted = [f for f in (*views[p].candidates, *views[p].waiting) if f.path not in taken]
            new = next_head(head, chunks[p], unadmitted, now, self._rules)
            if chunks[p] is not None or new != stored:
                manifest.commit(chunks[p], new, version)
            if chunks[p] is not None or version is not None or new != Head(p):
                ends[p] = new.end
        if self._partitions != "folder":
            return {p: ends.get(p, 0) for p in self.partitions()}
        return ends


__all__ = ["CsvOptions", "PrefixSource"]
