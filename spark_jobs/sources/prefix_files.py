"""Fetching the landing zone's files: admitting them (count + fingerprint) and reading row ranges.

Admission fixes a file's record count, version and SHA-256 in its manifest entry
(:class:`~spark_jobs.sources.prefix_manifest.FileEntry`); a read maps the range ``[start, end)``
back to ``(file, rows)`` and refuses a file whose bytes are no longer the admitted ones:

* version equal, or version changed but SHA-256 equal (rewritten with the same bytes) -> read;
* SHA-256 different -> :class:`FileChangedError` (offsets would name other records);
* missing -> :class:`FileMissingError`, or with ``on_missing="skip"`` one dead letter per offset
  of the range (reason ``missing_field``, detail "deleted after it was admitted");
* admitted as unreadable (``on_unreadable="dead_letter"``) -> its one offset is a dead letter
  (reason ``invalid_json``, detail "could not be read as ...").

The dead-letter reasons are the closest of :class:`DeadLetterReason`; the detail names the file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from spark_jobs.sources.conform import Where
from spark_jobs.sources.dead_letters import DeadLetter, DeadLetterReason, DeadLetters
from spark_jobs.sources.errors import MalformedRecordError
from spark_jobs.sources.prefix_discovery import Listed
from spark_jobs.sources.prefix_errors import FileChangedError, FileMissingError, UnreadableFileError
from spark_jobs.sources.prefix_formats import CsvOptions, FileFormat, FileRecords, Unreadable, open_records
from spark_jobs.sources.prefix_manifest import Chunk, FileEntry, Head
from state_store.core.ports import ObjectNotFound, ObjectStore


@dataclass(frozen=True, slots=True)
class LandingFiles:
    """How one source fetches, counts and decodes its files (plain values: pickles to executors)."""

    uid: str
    prefix: str
    format: FileFormat
    schema: pa.Schema
    csv: CsvOptions
    on_missing: str = "fail"
    on_unreadable: str = "fail"

    def admit(self, store: ObjectStore, head: Head, files: Sequence[Listed]) -> Chunk | None:
        """The next chunk of ``head``'s partition for ``files`` (None if none is left): each file is
        fetched once, counted and fingerprinted. A file gone or rewritten since the listing is left
        for a later round; an unreadable one raises (``on_unreadable_file="fail"``) before anything
        is written, or takes one offset to be dead-lettered."""
        entries: list[FileEntry] = []
        base = head.end
        for f in files:
            key = self.key(f.path)
            try:
                data = store.get(key)
            except ObjectNotFound:
                continue  # deleted since the listing: not admitted
            if data.version != f.version:
                continue  # rewritten since the listing: settles again first
            sha = hashlib.sha256(data.data).hexdigest()
            try:
                count, unreadable = open_records(self.format, data.data, self.csv).count, ""
            except Unreadable as exc:
                if self.on_unreadable == "fail":
                    raise UnreadableFileError(
                        f"file {key!r} in the landing zone of source {self.uid!r} cannot be read as "
                        f"{self.format} ({exc}): fix or remove it (or rename it with a leading '_' to "
                        "have it ignored), or set on_unreadable_file='dead_letter'; nothing was admitted",
                        path=key,
                    ) from None
                count, unreadable = 1, str(exc)
            entries.append(FileEntry(f.path, base, count, f.size, f.version, f.modified_ms, sha, unreadable))
            base += count
        if not entries:
            return None
        return Chunk(head.partition, head.seq + 1, head.end, base, tuple(entries))

    def key(self, path: str) -> str:
        """The store key of a path relative to the prefix."""
        return f"{self.prefix}/{path}" if self.prefix else path

    def read(
        self,
        store: ObjectStore,
        partition: str,
        entries: Sequence[FileEntry],
        start: int,
        end: int,
        chunk_size: int,
        dead_letters: DeadLetters | None,
    ) -> Iterator[pa.RecordBatch]:
        """Yield the valid records of ``entries`` within ``[start, end)``, in offset order."""
        where = Where(self.uid, partition)
        for entry in entries:
            first, stop = max(start, entry.base) - entry.base, min(end, entry.end) - entry.base
            records = self._open(store, entry, where, first, stop, dead_letters)
            if records is None:
                continue
            for lo in range(first, stop, chunk_size):
                conformed = records.decode(lo, min(lo + chunk_size, stop), entry.base, self.schema, where)
                self._route(conformed.rejected, dead_letters)
                if conformed.batch.num_rows:
                    yield conformed.batch

    def _open(
        self,
        store: ObjectStore,
        entry: FileEntry,
        where: Where,
        first: int,
        stop: int,
        dead_letters: DeadLetters | None,
    ) -> FileRecords | None:
        """The file's records, or None when its offsets were dead-lettered instead."""
        key = self.key(entry.path)
        span = f"offsets [{entry.base + first}, {entry.base + stop}) of partition {where.partition!r}"
        if entry.unreadable:
            detail = f"file {key!r} could not be read as {self.format}: {entry.unreadable}"
            self._route(
                [self._letter(where, entry.base, DeadLetterReason.INVALID_JSON, detail, key)], dead_letters
            )
            return None
        try:
            data = store.get(key)
        except ObjectNotFound:
            if self.on_missing == "fail":
                raise FileMissingError(
                    f"file {key!r} ({span} of source {self.uid!r}) was deleted after it was admitted: "
                    "restore it to replay these offsets, or set on_missing_file='skip' to dead-letter them",
                    path=key,
                ) from None
            detail = f"file {key!r} was deleted after it was admitted"
            reason = DeadLetterReason.MISSING_FIELD
            letters = [self._letter(where, entry.base + i, reason, detail, key) for i in range(first, stop)]
            self._route(letters, dead_letters)
            return None
        if data.version != entry.version and hashlib.sha256(data.data).hexdigest() != entry.sha256:
            raise FileChangedError(
                f"file {key!r} ({span} of source {self.uid!r}) changed after it was admitted (sha256 "
                f"{entry.sha256[:12]}... recorded): landing files must not change; restore its original "
                "content to replay, and write new data under new names",
                path=key,
            )
        try:
            records = open_records(self.format, data.data, self.csv)
        except Unreadable as exc:
            raise UnreadableFileError(
                f"file {key!r} ({span}) has its admitted bytes but no longer parses ({exc}): read it "
                "with the Epochal and pyarrow versions that admitted it",
                path=key,
            ) from None
        if records.count != entry.count:
            raise FileChangedError(
                f"file {key!r} ({span}) holds {records.count} records but was admitted with {entry.count}: "
                "it was counted by another Epochal version; replay it with the version that admitted it",
                path=key,
            )
        return records

    def _letter(
        self, where: Where, offset: int, reason: DeadLetterReason, detail: str, raw: str
    ) -> DeadLetter:
        return DeadLetter(where.source, where.partition, offset, reason, detail, raw)

    def _route(self, rejected: Sequence[DeadLetter], dead_letters: DeadLetters | None) -> None:
        if not rejected:
            return
        if dead_letters is None:
            first = rejected[0]
            raise MalformedRecordError(
                f"record at offset {first.offset} of partition {first.partition!r} of source "
                f"{self.uid!r} is malformed ({first.reason.value}: {first.detail}); pass a "
                "DeadLetters collector to read() to set malformed records aside and continue"
            )
        dead_letters.extend(rejected)
